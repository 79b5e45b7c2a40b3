#!/bin/bash
# Every vLLM `serve` flag (the table in src/cli/serve_vllm.c, printed by `cllm serve
# --list-vllm-flags`), fed to `cllm serve` on models/tiny:
#  - docs/vllm-flags.md holds exactly the table the binary prints (no drift);
#  - each refused flag (and each conditional flag with a refused value) exits 1 before anything
#    listens, naming the flag and the reason;
#  - one launch line carrying every accepted flag at once (and the vLLM names cllm honours)
#    becomes ready, with exactly one INFO line per no-op flag;
#  - the flags that take effect: --generation-config auto|vllm|DIR and
#    --override-generation-config change the sampling defaults as in vLLM, --uvicorn-log-level
#    warning and --disable-uvicorn-access-log drop the access lines (and
#    --disable-access-log-for-endpoints those of the paths named), --enable-force-include-usage
#    adds the usage chunk to every stream, --disable-log-stats the
#    throughput line, --kv-cache-dtype fp8 is refused by name (and vLLM's other KV dtypes but
#    bfloat16), --mamba-ssm-cache-dtype bfloat16 makes the state slots bf16 (float16 and bf16
#    beside --gdn-prefill chunked refused), -m is --model.
set -u
T=${CLLM_TMP:-/tmp}/serve_vllm_flags
rm -rf "$T"
mkdir -p "$T"
source "$CLLM_SRC/tests/lib/check.sh"
command -v curl > /dev/null || exit 77
M="$CLLM_SRC/models/tiny"
PORT=$((20000 + RANDOM % 12000))
U="http://127.0.0.1:$PORT"
COMMON=(--kv-cache-memory 16MiB --max-num-seqs 4 --threads 1 --port $PORT)
SPID=
trap '[ -n "$SPID" ] && kill $SPID 2>/dev/null' EXIT
start() { # start LOG FLAGS...: serve in the background, wait for /health 200
    local log=$1 try i
    shift
    local args=("$@")
    for try in 1 2 3 4 5; do
        "$CLLM_BIN" serve "${args[@]}" > "$log" 2>&1 &
        SPID=$!
        for _ in $(seq 300); do
            kill -0 $SPID 2> /dev/null || break # (a 200 from whoever holds the port is not ours)
            [ "$(curl -s -m 5 -o /dev/null -w '%{http_code}' $U/health)" = 200 ] && return 0
            sleep 0.1
        done
        # the random port was held by someone else: draw another (as tests/lib/serve.sh)
        kill -0 $SPID 2> /dev/null || ! grep -q "address already in use" "$log" || {
            PORT=$((20000 + RANDOM % 12000))
            U="http://127.0.0.1:$PORT"
            COMMON=(--kv-cache-memory 16MiB --max-num-seqs 4 --threads 1 --port $PORT)
            for i in "${!args[@]}"; do [ "${args[$i]}" = --port ] && args[$((i + 1))]=$PORT; done
            continue
        }
        break
    done
    bad "server did not become ready ($*)"
    cat "$log"
    return 1
}
stop() {
    kill -TERM $SPID 2> /dev/null
    wait $SPID 2> /dev/null
    SPID=
}

# --- the table and its copy in docs ---
expect_rc 0 "--list-vllm-flags tsv" "$CLLM_BIN" serve --list-vllm-flags tsv
cp "$T/out" "$T/flags.tsv"
n=$(wc -l < "$T/flags.tsv")
[ "$n" -gt 150 ] && ok "$n vLLM flags in the table" || bad "only $n flags"
expect_rc 0 "--list-vllm-flags md" "$CLLM_BIN" serve --list-vllm-flags md
sed -n '/^<!-- BEGIN cllm serve --list-vllm-flags md -->$/,/^<!-- END -->$/p' \
    "$CLLM_SRC/docs/vllm-flags.md" | sed '1d;$d' > "$T/doc_table.md"
cmp -s "$T/out" "$T/doc_table.md" && ok "docs/vllm-flags.md matches the table" ||
    { bad "docs/vllm-flags.md differs from 'cllm serve --list-vllm-flags md' (regenerate it)"; diff "$T/out" "$T/doc_table.md" | head; }

# --- each refusal, before anything listens ---
ACCEPT=()
NOOPS=()
n_ref=0
while IFS=$'\t' read -r name alias kind val badv; do
    case $kind in
    refused)
        if [ "$val" = - ]; then args=("$name"); else args=("$name" "$val"); fi
        "$CLLM_BIN" serve "$M" "${args[@]}" "${COMMON[@]}" > "$T/out" 2>&1
        rc=$?
        if [ $rc = 1 ] && grep -q -- "^cllm serve: $name" "$T/out" && ! grep -q "listening on http" "$T/out"; then
            n_ref=$((n_ref + 1))
        else
            bad "$name: rc $rc, want 1 with the flag named before listening"
            cat "$T/out"
        fi
        ;;
    cond)
        "$CLLM_BIN" serve "$M" "$name" "$badv" "${COMMON[@]}" > "$T/out" 2>&1
        rc=$?
        if [ $rc = 1 ] && grep -q -- "^cllm serve: $name $badv: .*(accepted: " "$T/out"; then
            n_ref=$((n_ref + 1))
        else
            bad "$name $badv: rc $rc, want 1 naming the accepted values"
            cat "$T/out"
        fi
        ACCEPT+=("$name" "$val")
        NOOPS+=("$name")
        ;;
    noop)
        if [ "$val" = - ]; then ACCEPT+=("$name"); else ACCEPT+=("$name" "$val"); fi
        NOOPS+=("$name")
        ;;
    esac
done < "$T/flags.tsv"
ok "$n_ref refusals named their flag and reason"
expect_rc 1 "--kv-cache-dtype fp8" "$CLLM_BIN" serve "$M" --kv-cache-dtype fp8 "${COMMON[@]}"
grep -q -- "--kv-cache-dtype fp8: quantized KV caches (fp8, int8, nvfp4) are not implemented" "$T/out" &&
    ok "fp8 KV refused by name" || { bad "fp8 KV message"; cat "$T/out"; }
expect_rc 1 "--kv-cache-dtype int8" "$CLLM_BIN" serve "$M" --kv-cache-dtype int8 "${COMMON[@]}"
grep -q -- "--kv-cache-dtype int8: quantized KV caches" "$T/out" &&
    ok "int8 KV refused by name" || { bad "int8 KV message"; cat "$T/out"; }
# vLLM's other choices: each refused with its reason, not as an unknown value
for v in fp8_e4m3 fp8_e5m2 fp8_inc fp8_ds_mla nvfp4 float16; do
    expect_rc 1 "--kv-cache-dtype $v" "$CLLM_BIN" serve "$M" --kv-cache-dtype $v "${COMMON[@]}"
    grep -q -- "--kv-cache-dtype $v: .*not implemented on the CPU" "$T/out" &&
        ok "$v KV refused with the reason" || { bad "$v KV message"; cat "$T/out"; }
done
# the recurrent state's dtype: bfloat16 takes effect, float16 and bf16 beside the chunked prefill
# are refused with the reason
expect_rc 1 "--mamba-ssm-cache-dtype float16" "$CLLM_BIN" serve "$M" --mamba-ssm-cache-dtype float16 "${COMMON[@]}"
grep -q -- "--mamba-ssm-cache-dtype float16: a float16 recurrent state is not implemented" "$T/out" &&
    ok "float16 recurrent state refused with the reason" || { bad "float16 state message"; cat "$T/out"; }
expect_rc 1 "bf16 state with the chunked prefill" "$CLLM_BIN" serve "$M" --mamba-ssm-cache-dtype bf16 \
    --gdn-prefill chunked "${COMMON[@]}"
grep -q -- "--mamba-ssm-cache-dtype bf16 with --gdn-prefill chunked: the chunked prefill needs a float32" "$T/out" &&
    ok "bf16 state + chunked prefill refused" || { bad "bf16 + chunked message"; cat "$T/out"; }
if start "$T/ssm.log" "$M" --mamba-ssm-cache-dtype bfloat16 --stats-interval 0 "${COMMON[@]}"; then
    code=$(curl -s -o "$T/ssm.json" -w '%{http_code}' $U/v1/completions -d '{"prompt":"Hello","max_tokens":4}')
    stop
    [ "$code" = 200 ] && grep -q "recurrent state bf16" "$T/ssm.log" &&
        ok "--mamba-ssm-cache-dtype bfloat16: the state slots are bf16, and it serves" ||
        { bad "bf16 state serve: $code"; grep "state slots" "$T/ssm.log"; }
fi
expect_rc 1 "--generation-config without the file" "$CLLM_BIN" serve "$M" --generation-config "$T" "${COMMON[@]}"
grep -q "no readable generation_config.json" "$T/out" && ok "missing generation_config.json named" || bad "gen dir message"
expect_rc 1 "--override-generation-config with an unknown key" \
    "$CLLM_BIN" serve "$M" --override-generation-config '{"max_new_tokens":8}' "${COMMON[@]}"
grep -q "'max_new_tokens' is not supported" "$T/out" && ok "unknown override key named" || bad "override message"

# --- every accepted flag in one launch line, with the vLLM names cllm honours ---
if start "$T/all.log" -m "$M" --tokenizer "$M" --served-model-name tiny --tensor-parallel-size 1 \
    --pipeline-parallel-size 1 --max-model-len 2048 --max-num-batched-tokens 512 \
    --gpu-memory-utilization 0.9 --enforce-eager --swap-space 4 --dtype auto --kv-cache-dtype auto \
    --kv-cache-memory-bytes 16MiB --seed 1 --enable-prefix-caching --max-logprobs 20 \
    --generation-config auto --disable-log-stats --uvicorn-log-level info --trust-remote-code \
    --max-num-seqs 4 --threads 1 --port $PORT --cudagraph-capture-sizes 1 2 4 8 "${ACCEPT[@]}"; then
    ok "a launch line with ${#NOOPS[@]} no-op vLLM flags is ready"
    code=$(curl -s -o "$T/c.json" -w '%{http_code}' $U/v1/completions -d '{"prompt":"Hello","max_tokens":3}')
    [ "$code" = 200 ] && ok "and serves" || bad "completion: $code $(cat "$T/c.json")"
    stop
    missing=0
    for f in "${NOOPS[@]}"; do
        c=$(grep -c -- "INFO.* $f[ :].*no effect (" "$T/all.log")
        [ "$c" = 1 ] || { bad "$f: $c INFO lines, want 1"; missing=1; }
    done
    [ $missing = 0 ] && ok "one INFO line per no-op flag"
    grep -q "Avg prompt throughput" "$T/all.log" && bad "--disable-log-stats: a throughput line" ||
        ok "--disable-log-stats: no throughput line"
    grep -q "access: " "$T/all.log" && ok "--uvicorn-log-level info keeps the access log" || bad "no access line"
fi

# --- flags that take effect ---
for lvl in --uvicorn-log-level=warning --disable-uvicorn-access-log; do
    if start "$T/acc.log" "$M" "$lvl" --stats-interval 0 "${COMMON[@]}"; then
        curl -s -o /dev/null $U/v1/completions -d '{"prompt":"Hello","max_tokens":2}'
        stop
        grep -q "access: " "$T/acc.log" && bad "$lvl: access line written" || ok "$lvl: no access line"
    fi
done

if start "$T/skip.log" "$M" --disable-access-log-for-endpoints /health,/metrics --stats-interval 0 "${COMMON[@]}"; then
    curl -s -o /dev/null $U/metrics
    curl -s -o /dev/null $U/v1/completions -d '{"prompt":"Hello","max_tokens":2}'
    stop
    ! grep -q '"GET /health"\|"GET /metrics"' "$T/skip.log" && grep -q '"POST /v1/completions"' "$T/skip.log" &&
        ok "--disable-access-log-for-endpoints /health,/metrics: only the completion logged" ||
        { bad "access log skip"; grep access "$T/skip.log"; }
fi

if start "$T/usage.log" "$M" --enable-force-include-usage --stats-interval 0 "${COMMON[@]}"; then
    curl -sN $U/v1/completions -d '{"prompt":"Hello","max_tokens":2,"stream":true}' > "$T/usage.txt"
    stop
    grep -q '"choices":\[\],"usage":{"prompt_tokens":' "$T/usage.txt" &&
        ok "--enable-force-include-usage: a stream without stream_options ends with usage" ||
        { bad "force include usage"; cat "$T/usage.txt"; }
fi

# sampling defaults: models/tiny's generation_config.json samples (temperature 0.7, top_k 20)
sampled() { # sampled: 0 when some seeded request without temperature differs from greedy
    local g s diff=1
    for seed in 1 2 3; do
        g=$(curl -s $U/v1/completions -d "{\"prompt\":\"Once\",\"max_tokens\":24,\"temperature\":0,\"seed\":$seed}" | sed 's/.*"text":"\([^"]*\)".*/\1/')
        s=$(curl -s $U/v1/completions -d "{\"prompt\":\"Once\",\"max_tokens\":24,\"seed\":$seed}" | sed 's/.*"text":"\([^"]*\)".*/\1/')
        [ "$g" != "$s" ] && diff=0
    done
    return $diff
}
mkdir -p "$T/gen"
echo '{"do_sample": false, "eos_token_id": [4002, 4000]}' > "$T/gen/generation_config.json"
check_gen() { # check_gen WANT(sampled|greedy) DESC FLAGS...
    local want=$1 desc=$2
    shift 2
    if start "$T/gen.log" "$M" --stats-interval 0 "${COMMON[@]}" "$@"; then
        if sampled; then got=sampled; else got=greedy; fi
        stop
        expect_eq "$desc: $want" "$got" "$want"
    fi
}
check_gen sampled "--generation-config auto (the model's)" --generation-config auto
check_gen greedy "--generation-config vllm" --generation-config vllm
check_gen greedy "--generation-config DIR (do_sample false)" --generation-config "$T/gen"
check_gen greedy "--override-generation-config temperature 0" --override-generation-config '{"temperature":0}'
check_gen sampled "--generation-config vllm + an override" --generation-config vllm \
    --override-generation-config '{"temperature":0.7,"top_k":20}'
check_exit
