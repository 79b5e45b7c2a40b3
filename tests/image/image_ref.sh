#!/bin/bash
# src/image/ against an independent reference (tools/ref/image_prep_ref.py: PIL for decoding and
# the bicubic resize, numpy for the HF Qwen2-VL processor's smart_resize, rescale, normalize and
# patch order):
#  - ~100 random images (PNG of all 15 colour type/depth pairs, JPEG gray/RGB/CMYK/progressive/
#    4:4:4/4:2:2, WebP lossy/lossless with and without alpha, edge sizes 1x1 .. 200:1) through
#    test_image prep at three min/max_pixels settings (the Qwen3.5 default; a small budget that
#    shrinks; a large minimum that grows): decoded pixels and resized pixels bit for bit, resize
#    sizes and grids exact, float rows <= 1e-6;
#  - 150 direct resizes (shrinks to 1/40, growth x8, one side unchanged) bit for bit with PIL;
#  - 5000 smart_resize cases against transformers' function;
#  - a PNG bomb (16 MB of zero rows in 16 KB, declaring 100000x100000) and a 20000x20000 header
#    are refused before any pixel buffer exists (peak RSS of the run < 150 MB).
# Exit 77 without /usr/bin/python3 + numpy + PIL.
set -u
BIN=${CLLM_BIN:?}; SRC=${CLLM_SRC:?}; T=${CLLM_TMP:-/tmp}/image_ref
PY=/usr/bin/python3
REF=$SRC/tools/ref/image_prep_ref.py
TB=$(dirname "$BIN")/test_image
rm -rf "$T"; mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
if ! $PY -c 'import numpy, PIL.Image, PIL.features as f; assert f.check("webp")' 2>/dev/null; then
  echo "SKIP: no /usr/bin/python3 with numpy and PIL (python3-pil) with WebP" >&2; exit 77
fi
[ -x "$TB" ] || { bad "no test binary $TB"; exit 1; }

$PY "$REF" gen "$T/img" || { bad "image generator"; exit 1; }
mapfile -t FILES < <($PY -c 'import json,sys; [print(sys.argv[1] + "/" + f) for f in json.load(open(sys.argv[1] + "/manifest.json"))]' "$T/img")
for budget in "65536 16777216" "4096 40000" "300000 400000"; do
  if "$TB" prep $budget "${FILES[@]}" 2>"$T/err"; then
    if $PY "$REF" check "$T/img" $budget >"$T/out"; then ok "$(tail -1 "$T/out")"
    else head -20 "$T/out"; bad "preprocessing differs from the reference at $budget"; fi
  else cat "$T/err"; bad "test_image prep failed"; fi
done

mkdir -p "$T/rs"
$PY "$REF" resize-cases "$T/rs" 150 >"$T/rs/cases" || bad "resize cases"
while read -r k w h ow oh; do
  "$TB" resize "$T/rs/rs_$k.rgb" "$w" "$h" "$ow" "$oh" "$T/rs/rs_$k.out" || bad "resize $k failed"
done <"$T/rs/cases"
if $PY "$REF" resize-check "$T/rs" >"$T/out"; then ok "$(tail -1 "$T/out")"
else head -20 "$T/out"; bad "bicubic resize differs from PIL"; fi

$PY "$REF" smart-cases 5000 >"$T/smart.in"
"$TB" smart <"$T/smart.in" >"$T/smart.out"
if $PY "$REF" smart-check "$T/smart.in" "$T/smart.out" >"$T/out"; then ok "$(tail -1 "$T/out")"
else head -20 "$T/out"; bad "smart_resize differs from transformers'"; fi

# bombs: refused from the header, with bounded memory
$PY "$REF" bomb "$T/bomb.png" 100000 100000
$PY "$REF" bomb "$T/big.png" 20000 20000
echo "size of the bomb: $(stat -c %s "$T/bomb.png") bytes"
$PY - "$TB" "$T/bomb.png" "$T/big.png" <<'PYEOF' >"$T/out" 2>&1
import resource, struct, subprocess, sys
tb, files = sys.argv[1], sys.argv[2:]
subprocess.run([tb, "prep", "65536", "16777216"] + files, check=True)
rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
for f in files:
    b = open(f + ".out", "rb").read()
    st = struct.unpack("<i", b[:4])[0]
    print(f"{f}: status {st}: {b[32:].decode()}")
    assert st == 1 and b"over the limit" in b[32:], "not refused"
print(f"peak RSS {rss_mb:.0f} MB")
assert rss_mb < 150, "too much memory"
PYEOF
if [ $? = 0 ]; then cat "$T/out"; ok "PNG bomb and 20000x20000 refused before decoding"
else cat "$T/out"; bad "bomb not refused cheaply"; fi
check_exit
