#!/usr/bin/python3
"""Dev-only check (not run in CI) of tools/ref/gguf_np.py against llama.cpp's gguf-py:
  1. for every type, gguf_np.dequantize == gguf.quants.dequantize bitwise on random blocks
     (and on blocks gguf_np.quantize wrote);
  2. a GGUF written by gguf_np (every value type, string arrays, quantized tensors, and a
     hf_to_gguf conversion of a random qwen35moe model) is read by gguf.GGUFReader with the
     same keys, values, tensor types, shapes and bytes;
  3. (when /usr/bin/python3 has torch) llama.cpp's own convert_hf_to_gguf.py, run on a random
     qwen35moe model with MTP (stub `transformers`/`tqdm` modules, set_vocab skipped: no
     tokenizer), writes the same tensors (names, order, types, ne, bytes) and metadata as
     hf_to_gguf for --outtype f32 / f16 / q8_0, --fuse-gate-up-exps, per-expert BF16 shards
     and --split-max-tensors (only general.name / general.size_label differ).
Needs gguf-py:  GGUF_PY=/work/peer/llama.cpp-src/gguf-py /usr/bin/python3 tools/ref/check_gguf_np_vs_ggufpy.py"""
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.environ.get("GGUF_PY", "/work/peer/llama.cpp-src/gguf-py"))
import gguf  # noqa: E402
import gguf_np as G  # noqa: E402

BAD = []


def report(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}  {name}{': ' + detail if detail else ''}")
    if not ok:
        BAD.append(name)


def check_dequant():
    rng = np.random.default_rng(1)
    for t, nm in G.TYPE_NAMES.items():
        bs = G.BLOCK[t][0]
        K = bs * 3 if bs > 1 else 48
        rows = 7
        for how in ("random", "quantized"):
            if how == "random":
                data = G.random_blocks(t, rows, K, rng)
            else:
                data = G.quantize(rng.normal(0, 1, (rows, K)).astype(np.float32), t)
            ours = G.dequantize(data, rows, K, t)
            raw = np.frombuffer(data, np.uint8).reshape(rows, -1)
            if t == G.F32:
                raw = raw.view(np.float32)
            elif t == G.F16:
                raw = raw.view(np.float16)
            theirs = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(t))
            theirs = np.asarray(theirs, np.float32).reshape(rows, K)
            same = np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))
            report(f"dequantize {nm} ({how} blocks) bitwise == gguf-py", same,
                   "" if same else f"{np.sum(ours.view(np.uint32) != theirs.view(np.uint32))} differ")
        # gguf-py's own quantizer (where it has one) -> our dequantize
        x = rng.normal(0, 1, (rows, K)).astype(np.float32)
        try:
            q = gguf.quants.quantize(x, gguf.GGMLQuantizationType(t))
        except (NotImplementedError, gguf.quants.QuantError) as e:
            print(f"      ({nm}: gguf-py has no quantizer: {type(e).__name__})")
            continue
        ours = G.dequantize(np.ascontiguousarray(q).view(np.uint8).tobytes(), rows, K, t)
        theirs = np.asarray(gguf.quants.dequantize(q, gguf.GGMLQuantizationType(t)), np.float32)
        same = np.array_equal(ours.view(np.uint32), theirs.reshape(rows, K).view(np.uint32))
        report(f"dequantize {nm} (gguf-py-quantized blocks) bitwise == gguf-py", same)


def field_value(f):
    v = f.contents()
    return v


def compare_file(path, ours):
    r = gguf.GGUFReader(path)
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    report(f"{os.path.basename(path)}: same keys in order", keys == list(ours.kv),
           f"{keys} vs {list(ours.kv)}" if keys != list(ours.kv) else "")
    ok = True
    for k, v in ours.kv.items():
        f = r.fields.get(k)
        if f is None:
            ok = False
            continue
        gv = f.contents()
        tv = v.value
        if v.type == G.T_F32:
            tv = float(np.float32(tv))
        if v.type == G.T_ARR and v.elem == G.T_F32:
            tv = [float(np.float32(x)) for x in tv]
        if f.types[0] != v.type or (v.type == G.T_ARR and f.types[1] != v.elem) or gv != tv:
            print(f"      key {k}: gguf-py {f.types} {gv!r:.80} vs ours {v!r:.80}")
            ok = False
    report(f"{os.path.basename(path)}: every value and type equal", ok)
    ok = True
    names = [t.name for t in r.tensors]
    ours_names = [n for n, i in ours.tensors.items() if i["file"] == path]
    ok &= names == ours_names
    for t in r.tensors:
        i = ours.tensors[t.name]
        ne = [int(n) for n in t.shape]
        if int(t.tensor_type) != i["type"] or ne != i["ne"]:
            print(f"      tensor {t.name}: {t.tensor_type.name} {ne} vs {i['type']} {i['ne']}")
            ok = False
        if bytes(np.ascontiguousarray(t.data).view(np.uint8).tobytes()) != bytes(ours.raw(t.name)):
            print(f"      tensor {t.name}: bytes differ")
            ok = False
        if int(t.data_offset) != i["offset"]:
            print(f"      tensor {t.name}: offset {t.data_offset} vs {i['offset']}")
            ok = False
    report(f"{os.path.basename(path)}: tensors (names, types, ne, offsets, bytes) equal", ok)


def check_files():
    tmp = tempfile.mkdtemp(prefix="gguf_np_check_")
    rng = np.random.default_rng(2)
    kv = {"general.architecture": G.string("qwen35moe"),
          "t.u8": G.KV(G.T_U8, 200), "t.i8": G.KV(G.T_I8, -5), "t.u16": G.u16(65000),
          "t.i16": G.KV(G.T_I16, -300), "t.u32": G.u32(4000000000), "t.i32": G.i32(-7),
          "t.f32": G.f32(0.1), "t.bool": G.boolean(True), "t.str": G.string("héllo"),
          "t.u64": G.KV(G.T_U64, 2 ** 40 + 3), "t.i64": G.KV(G.T_I64, -2 ** 40),
          "t.f64": G.KV(G.T_F64, 1e-300), "t.arr_i32": G.array(G.T_I32, [11, 11, 10, 0]),
          "t.arr_str": G.array(G.T_STR, ["a", "", "Ġthe", "<|im_end|>"]),
          "t.arr_f32": G.array(G.T_F32, [0.5, -1.25]), "t.arr_u8": G.array(G.T_U8, [1, 2, 3])}
    tensors = []
    for j, (t, nm) in enumerate(G.TYPE_NAMES.items()):
        bs = G.BLOCK[t][0]
        K = bs * 2 if bs > 1 else 40
        shape = (3, 5, K) if j % 2 else (5, K)
        x = rng.normal(0, 1, shape).astype(np.float32)
        tensors.append(G.Tensor.from_array(f"t{j}.{nm}.weight", x, t))
    p = os.path.join(tmp, "all.gguf")
    G.write_gguf(p, kv, tensors)
    compare_file(p, G.GGUFFile(p))
    paths = G.write_gguf_split(os.path.join(tmp, "sp"), kv, tensors, max_tensors=5)
    ours = G.GGUFFile(paths[0])
    for q in paths:
        sub = G.GGUFFile(q, follow_splits=False)
        sub.tensors = {n: i for n, i in ours.tensors.items() if i["file"] == q}
        compare_file(q, sub)
    # a converted random model
    import random_model as RM
    cfg = dict(RM.PRESETS["qwen3_5_moe"])
    cfg.update(hidden_size=256, moe_intermediate_size=256, shared_expert_intermediate_size=256,
               head_dim=64, linear_key_head_dim=32, linear_value_head_dim=64, vocab_size=300)
    w = RM.random_weights(cfg, 3)
    d = os.path.join(tmp, "m")
    RM.write_model(d, cfg, w)
    types = [G.Q4_K, G.Q5_K, G.Q6_K, G.IQ4_XS, G.Q8_0, G.Q4_0]
    for fused in (False, True):
        out = os.path.join(tmp, f"m{int(fused)}.gguf")
        G.hf_to_gguf(d, out, lambda n: types[hash(n) % len(types)], fused_gate_up=fused)
        compare_file(out, G.GGUFFile(out))
        # and through gguf-py's dequantize too
        r = gguf.GGUFReader(out)
        ok = all(np.array_equal(np.asarray(gguf.quants.dequantize(t.data, t.tensor_type),
                                           np.float32).reshape(G.GGUFFile(out).array(t.name).shape),
                                G.GGUFFile(out).array(t.name)) for t in r.tensors)
        report(f"m{int(fused)}.gguf: every tensor dequantized by gguf-py == gguf_np", ok)


STUB_DRIVER = r"""
import sys, types, runpy
src = sys.argv.pop(1)
sys.argv[0] = "convert_hf_to_gguf.py"
tr = types.ModuleType("transformers")
class AutoConfig:
    @staticmethod
    def from_pretrained(*a, **k):
        raise RuntimeError("stub transformers")
tr.AutoConfig = tr.AutoTokenizer = AutoConfig
sys.modules["transformers"] = tr
tq = types.ModuleType("tqdm")
class _T:
    def __init__(self, *a, **k): pass
    def __getattr__(self, n): return lambda *a, **k: None
    def __enter__(self): return self
    def __exit__(self, *a): pass
tq.tqdm = _T
sys.modules["tqdm"] = tq
sys.path[:0] = [src, src + "/gguf-py"]
import torch
for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "uint16", "uint32", "uint64"):
    if not hasattr(torch, n):
        setattr(torch, n, object())
import conversion.qwen as Q
Q.Qwen3_5MoeTextModel.set_vocab = lambda self: None
runpy.run_path(src + "/convert_hf_to_gguf.py", run_name="__main__")
"""


def same_gguf(a_path, b_path):
    a, b = G.GGUFFile(a_path), G.GGUFFile(b_path)
    skip = ("general.name", "general.size_label")
    ka = {k: v for k, v in a.kv.items() if k not in skip}
    kb = {k: v for k, v in b.kv.items() if k not in skip}
    bad = [k for k in set(ka) | set(kb) if ka.get(k) != kb.get(k)]
    bad += [n for n in a.tensors if n not in b.tensors or a.tensors[n]["type"] != b.tensors[n]["type"]
            or a.tensors[n]["ne"] != b.tensors[n]["ne"] or bytes(a.raw(n)) != bytes(b.raw(n))]
    if list(a.tensors) != list(b.tensors):
        bad.append("tensor order / set")
    return bad


def check_real_converter():
    import subprocess
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP  llama.cpp's convert_hf_to_gguf.py comparison: no torch")
        return
    import test_gguf_np as TG
    import random_model as RM
    src = os.path.dirname(os.path.abspath(os.environ.get("GGUF_PY", "/work/peer/llama.cpp-src/gguf-py")))
    tmp = tempfile.mkdtemp(prefix="gguf_np_conv_")
    drv = os.path.join(tmp, "drive.py")
    with open(drv, "w") as f:
        f.write(STUB_DRIVER)
    rng = np.random.default_rng(8)
    cfg = TG.qcfg()
    w = TG.with_mtp(RM.random_weights(cfg, 11), cfg, rng)
    RM.write_model(os.path.join(tmp, "hf"), cfg, w)
    RM.write_model(os.path.join(tmp, "hf_pe"), cfg, RM.to_per_expert(w), dtype="BF16", shards=2)
    cases = [("f32", "hf", ["--outtype", "f32"], dict(type_of=lambda n: "F32")),
             ("f16", "hf", ["--outtype", "f16"], dict(type_of=lambda n: "F16")),
             ("q8_0", "hf", ["--outtype", "q8_0"], dict(type_of=lambda n: "Q8_0")),
             ("fused", "hf", ["--outtype", "f32", "--fuse-gate-up-exps"],
              dict(type_of=lambda n: "F32", fused_gate_up=True)),
             ("pe_bf16", "hf_pe", ["--outtype", "bf16"], dict(type_of=lambda n: "BF16")),
             ("split", "hf", ["--outtype", "f32", "--split-max-tensors", "40"],
              dict(type_of=lambda n: "F32", split_max_tensors=40))]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    for name, d, args, kw in cases:
        ll = os.path.join(tmp, f"ll_{name}.gguf")
        r = subprocess.run([sys.executable, drv, src, os.path.join(tmp, d), "--outfile", ll] + args,
                           capture_output=True, text=True, env=env)
        if r.returncode:
            report(f"llama.cpp converter ran ({name})", False, r.stderr[-300:])
            continue
        mine = G.hf_to_gguf(os.path.join(tmp, d), os.path.join(tmp, f"my_{name}.gguf"), **kw)
        lls = [ll] if len(mine) == 1 else [G.split_path(ll[:-5], i, len(mine)) for i in range(len(mine))]
        bad = same_gguf(lls[0], mine[0])
        for a, b in zip(lls, mine):
            fa, fb = G.GGUFFile(a, follow_splits=False), G.GGUFFile(b, follow_splits=False)
            if list(fa.tensors) != list(fb.tensors) or \
                    {k: v for k, v in fa.kv.items() if k.startswith("split.")} != \
                    {k: v for k, v in fb.kv.items() if k.startswith("split.")}:
                bad.append(os.path.basename(b))
        report(f"hf_to_gguf == llama.cpp's convert_hf_to_gguf.py ({name}, {len(mine)} file(s)): "
               "metadata and tensors", not bad, ", ".join(bad[:5]))


def main():
    check_dequant()
    check_files()
    check_real_converter()
    print(f"\n{'ALL PASSED' if not BAD else 'FAILED: ' + '; '.join(BAD)}")
    return 1 if BAD else 0


if __name__ == "__main__":
    sys.exit(main())
