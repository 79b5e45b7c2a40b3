#!/bin/bash
# `cllm serve --speculative-config` (models/tiny, real engine, n-gram, suffix and MTP drafts):
#  - a greedy completion and a seeded sampled chat answer are byte-for-byte the answers of a server
#    without speculation (ids and logprobs included), streamed and not;
#  - the same with the suffix method (drafts from earlier answers too) and with the MTP method
#    (models/tiny's trained head, tools/train/train_mtp.py);
#  - the same under --tensor-parallel-size 2 (when mpirun is there and cllm has MPI);
#  - /metrics carries vLLM's vllm:spec_decode_* counters, and drafts were accepted; /console/stats
#    has them for the dashboard's card;
#  - bad configs are refused before `ready`, naming the key: unknown key, unknown method, MTP on a
#    model without an MTP head (a synthetic one), k out of range, prompt_lookup_min > max, a benchmark-only key (generate and bench-forward take the flag:
#    tests/cli/generate_spec.sh).
set -u
T=${CLLM_TMP:-/tmp}/serve_spec
rm -rf "$T"
mkdir -p "$T"
source "$CLLM_SRC/tests/lib/check.sh"
command -v curl > /dev/null || exit 77
M="$CLLM_SRC/models/tiny"
COMMON=(--kv-cache-memory 16MiB --max-num-seqs 4 --threads 1 --stats-interval 0)
# fixed_k: the cost model may turn drafting off on a loaded machine, and this test must see drafts
SPEC='{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3, "fixed_k": true}'

serve_one() { # serve_one NAME [flags]: starts, asks, writes $T/NAME.*, stops
    local name=$1; shift
    local port=$((20000 + RANDOM % 12000))
    local u="http://127.0.0.1:$port"
    "$CLLM_BIN" serve "$M" --port $port "${COMMON[@]}" "$@" > "$T/$name.log" 2>&1 &
    local pid=$!
    local up=0
    for _ in $(seq 600); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' $u/health)" = 200 ] && up=1 && break
        kill -0 $pid 2> /dev/null || break
        sleep 0.1
    done
    [ $up = 1 ] || { echo "server $name did not come up on port $port:"; tail -5 "$T/$name.log"; }
    local p='The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown'
    curl -s $u/v1/completions -H 'Content-Type: application/json' \
        -d "{\"prompt\": \"$p\", \"max_tokens\": 60, \"temperature\": 0, \"logprobs\": 2}" \
        | sed 's/"id":"[^"]*"//; s/"created":[0-9]*//' > "$T/$name.cmpl"
    curl -s $u/v1/chat/completions -H 'Content-Type: application/json' \
        -d "{\"messages\": [{\"role\": \"user\", \"content\": \"$p\"}], \"max_tokens\": 50, \"temperature\": 0.9, \"seed\": 5, \"logprobs\": true, \"top_logprobs\": 2}" \
        | sed 's/"id":"[^"]*"//; s/"created":[0-9]*//' > "$T/$name.chat"
    curl -s -N $u/v1/completions -H 'Content-Type: application/json' \
        -d "{\"prompt\": \"$p\", \"max_tokens\": 40, \"temperature\": 0, \"stream\": true}" \
        | grep -o '"text":"[^"]*"' | tr -d '\n' > "$T/$name.sse"
    curl -s $u/metrics > "$T/$name.metrics"
    curl -s $u/console/stats > "$T/$name.stats"
    kill $pid 2> /dev/null
    wait $pid 2> /dev/null
    pkill -f -- "--port $port " 2> /dev/null # tensor-parallel ranks
}

serve_one plain
serve_one spec --speculative-config "$SPEC"
serve_one suffix --speculative-config '{"method": "suffix", "num_speculative_tokens": 3, "fixed_k": true}'
serve_one mtp --speculative-config '{"method": "mtp", "num_speculative_tokens": 3, "fixed_k": true}'
for run in spec suffix mtp; do
    for f in cmpl chat sse; do
        if [ -s "$T/plain.$f" ] && cmp -s "$T/plain.$f" "$T/$run.$f"; then
            ok "$f: the same answer with $run speculation"
        else
            bad "$f differs with $run speculation:"
            diff "$T/plain.$f" "$T/$run.$f" | head -5
        fi
    done
done
if command -v mpirun > /dev/null \
    && ! "$CLLM_BIN" eval /nonexistent --tokens 1 --tensor-parallel-size 2 2>&1 | grep -q "built without MPI"; then
    export OMPI_MCA_btl_vader_single_copy_mechanism=none
    # tensor parallel sums in another order than one process: compare TP with TP
    serve_one tp2plain --tensor-parallel-size 2
    serve_one tp2 --tensor-parallel-size 2 --speculative-config "$SPEC"
    for f in cmpl chat sse; do
        if [ -s "$T/tp2plain.$f" ] && cmp -s "$T/tp2plain.$f" "$T/tp2.$f"; then
            ok "$f: the same answer with speculation under tensor parallel 2"
        else
            bad "$f differs with speculation under TP 2:"
            diff "$T/tp2plain.$f" "$T/tp2.$f" | head -5
            tail -5 "$T/tp2.log"
        fi
    done
else
    echo "skip: tensor parallel part (no mpirun or no MPI build)"
fi
acc=$(awk '/^vllm:spec_decode_num_accepted_tokens_total/ {print $2 + 0}' "$T/spec.metrics")
drafts=$(awk '/^vllm:spec_decode_num_drafts_total/ {print $2 + 0}' "$T/spec.metrics")
[ -n "$acc" ] && [ -n "$drafts" ] && [ "$acc" -gt 0 ] && [ "$drafts" -gt 0 ] \
    && ok "metrics: $drafts verifies, $acc drafts accepted" \
    || { bad "spec metrics missing or nothing accepted"; grep spec_decode "$T/spec.metrics"; }
grep -q 'vllm:spec_decode_num_accepted_tokens_per_pos_total{.*position="2"}' "$T/spec.metrics" \
    && ok "per-position counters" || bad "no per-position counter for position 2"
/usr/bin/python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert s["spec_k"] == 3 and s["spec_drafts"] > 0 and 0 < s["spec_accepted_tokens"] <= s["spec_draft_tokens"], s
p = json.load(open(sys.argv[2]))
assert p["spec_k"] == 0 and p["spec_drafts"] == 0, p' "$T/spec.stats" "$T/plain.stats" \
    && ok "console stats carry the acceptance (the dashboard card)" || bad "console stats spec fields"
grep -q spec_decode "$T/plain.metrics" && bad "spec counters without --speculative-config" \
    || ok "no spec counters without speculation"

refused() { # refused JSON EXPECTED-TEXT [MODEL]
    local port=$((20000 + RANDOM % 12000))
    timeout 30 "$CLLM_BIN" serve "${3:-$M}" --port $port "${COMMON[@]}" --speculative-config "$1" \
        > "$T/out" 2>&1
    local rc=$?
    if [ $rc = 1 ] && grep -q -- "$2" "$T/out"; then ok "refused: $2"; else
        bad "rc $rc for $1, wanted '$2' in:"
        cat "$T/out"
    fi
}
refused '{"method": "ngram", "num_speculative_tokens": 3, "lookahead": 2}' "unknown key 'lookahead'"
refused '{"method": "eagle", "num_speculative_tokens": 3}' "method 'eagle' is not supported"
# models/tiny has a trained MTP head: a synthetic model without one for the refusal
"$CLLM_BIN" synth --config "$CLLM_SRC/configs/tiny.json" "$T/nomtp" --seed 5 -q > /dev/null 2>&1 \
    && cp "$M/tokenizer.json" "$M/tokenizer_config.json" "$T/nomtp/" || bad "synth configs/tiny.json"
refused '{"method": "qwen3_5_mtp", "num_speculative_tokens": 1}' "method mtp needs the checkpoint's MTP head" "$T/nomtp"
refused '{"method": "mtp", "num_speculative_tokens": 2, "prompt_lookup_max": 3}' "'prompt_lookup_max' does not apply to method 'mtp'"
refused '{"method": "ngram", "num_speculative_tokens": 2, "draft_vocab_size": 4096}' "'draft_vocab_size' does not apply to method 'ngram'"
refused '{"method": "mtp", "num_speculative_tokens": 2, "draft_vocab_size": 8}' "draft_vocab_size must be an integer in \[64"
refused '{"method": "ngram", "num_speculative_tokens": 0}' "num_speculative_tokens must be an integer"
refused '{"method": "ngram", "num_speculative_tokens": 17}' "num_speculative_tokens must be an integer"
refused '{"method": "ngram"}' "num_speculative_tokens is required"
refused '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2}' "prompt_lookup_min (4) must be <= prompt_lookup_max (2)"
refused '{"method": "ngram", "num_speculative_tokens": 2, "synthetic_acceptance": 0.6}' "'synthetic_acceptance' is for benchmarks only"
refused '{"method": "ngram", "num_speculative_tokens": 2, "model": "x"}' "key 'model' is not supported"
refused 'ngram' "not a JSON object"
refused '{"method": "suffix", "num_speculative_tokens": 2, "prompt_lookup_max": 3}' "'prompt_lookup_max' does not apply to method 'suffix'"
refused '{"method": "ngram", "num_speculative_tokens": 2, "suffix_decoding_max_tree_depth": 3}' "'suffix_decoding_max_tree_depth' does not apply to method 'ngram'"
refused '{"method": "suffix", "num_speculative_tokens": 2, "suffix_decoding_min_token_prob": 0.1}' "'suffix_decoding_min_token_prob' is not supported"
refused '{"method": "suffix", "num_speculative_tokens": 2, "suffix_decoding_max_spec_factor": 0}' "suffix_decoding_max_spec_factor must be a number"
check_exit
