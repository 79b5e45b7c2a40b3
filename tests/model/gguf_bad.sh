#!/bin/bash
# Bad GGUF files: each is refused by `cllm verify` and `cllm eval` with exit status 1 or 2 (never a
# signal: status < 128) and a message naming the field, key or tensor. The good file is a synth
# tiny-moe (with an MTP layer, V-head reorder) converted by tools/ref/gguf_np.py to F32; each
# case below is a copy with one thing broken (python: byte edits of the container, or a rewrite
# by the gguf_np writer for the semantic lies):
#   truncated in the header / in the key-values / in the tensor infos / in the data; wrong magic;
#   version 1; an unknown ggml type id (99) and an id cllm has no decoder for (Q2_K: the block
#   sizes still match); a string length past the end of the file; n_tensors / n_kv 2^62; a tensor
#   offset misaligned / past the end; a duplicate tensor name; a tensor's ne not what the metadata
#   implies (ssm_a longer; expert_feed_forward_length doubled); general.architecture "llama";
#   qwen35moe.block_count missing; ssm_a positive (A = -exp(A_log) must be < 0).
# Two of these cases found bugs, fixed since (a use after free formatting the ssm_a message; 1-D
# tensors without a length check).
# The good file itself verifies OK and evaluates (so the cases fail for their own reason).
# Exit 77 without /usr/bin/python3 + numpy.
set -u
BIN=${CLLM_BIN:?}; SRC=${CLLM_SRC:?}; T=${CLLM_TMP:-/tmp}/gguf_bad
PY=/usr/bin/python3
rm -rf "$T"; mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
if ! $PY -c 'import numpy' 2>/dev/null; then echo "SKIP: no /usr/bin/python3 with numpy" >&2; exit 77; fi
"$BIN" synth --config "$SRC/configs/tiny-mtp.json" "$T/fp" --seed 2 --dtype f32 -q || { bad synth; exit 1; }
CLLM_SRC="$SRC" $PY - "$T/fp" "$T" <<'PYEOF' || { bad "python writer"; exit 1; }
import os, struct, sys
sys.path.insert(0, os.environ["CLLM_SRC"] + "/tools/ref")
import numpy as np, gguf_np as G
fp, T = sys.argv[1], sys.argv[2]
good = f"{T}/good.gguf"
G.hf_to_gguf(fp, good, lambda n: "F32")
raw = open(good, "rb").read()
# walk the container: where the key-values, each tensor info's fields and the data start
b = G._Buf(memoryview(raw), good)
b.take(4); b.unpack("<I"); nt, nk = b.unpack("<QQ")
kv_start = b.o
for _ in range(nk):
    b.string(); (t,) = b.unpack("<I"); b.value(t)
info_start, infos = b.o, []
for _ in range(nt):
    name = b.string(); (nd,) = b.unpack("<I"); b.unpack(f"<{nd}Q")
    type_at = b.o; b.unpack("<IQ")
    infos.append((name, type_at))
data_start = b.o + G._pad(b.o, 32)
def put(name, data):
    open(f"{T}/{name}.gguf", "wb").write(bytes(data))
def edit(name, at, fmt, v):
    d = bytearray(raw); struct.pack_into(fmt, d, at, v); put(name, d)
def tinfo(n):
    return next(at for nm, at in infos if nm == n)
put("trunc_header", raw[:20])
put("trunc_kv", raw[:(kv_start + info_start) // 2])
put("trunc_infos", raw[:(info_start + data_start) // 2])
put("trunc_data", raw[:len(raw) - 4096])
put("bad_magic", b"GGUX" + raw[4:])
edit("version1", 4, "<I", 1)
edit("ntensors_huge", 8, "<Q", 1 << 62)
edit("nkv_huge", 16, "<Q", 1 << 62)
edit("strlen_past_end", kv_start, "<Q", 1 << 40)
E = "blk.1.ffn_down_exps.weight"
edit("type_unknown", tinfo(E), "<I", 99)
edit("type_q2k", tinfo("blk.1.ssm_out.weight"), "<I", 10)  # no decoder in cllm; sizes differ
edit("offset_misaligned", tinfo(E) + 4, "<Q", struct.unpack_from("<Q", raw, tinfo(E) + 4)[0] + 4)
edit("offset_past_end", tinfo(E) + 4, "<Q", len(raw))
# semantic lies, rewritten by the writer
g = G.GGUFFile(good)
def rewrite(name, kv=None, tensors=None):
    kv = dict(g.kv) if kv is None else kv
    ts = tensors if tensors is not None else \
        [G.Tensor(n, i["type"], i["ne"], g.raw(n)) for n, i in g.tensors.items()]
    G.write_gguf(f"{T}/{name}.gguf", kv, ts)
ts = [G.Tensor(n, i["type"], i["ne"], g.raw(n)) for n, i in g.tensors.items()]
A = g.tensors["blk.0.ssm_a"]
dup = ts + [G.Tensor("blk.0.ssm_a", A["type"], A["ne"], g.raw("blk.0.ssm_a"))]
rewrite("dup_tensor", tensors=dup)
ne_lie = [G.Tensor(t.name, t.type, [t.ne[0] * 2], t.data * 2) if t.name == "blk.0.ssm_a" else t for t in ts]
rewrite("ne_lie", tensors=ne_lie)
ne_short = [G.Tensor(t.name, t.type, [1], t.data[:4]) if t.name == "blk.0.ssm_a" else t for t in ts]
rewrite("ne_short", tensors=ne_short)
kv = dict(g.kv); kv["qwen35moe.expert_feed_forward_length"] = G.u32(g.kv["qwen35moe.expert_feed_forward_length"].value * 2)
rewrite("meta_lie", kv=kv)
kv = dict(g.kv); kv["general.architecture"] = G.string("llama")
rewrite("arch_llama", kv=kv)
kv = {k: v for k, v in g.kv.items() if k != "qwen35moe.block_count"}
rewrite("no_block_count", kv=kv)
pos = [G.Tensor(t.name, t.type, t.ne, np.abs(np.frombuffer(t.data, np.float32)).tobytes())
       if t.name == "blk.0.ssm_a" else t for t in ts]
rewrite("ssm_a_positive", tensors=pos)
open(f"{T}/ssm_a0", "w").write("%g" % abs(float(np.frombuffer(g.raw("blk.0.ssm_a"), np.float32)[0])))
print(f"{len(os.listdir(T)) - 2} files written")
PYEOF
"$BIN" verify "$T/good.gguf" >"$T/out" 2>&1 && grep -q "^OK" "$T/out" && ok "good file verifies OK" ||
  { bad "good file: verify"; cat "$T/out"; }
"$BIN" eval "$T/good.gguf" --tokens 1,2,3 --logits-hash >"$T/out" 2>&1 && ok "good file evaluates" ||
  { bad "good file: eval"; cat "$T/out"; }
# refused CASE PATTERN (extended regex, case-insensitive) for both verify and eval
refused() {
  local c=$1 pat=$2 cmd rc
  for cmd in verify eval; do
    if [ $cmd = verify ]; then "$BIN" verify "$T/$c.gguf" >"$T/out" 2>&1; rc=$?
    else "$BIN" eval "$T/$c.gguf" --tokens 1,2 --logits-hash >"$T/out" 2>&1; rc=$?; fi
    if [ $rc -ge 1 ] && [ $rc -le 2 ] && grep -Eqi -- "$pat" "$T/out"; then
      ok "$c: $cmd refused (rc $rc): $(grep -Ei -m1 -- "$pat" "$T/out" | cut -c1-160)"
    else
      bad "$c: $cmd rc $rc, want 1/2 and /$pat/:"; head -c 600 "$T/out"; echo
    fi
  done
}
refused trunc_header      "trunc|short|end of file|too small|header"
refused trunc_kv          "trunc|past the end|end of file|short"
refused trunc_infos       "trunc|past the end|end of file|short"
refused trunc_data        "blk\.|output|token_embd"
refused bad_magic         "magic|not a GGUF"
refused version1          "version"
refused ntensors_huge     "n_tensors|tensor count|tensors"
refused nkv_huge          "n_kv|key"
refused strlen_past_end   "truncated.*metadata key|string|past the end"
refused type_unknown      "blk\.1\.ffn_down_exps"
refused type_q2k          "blk\.1\.ssm_out"
refused offset_misaligned "blk\.1\.ffn_down_exps"
refused offset_past_end   "blk\.1\.ffn_down_exps"
refused dup_tensor        "blk\.0\.ssm_a"
refused ne_lie            "blk\.0\.ssm_a|A_log"
refused ne_short          "blk\.0\.ssm_a|A_log"
refused meta_lie          "ffn_(gate|up|down)_exps|experts|expert_feed_forward_length"
refused arch_llama        "llama"
refused no_block_count    "block_count"
# the message must show the file's value, blk.0.ssm_a[0]
refused ssm_a_positive    "ssm_a\[0\] = $(cat "$T/ssm_a0"): ssm_a must be negative"
[ $fail = 0 ] && echo "gguf_bad: all passed"
check_exit
