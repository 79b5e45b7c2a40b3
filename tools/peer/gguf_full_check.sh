#!/bin/bash
# Dev check, outside CI (issue 33's "done when"): cllm against llama.cpp at the real Qwen3.5-35B-A3B
# widths (configs/qwen3.5-35b-a3b.json: hidden 2048, 256 experts of 512, vocabulary 248320),
# random weights in llama-quantize's Q4_K_M mix (tools/ref/make_gguf_random.py), the Qwen3.5
# vocabulary of the peer's ggml-vocab-qwen35.gguf. Two parts, one big file on disk at a time:
#
#  exact  2 layers (full_attention_interval 2: one Gated DeltaNet layer, one gated full-attention
#         layer), no MTP, Q4_K_M: llama.cpp on the F32 GGUF of that file's exact weights
#         (tools/peer/gguf_to_f32.py) against cllm on the Q4_K_M file with float activations
#         (CLLM_ACT16=float): the same arithmetic, tolerance 1e-4 of the row's largest logit. Also
#         shown: cllm with its default int16 activation codes, and llama.cpp on the Q4_K_M file
#         itself (it rounds activations to 8 bits in quantized matmuls: no exact agreement there).
#  full   the whole model, 40 layers + MTP, Q4_K_M (~21.7 GB): llama.cpp on the file (no weight
#         repacking: LLAMA_LOGITS_NO_REPACK, the repacked copy would not fit in 24 GB beside the
#         page cache) against cllm on the file (both activation modes); then `cllm serve FILE`
#         (--max-num-seqs 2, a small KV cache) answers one chat request.
#
# Prints max |diff| / max |logit| per row (as tools/peer/gguf_vs_llama.sh) and the chat answer.
#   PEER_DIR=/work/peer tools/peer/gguf_full_check.sh        # both parts
#   PARTS=exact | PARTS=full                                  # one of them
#   PARTS=depth DEPTHS="2 8"   cllm float vs cllm int16 codes vs llama.cpp on Q4_K_M files of
#                              2, 8, ... layers: how the on-file gap grows with depth
# Environment: MIX (the exact part's mix: q4_k_m, q4_0, q8_0), RETYPE (exact part: gguf_retype.py
# rules applied to its file first, e.g. '@Q6_K=Q8_0'), WAIT_MEM (10-s waits for 8 GiB available
# before cllm loads the full file, 60), DIR (work folder, default a new one under $PEER_DIR/tmp:
# the files are big, keep them off a small /tmp), KEEP=1 (keep the files), CLLM, PORT (18298),
# IDS (token ids).
# Needs: disk for the full file (~21.7 GB) or the exact part's two (~2 + ~11 GB); RAM: one engine
# at a time (measured on the full file: llama.cpp without repacking 7.0 GB max RSS, cllm 7.0 GB:
# both run the K-quant blocks from the mapped file).
set -euo pipefail
: "${PEER_DIR:?set PEER_DIR}"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CLLM=${CLLM:-$SRC/build/cllm} LL=$PEER_DIR/llama_logits PY=/usr/bin/python3
VOC=$PEER_DIR/llama.cpp-src/models/ggml-vocab-qwen35.gguf
PARTS=${PARTS:-exact full}
PORT=${PORT:-18298}
IDS=${IDS:-1,5,9,200,33,77,450,3,8,100,101,102}
mkdir -p "$PEER_DIR/tmp"
T=${DIR:-$(mktemp -d "$PEER_DIR/tmp/gguf_full.XXXXXX")}
mkdir -p "$T"
[ -x "$LL" ] || PEER_DIR=$PEER_DIR "$SRC/tools/peer/build.sh" >/dev/null
log() { echo "gguf_full_check: $* ($(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg))" >&2; }
timed() { /usr/bin/time -f "%e s wall, %M KB max RSS" "$@"; }

compare() { # NAME REF OTHER...: max |diff| / max |ref logit| per row, then the max over rows
    $PY - "$@" <<'PY'
import sys, numpy as np
name, ref, others = sys.argv[1], sys.argv[2], sys.argv[3:]
def ld(p):
    n, v = map(int, open(p + ".shape").read().split())
    return np.fromfile(p, np.float32).reshape(n, v)
r = ld(ref)
print(f"{name}: reference {ref.rsplit('/', 1)[-1]}: {r.shape[0]} rows x {r.shape[1]}, max |logit| per row "
      + " ".join(f"{x:.3g}" for x in np.abs(r).max(axis=1)))
for o in others:
    x = ld(o)
    rel = np.abs(r - x).max(axis=1) / np.abs(r).max(axis=1)
    top = (r.argmax(axis=1) == x.argmax(axis=1)).mean()
    print(f"  vs {o.rsplit('/', 1)[-1]:14s} max {rel.max():.3g}; per row " + " ".join(f"{v:.2g}" for v in rel)
          + f"; argmax agrees on {100 * top:.0f}% of rows")
PY
}

for part in $PARTS; do
    case $part in
    exact)
        $PY - "$SRC/configs/qwen3.5-35b-a3b.json" "$T/w2.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.get("text_config", c)["full_attention_interval"] = 2  # 2 layers: linear, full
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
        log "exact: writing the 2-layer full-width ${MIX:-q4_k_m} GGUF"
        $PY "$SRC/tools/ref/make_gguf_random.py" --config "$T/w2.json" --layers 2 --no-mtp \
            --mix "${MIX:-q4_k_m}" --vocab-gguf "$VOC" --out "$T/w2.gguf" | tail -1
        if [ -n "${RETYPE:-}" ]; then # bisecting by tensor kind: re-encode some tensors first
            $PY "$SRC/tools/peer/gguf_retype.py" "$T/w2.gguf" "$T/w2r.gguf" "$RETYPE"
            mv "$T/w2r.gguf" "$T/w2.gguf"
        fi
        log "exact: its F32 twin"
        timed $PY "$SRC/tools/peer/gguf_to_f32.py" "$T/w2.gguf" "$T/w2.f32.gguf"
        log "exact: llama.cpp on the F32 twin"
        timed "$LL" "$T/w2.f32.gguf" "$IDS" "$T/ll_f32" >"$T/ll_f32.log" 2>&1
        [ -z "${KEEP:-}" ] && rm -f "$T/w2.f32.gguf"
        log "exact: llama.cpp on the Q4_K_M file"
        timed "$LL" "$T/w2.gguf" "$IDS" "$T/ll_q" >"$T/ll_q.log" 2>&1
        log "exact: cllm on the Q4_K_M file, float activations and int16 codes"
        CLLM_ACT16=float timed "$CLLM" eval "$T/w2.gguf" -t 2 --tokens "$IDS" --dump-logits "$T/cllm_float" 2>&1 | tail -1
        CLLM_ACT16=int timed "$CLLM" eval "$T/w2.gguf" -t 2 --tokens "$IDS" --dump-logits "$T/cllm_int" 2>&1 | tail -1
        compare "exact (2 layers, full width, ${MIX:-q4_k_m})" "$T/ll_f32" "$T/cllm_float" "$T/cllm_int" "$T/ll_q"
        [ -z "${KEEP:-}" ] && rm -f "$T/w2.gguf"
        ;;
    full)
        BIG=$T/q35-full-q4_k_m.gguf
        df -h "$T" | tail -1
        if [ ! -f "$BIG" ]; then
            log "full: writing the full-size Q4_K_M GGUF"
            timed $PY "$SRC/tools/ref/make_gguf_random.py" --config "$SRC/configs/qwen3.5-35b-a3b.json" \
                --mix q4_k_m --vocab-gguf "$VOC" --out "$BIG" | tail -1
        fi
        log "full: cllm verify"
        "$CLLM" verify "$BIG" 2>&1 | tail -3
        log "full: llama.cpp on the file (no repack)"
        LLAMA_LOGITS_NO_REPACK=1 timed "$LL" "$BIG" "$IDS" "$T/full_ll" >"$T/full_ll.log" 2>&1 ||
            tail -5 "$T/full_ll.log"
        tail -1 "$T/full_ll.log"
        # cllm runs the K-quant blocks from the mapped file (7.0 GB max RSS measured): on a shared
        # box wait for that much rather than push another process into the OOM killer
        need=$((8 * 1024 * 1024))
        enough=""
        for i in $(seq 1 "${WAIT_MEM:-60}"); do
            avail=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
            [ "$avail" -ge "$need" ] && enough=1 && break
            [ "$i" = 1 ] && log "full: waiting for $((need >> 20)) GiB available (now $((avail >> 20)) GiB)"
            sleep 10
        done
        if [ -z "$enough" ]; then
            log "full: not enough memory for cllm on the full file: cllm eval and serve skipped"
            [ -z "${KEEP:-}" ] && rm -f "$BIG"
            continue
        fi
        log "full: cllm on the file, int16 codes (default) and float activations"
        CLLM_ACT16=int timed "$CLLM" eval "$BIG" -t 2 --tokens "$IDS" --dump-logits "$T/full_int" 2>&1 | tail -1
        [ -z "${NO_FLOAT:-}" ] &&
            CLLM_ACT16=float timed "$CLLM" eval "$BIG" -t 2 --tokens "$IDS" --dump-logits "$T/full_float" 2>&1 | tail -1
        compare "full (40 layers + MTP, Q4_K_M, on the file)" "$T/full_ll" "$T/full_int" \
            $([ -f "$T/full_float" ] && echo "$T/full_float")
        log "full: cllm serve, one chat request"
        "$CLLM" serve "$BIG" -t 2 --port "$PORT" --max-num-seqs 2 --kv-cache-memory 512MiB \
            >"$T/serve.log" 2>&1 &
        SP=$!
        for i in $(seq 1 900); do
            curl -sf "localhost:$PORT/health" >/dev/null 2>&1 && break
            kill -0 "$SP" 2>/dev/null || break
            sleep 1
        done
        curl -s --max-time 600 "localhost:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
            -d '{"messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":16,"temperature":0}' |
            tee "$T/chat.json" | $PY -c 'import json,sys; d=json.load(sys.stdin); c=d["choices"][0]
print("chat answer:", repr(c["message"]["content"]), "finish", c["finish_reason"], "usage", d["usage"])' ||
            { echo "no chat answer"; tail -5 "$T/serve.log"; }
        kill "$SP" 2>/dev/null || true
        wait "$SP" 2>/dev/null || true
        [ -z "${KEEP:-}" ] && rm -f "$BIG"
        ;;
    depth)
        # how far llama.cpp's 8-bit activations take it from cllm on the file as layers are added
        for L in ${DEPTHS:-2 8}; do
            log "depth: $L layers, Q4_K_M"
            $PY "$SRC/tools/ref/make_gguf_random.py" --config "$SRC/configs/qwen3.5-35b-a3b.json" \
                --layers "$L" --no-mtp --mix q4_k_m --vocab-gguf "$VOC" --out "$T/d$L.gguf" | tail -1
            "$LL" "$T/d$L.gguf" "$IDS" "$T/d${L}_ll" >"$T/d${L}_ll.log" 2>&1
            CLLM_ACT16=int "$CLLM" eval "$T/d$L.gguf" -t 2 --tokens "$IDS" --dump-logits "$T/d${L}_int" 2>/dev/null
            CLLM_ACT16=float "$CLLM" eval "$T/d$L.gguf" -t 2 --tokens "$IDS" --dump-logits "$T/d${L}_float" 2>/dev/null
            compare "depth $L (Q4_K_M, on the file)" "$T/d${L}_float" "$T/d${L}_int" "$T/d${L}_ll"
            rm -f "$T/d$L.gguf"
        done
        ;;
    *) echo "unknown part $part" >&2 ;;
    esac
done
[ -z "${KEEP:-}" ] && rm -rf "$T"
