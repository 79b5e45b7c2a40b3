#!/bin/bash
# A prompt with images through the whole engine (model/vision.c, engine/sched_img.c's M-RoPE
# positions and embedding rows, the text forward) against the float64 reference chain: the tower
# (tools/ref/vision_ref.py), Qwen3-VL's rope index (get_rope_index), the text model with the
# rows at the pad positions and 3-D positions (tools/ref/ref_forward.py). The C side runs the
# request greedily with prompt logprobs through cllm_engine (test_vision_engine run): every
# prompt position's logprob and the 6 generated tokens (ids equal, logprobs) must agree within
# 1e-4 * max(1, |ref|). Token budgets 512 (one call) and 5 (chunks cutting the image and the
# text around it), one and two images, on configs/tiny-vision.json synthesized in f32.
# Exit 77 without /usr/bin/python3 + numpy.
set -u
BIN=${CLLM_BIN:?}; SRC=${CLLM_SRC:?}; T=${CLLM_TMP:-/tmp}/vision_text_ref
PY=/usr/bin/python3
RUN="$(dirname "$BIN")/test_vision_engine"
rm -rf "$T"; mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
if ! $PY -c 'import numpy' 2>/dev/null; then echo "SKIP: no /usr/bin/python3 with numpy" >&2; exit 77; fi
[ -x "$RUN" ] || { bad "no $RUN"; exit 1; }
d="$T/m"
expect_rc 0 "synth tiny-vision" "$BIN" synth -q --config "$SRC/configs/tiny-vision.json" --dtype f32 --seed 5 "$d"

cat > "$T/ref.py" <<'PYEOF'
import sys, numpy as np
sys.path.insert(0, sys.argv[1] + "/tools/ref")
import ref_forward as rf, vision_ref as vr
d, outc, prompt = sys.argv[2], sys.argv[3], sys.argv[4]
imgs = [(tuple(int(v) for v in a.split(":")[0].split(",")), a.split(":")[1]) for a in sys.argv[5:]]
lines = open(outc).read().split("\n")
toks = [int(x) for x in lines[0].split(",")]
gen = [int(x) for x in lines[1].split(",")]
vals = [float(x) for x in lines[2:] if x]
n = len(toks)
c_plp, c_glp = np.array(vals[:n - 1]), np.array(vals[n - 1:])
V = vr.VisionModel(d)
M = rf.Model(d)
pad = int(__import__("json").load(open(d + "/config.json"))["image_token_id"])
pd = V.C * V.TP * V.P * V.P
rows, idx = [], []
for g, path in imgs:
    rows.append(V.encode(np.fromfile(path, dtype=np.float32).astype(np.float64).reshape(-1, pd), g))
rows = np.concatenate(rows)
idx = [i for i, t in enumerate(toks) if t == pad]
pos, delta = vr.get_rope_index(toks, pad, [g for g, _ in imgs], V.m)
allt = toks + gen
pos_all = np.concatenate([pos, np.repeat((np.arange(n, len(allt)) + delta)[:, None], 3, axis=1)])
logits, _ = rf.forward(M, allt, input_embeds=(idx, rows), mrope_positions=pos_all)
lp = logits - logits.max(axis=1, keepdims=True)
lp = lp - np.log(np.exp(lp).sum(axis=1, keepdims=True))
r_plp = np.array([lp[i - 1, allt[i]] for i in range(1, n)])
r_gen = [int(np.argmax(logits[n - 1 + j])) for j in range(len(gen))]
r_glp = np.array([lp[n - 1 + j, gen[j]] for j in range(len(gen))])
err = max(np.max(np.abs(c_plp - r_plp)), np.max(np.abs(c_glp - r_glp)))
scale = max(1.0, np.max(np.abs(r_plp)))
# the pads' own logprobs depend on the rows; a test where they did not would prove little
spread = np.std(r_plp)
print(f"{n} prompt tokens ({len(idx)} image), max|c-ref| {err:.3g}, gen {'same' if r_gen == gen else 'DIFFERENT'}, std {spread:.3g}")
sys.exit(0 if err <= 1e-4 * scale and r_gen == gen and spread > 1e-3 else 1)
PYEOF

pdim=$($PY -c "import json; v=json.load(open('$d/config.json'))['vision_config']; print(v['in_channels']*v['temporal_patch_size']*v['patch_size']**2)")
mkpx() { $PY -c "import numpy as np; np.random.default_rng($4).standard_normal($1*$2*$3*$pdim).astype(np.float32).tofile('$5')"; }
mkpx 1 4 6 11 "$T/a.px"
mkpx 1 2 2 12 "$T/b.px"
mkpx 1 6 4 13 "$T/c.px"
# 500 = the config's image pad; 502 / 503 vision start / end
one="1,2,3,502,500,503,4,5,6,7"
two="9,502,500,503,8,8,502,500,503,20,21"
for budget in 512 5; do
    for case in one two; do
        if [ $case = one ]; then p=$one; imgs=("1,4,6:$T/a.px"); else p=$two; imgs=("1,2,2:$T/b.px" "1,6,4:$T/c.px"); fi
        tag="$case-b$budget"
        if ! "$RUN" run "$d" $budget "$T/$tag.out" "$p" "${imgs[@]}" >"$T/out" 2>&1; then
            bad "$tag: engine run"; cat "$T/out"; continue
        fi
        if r=$($PY "$T/ref.py" "$SRC" "$d" "$T/$tag.out" "$p" "${imgs[@]}" 2>&1); then ok "$tag: $r"; else bad "$tag: $r"; fi
    done
done
# the same image at budget 512 and 5: the same bytes (chunks cut the image)
cmp -s "$T/one-b512.out" "$T/one-b5.out" && ok "one image: budget 512 == budget 5 bitwise" || bad "one image: budgets differ"
check_exit
