#!/bin/bash
# Differential fuzz of speculative decoding (tests/server/spec_diff.py, models/tiny with its
# trained MTP head). Fixed seeds: every run draws the same prompts and requests (how a server
# interleaves them still varies with timing):
#  - `cllm generate`: 60 random prompts x speculative configs x engine flags, greedy ids equal to
#    the plain run's, seeded sampled runs repeatable;
#  - `cllm serve`: a speculative and a plain server get the same concurrent random requests and
#    give the same answers (texts, logprobs, finish reasons), once with MTP at ample KV (chat
#    requests with small images among them) and once
#    with n-gram and MTP near a full KV cache (prompts up to the whole --max-model-len, so
#    preemption and prefix-cache reuse of partial blocks happen: the case that once left a
#    request waiting forever, test_engine_sched's test_partial_fills_cache);
#  - n-gram under tensor parallel 2 when mpirun is there.
# FZ_CASES / FZ_ROUNDS scale it up for a longer hunt.
set -u
T=${CLLM_TMP:-/tmp}/spec_diff
rm -rf "$T"
mkdir -p "$T"
source "$CLLM_SRC/tests/lib/check.sh"
[ -x /usr/bin/python3 ] || exit 77
PY="/usr/bin/python3 $CLLM_SRC/tests/server/spec_diff.py"
M="$CLLM_SRC/models/tiny"
export FZ_DIR="$T"
R=${FZ_ROUNDS:-10}

expect_rc 0 "generate: speculative == plain over random configs" \
  $PY generate "$CLLM_BIN" "$M" "${FZ_CASES:-60}" 1
tail -1 "$T/out"
FZ_IMAGES=1 expect_rc 0 "serve: MTP k 4, ample KV, some chat requests with images" \
  $PY serve "$CLLM_BIN" "$M" "$R" 2 '{"method": "mtp", "num_speculative_tokens": 4, "fixed_k": true}' \
  --block-size 4 -b 24 --max-num-seqs 4 --threads 1
tail -2 "$T/out"
( export FZ_LENS=1,2,15,16,17,31,32,33,44,46 FZ_MAXT=1,2,3,5,8
  expect_rc 0 "serve: n-gram k 3 near a full KV cache" \
    $PY serve "$CLLM_BIN" "$M" "$R" 3 \
    '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3, "fixed_k": true}' \
    --block-size 16 -b 19 --kv-cache-memory 100KB --max-model-len 48 --max-num-seqs 5 --threads 1
  tail -2 "$T/out"
  expect_rc 0 "serve: MTP k 4 near a full KV cache" \
    $PY serve "$CLLM_BIN" "$M" "$R" 4 '{"method": "mtp", "num_speculative_tokens": 4, "fixed_k": true}' \
    --block-size 16 -b 19 --kv-cache-memory 100KB --max-model-len 48 --max-num-seqs 5 --threads 1
  tail -2 "$T/out"
  exit $fail ) || fail=1
# tensor parallel 2 (n-gram: the MTP head is not sharded), where mpirun is there and cllm has MPI
if command -v mpirun > /dev/null \
    && ! "$CLLM_BIN" eval /nonexistent --tokens 1 --tensor-parallel-size 2 2>&1 | grep -q "built without MPI"; then
  expect_rc 0 "serve: n-gram k 3 under tensor parallel 2" \
    $PY serve "$CLLM_BIN" "$M" "$R" 5 \
    '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3, "fixed_k": true}' \
    --tensor-parallel-size 2 --block-size 4 -b 24 --max-num-seqs 4 --threads 1
  tail -2 "$T/out"
fi
check_exit
