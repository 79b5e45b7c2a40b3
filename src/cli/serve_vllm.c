/* The vLLM `serve` flags and what cllm does with each (see serve_vllm.h). The list follows
 * vLLM's CLI reference (vllm/engine/arg_utils.py EngineArgs/AsyncEngineArgs and
 * vllm/entrypoints/openai/cli_args.py FrontendArgs, plus a few removed flags that older
 * systemd units and Helm charts still carry). A flag is accepted as a no-op only where ignoring
 * it cannot change a result a client sees; where it would (an adapter, a different model
 * configuration, TLS, another process layout), it is refused with the reason. */
#include "cli/serve_vllm.h"

#include <stdio.h>
#include <string.h>

#include "base/log.h"

#define NATIVE(n, a)                                                                               \
    { n, a, NULL, NULL, NULL, NULL, NULL, NULL }
#define ELSEWHERE(n, a, what)                                                                      \
    { n, a, NULL, NULL, NULL, NULL, NULL, what }
#define NOOP(n, a, arg, why)                                                                       \
    { n, a, arg, NULL, why, NULL, NULL, NULL }
#define REFUSE(n, a, arg, why)                                                                     \
    { n, a, arg, NULL, NULL, why, NULL, NULL }
#define COND(n, a, arg, acc, why, no, bad)                                                         \
    { n, a, arg, acc, why, no, bad, NULL }
#define NOOPS(n, a, arg, why)                                                                      \
    { n, a, arg, NULL, why, NULL, NULL, NULL, true }

#define NO_GPU  "no GPU"
#define NO_LORA "LoRA adapters are not supported: merge the adapter into the weights first"
#define NO_DP                                                                                      \
    "data parallel is not supported: run one cllm per replica behind a load balancer "             \
    "(--tensor-parallel-size splits one model over processes)"
#define NO_MM  "images are served without it (video parts are refused per request)"
#define NO_PY  "cllm runs no Python: plugins and classes cannot be loaded"
#define NO_DL  "cllm serves a local directory; nothing is downloaded"
#define NO_TLS "no TLS in cllm: terminate HTTPS in a reverse proxy (nginx, envoy) in front of it"

const serve_vflag serve_vflags[] = {
    /* ---- ModelConfig ---- */
    NATIVE("--model", NULL),
    COND("--runner", NULL, "generate", "auto|generate", "this model runs as a generator",
         "only the generate runner: pooling and draft models are not served", "pooling"),
    COND("--convert", NULL, "none", "auto|none", "the model is served as it is",
         "converting a generator into a pooling or classification model is not supported", "embed"),
    COND("--task", NULL, "generate", "auto|generate", "this model runs as a generator",
         "only text generation: embedding, scoring and classification tasks are not served",
         "embed"),
    NATIVE("--tokenizer", NULL),
    COND("--tokenizer-mode", NULL, "auto", "auto|hf",
         "cllm has one tokenizer: tokenizer.json (byte-level BPE)",
         "only tokenizer.json (auto/hf): the slow and mistral tokenizers are not implemented",
         "mistral"),
    NATIVE("--trust-remote-code", NULL),
    NATIVE("--dtype", NULL),
    NATIVE("--seed", NULL),
    REFUSE("--hf-config-path", NULL, "/models/cfg",
           "config.json is read from the model directory; copy it there"),
    NATIVE("--allowed-local-media-path", NULL),
    NOOPS("--allowed-media-domains", NULL, "example.com", NO_MM),
    NOOP("--revision", NULL, "main", NO_DL " (the directory is the revision)"),
    NOOP("--code-revision", NULL, "main", "cllm runs no model code from the checkpoint"),
    REFUSE("--rope-scaling", NULL, "{\"rope_type\":\"yarn\",\"factor\":4.0}",
           "changing the model's RoPE is not supported: positions run as config.json says"),
    REFUSE("--rope-theta", NULL, "1000000",
           "changing the model's RoPE is not supported: positions run as config.json says"),
    NOOP("--tokenizer-revision", NULL, "main", NO_DL),
    NATIVE("--max-model-len", NULL),
    NATIVE("--quantization", "-q"),
    NATIVE("--enforce-eager", NULL),
    NATIVE("--max-logprobs", NULL),
    COND("--logprobs-mode", NULL, "raw_logprobs", "raw_logprobs",
         "logprobs are the model's raw log-softmax, before penalties and temperature (vLLM's "
         "default)",
         "only raw_logprobs: processed or raw-logit values are not returned", "processed_logprobs"),
    NOOP("--disable-sliding-window", NULL, NULL, "this model family has no sliding-window layers"),
    NOOP("--disable-cascade-attn", NULL, NULL, "cascade attention is a GPU kernel choice"),
    NATIVE("--skip-tokenizer-init", NULL),
    REFUSE("--enable-prompt-embeds", NULL, NULL,
           "prompts as embedding tensors are not supported (text or token ids only)"),
    NATIVE("--served-model-name", NULL),
    COND("--config-format", NULL, "auto", "auto|hf", "config.json is read in Hugging Face format",
         "only Hugging Face config.json (auto/hf) is read", "mistral"),
    NOOP("--hf-token", NULL, "hf_xxx", NO_DL),
    REFUSE("--hf-overrides", NULL, "{\"max_position_embeddings\":65536}",
           "overriding config.json is not supported: edit the model directory's config.json"),
    REFUSE("--pooler-config", NULL, "{\"pooling_type\":\"MEAN\"}",
           "no pooling runner: only text generation is served"),
    REFUSE("--override-pooler-config", NULL, "{\"pooling_type\":\"MEAN\"}",
           "no pooling runner: only text generation is served"),
    NOOP("--logits-processor-pattern", NULL, "mypkg\\..*",
         "requests cannot name logits processors here (" NO_PY ")"),
    NATIVE("--generation-config", NULL),
    NATIVE("--override-generation-config", NULL),
    REFUSE("--enable-sleep-mode", NULL, NULL,
           "sleep mode offloads GPU memory; the weights here are mmap'd in RAM (no /sleep)"),
    COND("--model-impl", NULL, "auto", "auto|vllm", "cllm has its own forward pass for the model",
         "only cllm's own model implementation (the Transformers backend is Python)",
         "transformers"),
    REFUSE("--override-attention-dtype", NULL, "float16",
           "attention runs in float32 over the KV cache dtype (--kv-cache-dtype)"),
    REFUSE("--logits-processors", NULL, "mypkg.MyProcessor", NO_PY),
    REFUSE("--io-processor-plugin", NULL, "myplugin", NO_PY),

    /* ---- LoadConfig ---- */
    COND("--load-format", NULL, "auto", "auto|safetensors",
         "weights are always safetensors, mmap'd from the model directory",
         "only safetensors checkpoints load (pt, gguf, bitsandbytes, tensorizer, dummy... do not)",
         "gguf"),
    NOOP("--download-dir", NULL, "/data/hf-cache", NO_DL),
    NOOP("--safetensors-load-strategy", NULL, "lazy",
         "safetensors are mmap'd and paged in at start (one strategy)"),
    NOOP("--model-loader-extra-config", NULL, "{}", "cllm has one loader (safetensors mmap)"),
    NOOPS("--ignore-patterns", NULL, "original/**/*", NO_DL),
    NOOP("--use-tqdm-on-load", NULL, NULL, "loading progress is logged as lines"),
    NOOP("--no-use-tqdm-on-load", NULL, NULL, "loading progress is logged as lines"),
    NOOP("--pt-load-map-location", NULL, "cpu",
         "no .pt files are loaded; everything is on the CPU"),

    /* ---- StructuredOutputsConfig ---- */
    NATIVE("--reasoning-parser", NULL),
    NOOP("--guided-decoding-backend", NULL, "xgrammar",
         "structured outputs always use cllm's own grammar engine"),
    NOOP("--guided-decoding-disable-fallback", NULL, NULL,
         "cllm's grammar engine has no fallback backend"),
    NOOP("--guided-decoding-disable-any-whitespace", NULL, NULL,
         "not implemented: JSON output may contain the whitespace the schema allows"),
    NOOP("--guided-decoding-disable-additional-properties", NULL, NULL,
         "not implemented: additionalProperties is read from each schema"),
    NOOP("--structured-outputs-config", NULL, "{\"backend\":\"xgrammar\"}",
         "structured outputs always use cllm's own grammar engine"),

    /* ---- ParallelConfig ---- */
    COND("--distributed-executor-backend", NULL, "mp", "mp|uni",
         "ranks are MPI processes (--tensor-parallel-size)",
         "only MPI processes: Ray and external launchers are not supported", "ray"),
    NATIVE("--pipeline-parallel-size", "-pp"),
    NATIVE("--tensor-parallel-size", "-tp"),
    COND("--decode-context-parallel-size", "-dcp", "1", "1", "size 1 is no context parallelism",
         "decode context parallelism is not supported", "2"),
    COND("--data-parallel-size", "-dp", "1", "1", "one engine: size 1 is no data parallelism",
         NO_DP, "2"),
    REFUSE("--data-parallel-rank", "-dpn", "0", NO_DP),
    REFUSE("--data-parallel-start-rank", "-dpr", "0", NO_DP),
    COND("--data-parallel-size-local", "-dpl", "1", "1", "one engine on this node", NO_DP, "2"),
    REFUSE("--data-parallel-address", "-dpa", "10.0.0.1", NO_DP),
    REFUSE("--data-parallel-rpc-port", "-dpp", "13345", NO_DP),
    NOOP("--data-parallel-backend", "-dpb", "mp", "no data parallelism (size 1)"),
    NOOP("--data-parallel-hybrid-lb", NULL, NULL, "no data parallelism (size 1)"),
    REFUSE("--data-parallel-external-lb", NULL, NULL, NO_DP),
    REFUSE("--data-parallel-multi-port-external-lb", NULL, NULL, NO_DP),
    ELSEWHERE("--enable-expert-parallel", "-ep",
              "takes effect: with --tensor-parallel-size, whole experts are placed on ranks "
              "instead of splitting every expert"),
    NOOP("--all2all-backend", NULL, "naive", "experts exchange tokens through MPI collectives"),
    NOOP("--enable-dbo", NULL, NULL, "dual-batch overlap hides GPU communication; " NO_GPU),
    NOOP("--dbo-decode-token-threshold", NULL, "32", "dual-batch overlap is GPU-only"),
    NOOP("--dbo-prefill-token-threshold", NULL, "512", "dual-batch overlap is GPU-only"),
    NOOP("--disable-nccl-for-dp-synchronization", NULL, NULL, "no NCCL and no data parallelism"),
    REFUSE("--enable-eplb", NULL, NULL,
           "expert-parallel load balancing (redundant experts) is not implemented"),
    REFUSE("--eplb-config", NULL, "{\"window_size\":1000}",
           "expert-parallel load balancing (redundant experts) is not implemented"),
    REFUSE("--expert-placement-strategy", NULL, "round_robin",
           "expert placement is fixed (contiguous ranges per rank)"),
    REFUSE("--num-redundant-experts", NULL, "32",
           "expert-parallel load balancing (redundant experts) is not implemented"),
    REFUSE("--eplb-window-size", NULL, "1000",
           "expert-parallel load balancing (redundant experts) is not implemented"),
    REFUSE("--eplb-step-interval", NULL, "3000",
           "expert-parallel load balancing (redundant experts) is not implemented"),
    NOOP("--eplb-log-balancedness", NULL, NULL, "no expert-parallel load balancing to log"),
    NOOP("--max-parallel-loading-workers", NULL, "2", "weights are mmap'd, not loaded by workers"),
    NOOP("--ray-workers-use-nsight", NULL, NULL, "no Ray workers and no Nsight"),
    NOOP("--disable-custom-all-reduce", NULL, NULL,
         "no custom CUDA all-reduce: ranks reduce through MPI"),
    COND("--worker-cls", NULL, "auto", "auto", "one built-in worker", NO_PY, "mypkg.Worker"),
    REFUSE("--worker-extension-cls", NULL, "mypkg.Ext", NO_PY),
    NOOP("--enable-multimodal-encoder-data-parallel", NULL, NULL, NO_MM),

    /* ---- CacheConfig ---- */
    NATIVE("--block-size", NULL),
    NATIVE("--gpu-memory-utilization", NULL),
    NATIVE("--kv-cache-memory-bytes", NULL),
    NATIVE("--swap-space", NULL),
    NATIVE("--kv-cache-dtype", NULL),
    NOOP("--num-gpu-blocks-override", NULL, "4096",
         NO_GPU " blocks: the KV cache size is --kv-cache-memory (or --memory-utilization)"),
    NATIVE("--enable-prefix-caching", NULL),
    NATIVE("--no-enable-prefix-caching", NULL),
    NOOP("--prefix-caching-hash-algo", NULL, "sha256",
         "blocks are keyed by a 64-bit xxh3 chain; isolate tenants with the request's cache_salt"),
    NOOP("--cpu-offload-gb", NULL, "8", "the weights are in RAM already"),
    NOOP("--calculate-kv-scales", NULL, NULL, "no fp8 KV cache: no scales to calculate"),
    NOOP("--kv-sharing-fast-prefill", NULL, NULL,
         "this model shares no KV across layers (a GPU prefill shortcut)"),
    COND("--mamba-cache-dtype", NULL, "auto", "auto|float32",
         "the Gated DeltaNet conv and recurrent states stay float32",
         "the conv state is float32 only: --mamba-ssm-cache-dtype bfloat16 stores the recurrent "
         "state (over 90% of the bytes) in bf16",
         "bfloat16"),
    NATIVE("--mamba-ssm-cache-dtype", NULL),
    NOOP("--mamba-block-size", NULL, "256", "state snapshots are taken at --block-size boundaries"),

    /* ---- MultiModalConfig ---- */
    NATIVE("--limit-mm-per-prompt", NULL),
    NOOP("--enable-mm-embeds", NULL, NULL, NO_MM),
    NOOP("--media-io-kwargs", NULL, "{}", NO_MM),
    NATIVE("--mm-processor-kwargs", NULL),
    NOOP("--mm-processor-cache-gb", NULL, "0", NO_MM),
    NOOP("--disable-mm-preprocessor-cache", NULL, NULL, NO_MM),
    NOOP("--mm-processor-cache-type", NULL, "lru", NO_MM),
    NOOP("--mm-shm-cache-max-object-size-mb", NULL, "128", NO_MM),
    NOOP("--mm-encoder-tp-mode", NULL, "weights", NO_MM),
    NOOP("--mm-encoder-attn-backend", NULL, "TORCH_SDPA", NO_MM),
    NOOP("--interleave-mm-strings", NULL, NULL, NO_MM),
    NOOP("--skip-mm-profiling", NULL, NULL, NO_MM),
    NOOP("--video-pruning-rate", NULL, "0.5", NO_MM),

    /* ---- LoRAConfig ---- */
    REFUSE("--enable-lora", NULL, NULL, NO_LORA),
    NOOP("--no-enable-lora", NULL, NULL, "LoRA is off (adapters are not supported)"),
    REFUSE("--max-loras", NULL, "4", NO_LORA),
    REFUSE("--max-lora-rank", NULL, "64", NO_LORA),
    REFUSE("--lora-extra-vocab-size", NULL, "256", NO_LORA),
    REFUSE("--lora-dtype", NULL, "auto", NO_LORA),
    REFUSE("--max-cpu-loras", NULL, "8", NO_LORA),
    REFUSE("--fully-sharded-loras", NULL, NULL, NO_LORA),
    REFUSE("--default-mm-loras", NULL, "{\"audio\":\"/lora\"}", NO_LORA),
    REFUSE("--lora-modules", NULL, "sql=/loras/sql", NO_LORA),

    /* ---- ObservabilityConfig ---- */
    NOOP("--show-hidden-metrics-for-version", NULL, "0.10",
         "cllm hides no deprecated metrics: /metrics shows all of them"),
    REFUSE("--otlp-traces-endpoint", NULL, "http://otel:4317",
           "OpenTelemetry tracing is not implemented (per-request timings are in /metrics and "
           "the access log)"),
    {"--collect-detailed-traces", NULL, "all", NULL, NULL,
     "OpenTelemetry tracing is not implemented", NULL, NULL, true},

    /* ---- SchedulerConfig ---- */
    NATIVE("--max-num-batched-tokens", NULL),
    NATIVE("--max-num-seqs", NULL),
    NOOP("--max-num-partial-prefills", NULL, "4",
         "every running sequence may take a prefill chunk in the same step, in admission order, "
         "within --max-num-batched-tokens"),
    NOOP("--max-long-partial-prefills", NULL, "1",
         "prefill chunks are not split into long and short ones: admission order decides"),
    NOOP("--long-prefill-token-threshold", NULL, "256",
         "prefill chunks are not split into long and short ones: admission order decides"),
    NOOP("--num-lookahead-slots", NULL, "0", "lookahead slots are for GPU speculative decoding"),
    COND("--scheduling-policy", NULL, "fcfs", "fcfs",
         "requests are admitted first come, first served",
         "only fcfs: request priorities are not implemented", "priority"),
    NOOP("--enable-chunked-prefill", NULL, NULL,
         "prefill is always chunked to --max-num-batched-tokens"),
    NOOP("--no-enable-chunked-prefill", NULL, NULL,
         "prefill is always chunked to --max-num-batched-tokens (raise it to prefill in one step)"),
    NOOP("--disable-chunked-mm-input", NULL, NULL, NO_MM),
    COND("--scheduler-cls", NULL, "vllm.core.scheduler.Scheduler",
         "vllm.core.scheduler.Scheduler|vllm.v1.core.sched.scheduler.Scheduler",
         "one built-in scheduler", NO_PY, "mypkg.Sched"),
    NOOP("--disable-hybrid-kv-cache-manager", NULL, NULL,
         "paged KV for attention layers plus state slots for DeltaNet layers is how this model "
         "runs; there is no other manager"),
    NOOP("--async-scheduling", NULL, NULL,
         "scheduling overlaps a GPU's work; here the step runs on the same cores"),
    NOOP("--no-async-scheduling", NULL, NULL, "scheduling is synchronous already"),

    /* ---- CompilationConfig ---- */
    NOOPS("--cudagraph-capture-sizes", NULL, "1 2 4 8", "no CUDA graphs on a CPU"),
    NOOPS("--cuda-graph-sizes", NULL, "1 2 4 8", "no CUDA graphs on a CPU"),
    NOOP("--max-cudagraph-capture-size", NULL, "512", "no CUDA graphs on a CPU"),
    NOOP("--max-seq-len-to-capture", NULL, "8192", "no CUDA graphs on a CPU"),
    NOOP("--compilation-config", "-O", "{\"level\":3}",
         "no torch.compile: the kernels are compiled C chosen at start"),

    /* ---- VllmConfig ---- */
    NATIVE("--speculative-config", NULL),
    REFUSE("--kv-transfer-config", NULL, "{\"kv_connector\":\"NixlConnector\"}",
           "disaggregated prefill (KV transfer between instances) is not supported"),
    REFUSE("--kv-events-config", NULL, "{\"enable_kv_cache_events\":true}",
           "KV cache event publishing is not implemented"),
    NOOP("--additional-config", NULL, "{}", "it configures platform plugins; cllm has none"),

    /* ---- engine, other ---- */
    NATIVE("--disable-log-stats", NULL),
    NOOP("--aggregate-engine-logging", NULL, NULL, "one engine: its stats are the aggregate"),
    NOOP("--enable-log-requests", NULL, NULL,
         "an access line per request is logged unless --disable-log-requests"),
    NOOP("--no-enable-log-requests", NULL, NULL,
         "the access log stays on; --disable-log-requests turns it off"),
    NATIVE("--disable-log-requests", NULL),
    COND("--device", NULL, "cpu", "auto|cpu", "cllm runs on the CPU",
         "cllm runs on the CPU only (" NO_GPU ")", "cuda"),
    NOOP("--disable-async-output-proc", NULL, NULL,
         "outputs are processed on the engine thread already"),
    NOOP("--use-v2-block-manager", NULL, NULL, "one block manager"),
    COND("--num-scheduler-steps", NULL, "1", "1", "one step per schedule",
         "multi-step scheduling is not supported (vLLM removed it too)", "8"),
    NOOP("--disable-frontend-multiprocessing", NULL, NULL, "the HTTP front runs in this process"),
    COND("--preemption-mode", NULL, "recompute", "recompute", "preempted sequences are recomputed",
         "only recompute: swapping KV to host memory means nothing when it is in RAM", "swap"),

    /* ---- frontend (cli_args.py) ---- */
    NATIVE("--host", NULL),
    NATIVE("--port", NULL),
    REFUSE("--uds", NULL, "/run/vllm.sock",
           "Unix-socket listening is not supported: use --host/--port"),
    NATIVE("--uvicorn-log-level", NULL),
    NATIVE("--disable-uvicorn-access-log", NULL),
    NATIVE("--disable-access-log-for-endpoints", NULL),
    NOOP("--allow-credentials", NULL, NULL,
         "CORS credentials follow --allowed-origins (see the CORS notes)"),
    NATIVE("--allowed-origins", NULL),
    NOOP("--allowed-methods", NULL, "[\"*\"]", "CORS allows GET, POST and OPTIONS (all routes)"),
    NOOP("--allowed-headers", NULL, "[\"*\"]",
         "CORS allows the Authorization and Content-Type request headers"),
    NATIVE("--api-key", NULL),
    REFUSE("--ssl-keyfile", NULL, "/etc/tls/key.pem", NO_TLS),
    REFUSE("--ssl-certfile", NULL, "/etc/tls/cert.pem", NO_TLS),
    REFUSE("--ssl-ca-certs", NULL, "/etc/tls/ca.pem", NO_TLS),
    REFUSE("--enable-ssl-refresh", NULL, NULL, NO_TLS),
    REFUSE("--ssl-cert-reqs", NULL, "0", NO_TLS),
    REFUSE("--ssl-ciphers", NULL, "ECDHE-RSA-AES256-GCM-SHA384", NO_TLS),
    NOOP("--root-path", NULL, "/vllm",
         "it sets the prefix FastAPI writes into its docs pages; routes are served at the root "
         "as with vLLM (strip the prefix in the proxy)"),
    REFUSE("--middleware", NULL, "mypkg.middleware", NO_PY),
    REFUSE("--enable-request-id-headers", NULL, NULL,
           "X-Request-Id response headers are not implemented (the id is in each response body)"),
    NOOP("--disable-fastapi-docs", NULL, NULL, "there are no /docs, /redoc or /openapi.json pages"),
    NOOP("--enable-offline-docs", NULL, NULL, "there are no /docs pages"),
    NOOP("--h11-max-incomplete-event-size", NULL, "4194304",
         "the HTTP layer is libmicrohttpd (the body cap is --max-body-size)"),
    NOOP("--h11-max-header-count", NULL, "256", "the HTTP layer is libmicrohttpd, not h11"),
    NOOP("--enable-flash-late-interaction", NULL, NULL, "no pooling or scoring models"),
    NOOP("--data-parallel-supervisor-port", NULL, "9256", "no data parallelism (size 1)"),
    NOOP("--dp-supervisor-probe-interval-s", NULL, "5", "no data parallelism (size 1)"),
    NOOP("--dp-supervisor-probe-timeout-s", NULL, "5", "no data parallelism (size 1)"),
    NOOP("--dp-supervisor-probe-failure-threshold", NULL, "3", "no data parallelism (size 1)"),
    NATIVE("--chat-template", NULL),
    COND("--chat-template-content-format", NULL, "auto", "auto|string",
         "text content parts are joined into one string for the template",
         "only the string format: content parts are joined before the template runs", "openai"),
    NOOP("--trust-request-chat-template", NULL, NULL,
         "a request's chat_template is not used: the server's template applies"),
    NATIVE("--default-chat-template-kwargs", NULL),
    COND("--response-role", NULL, "assistant", "assistant", "the role is assistant",
         "the response role is always assistant", "bot"),
    REFUSE("--return-tokens-as-token-ids", NULL, NULL,
           "logprob tokens are returned as text; token_id:N strings are not implemented"),
    NATIVE("--enable-auto-tool-choice", NULL),
    NOOP("--exclude-tools-when-tool-choice-none", NULL, NULL,
         "not implemented: with tool_choice none the tools stay in the prompt and no call is "
         "parsed"),
    NATIVE("--tool-call-parser", NULL),
    REFUSE("--tool-parser-plugin", NULL, "/plugins/parser.py", NO_PY),
    REFUSE("--tool-server", NULL, "demo", "built-in and MCP tool servers are not supported"),
    NOOP("--log-config-file", NULL, "/etc/vllm/logging.json",
         "logs go to stderr; choose text or JSON lines with --log-format"),
    NOOP("--max-log-len", NULL, "100", "cllm's logs never contain prompt text or token ids"),
    NOOP("--enable-prompt-tokens-details", NULL, NULL,
         "usage.prompt_tokens_details.cached_tokens is always sent"),
    NOOP("--enable-per-request-metrics", NULL, NULL,
         "not implemented: per-request timings are in /metrics histograms and the access log"),
    NOOP("--enable-server-load-tracking", NULL, NULL,
         "not implemented: the load is in /metrics (cllm:num_requests_running/waiting)"),
    NATIVE("--enable-force-include-usage", NULL),
    NOOP("--enable-tokenizer-info-endpoint", NULL, NULL,
         "not implemented: there is no /tokenizer_info (use /tokenize)"),
    NOOP("--enable-log-outputs", NULL, NULL, "cllm's logs never contain generated text"),
    NOOP("--enable-log-deltas", NULL, NULL, "cllm's logs never contain generated text"),
    NOOP("--log-error-stack", NULL, NULL, "errors are logged as one line (there is no stack)"),
    REFUSE("--tokens-only", NULL, NULL,
           "a tokens-only front for disaggregated serving is not implemented"),
    NOOP("--fingerprint-mode", NULL, "none", "responses carry no system_fingerprint"),
    NOOP("--fingerprint-value", NULL, "cllm", "responses carry no system_fingerprint"),
    NOOP("--cohere-is-reasoning-model", NULL, NULL, "there is no /cohere endpoint"),
    NOOP("--cohere-format", NULL, "cmd4", "there is no /cohere endpoint"),

    /* ---- `vllm serve` itself ---- */
    REFUSE("--headless", NULL, NULL, "headless engines serve data-parallel ranks; " NO_DP),
    NOOP("--api-server-count", "-asc", "1", "one HTTP front; its thread count is --http-threads"),
    REFUSE("--config", NULL, "/etc/vllm/config.yaml",
           "YAML config files are not read: pass the flags on the command line"),
    REFUSE("--grpc", NULL, NULL, "there is no gRPC server: use the HTTP API"),
    {0}};

/* ---- parsing ---- */

static bool in_list(const char *list, const char *v) {
    size_t vl = strlen(v);
    for (const char *p = list; *p;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == vl && !strncmp(p, v, l)) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

static bool handled_here(const serve_vflag *f) {
    return f->noop || f->refuse;
}

int serve_vllm_add_opts(cli_opt *opts, int *n, int cap, serve_vstate *st) {
    int k = 0, nl = 0;
    const int max_k = (int)(sizeof(st->set) / sizeof(st->set[0]));
    for (const serve_vflag *f = serve_vflags; f->name; f++, k++) {
        if (!handled_here(f)) continue;
        if (k >= max_k || *n + 1 >= cap) return -1;
        void *target = f->arg ? (void *)&st->val[k] : (void *)&st->set[k];
        cli_type type = f->arg ? CLI_STR : CLI_FLAG;
        if (f->many) {
            if (nl >= (int)(sizeof(st->lists) / sizeof(st->lists[0]))) return -1;
            st->list_of[k] = ++nl;
            target = &st->lists[nl - 1];
            type = CLI_LIST;
        }
        /* not in --help (two hundred lines of "no effect"): --list-vllm-flags lists them */
        opts[(*n)++] = (cli_opt){f->name, f->alias, type, target, NULL};
    }
    opts[*n] = (cli_opt){0};
    return 0;
}

int serve_vllm_check(const serve_vstate *st) {
    int k = 0;
    int rc = 0;
    for (const serve_vflag *f = serve_vflags; f->name; f++, k++) {
        if (!handled_here(f)) continue;
        char joined[256] = "";
        const char *v = st->val[k];
        if (st->list_of[k]) {
            const cli_list *l = &st->lists[st->list_of[k] - 1];
            size_t len = 0;
            for (int i = 0; i < l->n && len < sizeof(joined); i++)
                len += (size_t)snprintf(joined + len, sizeof(joined) - len, "%s%s", i ? " " : "",
                                        l->v[i]);
            v = l->n ? joined : NULL;
        }
        if (!st->set[k] && !v) continue;
        bool ok = f->noop && (!f->accept || (v && in_list(f->accept, v)));
        if (ok) {
            LOG_INFO("%s%s%s: no effect (%s)", f->name, v ? " " : "", v ? v : "", f->noop);
        } else if (!rc) {
            fprintf(stderr, "cllm serve: %s%s%s: %s%s%s%s\n", f->name, v ? " " : "", v ? v : "",
                    f->refuse, f->accept ? " (accepted: " : "", f->accept ? f->accept : "",
                    f->accept ? ")" : "");
            rc = 1;
        }
    }
    return rc;
}

/* ---- the table for docs and tests ---- */

static const cli_opt *own_opt(const cli_opt *own, const char *name) {
    for (const cli_opt *o = own; o->name; o++)
        if (!strcmp(o->name, name) || (o->alias && !strcmp(o->alias, name))) return o;
    return NULL;
}

/* Markdown cells must not contain '|': the accepted-value lists are written with ", ". */
static void md_list(const char *list) {
    for (const char *p = list; *p; p++) {
        if (*p == '|')
            fputs(", ", stdout);
        else
            putchar(*p);
    }
}

int serve_vllm_print(const cli_opt *own, bool tsv) {
    int rc = 0;
    if (!tsv) {
        printf("| vLLM flag | cllm |\n|---|---|\n");
    }
    for (const serve_vflag *f = serve_vflags; f->name; f++) {
        const cli_opt *o = handled_here(f) || f->native ? NULL : own_opt(own, f->name);
        if (!handled_here(f) && !f->native && !o) {
            fprintf(stderr,
                    "cllm serve: %s is listed as a cllm flag but the serve table lacks it\n",
                    f->name);
            rc = 1;
            continue;
        }
        const char *kind = f->native   ? "elsewhere"
                           : o         ? "native"
                           : !f->noop  ? "refused"
                           : f->accept ? "cond"
                                       : "noop";
        if (tsv) {
            /* name alias kind value bad: a value a launch line carries ("-" for a switch) and a
             * value that is refused ("-" when none) */
            const char *good = f->arg ? f->arg : "-";
            printf("%s\t%s\t%s\t%s\t%s\n", f->name, f->alias ? f->alias : "-", kind, good,
                   f->bad ? f->bad : "-");
            continue;
        }
        printf("| `%s`%s%s%s | ", f->name, f->alias ? " (`" : "", f->alias ? f->alias : "",
               f->alias ? "`)" : "");
        if (f->native)
            printf("%s", f->native);
        else if (o)
            printf("takes effect: %s", o->help);
        else if (!f->noop)
            printf("**refused**: %s", f->refuse);
        else if (f->accept) {
            printf("accepted with `");
            md_list(f->accept);
            printf("`, no effect: %s; other values **refused**: %s", f->noop, f->refuse);
        } else
            printf("accepted, no effect: %s", f->noop);
        printf(" |\n");
    }
    return rc;
}
