#!/usr/bin/env bash
# cllm quantize end to end on a synth tiny Qwen3.5-MoE: plan/verify, an independent numpy
# dequantization with the official GPTQ formula (w = scale * (q - (z + 1)), 8 nibbles per int32
# along K) must reproduce cllm's logits on the quantized model; all schemes load and run
# deterministically; bad input fails with a message naming the problem.
set -u
BIN=${CLLM_BIN:?} SRC=${CLLM_SRC:?}
T=${CLLM_TMP:-/tmp}/quant_e2e
PY=/usr/bin/python3
rm -rf "$T" && mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
TOK=$($PY -c "print(','.join(str((i*37+5)%512) for i in range(48)))")

expect_rc 0 "synth" "$BIN" synth -q --config "$SRC/configs/tiny.json" --seed 3 --dtype f32 "$T/fp"
expect_rc 0 "quantize w4a16 rtn g32" "$BIN" quantize -q -g 32 "$T/fp" "$T/q4"
grep -q "^experts .*96 int4" "$T/out" && ok "plan lists 96 int4 experts" || { bad "plan"; cat "$T/out"; }
grep -q "^lm_head .*1 int8" "$T/out" && ok "lm_head int8 by default" || bad "lm_head default"
expect_rc 0 "verify quantized" "$BIN" verify --full "$T/q4"
grep -q "^OK" "$T/out" || bad "verify did not print OK"
expect_rc 0 "quantize again (determinism)" "$BIN" quantize -q -g 32 "$T/fp" "$T/q4b"
cmp -s "$T/q4/model.safetensors" "$T/q4b/model.safetensors" && ok "same bytes twice" || bad "not deterministic"

# independent dequantization -> f32 model with per-expert .weight tensors
cat > "$T/dequant.py" <<'PYEOF'
import json, os, struct, sys
import numpy as np
src, dst = sys.argv[1], sys.argv[2]
f = open(os.path.join(src, "model.safetensors"), "rb")
n = struct.unpack("<Q", f.read(8))[0]
hdr = json.loads(f.read(n)); base = 8 + n
dt = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "BF16": np.uint16}
def get(name):
    h = hdr[name]; a, b = h["data_offsets"]; f.seek(base + a)
    x = np.frombuffer(f.read(b - a), dtype=dt[h["dtype"]]).reshape(h["shape"])
    if h["dtype"] == "BF16": x = (x.astype(np.uint32) << 16).view(np.float32)
    return x
out = {}
for name in hdr:
    if name == "__metadata__": continue
    if name.endswith(".qweight"):
        p = name[:-8]
        qw = get(name).astype(np.uint32); qz = get(p + ".qzeros").astype(np.uint32)
        sc = get(p + ".scales").astype(np.float32); gi = get(p + ".g_idx")
        K8, N = qw.shape; bits = 32 * K8 // gi.shape[0]; per = 32 // bits; mask = (1 << bits) - 1
        q = np.stack([(qw >> (bits * j)) & mask for j in range(per)], 1).reshape(K8 * per, N)
        z = np.stack([(qz >> (bits * j)) & mask for j in range(per)], 2).reshape(qz.shape[0], N) + 1
        W = sc[gi] * (q.astype(np.float32) - z[gi].astype(np.float32))   # [K, N]
        out[p + ".weight"] = np.ascontiguousarray(W.T)                   # HF [out, in]
    elif name.endswith((".qzeros", ".scales", ".g_idx")): continue
    else: out[name] = get(name).astype(np.float32)
os.makedirs(dst)
cfg = json.load(open(os.path.join(src, "config.json"))); cfg.pop("quantization_config")
json.dump(cfg, open(os.path.join(dst, "config.json"), "w"))
h, off, blobs = {}, 0, []
for k in sorted(out):
    b = out[k].astype(np.float32).tobytes()
    h[k] = {"dtype": "F32", "shape": list(out[k].shape), "data_offsets": [off, off + len(b)]}
    off += len(b); blobs.append(b)
js = json.dumps(h).encode(); js += b" " * ((8 - len(js) % 8) % 8)
with open(os.path.join(dst, "model.safetensors"), "wb") as g:
    g.write(struct.pack("<Q", len(js))); g.write(js); [g.write(b) for b in blobs]
PYEOF
$PY "$T/dequant.py" "$T/q4" "$T/dq" || bad "numpy dequant failed"
expect_rc 0 "eval quantized" "$BIN" eval "$T/q4" --tokens "$TOK" --dump-logits "$T/q4.bin"
expect_rc 0 "eval numpy-dequantized" "$BIN" eval "$T/dq" --tokens "$TOK" --dump-logits "$T/dq.bin"
expect_rc 0 "eval fp" "$BIN" eval "$T/fp" --tokens "$TOK" --dump-logits "$T/fp.bin"
cat > "$T/cmp.py" <<'PYEOF'
import sys, numpy as np
t = sys.argv[1]
q, d, f = (np.fromfile(f"{t}/{n}.bin", dtype=np.float32).reshape(48, -1) for n in (sys.argv[2], sys.argv[3], "fp"))
diff = np.abs(q - d).max(); print("max |q4 - dequant| =", diff)
def lsm(x): x = x - x.max(1, keepdims=True); return x - np.log(np.exp(x).sum(1, keepdims=True))
lf, lq = lsm(f.astype(np.float64)), lsm(q.astype(np.float64))
kld = (np.exp(lf) * (lf - lq)).sum(1).mean(); print("KLD(fp || q4) =", kld)
sys.exit(0 if diff < 2e-3 and kld < 0.05 else 1)
PYEOF
$PY "$T/cmp.py" "$T" q4 dq && ok "int4 kernels == numpy dequant (official formula); KLD vs fp small" || bad "logits mismatch"

# asymmetric (per-group zeros in qzeros, "sym": false) and bf16 scales: same independent check
for v in "asym --asym" "bf16 --scale-dtype bf16" "asymbf16 --asym --scale-dtype bf16"; do
  set -- $v; n=$1; shift
  expect_rc 0 "quantize $*" "$BIN" quantize -q -g 32 "$@" "$T/fp" "$T/$n"
  expect_rc 0 "verify $n" "$BIN" verify --full "$T/$n"
  $PY "$T/dequant.py" "$T/$n" "$T/$n-dq" || bad "numpy dequant $n failed"
  expect_rc 0 "eval $n" "$BIN" eval "$T/$n" --tokens "$TOK" --dump-logits "$T/$n.bin"
  expect_rc 0 "eval $n-dq" "$BIN" eval "$T/$n-dq" --tokens "$TOK" --dump-logits "$T/$n-dq.bin"
  $PY "$T/cmp.py" "$T" "$n" "$n-dq" && ok "$n: kernels == numpy dequant" || bad "$n logits mismatch"
done
grep -q '"sym": false' "$T/asym/config.json" && ok "asym config sym false" || bad "asym config"
# Qwen2 (q/k/v biases, no q/k norms): quantize keeps the biases float, verify finds the plan,
# and the int4 kernels match the numpy dequantization as above
Q2="$T/qwen2"; mkdir -p "$Q2"
expect_rc 0 "synth tiny-qwen2" "$BIN" synth -q --config "$SRC/configs/tiny-qwen2.json" --seed 3 --dtype f32 "$Q2/fp"
expect_rc 0 "quantize tiny-qwen2" "$BIN" quantize -q -g 32 "$Q2/fp" "$Q2/q4"
expect_rc 0 "verify tiny-qwen2 q4" "$BIN" verify --full "$Q2/q4"
$PY - "$Q2/q4/model.safetensors" <<'PY' && ok "qwen2: biases float, projections GPTQ" || bad "qwen2 tensor set"
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
b = [k for k in h if k.endswith("_proj.bias")]
assert len(b) == 9 and all(h[k]["dtype"] in ("F32", "BF16", "F16") for k in b), b
assert "model.layers.0.self_attn.q_proj.qweight" in h and not any("q_norm" in k for k in h)
PY
$PY "$T/dequant.py" "$Q2/q4" "$Q2/dq" || bad "numpy dequant qwen2 failed"
expect_rc 0 "eval qwen2 q4" "$BIN" eval "$Q2/q4" --tokens "$TOK" --dump-logits "$Q2/q4.bin"
expect_rc 0 "eval qwen2 dq" "$BIN" eval "$Q2/dq" --tokens "$TOK" --dump-logits "$Q2/dq.bin"
expect_rc 0 "eval qwen2 fp" "$BIN" eval "$Q2/fp" --tokens "$TOK" --dump-logits "$Q2/fp.bin"
$PY "$T/cmp.py" "$Q2" q4 dq && ok "qwen2: kernels == numpy dequant" || bad "qwen2 logits mismatch"
# compressed-tensors "pack-quantized" (vllm/llm-compressor W4A16 layout): an independent numpy
# writer quantizes the fp model per Linear (same set and bits as q4) into weight_packed [N, K/8]
# (packed along K, low bits first, stored q + 8), weight_scale [N, K/G], weight_zero_point
# [N/8, K/G] (asym), weight_shape; cllm's logits must match the numpy-dequantized fp model.
cat > "$T/ct.py" <<'PYEOF'
import json, os, struct, sys
import numpy as np
fp, q4, dst, dqd, mode, sdt = sys.argv[1:7]
zero0 = len(sys.argv) > 7
def load(d):
    f = open(os.path.join(d, "model.safetensors"), "rb"); n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n)); b = 8 + n; out = {}
    for k, e in h.items():
        if k == "__metadata__": continue
        a, c = e["data_offsets"]; f.seek(b + a)
        dt = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "BF16": np.uint16}[e["dtype"]]
        out[k] = np.frombuffer(f.read(c - a), dtype=dt).reshape(e["shape"])
    return out
def save(d, t, cfg):
    os.makedirs(d)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    h, off, blobs = {}, 0, []
    for k in sorted(t):
        x, dt = t[k]; b = np.ascontiguousarray(x).tobytes()
        h[k] = {"dtype": dt, "shape": list(x.shape), "data_offsets": [off, off + len(b)]}
        off += len(b); blobs.append(b)
    js = json.dumps(h).encode(); js += b" " * ((8 - len(js) % 8) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as g:
        g.write(struct.pack("<Q", len(js))); g.write(js); [g.write(b) for b in blobs]
def pack(u, bits):  # [R, C] unsigned codes -> int32 [R, C*bits/32], along C, low bits first
    per = 32 // bits; u = u.astype(np.uint32).reshape(u.shape[0], -1, per)
    return (u << (np.arange(per, dtype=np.uint32) * bits)).sum(2, dtype=np.uint32).view(np.int32)
W = load(fp); Q = load(q4); G = 32
qcfg = json.load(open(os.path.join(q4, "config.json")))["quantization_config"]
ct, dq = {}, {}
bases = {k[:-8]: Q[k].shape[0] * 32 // Q[k[:-8] + ".g_idx"].shape[0] for k in Q if k.endswith(".qweight")}
def weight(b):
    if b + ".weight" in W: return W[b + ".weight"]
    pre, e, what = b.rsplit(".", 2); e = int(e)
    if what == "down_proj": return W[pre + ".down_proj"][e]
    gu = W[pre + ".gate_up_proj"][e]; I = gu.shape[0] // 2
    return gu[:I] if what == "gate_proj" else gu[I:]
used = set()
for b, bits in sorted(bases.items()):
    w = weight(b).astype(np.float32); N, K = w.shape; off = 1 << (bits - 1); maxq = 2 * off - 1
    g = w.reshape(N, K // G, G)
    if mode == "sym":
        s = np.abs(g).max(2) / (maxq / 2)
    else:
        lo, hi = np.minimum(g.min(2), 0), np.maximum(g.max(2), 0); s = (hi - lo) / maxq
    s = np.where(s > 0, s, 1).astype(np.float32)
    if sdt == "BF16":
        sb = ((s.view(np.uint32) + 0x7FFF + ((s.view(np.uint32) >> 16) & 1)) >> 16).astype(np.uint16)
        sr = (sb.astype(np.uint32) << 16).view(np.float32); st = (sb, "BF16")
    else:
        sr = s.astype(np.float16).astype(np.float32); st = (s.astype(np.float16), "F16")
    uz = np.full((N, K // G), off, np.int64)
    if mode == "asym":
        uz = np.clip(np.round(-lo / sr), 1, maxq).astype(np.int64)
        if zero0 and b.endswith("layers.1.mlp.experts.3.up_proj"): uz[5, 0] = 0
    u = np.clip(np.round(g / sr[:, :, None]) + uz[:, :, None], 0, maxq).astype(np.int64)
    dq[b + ".weight"] = ((u - uz[:, :, None]) * sr[:, :, None]).reshape(N, K).astype(np.float32)
    ct[b + ".weight_packed"] = (pack(u.reshape(N, K), bits), "I32")
    ct[b + ".weight_scale"] = st
    ct[b + ".weight_shape"] = (np.array([N, K], np.int64), "I64")
    if mode == "asym": ct[b + ".weight_zero_point"] = (pack(uz.T, bits).T.copy(), "I32")
for k, x in Q.items():
    if not k.endswith((".qweight", ".qzeros", ".scales", ".g_idx")):
        ct[k] = (x, "F32"); dq[k] = x
cfg = json.load(open(os.path.join(fp, "config.json")))
save(dqd, {k: (v.astype(np.float32), "F32") for k, v in dq.items()}, cfg)
grp = lambda bits: {"targets": ["Linear"], "input_activations": None, "output_activations": None,
    "weights": {"num_bits": bits, "type": "int", "symmetric": mode == "sym", "strategy": "group",
                "group_size": G, "dynamic": False, "actorder": None, "observer": "minmax"}}
cfg["quantization_config"] = {"quant_method": "compressed-tensors", "format": "pack-quantized",
    "quantization_status": "compressed", "ignore": [],
    "config_groups": {"group_0": grp(4), "group_1": dict(grp(8), targets=["lm_head"])}}
save(dst, ct, cfg)
PYEOF
for v in "ctsym sym F16" "ctasym asym BF16"; do
  set -- $v
  $PY "$T/ct.py" "$T/fp" "$T/q4" "$T/$1" "$T/$1-dq" $2 $3 || bad "ct writer $1"
  expect_rc 0 "eval compressed-tensors $1" "$BIN" eval "$T/$1" --tokens "$TOK" --dump-logits "$T/$1.bin"
  expect_rc 0 "eval $1-dq" "$BIN" eval "$T/$1-dq" --tokens "$TOK" --dump-logits "$T/$1-dq.bin"
  $PY "$T/cmp.py" "$T" "$1" "$1-dq" && ok "$1: compressed-tensors load == numpy dequant" || bad "$1 logits mismatch"
done
expect_rc 0 "verify compressed-tensors sym" "$BIN" verify --full "$T/ctsym"
expect_rc 0 "verify compressed-tensors asym bf16" "$BIN" verify --full "$T/ctasym"
# the numpy writer's symmetric grid is cllm's (2 amax / 15): the two files hold the same model
[ "$("$BIN" eval "$T/ctsym" --tokens "$TOK" --logits-hash 2>&1)" = "$("$BIN" eval "$T/q4" --tokens "$TOK" --logits-hash 2>&1)" ] \
  && ok "compressed-tensors sym == cllm GPTQ sym bitwise" || bad "ctsym vs q4 hash"
cp -r "$T/ctsym" "$T/ctfmt"
$PY -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['quantization_config']['format']='int-quantized'; json.dump(c,open(p,'w'))" "$T/ctfmt/config.json"
expect_rc 1 "compressed-tensors int-quantized refused" "$BIN" eval "$T/ctfmt" --tokens "$TOK" --logits-hash
grep -q "format 'int-quantized' is not supported" "$T/out" && ok "format named" || { bad "format message"; cat "$T/out"; }
$PY "$T/ct.py" "$T/fp" "$T/q4" "$T/ctz0" "$T/ctz0-dq" asym F16 zero0 || bad "ct writer z0"
# zero point -8 (stored 0) has no GPTQ v1 zero: the loader stores that block sign-flipped
# (codes 15 - u, scale -s, zero 15), exactly the same weights (more cases: tests/quant_ct.sh)
expect_rc 0 "verify ct zero point -8" "$BIN" verify "$T/ctz0"
expect_rc 0 "eval ct zero point -8" "$BIN" eval "$T/ctz0" --tokens "$TOK" --dump-logits "$T/ctz0.bin"
expect_rc 0 "eval ctz0-dq" "$BIN" eval "$T/ctz0-dq" --tokens "$TOK" --dump-logits "$T/ctz0-dq.bin"
$PY "$T/cmp.py" "$T" ctz0 ctz0-dq && ok "ctz0: zero point -8 loads == numpy dequant" || bad "ctz0 logits mismatch"

$PY - "$T" <<'PYEOF' && ok "asym zeros vary; bf16 scales stored BF16" || bad "asym/bf16 tensors"
import json, struct, sys, numpy as np
def hdr(d):
    f = open(d + "/model.safetensors", "rb"); n = struct.unpack("<Q", f.read(8))[0]
    return json.loads(f.read(n)), f, 8 + n
h, f, b = hdr(sys.argv[1] + "/asym")
e = h["model.language_model.layers.0.mlp.experts.0.up_proj.qzeros"]; f.seek(b + e["data_offsets"][0])
z = np.frombuffer(f.read(e["data_offsets"][1] - e["data_offsets"][0]), dtype=np.uint32)
assert len(set(z.tolist())) > 1 and not (z == 0x77777777).all()
h2, _, _ = hdr(sys.argv[1] + "/bf16")
assert h2["model.language_model.layers.0.mlp.experts.0.up_proj.scales"]["dtype"] == "BF16"
PYEOF

# every scheme / lm_head choice loads and runs; batch split and threads do not change the logits
for v in "w8a16 int8" "w4a8 int8" "w4a4 int8" "w4a16 int4" "w4a16 bf16"; do
  set -- $v
  expect_rc 0 "quantize $1 lm_head $2" "$BIN" quantize -q -g 32 --scheme $1 --lm-head $2 "$T/fp" "$T/$1-$2"
  h1=$("$BIN" eval "$T/$1-$2" --tokens "$TOK" --logits-hash 2>&1)
  h2=$("$BIN" eval "$T/$1-$2" --tokens "$TOK" --logits-hash --prefill-chunk 5 -t 2 2>&1)
  [ -n "$h1" ] && [ "$h1" = "$h2" ] && ok "$1/$2 runs, chunked+threads same logits" || bad "$1/$2: '$h1' vs '$h2'"
done
grep -q '"cllm_act_bits": 8' "$T/w4a8-int8/config.json" && ok "w4a8 config" || bad "w4a8 config"
"$BIN" generate "$T/q4" --help >/dev/null 2>&1

# cllm eval --ppl / --compare / --table
$PY -c "import random; random.seed(1); print(' '.join(str(random.randrange(512)) for _ in range(300)))" > "$T/text.ids"
expect_rc 0 "eval --ppl --compare" "$BIN" eval "$T/q4" --ppl @"$T/text.ids" --compare "$T/fp" --ctx 64 --stride 32 --prompts 3
grep -Eq "^q4 .* [0-9.]+ +[0-9.]+% +[0-9.]+$" "$T/out" && ok "compare row" || { bad "compare row"; cat "$T/out"; }
expect_rc 0 "eval --table" "$BIN" eval -q "$T/fp" --ppl @"$T/text.ids" --table "$T/q4,$T/w8a16-int8,$T/w4a8-int8,$T/w4a4-int8" --ctx 64 --stride 32 --prompts 2
[ "$(grep -c '%' "$T/out")" = 4 ] && ok "table has 4 compared rows" || { bad "table"; cat "$T/out"; }
expect_rc 0 "self-compare" "$BIN" eval "$T/q4" --ppl @"$T/text.ids" --compare "$T/q4" --ctx 64 --stride 32 --prompts 2
grep -Eq " 0.00000 +100.00% +100.00$" "$T/out" && ok "self: KLD 0, top-1 100%, BLEU 100" || { bad "self compare"; cat "$T/out"; }
expect_rc 2 "bad stride" "$BIN" eval "$T/q4" --ppl @"$T/text.ids" --ctx 16 --stride 32

# GPTQ with calibration; experts with too few routed tokens fall back to RTN and are counted
$PY -c "import random; random.seed(7); print(' '.join(str(random.randrange(512)) for _ in range(2048)))" > "$T/calib.ids"
expect_rc 0 "quantize gptq" "$BIN" quantize -q -g 32 --method gptq --calib "$T/calib.ids" --calib-samples 16 --calib-seq-len 128 "$T/fp" "$T/g4"
grep -q "(121 gptq, 1 rtn; 0 experts and 1 other" "$T/out" && ok "gptq counts (lm_head never sees calibration logits -> RTN)" || { bad "gptq summary"; cat "$T/out"; }
expect_rc 0 "gptq all experts below threshold" "$BIN" quantize -q -g 32 --method gptq --calib "$T/calib.ids" --calib-samples 2 --calib-seq-len 16 --min-expert-tokens 100000 "$T/fp" "$T/g4x"
grep -q "96 experts and 26 other linears saw fewer than 100000" "$T/out" && ok "fallbacks counted" || { bad "fallback count"; cat "$T/out"; }
expect_rc 0 "verify gptq" "$BIN" verify "$T/g4"
expect_rc 0 "eval table rtn vs gptq" "$BIN" eval "$T/fp" --ppl @"$T/text.ids" --table "$T/q4,$T/g4" --prompts 2
awk '$1=="q4"{r=$9} $1=="g4"{g=$9} END{exit !(g>0 && g < 1.5*r)}' "$T/out" && ok "gptq KLD within 1.5x of rtn (random model)" || { bad "gptq KLD"; cat "$T/out"; }
expect_rc 2 "gptq without --calib" "$BIN" quantize -q -g 32 --method gptq "$T/fp" "$T/x7"

# the official Qwen GPTQ-Int4 selection: only routed experts int4, per-expert GPTQ tensors
expect_rc 0 "quantize --qwen-gptq-int4" "$BIN" quantize -q -g 32 --qwen-gptq-int4 "$T/fp" "$T/off"
grep -q "^experts .*96 int4" "$T/out" && grep -q "^attention .*kept" "$T/out" && grep -q "^lm_head .*1 kept" "$T/out" \
  && ! grep -q "^deltanet .*int4" "$T/out" && ok "official selection" || { bad "official selection"; cat "$T/out"; }
expect_rc 0 "verify official layout" "$BIN" verify --full "$T/off"
expect_rc 0 "eval official layout" "$BIN" eval "$T/off" --ppl @"$T/text.ids" --compare "$T/fp" --prompts 2

# sharded output (index) and per-expert input give the same model
expect_rc 0 "quantize into 100kB shards" "$BIN" quantize -q -g 32 --shard-size 100kB "$T/fp" "$T/q4s"
[ -f "$T/q4s/model.safetensors.index.json" ] && [ "$(ls "$T/q4s"/model-*.safetensors | wc -l)" -gt 2 ] && ok "sharded + index" || bad "shards"
expect_rc 0 "verify sharded" "$BIN" verify "$T/q4s"
expect_rc 0 "synth per-expert" "$BIN" synth -q --config "$SRC/configs/tiny.json" --seed 3 --dtype f32 --experts per-expert "$T/fpe"
expect_rc 0 "quantize per-expert input" "$BIN" quantize -q -g 32 "$T/fpe" "$T/q4e"
a=$("$BIN" eval "$T/q4" --tokens "$TOK" --logits-hash); b=$("$BIN" eval "$T/q4s" --tokens "$TOK" --logits-hash)
[ "$a" = "$b" ] && ok "same logits: single file and sharded" || bad "hash $a / $b"
expect_rc 0 "per-expert input: compare" "$BIN" eval "$T/q4e" --ppl @"$T/text.ids" --compare "$T/fpe" --prompts 0
awk '$1=="q4e"{exit !($9 > 0 && $9 < 0.05)}' "$T/out" && ok "per-expert input quantized, KLD small" || { bad "per-expert KLD"; cat "$T/out"; }

# bad input
expect_rc 2 "unsupported scheme" "$BIN" quantize -q --scheme w3a16 "$T/fp" "$T/x1"
expect_rc 2 "group size not dividing" "$BIN" quantize -q -g 128 "$T/fp" "$T/x2"
grep -q "does not divide in_features 64" "$T/out" && ok "names the dimension" || bad "group msg"
expect_rc 0 "keep glob matching nothing warns" "$BIN" quantize -q -g 32 --keep 'nothing.*' "$T/fp" "$T/x3"
grep -q "warning: --keep glob 'nothing.\*' matches no tensor" "$T/out" && ok "warning printed" || bad "no warning"
expect_rc 0 "keep experts" "$BIN" quantize -q -g 32 --keep '*mlp.experts*' "$T/fp" "$T/x4"
grep -q "^experts .*kept" "$T/out" && ok "experts kept" || bad "keep experts"
CLLM_QUANT_FAKE_AVAIL=1000 "$BIN" quantize -q -g 32 "$T/fp" "$T/x5" >"$T/out" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "not enough disk space" "$T/out" && [ ! -e "$T/x5" ] && ! ls -d "$T"/x5.tmp* >/dev/null 2>&1 \
  && ok "too little disk: error before writing" || { bad "disk check rc $rc"; cat "$T/out"; }
expect_rc 2 "output exists" "$BIN" quantize -q -g 32 "$T/fp" "$T/q4"
expect_rc 2 "already quantized input" "$BIN" quantize -q -g 32 "$T/q4" "$T/x6"
# corrupt: NaN into one scales tensor -> verify names it; truncated qzeros shape -> verify names it
cp -r "$T/q4" "$T/bad"
$PY - "$T/bad/model.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]; f = open(p, "r+b"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
a = h["model.language_model.layers.1.mlp.experts.3.up_proj.scales"]["data_offsets"][0]
f.seek(8 + n + a); f.write(b"\x00\x7e")  # fp16 NaN
PYEOF
expect_rc 1 "verify fails on corrupted" "$BIN" verify --full "$T/bad"
grep -q "problem: .*layers.1.mlp.experts.3.up_proj.scales.*NaN" "$T/out" && grep -q FAILED "$T/out" \
  && ok "verify names the corrupted scales" || { bad "corruption not named"; cat "$T/out"; }
check_exit
