#!/usr/bin/env bash
# Regenerates fuzz/seeds/quant_load/ for fuzz/fuzz_quant_load.c: tiny models in the fuzzer's two
# base configs, quantized by `cllm quantize` (RTN w4a16 g32, --asym, w8a16, bf16 scales, w4a8)
# and by tools/ref/ct_writer.py (compressed-tensors group/channel, sym/asym with zero points
# stored 0, F16/BF16 scales, weight_g_idx; GPTQ v2 with a zero of 0), then encoded into fuzz
# inputs by the fuzzer itself (CLLM_FUZZ_QL_ENCODE), each holding a few quantized Linears.
# The hand_* seeds (groups 24/40 on the width-120 MLP, N = 120, act_bits 4/8) were made with
# fuzz/quant_load_input.py and are kept as they are.
# usage: fuzz/quant_load_seeds.sh BUILD_DIR_WITH_cllm FUZZ_BUILD_DIR
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=$1/cllm FZ=$2/fuzz_quant_load PY=/usr/bin/python3
OUT=$SRC/fuzz/seeds/quant_load T=$(mktemp -d /tmp/ql_seeds.XXXXXX)
trap 'rm -rf "$T"' EXIT
export CLLM_SRC=$SRC
W=$SRC/tools/ref/ct_writer.py
mkdir -p "$OUT"
enc() { CLLM_FUZZ_QL_ENCODE="$1:$2:$OUT/$3:$4" "$FZ"; }
for b in 0 1; do
  mkdir -p "$T/c$b"
  CLLM_FUZZ_QL_CONFIG="$b:$T/c$b/config.json" "$FZ"
  "$BIN" synth -q --config "$T/c$b/config.json" --seed 3 --dtype bf16 --experts per-expert "$T/fp$b"
  g=$((b ? 8 : 32)) # the dense config's MLP width 120 takes groups of 8 (and 24, 40, 120)
  "$BIN" quantize -q -g $g "$T/fp$b" "$T/g4_$b" >/dev/null
  "$BIN" quantize -q -g $g --asym --scale-dtype bf16 "$T/fp$b" "$T/g4a_$b" >/dev/null
  "$BIN" quantize -q -g $g --scheme w8a16 "$T/fp$b" "$T/g8_$b" >/dev/null
  "$BIN" quantize -q -g $g --scheme w4a8 "$T/fp$b" "$T/g4a8_$b" >/dev/null
  "$PY" "$W" ct "$T/fp$b" "$T/cg_$b" "$T/dq" --strategy group --group $((b ? 8 : 16)) >/dev/null
  "$PY" "$W" ct "$T/fp$b" "$T/cc_$b" "$T/dq" --strategy channel --asym --scale-dtype BF16 --g-idx >/dev/null
  "$PY" "$W" gptq-v2 "$T/g4a_$b" "$T/v2_$b" "$T/dq" >/dev/null
done
Z0=model.language_model.layers.0.mlp.experts.1.down_proj
"$PY" "$W" ct "$T/fp0" "$T/cz_0" "$T/dq" --strategy group --asym --zero0 $Z0 >/dev/null
"$PY" "$W" gptq-v2 "$T/g4a_0" "$T/v2z_0" "$T/dq" --zero0 $Z0 >/dev/null
MOE=layers.1.self_attn.k_proj,experts.1.down_proj,lm_head
GDN=linear_attn.in_proj_z,shared_expert.up_proj
DENSE=self_attn.v_proj,mlp.down_proj,mlp.up_proj
for v in g4 g4a g8 g4a8 cg cc v2; do
  enc 0 "$T/${v}_0" "${v}_moe" "$MOE"
  enc 0 "$T/${v}_0" "${v}_gdn" "$GDN"
  enc 1 "$T/${v}_1" "${v}_dense" "$DENSE"
  enc 3 "$T/${v}_1" "${v}_dense_unaligned" "self_attn.o_proj"
done
enc 0 "$T/cz_0" cz_moe "$MOE"
enc 0 "$T/v2z_0" v2z_moe "$MOE"
enc 1 "$T/g4_1" g4_dense_all ""
