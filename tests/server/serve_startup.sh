#!/bin/bash
# `cllm serve` start-up as a vLLM operator runs it (models/tiny, real engine):
#  - the reference launch line (--model, --tokenizer, --tensor-parallel-size 1, --pipeline-parallel-size
#    1, --max-model-len, --max-num-batched-tokens, --gpu-memory-utilization, --enforce-eager,
#    --disable-log-requests, --port) starts and serves; underscore spellings; several served names;
#    the model path accepted as a model name;
#  - every unknown flag in one message with a "did you mean";
#  - the refusals before `ready`, exit 1 with vLLM's words: a --tensor-parallel-size the heads do
#    not divide (3; serve under tensor parallel itself is tests/dist/tp_serve.sh),
#    --max-model-len above max_position_embeddings, no tokenizer.json (and --skip-tokenizer-init
#    instead: ids work, text is 400), --quantization not matching the checkpoint, --dtype that
#    would need a conversion, the port in use by another cllm server;
#  - a Hugging Face id or a file instead of a model directory gets a hint (serve, verify, eval).
set -u
T=${CLLM_TMP:-/tmp}/serve_startup
rm -rf "$T"
mkdir -p "$T"
source "$CLLM_SRC/tests/lib/check.sh"
command -v curl > /dev/null || exit 77
M="$CLLM_SRC/models/tiny"
PORT=$((20000 + RANDOM % 12000))
U="http://127.0.0.1:$PORT"
COMMON=(--kv-cache-memory 16MiB --max-num-seqs 4 --threads 1 --stats-interval 0)
wait_ready() { # wait_ready PID LOG
    for _ in $(seq 300); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' $U/health)" = 200 ] && return 0
        kill -0 "$1" 2> /dev/null || break
        sleep 0.1
    done
    bad "server did not become ready"
    cat "$2"
    return 1
}
has() { grep -q -- "$1" "$T/out" && ok "$2" || { bad "$2: no '$1' in:"; cat "$T/out"; }; }

# --- the reference launch line, TP 1 ---
"$CLLM_BIN" serve --model "$M" --tokenizer "$M" --tensor-parallel-size 1 --pipeline-parallel-size 1 \
    --max-model-len 4096 --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9 --enforce-eager \
    --disable-log-requests --port $PORT --served-model-name qwen tiny-alias --trust-remote-code \
    --swap-space 4 --dtype auto --kv-cache-dtype bfloat16 --seed 7 --enable-auto-tool-choice \
    --tool-call-parser qwen3_xml --reasoning-parser qwen3 "${COMMON[@]}" > "$T/ref.log" 2>&1 &
SPID=$!
if wait_ready $SPID "$T/ref.log"; then
    ok "reference launch line is ready"
    # --seed: the first unseeded sampled request repeats across restarts (checked below)
    curl -s $U/v1/completions -d '{"prompt":"Once","max_tokens":8,"temperature":1}' |
        sed 's/"id":"[^"]*"//; s/"created":[0-9]*//' > "$T/seed1.json"
    models=$(curl -s $U/v1/models)
    echo "$models" | grep -q '"id":"qwen"' && echo "$models" | grep -q '"id":"tiny-alias"' &&
        ok "both served names listed" || bad "models: $models"
    for name in qwen tiny-alias "$M"; do
        code=$(curl -s -o "$T/c.json" -w '%{http_code}' $U/v1/completions \
            -d "{\"model\":\"$name\",\"prompt\":\"Hello\",\"max_tokens\":3}")
        [ "$code" = 200 ] && grep -q '"model":"qwen"' "$T/c.json" && ok "model name '$name' accepted" ||
            bad "model '$name': $code $(cat "$T/c.json")"
    done
    grep -q "gpu-memory-utilization 0.90: no GPU, no effect" "$T/ref.log" && ok "no-op flag logged" ||
        bad "no-op log line missing"
    grep -q "KV: .*bf16" "$T/ref.log" && ok "--kv-cache-dtype bfloat16 reached the engine" || bad "kv dtype"

    # --- the port is taken: a second server must fail, not share it ---
    expect_rc 1 "second server on the same port" "$CLLM_BIN" serve "$M" --port $PORT "${COMMON[@]}"
    has "address already in use" "port-in-use message"
    grep -q "ready:" "$T/out" && bad "second server said ready" || ok "second server never ready"
    [ "$(curl -s -o /dev/null -w '%{http_code}' $U/health)" = 200 ] && ok "first server still serving" ||
        bad "first server gone"
    kill -TERM $SPID
    wait $SPID
    # the same --seed after a restart gives the same sampled text
    "$CLLM_BIN" serve "$M" --port $PORT --seed 7 --kv-cache-dtype bf16 "${COMMON[@]}" > "$T/seed.log" 2>&1 &
    SPID=$!
    if wait_ready $SPID "$T/seed.log"; then
        curl -s $U/v1/completions -d '{"prompt":"Once","max_tokens":8,"temperature":1}' |
            sed 's/"id":"[^"]*"//; s/"created":[0-9]*//; s/"model":"[^"]*"//' > "$T/seed2.json"
        sed -i 's/"model":"[^"]*"//' "$T/seed1.json"
        cmp -s "$T/seed1.json" "$T/seed2.json" && ok "--seed repeats across restarts" ||
            bad "--seed: $(cat "$T/seed1.json") vs $(cat "$T/seed2.json")"
        kill -TERM $SPID
        wait $SPID
    fi
fi

# --- flags ---
expect_rc 2 "unknown flags" "$CLLM_BIN" serve "$M" --max-model-lenn 64 --enforce-eagre --frobnicate 3
has "unknown options '--max-model-lenn' (did you mean --max-model-len?), '--enforce-eagre' (did you mean --enforce-eager?), '--frobnicate'" \
    "all unknown flags in one message with suggestions"
expect_rc 2 "underscore spelling parses (then --max_num_seqs 0 is out of range)" \
    "$CLLM_BIN" serve "$M" --max_model_len 64 --max_num_seqs 0
has "--max-num-seqs must be in" "underscore spelling maps to the flag"
expect_rc 2 "MODEL and --model differ" "$CLLM_BIN" serve "$M" --model /elsewhere

# --- refusals before ready ---
if command -v mpirun >/dev/null && ! "$CLLM_BIN" eval "$M" --tokens 1 --tensor-parallel-size 2 2>&1 | grep -q "without MPI"; then
    [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    [ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" # OpenMPI's own leaks
    expect_rc 1 "tensor parallel 3" "$CLLM_BIN" serve "$M" --tensor-parallel-size 3 --port $PORT "${COMMON[@]}"
    has "is not divisible by --tensor-parallel-size 3" "TP refusal names the flag"
else
    expect_rc 2 "tensor parallel 3 without MPI" "$CLLM_BIN" serve "$M" --tensor-parallel-size 3 --port $PORT "${COMMON[@]}"
    has "without MPI" "TP refusal says why"
fi
expect_rc 1 "max-model-len over the model" "$CLLM_BIN" serve "$M" --max-model-len 32768 --port $PORT "${COMMON[@]}"
has "User-specified max_model_len (32768) is greater than the derived max_model_len (max_position_embeddings=4096" \
    "max-model-len refusal in vLLM's words"
expect_rc 1 "--quantization gptq on a bf16 checkpoint" "$CLLM_BIN" serve "$M" --quantization gptq --port $PORT "${COMMON[@]}"
has "Quantization method specified in the model config (none) does not match" "quantization refusal"
expect_rc 1 "--dtype float16 on a bf16 checkpoint" "$CLLM_BIN" serve "$M" --dtype float16 --port $PORT "${COMMON[@]}"
has "checkpoint stores bfloat16" "dtype refusal"
mkdir -p "$T/notok"
cp "$M/config.json" "$T/notok/"
ln -s "$M/model.safetensors" "$T/notok/model.safetensors"
expect_rc 1 "no tokenizer" "$CLLM_BIN" serve "$T/notok" --port $PORT "${COMMON[@]}"
has "Can't load tokenizer for '$T/notok'" "no-tokenizer refusal"
grep -q "ready:" "$T/out" && bad "no-tokenizer server said ready" || ok "no-tokenizer refused before ready"
"$CLLM_BIN" serve "$T/notok" --skip-tokenizer-init --port $PORT "${COMMON[@]}" > "$T/skip.log" 2>&1 &
SPID=$!
if wait_ready $SPID "$T/skip.log"; then
    code=$(curl -s -o "$T/c.json" -w '%{http_code}' $U/v1/completions -d '{"prompt":"Hello","max_tokens":2}')
    [ "$code" = 400 ] && ok "--skip-tokenizer-init: text prompt is 400" || bad "text prompt: $code $(cat "$T/c.json")"
    code=$(curl -s -o "$T/c.json" -w '%{http_code}' $U/v1/completions -d '{"prompt":[1,2,3],"max_tokens":2}')
    [ "$code" = 200 ] && ok "--skip-tokenizer-init: token ids served" || bad "ids: $code $(cat "$T/c.json")"
    kill -TERM $SPID
    wait $SPID
fi

# --- model directory hints ---
expect_rc 1 "serve a Hugging Face id" "$CLLM_BIN" serve Qwen/Qwen3.5-35B-A3B
has "huggingface-cli download Qwen/Qwen3.5-35B-A3B --local-dir DIR" "HF id hint (serve)"
expect_rc 1 "verify a config file" "$CLLM_BIN" verify "$M/config.json"
has "is a file, not a model directory" "file hint (verify)"
expect_rc 1 "eval a Hugging Face id" "$CLLM_BIN" eval Qwen/Qwen3.5-35B-A3B --tokens 1,2
has "download it first" "HF id hint (eval)"
check_exit
