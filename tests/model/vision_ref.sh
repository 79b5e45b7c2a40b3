#!/bin/bash
# The vision tower (model/vision.c) against the float64 numpy reference (tools/ref/vision_ref.py,
# written from docs/model.md "Vision tower"), on `cllm synth` f32 models of two shapes:
#   configs/tiny-vision.json       (tower hidden 64, 4 heads: head_dim 16, 2 blocks, 8x8 pos grid)
#   configs/tiny-vision-hd72.json  (hidden 144, 2 heads: the real head_dim 72, so 18 rotary
#                                   frequencies per axis, as in Qwen3.5)
#   configs/tiny-vision-real-tower.json (the 35B-A3B tower's widths: hidden 1152, 16 heads, mlp
#                                   4304, the 48x48 position grid, out 2048; 2 blocks)
# on random pixels for the grids (t h w): one merged token (1 2 2), non-square (1 4 6), the
# position grid itself (1 8 8), larger than it (1 10 14: interpolated upwards), a tall one
# (1 12 2) and two frames (2 4 4: attention stays within a frame). Each: max |c - ref| <=
# 1e-4 * max(1, max |ref|) (the text forward's bound), and the C output with 1 and 2 threads
# is the same bytes. Also: `cllm verify --full` accepts the synth model, `cllm quantize` keeps the
# tower (verify passes, the same output bytes), and the M-RoPE
# positions of vision_ref.py --rope-index on a prompt with two images against values worked
# out by hand from the rule in docs/model.md. Exit 77 without /usr/bin/python3 + numpy.
set -u
BIN=${CLLM_BIN:?}; SRC=${CLLM_SRC:?}; T=${CLLM_TMP:-/tmp}/vision_ref
PY=/usr/bin/python3
DUMP="$(dirname "$BIN")/test_vision"
rm -rf "$T"; mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
if ! $PY -c 'import numpy' 2>/dev/null; then echo "SKIP: no /usr/bin/python3 with numpy" >&2; exit 77; fi
[ -x "$DUMP" ] || { bad "no $DUMP (build the test_vision target)"; exit 1; }

cat > "$T/cmp.py" <<'PYEOF'
import sys, numpy as np
c = np.fromfile(sys.argv[1], dtype=np.float32).astype(np.float64)
r = np.fromfile(sys.argv[2], dtype=np.float32).astype(np.float64)
if c.shape != r.shape or c.size == 0:
    print("shape mismatch", c.shape, r.shape); sys.exit(1)
if not np.all(np.isfinite(c)):
    print("non-finite output"); sys.exit(1)
err, scale = np.max(np.abs(c - r)), max(1.0, np.max(np.abs(r)))
print(f"max|c-ref| {err:.3g}  max|ref| {np.max(np.abs(r)):.3g}  std(ref) {np.std(r):.3g}")
sys.exit(0 if err <= 1e-4 * scale and np.std(r) > 1e-2 else 1)
PYEOF

for cfg in tiny-vision tiny-vision-hd72 tiny-vision-real-tower; do
    d="$T/$cfg"
    expect_rc 0 "synth $cfg" "$BIN" synth -q --config "$SRC/configs/$cfg.json" --dtype f32 --seed 3 "$d"
    expect_rc 0 "verify $cfg" "$BIN" verify --full "$d"
    grep -q "^OK" "$T/out" || bad "verify $cfg did not print OK"
    pd=$($PY -c "import json; v=json.load(open('$d/config.json'))['vision_config']; print(v['in_channels']*v['temporal_patch_size']*v['patch_size']**2)")
    grids=("1 2 2" "1 4 6" "1 8 8" "1 10 14" "1 12 2" "2 4 4")
    # the real tower's widths: fewer grids (the float64 reference takes seconds each)
    [ $cfg = tiny-vision-real-tower ] && grids=("1 2 2" "1 6 4" "1 10 14")
    for g in "${grids[@]}"; do
        set -- $g
        tag="$cfg-$1x$2x$3"
        $PY -c "import numpy as np; np.random.default_rng($1*100+$2*10+$3).standard_normal($1*$2*$3*$pd).astype(np.float32).tofile('$T/$tag.px')"
        "$DUMP" dump "$d" $1 $2 $3 "$T/$tag.px" "$T/$tag.c1" 1 >"$T/out" 2>&1 || { bad "$tag: C encode"; cat "$T/out"; continue; }
        "$DUMP" dump "$d" $1 $2 $3 "$T/$tag.px" "$T/$tag.c2" 2 >"$T/out" 2>&1 || { bad "$tag: C encode (2 threads)"; cat "$T/out"; continue; }
        cmp -s "$T/$tag.c1" "$T/$tag.c2" && ok "$tag: 1 and 2 threads bitwise equal" || bad "$tag: 1 and 2 threads differ"
        $PY "$SRC/tools/ref/vision_ref.py" "$d" --pixels "$T/$tag.px" --grid $1,$2,$3 --out "$T/$tag.r" || { bad "$tag: reference"; continue; }
        if r=$($PY "$T/cmp.py" "$T/$tag.c1" "$T/$tag.r"); then ok "$tag: $r"; else bad "$tag: $r"; fi
    done
done

# `cllm quantize` keeps the tower (its 5-D patch kernel included) and its output is the same bytes
q="$T/tiny-vision-w4"
expect_rc 0 "quantize tiny-vision" "$BIN" quantize "$T/tiny-vision" "$q" --group-size 32
expect_rc 0 "verify the quantized model" "$BIN" verify "$q"
if "$DUMP" dump "$q" 1 4 6 "$T/tiny-vision-1x4x6.px" "$T/q.c1" 1 >"$T/out" 2>&1; then
    cmp -s "$T/q.c1" "$T/tiny-vision-1x4x6.c1" && ok "quantized model: the tower's output is unchanged" \
        || bad "quantized model: the tower's output changed"
else
    bad "quantized model: C encode"; cat "$T/out"
fi

# cllm bench-vision prints a row per size (the tower's tokens as the processor sizes the image)
expect_rc 0 "bench-vision" "$BIN" bench-vision "$T/tiny-vision" --sizes 64,300 -r 1 -t 1
grep -q '^| 64x64 | 16x16 | 64 |' "$T/out" && grep -q '^| 300x300 | 18x18 | 81 |' "$T/out" &&
    ok "bench-vision rows: 64x64 -> 16x16 patches (min pixels), 300x300 -> 18x18" ||
    { bad "bench-vision rows"; cat "$T/out"; }
"$BIN" synth -q --config "$SRC/configs/tiny.json" --dtype f32 "$T/text" >/dev/null 2>&1
expect_rc 1 "bench-vision on a model without a tower" "$BIN" bench-vision "$T/text"
grep -q "has no vision tower" "$T/out" && ok "bench-vision says why" || bad "bench-vision: no reason given"

# M-RoPE positions: 3 text tokens, an image of grid (1, 4, 6) (2 x 3 merged: 6 tokens), 2 text,
# an image of grid (1, 2, 2) (1 token), 1 text. Image 1 starts at 3: (3, 3+r, 3+c); text resumes
# at 3 + max(2, 3) = 6; image 2 at 8: (8, 8, 8); the last text token at 9; delta = 10 - 13 = -3.
want="0 0 0|1 1 1|2 2 2|3 3 3|3 3 4|3 3 5|3 4 3|3 4 4|3 4 5|6 6 6|7 7 7|8 8 8|9 9 9|delta -3"
got=$($PY "$SRC/tools/ref/vision_ref.py" "$T/tiny-vision" --rope-index 1,2,3,500,500,500,500,500,500,4,5,500,6 --grids "1,4,6;1,2,2" | paste -sd'|')
expect_eq "rope index of two images" "$got" "$want"
check_exit
