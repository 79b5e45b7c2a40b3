#!/usr/bin/python3
"""Independent numpy decoders for block-FP8 and AutoAWQ gemm checkpoints (no C code involved).

  awq_fp8_ref.py fp8-dq FP8_DIR DQ
      Block FP8 (quant_method "fp8", docs/model.md §6): every P.weight F8_E4M3 [N, K] with
      P.weight_scale_inv F32 [ceil(N/bn), ceil(K/bk)] becomes P.weight F32 = e4m3(code) *
      scale_inv[n // bn, k // bk] (the product rounded once to f32, as cllm quantize does).
      e4m3 is decoded from the OCP FP8 spec: sign, 4 exponent bits with bias 7, 3 mantissa bits;
      exponent 0 is subnormal (m/8 * 2^-6); S.1111.111 (0x7f, 0xff) is NaN; there is no infinity.
  awq_fp8_ref.py fp8-codes
      Checks the decoder on all 256 codes against torch.float8_e4m3fn when torch is present
      (prints the number checked), and against spot values from the spec always.
  awq_fp8_ref.py awq-dq AWQ_DIR DQ
      AutoAWQ gemm (quant_method "awq", version "gemm"): P.qweight I32 [K, N/8], P.qzeros I32
      [K/G, N/8] packed along N with nibble i of word c holding column 8c + ORDER[i], ORDER =
      [0, 2, 4, 6, 1, 3, 5, 7] (awq/utils/packing_utils.py AWQ_ORDER), P.scales F16 [K/G, N];
      w[k, n] = (q - z) * s, written transposed as P.weight F32 [N, K].
  awq_fp8_ref.py awq-repack AWQ_DIR
      Unpacks every qweight/qzeros and packs them again the way AutoAWQ's WQLinear_GEMM.from_linear
      does (column 8c + ORDER[i] shifted by 4i); exits 1 unless the words are identical.
DQ receives config.json without quantization_config and one model.safetensors (F32 floats).
"""
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np as S  # noqa: E402

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def e4m3_decode(codes):
    """uint8 codes -> float32 values, from the spec (bias 7, subnormals, NaN at S.1111.111)."""
    c = np.asarray(codes, dtype=np.uint8).astype(np.int64)
    sign = np.where(c >> 7, -1.0, 1.0)
    e, m = (c >> 3) & 15, c & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7))
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return (sign * v).astype(np.float32)


def write_dq(src_dir, dq_dir, tensors):
    cfg = json.load(open(os.path.join(src_dir, "config.json")))
    cfg.pop("quantization_config", None)
    if os.path.exists(dq_dir):
        shutil.rmtree(dq_dir)
    os.makedirs(dq_dir)
    with open(os.path.join(dq_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    S.write_safetensors(os.path.join(dq_dir, "model.safetensors"), tensors, dtype="F32")


def raw(m, k):
    return np.array(m.where[k].raw(k))


def cmd_fp8_dq(src, dq):
    m = S.SafetensorsModel(src)
    bn, bk = json.load(open(os.path.join(src, "config.json")))["quantization_config"][
        "weight_block_size"]
    out, n8 = {}, 0
    for k in m.keys():
        if k.endswith(".weight_scale_inv"):
            continue
        if m.dtype(k) != "F8_E4M3":
            out[k] = m.get(k).astype(np.float32)
            continue
        w = e4m3_decode(raw(m, k))
        s = raw(m, k + "_scale_inv").astype(np.float32)
        N, K = w.shape
        full = np.repeat(np.repeat(s, bn, 0), bk, 1)[:N, :K]
        out[k] = (w * full).astype(np.float32)
        n8 += 1
    write_dq(src, dq, out)
    print(f"fp8-dq: {n8} F8_E4M3 matrices, block [{bn}, {bk}]")


def cmd_fp8_codes():
    spot = {0x00: 0.0, 0x01: 2.0 ** -9, 0x07: 7 / 8 * 2.0 ** -6, 0x08: 2.0 ** -6, 0x38: 1.0,
            0x7e: 448.0, 0xfe: -448.0, 0x80: -0.0, 0x3c: 1.5}
    d = e4m3_decode(np.arange(256))
    for c, v in spot.items():
        if d[c] != v:
            print(f"code {c:#x}: {d[c]} != {v}")
            sys.exit(1)
    if not (np.isnan(d[0x7f]) and np.isnan(d[0xff]) and np.isfinite(np.delete(d, [0x7f, 0xff])).all()):
        print("NaN codes wrong")
        sys.exit(1)
    try:
        import torch
        t = torch.tensor(np.arange(256, dtype=np.uint8)).view(torch.float8_e4m3fn).float().numpy()
        same = (t == d) | (np.isnan(t) & np.isnan(d))
        if not same.all():
            print("differs from torch at", np.nonzero(~same)[0][:8])
            sys.exit(1)
        print("e4m3 decoder: 256 codes equal torch.float8_e4m3fn; spec spot values OK")
    except (ImportError, AttributeError):  # no torch, or one without float8 types
        print("e4m3 decoder: spec spot values OK (no torch float8_e4m3fn to compare)")


def unpack_awq(words):
    """I32 [R, C] -> codes [R, 8C] in column order (nibble i of word c is column 8c + ORDER[i])."""
    w = words.view(np.uint32).astype(np.int64)
    R, C = w.shape
    out = np.zeros((R, 8 * C), np.int64)
    for i, col in enumerate(AWQ_ORDER):
        out[:, col::8] = (w >> (4 * i)) & 15
    return out


def pack_awq(codes):
    """codes [R, 8C] -> I32 [R, C], as WQLinear_GEMM.from_linear packs: column 8c + ORDER[i]
    shifted left by 4i into word c."""
    R, C8 = codes.shape
    out = np.zeros((R, C8 // 8), np.uint32)
    for i in range(8):
        out |= (codes[:, AWQ_ORDER[i]::8].astype(np.uint32) & 15) << np.uint32(4 * i)
    return out.view(np.int32)


def awq_bases(m):
    return sorted(k[: -len(".qweight")] for k in m.keys() if k.endswith(".qweight"))


def cmd_awq_dq(src, dq):
    m = S.SafetensorsModel(src)
    out, skip = {}, set()
    for b in awq_bases(m):
        q = unpack_awq(raw(m, b + ".qweight"))  # [K, N]
        z = unpack_awq(raw(m, b + ".qzeros"))  # [K/G, N]
        s = m.get(b + ".scales").astype(np.float32)  # [K/G, N]
        G = q.shape[0] // s.shape[0]
        w = (q - np.repeat(z, G, 0)).astype(np.float32) * np.repeat(s, G, 0)
        out[b + ".weight"] = np.ascontiguousarray(w.T)
        skip |= {b + ".qweight", b + ".qzeros", b + ".scales"}
    for k in m.keys():
        if k not in skip:
            out[k] = m.get(k).astype(np.float32)
    write_dq(src, dq, out)
    print(f"awq-dq: {len(awq_bases(m))} matrices")


def cmd_awq_repack(src):
    m = S.SafetensorsModel(src)
    for b in awq_bases(m):
        for part in (".qweight", ".qzeros"):
            w = raw(m, b + part)
            if not np.array_equal(pack_awq(unpack_awq(w)), w):
                print(f"{b}{part}: repack differs")
                sys.exit(1)
    print(f"awq-repack: {len(awq_bases(m))} matrices, words identical")


def main():
    a = sys.argv[1:]
    if a[:1] == ["fp8-dq"] and len(a) == 3:
        cmd_fp8_dq(a[1], a[2])
    elif a[:1] == ["fp8-codes"]:
        cmd_fp8_codes()
    elif a[:1] == ["awq-dq"] and len(a) == 3:
        cmd_awq_dq(a[1], a[2])
    elif a[:1] == ["awq-repack"] and len(a) == 2:
        cmd_awq_repack(a[1])
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
