#!/usr/bin/python3
"""Self-test of tools/ref/gguf_np.py (numpy GGUF writer/reader, ggml block formats, qwen35moe
converter). Independent of the C code and of llama.cpp's gguf-py (that comparison is the dev-only
check_gguf_np_vs_ggufpy.py). Run:  /usr/bin/python3 tools/ref/test_gguf_np.py [--keep]
(exit 0 = all passed)."""
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_np as G  # noqa: E402
import random_model as RM  # noqa: E402
import ref_forward as R  # noqa: E402

TMP = tempfile.mkdtemp(prefix="cllm_gguf_np_test_")
RESULTS = []


def check(name, value, limit, what="max abs diff"):
    ok = bool(np.isfinite(value)) and value <= limit
    RESULTS.append((name, ok))
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {what} {value:.3e} (limit {limit:.0e})")
    return ok


def check_true(name, cond, detail=""):
    RESULTS.append((name, bool(cond)))
    print(f"{'PASS' if cond else 'FAIL'}  {name}{': ' + detail if detail else ''}")


# ------------------------------------------------------------------ (1) scalar transliteration
# Each function below is ggml-quants.c's dequantize_row_* for ONE block, loop for loop, with
# numpy float32 scalars (so every product/sum rounds to float32 as the C code does).

F = np.float32


def h2f(b, o):
    return F(np.frombuffer(bytes(b[o:o + 2]), "<f2")[0])


def s_get_scale_min_k4(j, q):
    if j < 4:
        return q[j] & 63, q[j + 4] & 63
    return (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4)


def s_q4_0(b):
    d, y = h2f(b, 0), [F(0)] * 32
    for j in range(16):
        y[j] = F((b[2 + j] & 0x0F) - 8) * d
        y[j + 16] = F((b[2 + j] >> 4) - 8) * d
    return y


def s_q4_1(b):
    d, m, y = h2f(b, 0), h2f(b, 2), [F(0)] * 32
    for j in range(16):
        y[j] = F(b[4 + j] & 0x0F) * d + m
        y[j + 16] = F(b[4 + j] >> 4) * d + m
    return y


def s_q5(b, has_m):
    d = h2f(b, 0)
    m = h2f(b, 2) if has_m else None
    o = 4 if has_m else 2
    qh = int.from_bytes(bytes(b[o:o + 4]), "little")
    qs = b[o + 4:o + 20]
    y = [F(0)] * 32
    for j in range(16):
        xh0 = ((qh >> (j + 0)) << 4) & 0x10
        xh1 = ((qh >> (j + 12))) & 0x10
        x0 = (qs[j] & 0x0F) | xh0
        x1 = (qs[j] >> 4) | xh1
        if has_m:
            y[j], y[j + 16] = F(x0) * d + m, F(x1) * d + m
        else:
            y[j], y[j + 16] = F(x0 - 16) * d, F(x1 - 16) * d
    return y


def s_q8_0(b):
    d = h2f(b, 0)
    return [F(int(np.int8(np.uint8(b[2 + j])))) * d for j in range(32)]


def s_q45_k(b, five):
    d, mn = h2f(b, 0), h2f(b, 2)
    sc_b = b[4:16]
    qh = b[16:48] if five else None
    ql = b[48:176] if five else b[16:144]
    y, is_, u1, u2, o = [], 0, 1, 2, 0
    for j in range(0, 256, 64):
        sc, m = s_get_scale_min_k4(is_ + 0, sc_b)
        d1, m1 = d * F(sc), mn * F(m)
        sc, m = s_get_scale_min_k4(is_ + 1, sc_b)
        d2, m2 = d * F(sc), mn * F(m)
        for l in range(32):
            q = (ql[o + l] & 0xF) + ((16 if qh[l] & u1 else 0) if five else 0)
            y.append(d1 * F(q) - m1)
        for l in range(32):
            q = (ql[o + l] >> 4) + ((16 if qh[l] & u2 else 0) if five else 0)
            y.append(d2 * F(q) - m2)
        o += 32
        is_ += 2
        u1 <<= 2
        u2 <<= 2
    return y


def s_q6_k(b):
    d = h2f(b, 208)
    y = [F(0)] * 256
    for n in range(2):
        ql, qh = b[64 * n:64 * n + 64], b[128 + 32 * n:128 + 32 * n + 32]
        sc = [int(np.int8(np.uint8(v))) for v in b[192 + 8 * n:192 + 8 * n + 8]]
        for l in range(32):
            is_ = l // 16
            q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32
            q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32
            q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32
            q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32
            y[128 * n + l] = d * F(sc[is_ + 0]) * F(q1)
            y[128 * n + l + 32] = d * F(sc[is_ + 2]) * F(q2)
            y[128 * n + l + 64] = d * F(sc[is_ + 4]) * F(q3)
            y[128 * n + l + 96] = d * F(sc[is_ + 6]) * F(q4)
    return y


KV = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]


def s_iq4_nl(b):
    d, y = h2f(b, 0), [F(0)] * 32
    for j in range(16):
        y[j] = d * F(KV[b[2 + j] & 0xF])
        y[j + 16] = d * F(KV[b[2 + j] >> 4])
    return y


def s_iq4_xs(b):
    d = h2f(b, 0)
    sh = int.from_bytes(bytes(b[2:4]), "little")
    y = []
    for ib in range(8):
        ls = ((b[4 + ib // 2] >> 4 * (ib % 2)) & 0xF) | (((sh >> 2 * ib) & 3) << 4)
        dl = d * F(ls - 32)
        qs = b[8 + 16 * ib:8 + 16 * ib + 16]
        y += [dl * F(KV[qs[j] & 0xF]) for j in range(16)] + [dl * F(KV[qs[j] >> 4]) for j in range(16)]
    return y


SCALAR = {G.Q4_0: s_q4_0, G.Q4_1: s_q4_1, G.Q5_0: lambda b: s_q5(b, False),
          G.Q5_1: lambda b: s_q5(b, True), G.Q8_0: s_q8_0, G.Q4_K: lambda b: s_q45_k(b, False),
          G.Q5_K: lambda b: s_q45_k(b, True), G.Q6_K: s_q6_k, G.IQ4_NL: s_iq4_nl,
          G.IQ4_XS: s_iq4_xs}


def test_scalar_dequant():
    rng = np.random.default_rng(5)
    for t, fn in SCALAR.items():
        bs, bb = G.BLOCK[t]
        rows, K = 3, 2 * bs
        data = G.random_blocks(t, rows, K, rng) + b""
        data += G.quantize(rng.normal(0, 1, (rows, K)).astype(np.float32), t)
        vec = G.dequantize(data, 2 * rows, K, t).reshape(-1)
        blocks = np.frombuffer(data, np.uint8).reshape(-1, bb).tolist()
        sca = np.array([v for b in blocks for v in fn(b)], np.float32)
        same = np.array_equal(vec.view(np.uint32), sca.view(np.uint32))
        check_true(f"(1) {G.TYPE_NAMES[t]} vectorized dequantize == scalar ggml transliteration "
                   f"bitwise ({2 * rows * K // bs} blocks)", same)
    # floats
    x = rng.normal(0, 3, (5, 7)).astype(np.float32)
    check_true("(1) F32 / F16 round trips exact, BF16 = round-to-nearest-even of the bits",
               np.array_equal(G.dequantize(G.quantize(x, "F32"), 5, 7, "F32"), x)
               and np.array_equal(G.dequantize(G.quantize(x, "F16"), 5, 7, "F16"),
                                  x.astype(np.float16).astype(np.float32))
               and np.array_equal(G.dequantize(G.quantize(np.float32([[1.00390625, 1.01171875,
                                                                         -2.0]]), "BF16"), 1, 3, "BF16"),
                                  np.float32([[1.0, 1.015625, -2.0]])))
    # hand-made Q4_K block: sub-block j has scale j+1, min 2j, d = 1, dmin = 0.5, q = l % 16
    b = np.zeros(144, np.uint8)
    b[0:2] = np.frombuffer(np.float16(1).tobytes(), np.uint8)
    b[2:4] = np.frombuffer(np.float16(0.5).tobytes(), np.uint8)
    sc, mn = np.arange(1, 9, dtype=np.uint8), (2 * np.arange(8)).astype(np.uint8)
    b[4:16] = G._pack_scale_min_k4(sc[None], mn[None])[0]
    q = (np.arange(256) % 16).astype(np.uint8).reshape(4, 2, 32)
    b[16:144] = (q[:, 0] | (q[:, 1] << 4)).reshape(128)
    e = np.arange(256)
    want = (e // 32 + 1) * (e % 16) - 0.5 * (2 * (e // 32))
    check_true("(1) hand-made Q4_K block (scales 1..8, mins 0..14 via get_scale_min_k4 packing)",
               np.array_equal(G.dequantize(b.tobytes(), 1, 256, "Q4_K")[0], want.astype(np.float32)))


# ------------------------------------------------------------------ (2) quantize round trips

LIMITS = {"Q4_0": 0.12, "Q4_1": 0.10, "Q5_0": 0.06, "Q5_1": 0.05, "Q8_0": 0.01, "Q4_K": 0.12,
          "Q5_K": 0.06, "Q6_K": 0.03, "IQ4_NL": 0.10, "IQ4_XS": 0.12, "F16": 1e-3, "BF16": 5e-3,
          "F32": 0.0}


def test_quant_round_trip():
    rng = np.random.default_rng(6)
    for nm, lim in LIMITS.items():
        t = G.type_id(nm)
        bs = G.BLOCK[t][0]
        rows, K = 37, bs * 3 if bs > 1 else 100          # odd row count
        x = (rng.normal(0, 1, (rows, K)) * rng.uniform(0.01, 10, (rows, 1))).astype(np.float32)
        data = G.quantize(x, t)
        ok_len = len(data) == G.row_bytes(t, K) * rows
        y = G.dequantize(data, rows, K, t)
        err = np.sqrt(np.mean((y - x) ** 2, axis=1) / np.mean(x ** 2, axis=1)).max()
        check(f"(2) {nm} quantize -> dequantize, {rows} rows x {K}, worst row rms rel error"
              + ("" if ok_len else " [WRONG SIZE]"), err if ok_len else np.inf, lim, "")
        z = G.dequantize(G.quantize(np.zeros((3, K), np.float32), t), 3, K, t)
        check_true(f"(2) {nm}: zero rows stay zero, no NaN", np.array_equal(z, np.zeros_like(z)))


# ------------------------------------------------------------------ (3) container round trip

def test_container():
    rng = np.random.default_rng(7)
    kv = {"general.architecture": G.string("qwen35moe"), "a.u8": G.KV(G.T_U8, 255),
          "a.i8": G.KV(G.T_I8, -128), "a.u16": G.u16(65535), "a.i16": G.KV(G.T_I16, -32768),
          "a.u32": G.u32(2 ** 32 - 1), "a.i32": G.i32(-2 ** 31), "a.f32": G.f32(1.5),
          "a.bool": G.boolean(False), "a.str": G.string("ünï <|im_start|>"),
          "a.u64": G.KV(G.T_U64, 2 ** 64 - 1), "a.i64": G.KV(G.T_I64, -2 ** 63),
          "a.f64": G.KV(G.T_F64, 0.1), "a.empty": G.string(""),
          "a.strs": G.array(G.T_STR, ["x", "", "Ġy", "\n"]), "a.i32s": G.array(G.T_I32, [1, -2]),
          "a.f32s": G.array(G.T_F32, [0.5, 2.0]), "a.bools": G.array(G.T_BOOL, [True, False]),
          "a.none": G.array(G.T_U32, [])}
    tensors = []
    for j, t in enumerate(G.TYPE_NAMES):
        bs = G.BLOCK[t][0]
        K = bs * 2 if bs > 1 else 33
        shape = (3, 5, K) if j % 2 else (7, K)
        tensors.append(G.Tensor.from_array(f"t.{j}", rng.normal(0, 1, shape), t))
    p = os.path.join(TMP, "c.gguf")
    G.write_gguf(p, kv, tensors)
    g = G.GGUFFile(p)
    same_kv = list(g.kv) == list(kv) and all(g.kv[k] == (v if v.type != G.T_F32 else v)
                                             for k, v in kv.items())
    check_true("(3) writer -> reader: every metadata type incl. string arrays, in order", same_kv)
    ok = all(g.tensors[t.name]["type"] == t.type and g.tensors[t.name]["ne"] == t.ne
             and bytes(g.raw(t.name)) == t.data and g.tensors[t.name]["offset"] % 32 == 0
             for t in tensors)
    check_true("(3) tensor infos, 32-aligned offsets and bytes", ok)
    paths = G.write_gguf_split(os.path.join(TMP, "s"), kv, tensors, n_split=3)
    names = [os.path.basename(q) for q in paths]
    s = G.GGUFFile(paths[0])
    ok = names == [f"s-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    ok &= all(bytes(s.raw(t.name)) == t.data for t in tensors) and list(s.tensors) == [t.name for t in tensors]
    second = G.GGUFFile(paths[1], follow_splits=False)
    ok &= list(second.kv) == ["split.no", "split.count", "split.tensors.count"]
    ok &= second.kv["split.no"] == G.u16(1) and s.kv["split.count"] == G.u16(3)
    ok &= s.kv["split.tensors.count"] == G.i32(len(tensors)) and s.kv["a.strs"] == kv["a.strs"]
    check_true("(3) split files: names, split.* keys (u16, u16, i32), all tensors found", ok, str(names))
    with open(p, "rb") as f:
        data = f.read()
    with open(os.path.join(TMP, "trunc.gguf"), "wb") as f:
        f.write(data[:-100])
    try:
        G.GGUFFile(os.path.join(TMP, "trunc.gguf"))
        check_true("(3) truncated file refused", False)
    except ValueError as e:
        check_true("(3) truncated file refused naming the tensor", "t." in str(e), str(e))


# ------------------------------------------------------------------ (4) converter round trip

def qcfg(**over):
    c = dict(RM.PRESETS["qwen3_5_moe"])
    c.update(hidden_size=256, moe_intermediate_size=256, shared_expert_intermediate_size=256,
             head_dim=64, linear_key_head_dim=32, linear_value_head_dim=64, vocab_size=301,
             num_hidden_layers=4, mtp_num_hidden_layers=1)
    c.update(over)
    return c


def with_mtp(w, cfg, rng):
    """MTP tensors (docs/model.md §2.7) from a full-attention layer's, plus fc and the norms."""
    P = "model.language_model."
    L = [i for i in range(cfg["num_hidden_layers"]) if (i + 1) % 4 == 0][0]
    src = f"{P}layers.{L}."
    out = dict(w)
    for n, a in w.items():
        if n.startswith(src):
            out["mtp.layers.0." + n[len(src):]] = (a + rng.normal(0, 0.01, a.shape)).astype(np.float32)
    H = cfg["hidden_size"]
    out["mtp.fc.weight"] = rng.normal(0, 1 / np.sqrt(2 * H), (H, 2 * H)).astype(np.float32)
    for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        out[f"mtp.{n}.weight"] = rng.normal(0, 0.1, H).astype(np.float32)
    return out


def expected_back(name, a):
    """What gguf_to_hf_arrays must return for an F32 conversion of HF tensor `name`."""
    a = np.asarray(a, np.float32)
    if name.endswith("A_log"):
        return np.log(-(-np.exp(a.astype(np.float64))).astype(np.float32).astype(np.float64))
    if (name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight")) \
            or name.startswith("mtp.pre_fc_norm_"):        # renamed enorm/hnorm: +1 too
        return ((a + F(1)) - F(1)).astype(np.float64)
    return a.astype(np.float64)


def test_converter():
    rng = np.random.default_rng(8)
    cfg = qcfg()
    w = with_mtp(RM.random_weights(cfg, 11), cfg, rng)
    d = os.path.join(TMP, "hf")
    RM.write_model(d, cfg, w)
    dpe = os.path.join(TMP, "hf_pe")
    RM.write_model(dpe, cfg, RM.to_per_expert(w))
    A = "qwen35moe."
    # F32: exact
    p = os.path.join(TMP, "f32.gguf")
    G.hf_to_gguf(d, p, lambda n: "F32")
    g = G.GGUFFile(p)
    back = G.gguf_to_hf_arrays(g)
    ok = set(back) == set(w)
    bad = [n for n in w if n in back and not np.array_equal(back[n], expected_back(n, w[n]))]
    check_true("(4) F32 hf_to_gguf -> gguf_to_hf_arrays: same names, exact values "
               "(norms: f32(w+1)-1, A_log: log(-f32(-exp)))", ok and not bad,
               f"{sorted(set(w) ^ set(back))[:4]} {bad[:4]}")
    an = "model.language_model.layers.0.linear_attn.A_log"
    check(f"(4) A_log through ssm_a = -exp(A_log) and back", float(np.max(np.abs(back[an] - w[an]))),
          1e-6)
    kv = g.kv
    ok = (kv[A + "block_count"] == G.u32(5) and kv[A + "nextn_predict_layers"] == G.u32(1)
          and kv[A + "rope.dimension_sections"] == G.array(G.T_I32, [11, 11, 10, 0])
          and kv[A + "rope.dimension_count"] == G.u32(16) and kv[A + "ssm.group_count"] == G.u32(2)
          and kv[A + "ssm.time_step_rank"] == G.u32(4) and kv[A + "ssm.inner_size"] == G.u32(256)
          and kv[A + "ssm.state_size"] == G.u32(32) and kv[A + "full_attention_interval"] == G.u32(4)
          and kv["general.architecture"] == G.string("qwen35moe") and kv["general.file_type"] == G.u32(0))
    check_true("(4) qwen35moe metadata (block_count incl. MTP, nextn, rope sections, ssm keys)", ok)
    T = g.tensors
    ok = (T["blk.0.ffn_gate_exps.weight"]["ne"] == [256, 256, 8]
          and T["blk.0.ssm_conv1d.weight"]["ne"] == [4, 2 * 64 + 256]
          and T["blk.0.ssm_a"]["type"] == G.F32 and "blk.0.ssm_dt.bias" in T
          and T["blk.0.ffn_gate_inp_shexp.weight"]["ne"] == [256, 1]
          and "blk.4.nextn.eh_proj.weight" in T and "blk.4.nextn.shared_head_norm.weight" in T
          and "blk.4.attn_q.weight" in T and "output.weight" in T and "blk.4.ffn_down_exps.weight" in T)
    check_true("(4) tensor names / ne (experts {n_embd, n_ff, n_expert}, conv1d squeezed, MTP as blk.4)", ok)
    # the V-head reorder: GGUF in_proj_z row block of value head (g, v) tiled = HF head g*r + v
    z_hf = w["model.language_model.layers.0.linear_attn.in_proj_z.weight"].reshape(2, 2, 64, 256)
    z_gg = g.array("blk.0.attn_gate.weight").reshape(2, 2, 64, 256)
    ok = np.array_equal(z_gg[1, 0], z_hf[0, 1]) and np.array_equal(z_gg[0, 1], z_hf[1, 0])
    a_gg = g.array("blk.0.ssm_a")
    a_hf = (-np.exp(w[an].astype(np.float64))).astype(np.float32)
    ok &= np.array_equal(a_gg, a_hf.reshape(2, 2).T.reshape(4))
    check_true("(4) V heads reordered grouped -> tiled (attn_gate rows, ssm_a)", ok)
    nw = g.array("blk.0.attn_norm.weight")
    check_true("(4) attn_norm = w + 1, ssm_norm unchanged",
               np.array_equal(nw, w["model.language_model.layers.0.input_layernorm.weight"] + F(1))
               and np.array_equal(g.array("blk.0.ssm_norm.weight"),
                                  w["model.language_model.layers.0.linear_attn.norm.weight"]))
    # per-expert layout gives the same file contents
    p2 = os.path.join(TMP, "f32pe.gguf")
    G.hf_to_gguf(dpe, p2, lambda n: "F32")
    g2 = G.GGUFFile(p2)
    ok = set(g2.tensors) == set(T) and all(bytes(g2.raw(n)) == bytes(g.raw(n)) for n in T)
    check_true("(4) per-expert safetensors -> same tensors as fused", ok)
    # fused gate_up
    p3 = os.path.join(TMP, "fused.gguf")
    G.hf_to_gguf(d, p3, lambda n: "F32", fused_gate_up=True)
    g3 = G.GGUFFile(p3)
    gu = g3.array("blk.0.ffn_gate_up_exps.weight")
    ok = (g3.tensors["blk.0.ffn_gate_up_exps.weight"]["ne"] == [256, 512, 8]
          and "blk.0.ffn_gate_exps.weight" not in g3.tensors
          and np.array_equal(gu[:, :256], g.array("blk.0.ffn_gate_exps.weight"))
          and np.array_equal(gu[:, 256:], g.array("blk.0.ffn_up_exps.weight")))
    b3 = G.gguf_to_hf_arrays(g3)
    ok &= all(np.array_equal(b3[n], back[n]) for n in back)
    check_true("(4) --fused-gate-up: ffn_gate_up_exps {n_embd, 2 n_ff, n_expert}, gate rows first; "
               "inverse identical", ok)

    # quantized mixes: every weight within its type's error, ref logits from the GGUF
    toks = [1, 5, 77, 300, 2, 9, 100]
    ref0, _ = R.forward(R.Model(d), toks)
    mixes = {"Q4_K": lambda n: "Q4_K", "Q8_0": lambda n: "Q8_0",
             "mix": lambda n: ("Q6_K" if "output" in n or "token_embd" in n else
                               "Q5_K" if "ffn_down" in n else "IQ4_XS" if "exps" in n else
                               "Q4_0" if "attn" in n else "IQ4_NL" if "ssm" in n else "Q5_1")}
    for mname, tf in mixes.items():
        p = os.path.join(TMP, f"{mname}.gguf")
        G.hf_to_gguf(d, p, tf, split_max_tensors=40 if mname == "mix" else None)
        p = p[:-5] + "-00001-of-00003.gguf" if mname == "mix" else p
        g = G.GGUFFile(p)
        back = G.gguf_to_hf_arrays(g)
        worst = 0.0
        for n, a in w.items():
            e = expected_back(n, a)
            worst = max(worst, float(np.sqrt(np.mean((back[n] - e) ** 2) / max(np.mean(e ** 2), 1e-30))))
        check(f"(4) {mname}: every tensor back within quant error (worst rms rel)", worst,
              0.12, "")
        # ref_forward on the dict == on gguf_to_ref_dir, close to the F32 model
        m_dict = R.Model(d, tensors=back, config=G.gguf_to_hf_config(g))
        rd = G.gguf_to_ref_dir(p, os.path.join(TMP, f"ref_{mname}"))
        l1, _ = R.forward(m_dict, toks)
        l2, _ = R.forward(R.Model(rd), toks)
        check_true(f"(4) {mname}: ref_forward logits from the dict == from gguf_to_ref_dir bitwise",
                   np.array_equal(l1, l2))
        rel = float(np.sqrt(np.mean((l1 - ref0) ** 2) / np.mean(ref0 ** 2)))
        print(f"      {mname}: logits vs the unquantized model: rms rel {rel:.3e}, max rel "
              f"{float(np.max(np.abs(l1 - ref0)) / np.max(np.abs(ref0))):.3e}")
    # F32 GGUF -> reference: logits of the converted model == original up to the norm rounding
    gf = G.GGUFFile(os.path.join(TMP, "f32.gguf"))
    lf, _ = R.forward(R.Model(d, tensors=G.gguf_to_hf_arrays(gf), config=G.gguf_to_hf_config(gf)), toks)
    check("(4) F32 GGUF through the reference == the HF model (max rel)",
          float(np.max(np.abs(lf - ref0)) / np.max(np.abs(ref0))), 1e-5, "")
    # F16 fallback where the block does not divide the row (preset: hidden 64, ff 24)
    small = dict(RM.PRESETS["qwen3_5_moe"])
    ds = os.path.join(TMP, "small")
    RM.write_model(ds, small, RM.random_weights(small, 1))
    ps = os.path.join(TMP, "small.gguf")
    G.hf_to_gguf(ds, ps, lambda n: "Q4_K")
    gs = G.GGUFFile(ps)
    ok = gs.tensors["blk.0.ffn_down_exps.weight"]["type"] == G.F16 and \
        gs.tensors["blk.0.attn_qkv.weight"]["type"] == G.F16 and "output.weight" in gs.tensors \
        and "blk.4.attn_q.weight" not in gs.tensors and "qwen35moe.nextn_predict_layers" not in gs.kv
    check_true("(4) row length not a multiple of the block: F16 fallback; no MTP -> no nextn key", ok)
    # CLI
    r = subprocess.run([sys.executable, os.path.join(HERE, "gguf_np.py"), "convert", ds,
                        os.path.join(TMP, "cli.gguf"), "--types", "*exps*=Q8_0,*=F16"],
                       capture_output=True, text=True)
    r2 = subprocess.run([sys.executable, os.path.join(HERE, "gguf_np.py"), "dump",
                         os.path.join(TMP, "cli.gguf")], capture_output=True, text=True)
    check_true("(4) CLI convert + dump", r.returncode == 0 and "blk.0.ffn_up_exps.weight Q8_0" in r2.stdout
               and "blk.0.ffn_down_exps.weight F16" in r2.stdout
               and "blk.0.attn_qkv.weight F16" in r2.stdout, r.stderr[-200:])


def test_random_writer():
    """make_gguf_random.py: the tensor list of qwen35moe_tensor_specs is hf_to_gguf's (names, ne,
    which stay F32), the metadata too; each mix loads, is finite, matmuls give O(gain) outputs;
    the Q4_K_M rule picks Q6_K where llama-quantize does; tokens padded with [PAD<i>] UNUSED."""
    import make_gguf_random as MR
    rng = np.random.default_rng(5)
    cfg = qcfg()
    d = os.path.join(TMP, "hf_rw")
    RM.write_model(d, cfg, with_mtp(RM.random_weights(cfg, 3), cfg, rng))
    p = os.path.join(TMP, "rw_conv.gguf")
    G.hf_to_gguf(d, p, lambda n: "Q8_0", name="x")
    gc = G.GGUFFile(p)
    with open(os.path.join(d, "config.json")) as f:
        dcfg = json.load(f)
    specs = G.qwen35moe_tensor_specs(dcfg)
    same = {n: (ne, k != "matrix") for n, ne, k in specs} == \
        {n: (i["ne"], i["type"] == G.F32) for n, i in gc.tensors.items()}
    check_true("(5) qwen35moe_tensor_specs == hf_to_gguf's tensors (names, ne, F32 ones)", same)
    voc = os.path.join(TMP, "voc.gguf")
    G.write_gguf(voc, {"general.architecture": G.string("x"),
                       "tokenizer.ggml.model": G.string("gpt2"),
                       "tokenizer.ggml.tokens": G.array(G.T_STR, ["a", "b", "c"]),
                       "tokenizer.ggml.token_type": G.array(G.T_I32, [1, 1, 3])}, [])
    for mix in ("q4_0", "q8_0", "q4_k_m"):
        out = os.path.join(TMP, f"rw_{mix}.gguf")
        MR.write_random_gguf(dcfg, out, mix, vocab_gguf=voc, seed=2, progress=False)
        g = G.GGUFFile(out)
        kv_ok = all(g.kv[k] == v for k, v in gc.kv.items()
                    if k not in ("general.file_type", "general.name"))
        kv_ok &= g.value("general.file_type") == MR.MIX_FTYPE[mix]
        toks = g.value("tokenizer.ggml.tokens")
        kv_ok &= len(toks) == 301 and toks[3] == "[PAD3]" and toks[300] == "[PAD300]" and \
            g.value("tokenizer.ggml.token_type")[2:5] == [3, 5, 5]
        check_true(f"(5) random {mix}: metadata == hf_to_gguf's, tokens padded [PAD<i>] UNUSED", kv_ok)
        same = {n: i["ne"] for n, i in g.tensors.items()} == {n: i["ne"] for n, i in gc.tensors.items()}
        rms, finite = [], True
        x = np.random.default_rng(0).standard_normal(4096)
        for n, i in g.tensors.items():
            a = g.array(n)
            finite &= bool(np.isfinite(a).all())
            if i["type"] != G.F32:
                K = i["ne"][0]
                y = a.reshape(-1, K) @ x[:K]
                if y.size >= 256:
                    rms.append(float(np.sqrt(np.mean(y ** 2))))
        check_true(f"(5) random {mix}: same tensors, all finite, matmul RMS of a unit input in "
                   f"[0.3, 0.8] for gain 0.5 ({min(rms):.3f}..{max(rms):.3f})",
                   same and finite and 0.3 < min(rms) and max(rms) < 0.8)
    c10 = qcfg(num_hidden_layers=9)
    c10.pop("layer_types", None)
    ty = {n: G.TYPE_NAMES[t] for n, _, _, t in
          MR.assign_types(G.qwen35moe_tensor_specs(c10), "q4_k_m", 16, 10)}
    want6 = {0, 3, 6, 8, 9}             # use_more_bits(i, 10)
    ok = all((ty[f"blk.{b}.ffn_down_exps.weight"] == "Q6_K") == (b in want6) for b in range(10))
    ok &= all((ty.get(f"blk.{b}.attn_qkv.weight", ty.get(f"blk.{b}.attn_v.weight")) == "Q6_K")
              == (b in want6) for b in range(10))
    ok &= ty["output.weight"] == "Q6_K" and ty["token_embd.weight"] == "Q4_K" and \
        ty["blk.1.ffn_gate_exps.weight"] == "Q4_K" and ty["blk.1.ffn_gate_inp_shexp.weight"] == "F32"
    ty8 = {n: G.TYPE_NAMES[t] for n, _, _, t in
           MR.assign_types(G.qwen35moe_tensor_specs(c10), "q4_k_m", 8, 10)}
    ok &= ty8["blk.3.attn_v.weight"] == "Q8_0" and ty8["blk.3.attn_k.weight"] == "Q8_0" and \
        ty8["blk.3.attn_output.weight"] == "Q5_K" and ty8["blk.1.attn_qkv.weight"] == "Q8_0"
    check_true("(5) Q4_K_M rule: Q6_K on use_more_bits layers (ffn_down*, attn_v/attn_qkv), "
               "output Q6_K, 8 experts: attn_v/k Q8_0, attn_output Q5_K", ok)


def main():
    t0 = time.time()
    test_scalar_dequant()
    test_quant_round_trip()
    test_container()
    test_converter()
    test_random_writer()
    bad = [n for n, ok in RESULTS if not ok]
    keep = "--keep" in sys.argv[1:]
    print(f"\n{len(RESULTS) - len(bad)}/{len(RESULTS)} passed in {time.time() - t0:.1f}s"
          + (f" (fixtures kept in {TMP})" if keep else ""))
    if not keep:
        shutil.rmtree(TMP, ignore_errors=True)
    if bad:
        print("FAILED: " + "; ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
