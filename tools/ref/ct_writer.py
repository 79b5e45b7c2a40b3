#!/usr/bin/python3
"""Independent numpy writer of quantized checkpoints for loader tests (no C code involved).

  ct_writer.py ct FP_DIR OUT DQ --strategy group|channel [--group 32] [--asym] [--bits 4]
                [--scale-dtype F16|BF16] [--zero0 BASE] [--g-idx]
      compressed-tensors "pack-quantized" (what llm-compressor / compressed_tensors'
      PackedQuantizationCompressor write): every 2-D Linear `P.weight` [N out, K in] with
      N % 8 == 0 (routed experts split per expert, attention, GDN projections, shared expert;
      not embeddings, norms, the router, shared_expert_gate) becomes
        P.weight_packed     I32 [N, K*b/32]  signed code q + 2^(b-1), packed along K, low bits first
        P.weight_scale      F16|BF16 [N, K/G] (channel: [N, 1])
        P.weight_zero_point I32 [N*b/32, K/G] (asym only) zero point + 2^(b-1), packed along N
        P.weight_shape      I64 [2] = [N, K]
      lm_head gets 8 bits (a second config group, as a W8A16 lm_head). Symmetric: scale =
      amax / ((2^b - 1) / 2), q = clamp(round(w / s), -2^(b-1), 2^(b-1) - 1). Asymmetric: range
      widened to include 0, scale = (max - min) / (2^b - 1), zero point = clamp(round(-2^(b-1) -
      min / s)), q = clamp(round(w / s) + zp). --zero0 BASE makes rows 0..7 of BASE non-negative
      (abs) before quantizing, so asymmetric zero points of -2^(b-1) (stored 0) occur there.
      --g-idx also writes P.weight_g_idx = k // G (a trivial act-order index).
  ct_writer.py gptq-v2 Q_DIR OUT DQ [--zero0 BASE]
      Rewrites a GPTQ v1 checkpoint (cllm quantize output: qzeros hold z - 1) as GPTQModel's
      "gptq_v2" format (qzeros hold z) and sets quantization_config.checkpoint_format;
      --zero0 sets the zero of (group 0, outputs 0..7) of BASE to 0.
  DQ receives the same model dequantized to F32 from the stored codes (w = s * (u - uz)), with
  per-expert tensors: the oracle for tools/ref/ref_forward.py and `cllm eval`.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np as S  # noqa: E402


def pack_rows(u, bits):
    """[R, C] unsigned codes -> int32 [R, C*bits/32]: consecutive C packed, low bits first."""
    per = 32 // bits
    u = u.astype(np.uint32).reshape(u.shape[0], -1, per)
    return (u << (np.arange(per, dtype=np.uint32) * bits)).sum(2, dtype=np.uint32).view(np.int32)


def unpack_rows(w, bits):
    per = 32 // bits
    w = w.view(np.uint32)
    return np.stack([(w >> (bits * j)) & ((1 << bits) - 1) for j in range(per)], 2).reshape(
        w.shape[0], -1).astype(np.int64)


def round_scale(s, sdt):
    s = s.astype(np.float32)
    if sdt == "BF16":
        bits = S.f32_to_bf16_bits(s)
        return S.bf16_to_f32(bits), bits
    h = s.astype(np.float16)
    return h.astype(np.float32), h


def linears(m):
    """name base -> fp32 [N, K] for every Linear the writer quantizes (experts per expert)."""
    out = {}
    for k in sorted(m.keys()):
        shp = m.shape(k)
        if k.endswith(".mlp.experts.gate_up_proj"):
            pre = k[: -len(".gate_up_proj")]
            I = shp[1] // 2
            for e in range(shp[0]):
                gu = m.get(k, e).astype(np.float32)
                out[f"{pre}.{e}.gate_proj"], out[f"{pre}.{e}.up_proj"] = gu[:I], gu[I:]
        elif k.endswith(".mlp.experts.down_proj"):
            pre = k[: -len(".down_proj")]
            for e in range(shp[0]):
                out[f"{pre}.{e}.down_proj"] = m.get(k, e).astype(np.float32)
        elif (k.endswith(".weight") and len(shp) == 2 and shp[0] % 8 == 0
              and "embed_tokens" not in k and not k.endswith("mlp.gate.weight")
              and "norm" not in k):
            out[k[:-7]] = m.get(k).astype(np.float32)
    return out


def quantize(w, bits, G, asym, sdt):
    """compressed-tensors min/max quantization of w [N, K] with groups of G along K."""
    N, K = w.shape
    off, maxq = 1 << (bits - 1), (1 << bits) - 1
    g = w.reshape(N, K // G, G)
    if asym:
        lo, hi = np.minimum(g.min(2), 0), np.maximum(g.max(2), 0)
        s = (hi - lo) / maxq
    else:
        s = np.abs(g).max(2) / (maxq / 2)
    s = np.where(s > 0, s, 1.0)
    sr, stored = round_scale(s, sdt)
    if asym:
        zp = np.clip(np.round(-off - lo / sr), -off, off - 1).astype(np.int64)
    else:
        zp = np.zeros_like(sr, dtype=np.int64)
    q = np.clip(np.round(g / sr[:, :, None]) + zp[:, :, None], -off, off - 1).astype(np.int64)
    u, uz = q + off, zp + off
    deq = ((u - uz[:, :, None]).astype(np.float32) * sr[:, :, None]).reshape(N, K)
    return u.reshape(N, K), uz, stored, deq


def write_model(d, tensors, cfg, dtypes=None):
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    S.write_safetensors(os.path.join(d, "model.safetensors"), tensors, dtype="F32", dtypes=dtypes)


def cmd_ct(a):
    m = S.SafetensorsModel(a.src)
    cfg = json.load(open(os.path.join(a.src, "config.json")))
    lin = linears(m)
    ct, dq, dtypes = {}, {}, {}
    for base, w in lin.items():
        bits = 8 if base == "lm_head" else a.bits
        N, K = w.shape
        G = K if a.strategy == "channel" else a.group
        if base == a.zero0:
            w = w.copy()
            w[:8] = np.abs(w[:8])
        u, uz, stored, deq = quantize(w, bits, G, a.asym, a.scale_dtype)
        ct[base + ".weight_packed"] = pack_rows(u, bits)
        # BF16: the rounded values as f32 (write_safetensors re-rounds them: exact); F16: as is
        ct[base + ".weight_scale"] = S.bf16_to_f32(stored) if a.scale_dtype == "BF16" else stored
        dtypes[base + ".weight_scale"] = a.scale_dtype
        ct[base + ".weight_shape"] = np.array([N, K], np.int64)
        if a.asym:
            ct[base + ".weight_zero_point"] = np.ascontiguousarray(pack_rows(uz.T, bits).T)
        if a.g_idx:
            ct[base + ".weight_g_idx"] = (np.arange(K) // G).astype(np.int32)
        dq[base + ".weight"] = deq
    for k in m.keys():
        if k.endswith((".mlp.experts.gate_up_proj", ".mlp.experts.down_proj")):
            continue
        if k.endswith(".weight") and k[:-7] in lin:
            continue
        ct[k] = dq[k] = m.get(k).astype(np.float32)
    for k, v in ct.items():  # F16 scales are stored as they are (write_safetensors: float)
        if v.dtype == np.float16:
            dtypes[k] = "F16"
    zero = 0.0
    if a.asym:
        zero = float(np.mean([(unpack_rows(v.T.copy(), a.bits if not k.startswith("lm_head")
                                           else 8) == 0).mean()
                              for k, v in ct.items() if k.endswith(".weight_zero_point")]))
    wargs = lambda bits: {"num_bits": bits, "type": "int", "symmetric": not a.asym,
                          "strategy": a.strategy,
                          "group_size": a.group if a.strategy == "group" else None,
                          "dynamic": False, "actorder": None, "observer": "minmax",
                          "block_structure": None}
    grp = lambda bits, targets: {"targets": targets, "weights": wargs(bits),
                                 "input_activations": None, "output_activations": None,
                                 "format": "pack-quantized"}
    qcfg = {"quant_method": "compressed-tensors", "format": "pack-quantized",
            "quantization_status": "compressed", "ignore": ["re:.*mlp.gate$", "re:.*norm.*"],
            "config_groups": {"group_0": grp(a.bits, ["Linear"]), "group_1": grp(8, ["lm_head"])},
            "kv_cache_scheme": None, "sparsity_config": {}, "transform_config": None}
    write_model(a.dq, dq, {k: v for k, v in cfg.items() if k != "quantization_config"})
    cfg["quantization_config"] = qcfg
    write_model(a.out, ct, cfg, dtypes)
    print(f"ct: {len(lin)} Linears, strategy {a.strategy}, bits {a.bits}, "
          f"{'asym' if a.asym else 'sym'}, scales {a.scale_dtype}; "
          f"fraction of zero points stored 0: {zero:.4f}")


def cmd_gptq_v2(a):
    m = S.SafetensorsModel(a.src)
    cfg = json.load(open(os.path.join(a.src, "config.json")))
    out, dq, dtypes = {}, {}, {}
    for k in m.keys():
        out[k] = m.where[k].raw(k).copy()
        if m.dtype(k) in ("F16", "BF16"):
            dtypes[k] = m.dtype(k)
            if m.dtype(k) == "BF16":
                out[k] = S.bf16_to_f32(out[k])
    for k in m.keys():
        if not k.endswith(".qweight"):
            if not k.endswith((".qzeros", ".scales", ".g_idx")):
                dq[k] = m.get(k).astype(np.float32)
            continue
        p = k[:-8]
        qw, K = m.where[k].raw(k), m.shape(p + ".g_idx")[0]
        bits = 32 * qw.shape[0] // K
        z = unpack_rows(m.where[k].raw(p + ".qzeros").copy(), bits) + 1  # v1: stored z - 1
        if p == a.zero0:
            z[0, :8] = 0
        out[p + ".qzeros"] = pack_rows(z, bits)
        q = unpack_rows(np.ascontiguousarray(qw.T), bits).T  # [K, N]
        sc = m.get(p + ".scales").astype(np.float32)
        gi = m.where[k].raw(p + ".g_idx").astype(np.int64)
        dq[p + ".weight"] = np.ascontiguousarray((sc[gi] * (q - z[gi]).astype(np.float32)).T)
    cfg_dq = {k: v for k, v in cfg.items() if k != "quantization_config"}
    write_model(a.dq, dq, cfg_dq)
    cfg["quantization_config"]["checkpoint_format"] = "gptq_v2"
    write_model(a.out, out, cfg, dtypes)
    print(f"gptq-v2: {sum(k.endswith('.qweight') for k in m.keys())} matrices")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("kind", choices=["ct", "gptq-v2"])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("dq")
    ap.add_argument("--strategy", choices=["group", "channel"], default="group")
    ap.add_argument("--group", type=int, default=32)
    ap.add_argument("--bits", type=int, choices=[4, 8], default=4)
    ap.add_argument("--asym", action="store_true")
    ap.add_argument("--scale-dtype", choices=["F16", "BF16"], default="F16")
    ap.add_argument("--zero0", default="")
    ap.add_argument("--g-idx", action="store_true")
    a = ap.parse_args()
    for d in (a.out, a.dq):
        if os.path.exists(d):
            shutil.rmtree(d)
    (cmd_ct if a.kind == "ct" else cmd_gptq_v2)(a)


if __name__ == "__main__":
    main()
