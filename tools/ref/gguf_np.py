#!/usr/bin/python3
"""GGUF v3 in numpy, written from the format description and ggml's block definitions (test
fixtures and oracle for cllm's GGUF loader; stdlib + numpy only, never llama.cpp's gguf-py):

  * writer / reader of GGUF v3 files (every metadata value type, arrays incl. arrays of strings,
    tensor infos, alignment padding), optionally split into NAME-0000i-of-0000n.gguf files with
    the split.no / split.count / split.tensors.count keys as llama.cpp's gguf-split writes them;
  * per ggml type: quantize(x float32 [rows][K]) -> bytes (plain round-to-nearest; it only has to
    produce valid blocks) and dequantize(bytes, rows, K) -> float32, the latter exactly as
    ggml's dequantize_row_* computes it (float32 arithmetic in the same order, no FMA);
    F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K IQ4_NL IQ4_XS;
  * hf_to_gguf: a cllm/HF-layout Qwen3.5-MoE safetensors directory -> a `qwen35moe` GGUF with
    the tensor names, transforms and metadata of llama.cpp's converter (conversion/qwen.py
    Qwen3_5MoeTextModel and its bases), and gguf_to_hf_arrays / gguf_to_hf_config /
    gguf_to_ref_dir, which invert it so that tools/ref/ref_forward.py runs the GGUF's weights.

CLI:  gguf_np.py convert MODEL_DIR OUT.gguf [--type Q4_K | --types 'glob=TYPE,...'] [--fused-gate-up]
                 [--split N] [--vocab VOCAB.gguf]
      gguf_np.py to-ref FILE.gguf OUT_DIR      (config.json + F32 model.safetensors for ref_forward)
      gguf_np.py dump FILE.gguf                (metadata and tensor infos)
"""
import fnmatch
import json
import os
import re
import struct
import sys

import numpy as np

# ----------------------------------------------------------------------------- ggml types

F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 = 0, 1, 2, 3, 6, 7, 8
Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, BF16 = 12, 13, 14, 20, 23, 30
QK_K = 256

TYPE_NAMES = {F32: "F32", F16: "F16", Q4_0: "Q4_0", Q4_1: "Q4_1", Q5_0: "Q5_0", Q5_1: "Q5_1",
              Q8_0: "Q8_0", Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K", IQ4_NL: "IQ4_NL",
              IQ4_XS: "IQ4_XS", BF16: "BF16"}
TYPE_IDS = {v: k for k, v in TYPE_NAMES.items()}

# (elements per block, bytes per block), ggml-common.h
BLOCK = {F32: (1, 4), F16: (1, 2), BF16: (1, 2),
         Q4_0: (32, 2 + 16), Q4_1: (32, 2 + 2 + 16), Q5_0: (32, 2 + 4 + 16),
         Q5_1: (32, 2 + 2 + 4 + 16), Q8_0: (32, 2 + 32),
         Q4_K: (QK_K, 2 + 2 + 12 + QK_K // 2), Q5_K: (QK_K, 2 + 2 + 12 + QK_K // 8 + QK_K // 2),
         Q6_K: (QK_K, QK_K // 2 + QK_K // 4 + QK_K // 16 + 2),
         IQ4_NL: (32, 2 + 16), IQ4_XS: (QK_K, 2 + 2 + QK_K // 64 + QK_K // 2)}

# llama_ftype ("general.file_type") of a file whose big matrices are mostly of one type
FILE_TYPE = {F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q8_0: 7, Q5_0: 8, Q5_1: 9, Q4_K: 15, Q5_K: 17,
             Q6_K: 18, IQ4_NL: 25, IQ4_XS: 30, BF16: 32}

KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10,
                          1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8)


def type_id(t):
    """An int type id or a name ('Q4_K', 'q4_k')."""
    if isinstance(t, str):
        return TYPE_IDS[t.upper()]
    t = int(t)
    if t not in TYPE_NAMES:
        raise ValueError(f"unsupported ggml type {t}")
    return t


def row_bytes(t, K):
    t = type_id(t)
    bs, bb = BLOCK[t]
    if K % bs:
        raise ValueError(f"{TYPE_NAMES[t]}: row length {K} is not a multiple of {bs}")
    return K // bs * bb


def _blocks(data, t, rows, K):
    bs, bb = BLOCK[t]
    nb = rows * (K // bs)
    a = np.frombuffer(data, dtype=np.uint8, count=nb * bb) if not isinstance(data, np.ndarray) \
        else np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)[: nb * bb]
    if a.size != nb * bb:
        raise ValueError(f"{TYPE_NAMES[t]}: {a.size} bytes, need {nb * bb} for {rows}x{K}")
    return a.reshape(nb, bb)


def _f16(b, off):
    """fp16 field at byte `off` of each block -> float32 [nb, 1] (exact)."""
    return np.ascontiguousarray(b[:, off:off + 2]).view("<f2").astype(np.float32)


def _f32(a):
    return a.astype(np.float32)


def _nibbles32(qs):
    """16 bytes -> 32 values: low nibbles are elements 0..15, high nibbles 16..31."""
    return np.concatenate([qs & 15, qs >> 4], axis=-1)


def _scale_min_k4(s):
    """get_scale_min_k4 for j = 0..7 on scales [nb, 12] -> (sc, m) uint8 [nb, 8]."""
    sc = np.empty((s.shape[0], 8), np.uint8)
    m = np.empty((s.shape[0], 8), np.uint8)
    sc[:, :4] = s[:, 0:4] & 63
    m[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)
    m[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc, m


def _k_low_nibbles(qs):
    """qs [nb, 128] of Q4_K/Q5_K -> 4-bit values [nb, 256]: chunk c of 64 elements takes bytes
    32c..32c+31, low nibbles first, then high nibbles."""
    nb = qs.shape[0]
    q = qs.reshape(nb, 4, 32)
    return np.concatenate([q & 15, q >> 4], axis=-1).reshape(nb, 256)


def dequantize(data, rows, K, t):
    """Blocks of type t (bytes or uint8 array) -> float32 [rows][K], as ggml computes them."""
    t = type_id(t)
    rows, K = int(rows), int(K)
    if t == F32:
        return np.frombuffer(bytes(data), "<f4", rows * K).reshape(rows, K).copy()
    if t == F16:
        return np.frombuffer(bytes(data), "<f2", rows * K).astype(np.float32).reshape(rows, K)
    if t == BF16:
        u = np.frombuffer(bytes(data), "<u2", rows * K).astype(np.uint32) << 16
        return u.view(np.float32).reshape(rows, K)
    b = _blocks(data, t, rows, K)
    nb = b.shape[0]
    if t == Q4_0:
        d = _f16(b, 0)
        q = _f32(_nibbles32(b[:, 2:18]).astype(np.int16) - 8)
        y = q * d
    elif t == Q4_1:
        d, m = _f16(b, 0), _f16(b, 2)
        y = _f32(_nibbles32(b[:, 4:20])) * d + m
    elif t in (Q5_0, Q5_1):
        off = 2 if t == Q5_0 else 4
        qh = np.ascontiguousarray(b[:, off:off + 4]).view("<u4")          # [nb, 1]
        h = ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int16)  # bit j: element j
        q = _nibbles32(b[:, off + 4:off + 20]).astype(np.int16) | (h << 4)
        d = _f16(b, 0)
        y = _f32(q - 16) * d if t == Q5_0 else _f32(q) * d + _f16(b, 2)
    elif t == Q8_0:
        y = _f32(b[:, 2:34].view(np.int8)) * _f16(b, 0)
    elif t in (Q4_K, Q5_K):
        d, dmin = _f16(b, 0), _f16(b, 2)
        sc, m = _scale_min_k4(b[:, 4:16])
        d1 = d * _f32(sc)                          # const float d1 = d * sc
        m1 = dmin * _f32(m)                        # const float m1 = min * m
        if t == Q4_K:
            q = _k_low_nibbles(b[:, 16:144]).astype(np.int16)
        else:
            qh = b[:, 16:48]                       # bit 2c: element 64c+l, bit 2c+1: 64c+32+l
            sh = np.arange(8, dtype=np.uint8)
            h = ((qh[:, None, :] >> sh[None, :, None]) & 1).reshape(nb, 256)
            q = _k_low_nibbles(b[:, 48:176]).astype(np.int16) + 16 * h.astype(np.int16)
        sub = np.arange(256) // 32
        y = d1[:, sub] * _f32(q) - m1[:, sub]
    elif t == Q6_K:
        ql, qh = b[:, 0:128].reshape(nb, 2, 64), b[:, 128:192].reshape(nb, 2, 32)
        sc = b[:, 192:208].view(np.int8)
        d = _f16(b, 208)
        lo = np.concatenate([ql[:, :, :32] & 15, ql[:, :, 32:] & 15,
                             ql[:, :, :32] >> 4, ql[:, :, 32:] >> 4], axis=-1)   # [nb, 2, 128]
        hi = np.concatenate([(qh >> 0) & 3, (qh >> 2) & 3, (qh >> 4) & 3, (qh >> 6) & 3], axis=-1)
        q = (lo.astype(np.int16) | (hi.astype(np.int16) << 4)).reshape(nb, 256) - 32
        ds = d * _f32(sc)                          # d * sc[is] ...
        y = ds[:, np.arange(256) // 16] * _f32(q)  # ... * q
    elif t == IQ4_NL:
        y = _f16(b, 0) * _f32(KVALUES_IQ4NL[_nibbles32(b[:, 2:18])])
    elif t == IQ4_XS:
        d = _f16(b, 0)
        sh = np.ascontiguousarray(b[:, 2:4]).view("<u2").astype(np.int32)    # [nb, 1]
        sl = b[:, 4:8].astype(np.int32)
        ib = np.arange(8)
        ls = ((sl[:, ib // 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4)
        dl = d * _f32(ls - 32)                     # [nb, 8]
        qs = b[:, 8:136].reshape(nb, 8, 16)
        kv = _f32(KVALUES_IQ4NL[np.concatenate([qs & 15, qs >> 4], axis=-1)])  # [nb, 8, 32]
        y = (dl[:, :, None] * kv).reshape(nb, 256)
    else:
        raise ValueError(f"dequantize: type {t} not supported")
    assert y.dtype == np.float32
    return y.reshape(rows, K)


# ----------------------------------------------------------------------------- quantize

def _to_f16(a):
    return np.asarray(a, np.float32).astype(np.float16)


def _put_f16(out, off, v):
    out[:, off:off + 2] = np.ascontiguousarray(_to_f16(v).reshape(-1, 1)).view(np.uint8)


def _signed_absmax(xb):
    i = np.abs(xb).argmax(axis=-1)[..., None]
    return np.take_along_axis(xb, i, axis=-1)[..., 0]


def _safe_inv(d):
    d = np.asarray(d, np.float32)
    with np.errstate(divide="ignore"):
        return np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), np.float32(0))


def _pack_nibbles32(q):
    return (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)


def _nearest_kv(v):
    """index of the nearest IQ4_NL codebook value for each element of v."""
    kv = KVALUES_IQ4NL.astype(np.float32)
    return np.abs(v[..., None] - kv).argmin(axis=-1).astype(np.uint8)


def _pack_scale_min_k4(sc, m):
    s = np.zeros((sc.shape[0], 12), np.uint8)
    s[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    s[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    s[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    return s


def quantize(x, t):
    """float [rows][K] -> bytes of type t (round to nearest; valid blocks, not llama.cpp's
    search-based choice of scales)."""
    t = type_id(t)
    x = np.asarray(x, np.float32)
    if x.ndim == 1:
        x = x[None]
    rows, K = x.shape[0], int(np.prod(x.shape[1:]))
    x = x.reshape(rows, K)
    if t == F32:
        return x.astype("<f4").tobytes()
    if t == F16:
        return x.astype("<f2").tobytes()
    if t == BF16:
        n = x.view(np.uint32).astype(np.uint64)
        nan = (n & 0x7FFFFFFF) > 0x7F800000
        n = np.where(nan, (n & 0xFFFF0000) | (64 << 16), n + (0x7FFF + ((n >> 16) & 1)))
        return (n >> 16).astype("<u2").tobytes()
    bs, bb = BLOCK[t]
    if K % bs:
        raise ValueError(f"{TYPE_NAMES[t]}: row length {K} is not a multiple of {bs}")
    xb = x.reshape(-1, bs)
    nb = xb.shape[0]
    out = np.zeros((nb, bb), np.uint8)
    if t in (Q4_0, Q5_0):
        half = 8 if t == Q4_0 else 16
        d = _to_f16(_signed_absmax(xb) / -half).astype(np.float32)
        q = np.clip(np.floor(xb * _safe_inv(d)[:, None] + half + 0.5), 0, 2 * half - 1).astype(np.uint8)
        _put_f16(out, 0, d)
        if t == Q4_0:
            out[:, 2:18] = _pack_nibbles32(q)
        else:
            h = (q >> 4).astype(np.uint32)
            out[:, 2:6] = np.ascontiguousarray((h << np.arange(32, dtype=np.uint32)).sum(
                axis=1, dtype=np.uint32).astype("<u4").reshape(-1, 1)).view(np.uint8)
            out[:, 6:22] = _pack_nibbles32(q & 15)
    elif t in (Q4_1, Q5_1):
        top = 15 if t == Q4_1 else 31
        mn, mx = xb.min(axis=1), xb.max(axis=1)
        d = _to_f16((mx - mn) / top).astype(np.float32)
        m = _to_f16(mn).astype(np.float32)
        q = np.clip(np.floor((xb - m[:, None]) * _safe_inv(d)[:, None] + 0.5), 0, top).astype(np.uint8)
        _put_f16(out, 0, d)
        _put_f16(out, 2, m)
        if t == Q4_1:
            out[:, 4:20] = _pack_nibbles32(q)
        else:
            h = (q >> 4).astype(np.uint32)
            out[:, 4:8] = np.ascontiguousarray((h << np.arange(32, dtype=np.uint32)).sum(
                axis=1, dtype=np.uint32).astype("<u4").reshape(-1, 1)).view(np.uint8)
            out[:, 8:24] = _pack_nibbles32(q & 15)
    elif t == Q8_0:             # as ggml's quantize_row_q8_0_ref: f32 d, id = 1/d, roundf(x*id)
        d = np.abs(xb).max(axis=1) / np.float32(127)
        v = xb * _safe_inv(d)[:, None]
        a = np.abs(v)
        r = np.floor(a)
        r = r + (a - r >= 0.5)                  # roundf: halves away from zero
        q = np.clip(np.sign(v) * r, -127, 127).astype(np.int8)
        _put_f16(out, 0, d)
        out[:, 2:34] = q.view(np.uint8)
    elif t in (Q4_K, Q5_K):
        top = 15 if t == Q4_K else 31
        sb = xb.reshape(nb, 8, 32)
        mn = np.minimum(sb.min(axis=2), 0)
        scale = (sb.max(axis=2) - mn) / top
        d = _to_f16(scale.max(axis=1) / 63).astype(np.float32)
        dmin = _to_f16(-mn.min(axis=1) / 63).astype(np.float32)
        sc = np.clip(np.round(scale * _safe_inv(d)[:, None]), 0, 63).astype(np.uint8)
        m = np.clip(np.round(-mn * _safe_inv(dmin)[:, None]), 0, 63).astype(np.uint8)
        ed = d[:, None] * sc.astype(np.float32)
        em = dmin[:, None] * m.astype(np.float32)
        q = np.clip(np.round((sb + em[:, :, None]) * _safe_inv(ed)[:, :, None]), 0, top)
        q = q.astype(np.uint8).reshape(nb, 4, 2, 32)          # chunk c: sub-blocks 2c, 2c+1
        _put_f16(out, 0, d)
        _put_f16(out, 2, dmin)
        out[:, 4:16] = _pack_scale_min_k4(sc, m)
        lowb = ((q[:, :, 0] & 15) | ((q[:, :, 1] & 15) << 4)).reshape(nb, 128)
        if t == Q4_K:
            out[:, 16:144] = lowb
        else:
            h = (q >> 4).astype(np.uint8)                       # [nb, 4, 2, 32]
            qh = np.zeros((nb, 32), np.uint8)
            for c in range(4):
                qh |= (h[:, c, 0] << (2 * c)) | (h[:, c, 1] << (2 * c + 1))
            out[:, 16:48] = qh
            out[:, 48:176] = lowb
    elif t == Q6_K:
        sb = xb.reshape(nb, 16, 16)
        scale = _signed_absmax(sb) / -32
        d = _to_f16(np.abs(scale).max(axis=1) / 127).astype(np.float32)
        sc = np.clip(np.round(scale * _safe_inv(d)[:, None]), -127, 127).astype(np.int8)
        ed = d[:, None] * sc.astype(np.float32)
        q = np.clip(np.round(sb * _safe_inv(ed)[:, :, None]) + 32, 0, 63).astype(np.uint8)
        q = q.reshape(nb, 2, 4, 32)                             # half n, quarter k, l
        ql = np.concatenate([(q[:, :, 0] & 15) | ((q[:, :, 2] & 15) << 4),
                             (q[:, :, 1] & 15) | ((q[:, :, 3] & 15) << 4)], axis=-1)  # [nb,2,64]
        qh = (q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) | \
             ((q[:, :, 3] >> 4) << 6)
        out[:, 0:128] = ql.reshape(nb, 128)
        out[:, 128:192] = qh.reshape(nb, 64)
        out[:, 192:208] = sc.view(np.uint8)
        _put_f16(out, 208, d)
    elif t == IQ4_NL:
        d = _to_f16(_signed_absmax(xb) / -127).astype(np.float32)
        q = _nearest_kv(xb * _safe_inv(d)[:, None])
        _put_f16(out, 0, d)
        out[:, 2:18] = _pack_nibbles32(q)
    elif t == IQ4_XS:
        sb = xb.reshape(nb, 8, 32)
        s = _signed_absmax(sb) / -127
        d = _to_f16(np.abs(s).max(axis=1) / 31).astype(np.float32)
        ls = np.clip(np.round(s * _safe_inv(d)[:, None]) + 32, 0, 63).astype(np.int32)
        dl = d[:, None] * (ls - 32).astype(np.float32)
        q = _nearest_kv(sb * _safe_inv(dl)[:, :, None])        # [nb, 8, 32]
        _put_f16(out, 0, d)
        shv = ((ls >> 4) << (2 * np.arange(8))).sum(axis=1).astype("<u2")
        out[:, 2:4] = np.ascontiguousarray(shv.reshape(-1, 1)).view(np.uint8)
        lo = (ls & 15).astype(np.uint8)
        out[:, 4:8] = lo[:, 0::2] | (lo[:, 1::2] << 4)
        out[:, 8:136] = (q[:, :, :16] | (q[:, :, 16:] << 4)).reshape(nb, 128)
    else:
        raise ValueError(f"quantize: type {t} not supported")
    return out.tobytes()


_F16_FIELDS = {Q4_0: (0,), Q4_1: (0, 2), Q5_0: (0,), Q5_1: (0, 2), Q8_0: (0,), Q4_K: (0, 2),
               Q5_K: (0, 2), Q6_K: (208,), IQ4_NL: (0,), IQ4_XS: (0,)}


def random_blocks(t, rows, K, rng, scale=0.01):
    """Random valid blocks (random bytes; the fp16 scale fields set to finite values of about
    `scale`, K-quant sub-scales then multiply them)."""
    t = type_id(t)
    if t in (F32, F16, BF16):
        return quantize(rng.normal(0, 1, (rows, K)).astype(np.float32), t)
    bs, bb = BLOCK[t]
    nb = rows * (K // bs)
    out = np.frombuffer(bytearray(rng.bytes(nb * bb)), np.uint8).reshape(nb, bb)
    for off in _F16_FIELDS[t]:
        v = scale * rng.uniform(0.25, 1.5, nb) * rng.choice([-1.0, 1.0], nb)
        if t in (Q4_K, Q5_K, IQ4_XS, Q6_K):
            v = np.abs(v) / 16                    # d, dmin multiply 6/8-bit sub-scales
        _put_f16(out, off, v)
    return out.tobytes()


# ----------------------------------------------------------------------------- GGUF container

GGUF_MAGIC = b"GGUF"
(T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64,
 T_F64) = range(13)
_SCALAR = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i",
           T_F32: "<f", T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d"}
VALUE_TYPE_NAMES = ["UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL",
                    "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"]


class KV:
    """A typed metadata value. Arrays: KV(T_ARR, list, elem=T_...)."""
    __slots__ = ("type", "value", "elem")

    def __init__(self, vtype, value, elem=None):
        self.type, self.value, self.elem = vtype, value, elem

    def __eq__(self, o):
        return isinstance(o, KV) and (self.type, self.elem, self.value) == (o.type, o.elem, o.value)

    def __repr__(self):
        e = f"[{VALUE_TYPE_NAMES[self.elem]}]" if self.type == T_ARR else ""
        return f"KV({VALUE_TYPE_NAMES[self.type]}{e}, {self.value!r})"


def u32(v): return KV(T_U32, int(v))
def i32(v): return KV(T_I32, int(v))
def u16(v): return KV(T_U16, int(v))
def f32(v): return KV(T_F32, float(v))
def string(v): return KV(T_STR, v)
def boolean(v): return KV(T_BOOL, bool(v))
def array(elem, values): return KV(T_ARR, list(values), elem)


def _as_kv(v):
    """Plain Python values the way gguf-py's add_key_value types them (int -> INT32, float ->
    FLOAT32, str, bool, list -> ARRAY of the first element's type)."""
    if isinstance(v, KV):
        return v
    if isinstance(v, bool):
        return KV(T_BOOL, v)
    if isinstance(v, int):
        return KV(T_I32, v)
    if isinstance(v, float):
        return KV(T_F32, v)
    if isinstance(v, (str, bytes)):
        return KV(T_STR, v)
    if isinstance(v, (list, tuple)):
        return KV(T_ARR, list(v), _as_kv(v[0]).type if v else T_I32)
    raise TypeError(f"metadata value {v!r}")


def _enc_str(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _enc_value(t, v, elem=None):
    if t == T_STR:
        return _enc_str(v)
    if t == T_ARR:
        if elem == T_ARR:
            raise ValueError("nested arrays are not written")
        head = struct.pack("<IQ", elem, len(v))
        if elem == T_STR:
            return head + b"".join(_enc_str(s) for s in v)
        return head + np.asarray(v, dtype=_SCALAR[elem]).tobytes()
    return struct.pack(_SCALAR[t], v)


class Tensor:
    """A tensor to write: name, ggml type, ne (ggml order, ne[0] = row length) and its bytes."""

    def __init__(self, name, qtype, ne, data):
        self.name, self.type, self.ne = name, type_id(qtype), [int(n) for n in ne]
        self.data = bytes(data)
        need = row_bytes(self.type, self.ne[0]) * int(np.prod(self.ne[1:], dtype=np.int64))
        if len(self.data) != need:
            raise ValueError(f"tensor {name}: {len(self.data)} bytes, {TYPE_NAMES[self.type]}"
                             f"{self.ne} needs {need}")

    @classmethod
    def from_array(cls, name, a, qtype):
        """a: numpy array in PyTorch/HF order (ne reversed); quantized along its last axis."""
        a = np.asarray(a)
        rows = int(np.prod(a.shape[:-1], dtype=np.int64)) if a.ndim > 1 else 1
        return cls(name, qtype, list(reversed(a.shape)), quantize(a.reshape(rows, a.shape[-1]), qtype))


def _pad(n, align):
    return (align - n % align) % align


def tensor_nbytes(t, ne):
    """Bytes of a tensor of type t with ggml shape ne (ne[0] = row length)."""
    return row_bytes(t, ne[0]) * int(np.prod(ne[1:], dtype=np.int64))


def gguf_header(kv, infos, alignment=None):
    """The GGUF v3 bytes before the data section, its alignment padding included.
    kv: ordered dict key -> KV or plain value; infos: [(name, type, ne, nbytes)] in data order.
    Returns (header bytes, alignment); tensor i's data then starts at the sum of the padded
    sizes of the tensors before it (each padded to `alignment`)."""
    kv = {k: _as_kv(v) for k, v in kv.items()}
    if alignment is None:
        alignment = kv["general.alignment"].value if "general.alignment" in kv else 32
    out = bytearray(GGUF_MAGIC + struct.pack("<IQQ", 3, len(infos), len(kv)))
    for k, v in kv.items():
        out += _enc_str(k) + struct.pack("<I", v.type) + _enc_value(v.type, v.value, v.elem)
    off = 0
    for name, t, ne, nbytes in infos:
        out += _enc_str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        out += struct.pack("<IQ", type_id(t), off)
        off += nbytes + _pad(nbytes, alignment)
    out += b"\0" * _pad(len(out), alignment)
    return bytes(out), alignment


def write_gguf(path, kv, tensors, alignment=None):
    """kv: ordered dict key -> KV or plain value; tensors: list of Tensor. Writes GGUF v3."""
    head, alignment = gguf_header(kv, [(t.name, t.type, t.ne, len(t.data)) for t in tensors],
                                  alignment)
    with open(path, "wb") as f:
        f.write(head)
        for t in tensors:
            f.write(t.data)
            f.write(b"\0" * _pad(len(t.data), alignment))


def split_path(prefix, i, n):
    """llama.cpp's llama_split_path: PREFIX-%05d-of-%05d.gguf, i counted from 0."""
    return f"{prefix}-{i + 1:05d}-of-{n:05d}.gguf"


def write_gguf_split(prefix, kv, tensors, n_split=None, max_tensors=None, alignment=None):
    """Split as gguf-split does: tensors in order, `max_tensors` per file (or n_split files);
    the first file has every key plus split.no/split.count (u16) and split.tensors.count (i32),
    the others only those three. Returns the paths."""
    if max_tensors is None:
        max_tensors = -(-len(tensors) // n_split)
    parts = [tensors[i:i + max_tensors] for i in range(0, len(tensors), max_tensors)] or [[]]
    paths = []
    for i, part in enumerate(parts):
        k = dict(kv) if i == 0 else {}
        for key in ("split.no", "split.count", "split.tensors.count"):
            k.pop(key, None)
        k["split.no"] = u16(i)
        k["split.count"] = u16(len(parts))
        k["split.tensors.count"] = i32(len(tensors))
        p = split_path(prefix, i, len(parts))
        write_gguf(p, k, part, alignment)
        paths.append(p)
    return paths


class _Buf:
    def __init__(self, data, path):
        self.b, self.o, self.path = data, 0, path

    def take(self, n):
        if self.o + n > len(self.b):
            raise ValueError(f"{self.path}: truncated at byte {self.o}")
        r = self.b[self.o:self.o + n]
        self.o += n
        return r

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def string(self):
        (n,) = self.unpack("<Q")
        return bytes(self.take(n)).decode("utf-8", errors="surrogateescape")

    def value(self, t):
        if t == T_STR:
            return KV(T_STR, self.string())
        if t == T_ARR:
            elem, n = self.unpack("<IQ")
            if elem == T_STR:
                return KV(T_ARR, [self.string() for _ in range(n)], T_STR)
            if elem == T_ARR:
                return KV(T_ARR, [self.value(T_ARR) for _ in range(n)], T_ARR)
            dt = np.dtype(_SCALAR[elem])
            return KV(T_ARR, np.frombuffer(self.take(n * dt.itemsize), dt).tolist(), elem)
        if t not in _SCALAR:
            raise ValueError(f"{self.path}: bad metadata value type {t} at byte {self.o}")
        (v,) = self.unpack(_SCALAR[t])
        return KV(t, v)


class GGUFFile:
    """Reads one GGUF file, or every file of a split set when given its first part
    (NAME-00001-of-0000N.gguf). kv: key -> KV (first file's, split.* included);
    tensors: name -> dict(type, ne, file, offset (absolute), nbytes)."""

    def __init__(self, path, follow_splits=True):
        self.kv, self.tensors, self.files = {}, {}, []
        self._read(path, first=True)
        n = self.kv["split.count"].value if "split.count" in self.kv else 1
        if follow_splits and n > 1:
            m = re.match(r"(.*)-(\d{5})-of-(\d{5})\.gguf$", path)
            if not m or int(m.group(2)) != 1:
                raise ValueError(f"{path}: split.count {n} but not a -00001-of-N.gguf name")
            for i in range(1, n):
                self._read(split_path(m.group(1), i, n), first=False)
            want = self.kv["split.tensors.count"].value
            if want != len(self.tensors):
                raise ValueError(f"{path}: split.tensors.count {want}, found {len(self.tensors)}")

    def _read(self, path, first):
        with open(path, "rb") as f:
            data = f.read()
        b = _Buf(memoryview(data), path)
        if bytes(b.take(4)) != GGUF_MAGIC:
            raise ValueError(f"{path}: not a GGUF file")
        (ver,) = b.unpack("<I")
        if ver != 3:
            raise ValueError(f"{path}: GGUF version {ver}, only 3 is read")
        nt, nk = b.unpack("<QQ")
        kv = {}
        for _ in range(nk):
            k = b.string()
            (t,) = b.unpack("<I")
            kv[k] = b.value(t)
        if first:
            self.kv = kv
        self.files.append((path, kv))
        align = kv["general.alignment"].value if "general.alignment" in kv else 32
        infos = []
        for _ in range(nt):
            name = b.string()
            (nd,) = b.unpack("<I")
            ne = list(b.unpack(f"<{nd}Q"))
            t, off = b.unpack("<IQ")
            infos.append((name, ne, t, off))
        start = b.o + _pad(b.o, align)
        for name, ne, t, off in infos:
            if name in self.tensors:
                raise ValueError(f"{path}: duplicate tensor {name}")
            nbytes = row_bytes(t, ne[0]) * int(np.prod(ne[1:], dtype=np.int64))
            if off % align or start + off + nbytes > len(data):
                raise ValueError(f"{path}: tensor {name}: offset {off} + {nbytes} bytes out of file")
            self.tensors[name] = dict(type=t, ne=ne, data=data, offset=start + off, nbytes=nbytes,
                                      file=path)

    def value(self, key, default=None):
        return self.kv[key].value if key in self.kv else default

    def raw(self, name):
        i = self.tensors[name]
        return i["data"][i["offset"]:i["offset"] + i["nbytes"]]

    def array(self, name):
        """float32 array in PyTorch order (shape = reversed ne), dequantized."""
        i = self.tensors[name]
        ne = i["ne"]
        rows = int(np.prod(ne[1:], dtype=np.int64))
        return dequantize(self.raw(name), rows, ne[0], i["type"]).reshape(tuple(reversed(ne)))


# ----------------------------------------------------------------------------- qwen35moe

ARCH = "qwen35moe"

_LAYER_MAP = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight", "self_attn.o_proj.bias": "attn_output.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "linear_attn.in_proj_qkv.weight": "attn_qkv.weight",
    "linear_attn.in_proj_z.weight": "attn_gate.weight",
    "linear_attn.in_proj_b.weight": "ssm_beta.weight",
    "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
    "linear_attn.conv1d.weight": "ssm_conv1d.weight",
    "linear_attn.conv1d.bias": "ssm_conv1d.bias",
    "linear_attn.dt_bias": "ssm_dt.bias",
    "linear_attn.A_log": "ssm_a",
    "linear_attn.norm.weight": "ssm_norm.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.experts.gate_proj.weight": "ffn_gate_exps.weight",
    "mlp.experts.up_proj.weight": "ffn_up_exps.weight",
    "mlp.experts.down_proj.weight": "ffn_down_exps.weight",
    # MTP (nextn) block-level tensors, after the _QwenMtpMixin renames
    "eh_proj.weight": "nextn.eh_proj.weight",
    "enorm.weight": "nextn.enorm.weight",
    "hnorm.weight": "nextn.hnorm.weight",
    "shared_head.norm.weight": "nextn.shared_head_norm.weight",
    "shared_head.head.weight": "nextn.shared_head_head.weight",
    "embed_tokens.weight": "nextn.embed_tokens.weight",
}
_GLOBAL_MAP = {"model.embed_tokens.weight": "token_embd.weight",
               "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
_MTP_TOP = {"fc": "eh_proj", "pre_fc_norm_embedding": "enorm", "pre_fc_norm_hidden": "hnorm",
            "norm": "shared_head.norm"}
# GGUF names that stay F32 whatever the requested type (conversion/base.py prepare_tensors)
_F32_KEEP = ("ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight", "ssm_conv1d.weight")


def _text_hparams(cfg):
    hp = dict(cfg)
    hp.update(cfg.get("text_config", {}))
    return hp


def _reorder_v(a, axis, nk, nvk, hd):
    """_LinearAttentionVReorderBase._reorder_v_heads: along `axis`, [nk][nvk][hd] -> [nvk][nk][hd]."""
    a = np.moveaxis(a, axis, 0)
    s = a.shape
    a = a.reshape((nk, nvk, hd) + s[1:]).swapaxes(0, 1).reshape(s)
    return np.moveaxis(a, 0, axis)


def _unreorder_v(a, axis, nk, nvk, hd):
    a = np.moveaxis(a, axis, 0)
    s = a.shape
    a = a.reshape((nvk, nk, hd) + s[1:]).swapaxes(0, 1).reshape(s)
    return np.moveaxis(a, 0, axis)


def _hf_renamed(name, n_layer):
    """TextModel/_QwenMtpMixin filter_tensors: drop vision, strip 'language_model.', move mtp.*
    to model.layers.{n_layer + i}. Returns the new name or None."""
    if "visual." in name or "vision" in name:
        return None
    name = name.replace("language_model.", "")
    if name.startswith("model.mtp."):
        name = name[len("model."):]
    if name.startswith("mtp."):
        parts = name.split(".", 3)
        if len(parts) == 4 and parts[1] == "layers" and parts[2].isdecimal():
            return f"model.layers.{n_layer + int(parts[2])}.{parts[3]}"
        if len(parts) == 3 and parts[1] in _MTP_TOP:
            return f"model.layers.{n_layer}.{_MTP_TOP[parts[1]]}.{parts[2]}"
    return name


def _gguf_name(name):
    if name in _GLOBAL_MAP:
        return _GLOBAL_MAP[name]
    m = re.match(r"model\.layers\.(\d+)\.(.*)$", name)
    if m and m.group(2) in _LAYER_MAP:
        return f"blk.{m.group(1)}.{_LAYER_MAP[m.group(2)]}"
    raise ValueError(f"can not map tensor {name!r}")


def _default_type_of(name):
    return F16


def qwen35moe_metadata(cfg, file_type, n_mtp, name="cllm-ref"):
    """The keys llama.cpp's converter writes for Qwen3_5MoeTextModel (no tokenizer)."""
    hp = _text_hparams(cfg)
    rope = dict(hp.get("rope_parameters") or hp.get("rope_scaling") or {})
    theta = rope.get("rope_theta", hp.get("rope_theta"))
    prf = rope.get("partial_rotary_factor", hp.get("partial_rotary_factor", 0.25))
    A = ARCH + "."
    kv = {"general.architecture": string(ARCH), "general.type": string("model"),
          "general.name": string(name)}
    kv[A + "block_count"] = u32(hp["num_hidden_layers"] + n_mtp)
    if "max_position_embeddings" in hp:
        kv[A + "context_length"] = u32(hp["max_position_embeddings"])
    kv[A + "embedding_length"] = u32(hp["hidden_size"])
    if "intermediate_size" in hp:
        kv[A + "feed_forward_length"] = u32(hp["intermediate_size"])
    kv[A + "attention.head_count"] = u32(hp["num_attention_heads"])
    kv[A + "attention.head_count_kv"] = u32(hp["num_key_value_heads"])
    if "mrope_section" in rope:
        ms = list(rope["mrope_section"]) + [0] * 4
        kv[A + "rope.dimension_sections"] = array(T_I32, ms[:4])
    if theta is not None:
        kv[A + "rope.freq_base"] = f32(theta)
    kv[A + "attention.layer_norm_rms_epsilon"] = f32(hp["rms_norm_eps"])
    kv[A + "expert_count"] = u32(hp["num_experts"])
    kv[A + "expert_used_count"] = u32(hp["num_experts_per_tok"])
    if hp.get("head_dim") is not None:
        kv[A + "attention.key_length"] = u32(hp["head_dim"])
        kv[A + "attention.value_length"] = u32(hp["head_dim"])
    kv["general.file_type"] = u32(file_type)
    kv[A + "expert_feed_forward_length"] = u32(hp["moe_intermediate_size"])
    if hp.get("shared_expert_intermediate_size") is not None:
        kv[A + "expert_shared_feed_forward_length"] = u32(hp["shared_expert_intermediate_size"])
    kv[A + "ssm.conv_kernel"] = u32(hp["linear_conv_kernel_dim"])
    kv[A + "ssm.state_size"] = u32(hp["linear_key_head_dim"])
    kv[A + "ssm.group_count"] = u32(hp["linear_num_key_heads"])
    kv[A + "ssm.time_step_rank"] = u32(hp["linear_num_value_heads"])
    kv[A + "ssm.inner_size"] = u32(hp["linear_value_head_dim"] * hp["linear_num_value_heads"])
    kv[A + "full_attention_interval"] = u32(hp.get("full_attention_interval", 4))
    hd = hp.get("head_dim") or hp["hidden_size"] // hp["num_attention_heads"]
    kv[A + "rope.dimension_count"] = u32(int(hd * prf))
    if n_mtp > 0:
        kv[A + "nextn_predict_layers"] = u32(n_mtp)
    if "mrope_section" not in rope:
        kv[A + "rope.dimension_sections"] = array(T_I32, [11, 11, 10, 0])
    kv["general.quantization_version"] = u32(2)
    return kv


def qwen35moe_layer_is_full(hp, i):
    """Layer i of the text model is full attention (layer_types, else full_attention_interval)."""
    lt = hp.get("layer_types")
    if lt:
        return lt[i] == "full_attention"
    return (i + 1) % hp.get("full_attention_interval", 4) == 0


def qwen35moe_tensor_specs(cfg, n_mtp=None):
    """The tensors hf_to_gguf writes for a Qwen3.5-MoE config (separate gate/up experts, no
    biases, no dedicated MTP embeddings), without the weights: [(gguf name, ne, kind)] in
    layer order (globals, blk.0 .. blk.{n_layer+n_mtp-1}). ne in ggml order. kind: 'matrix'
    (the converter's type_of applies), 'norm' (+1-shifted *_norm.weight), 'ssm_norm' (plain),
    'router' (ffn_gate_inp), 'shexp_gate' (ffn_gate_inp_shexp {n_embd, 1}), 'conv' (ssm_conv1d
    {K, C}), 'dt' (ssm_dt.bias), 'a' (ssm_a); every kind but 'matrix' is F32 in the file.
    n_mtp: None = the config's mtp_num_hidden_layers."""
    hp = _text_hparams(cfg)
    H, L = hp["hidden_size"], hp["num_hidden_layers"]
    V = hp["vocab_size"]
    nh, nkv = hp["num_attention_heads"], hp["num_key_value_heads"]
    hd = hp.get("head_dim") or H // nh
    nk, nv = hp["linear_num_key_heads"], hp["linear_num_value_heads"]
    dk, dv = hp["linear_key_head_dim"], hp["linear_value_head_dim"]
    kc = hp["linear_conv_kernel_dim"]
    E, I = hp["num_experts"], hp["moe_intermediate_size"]
    Is = hp.get("shared_expert_intermediate_size") or 0
    tied = cfg.get("tie_word_embeddings", hp.get("tie_word_embeddings", False))
    if n_mtp is None:
        n_mtp = hp.get("mtp_num_hidden_layers", 0) or 0
    specs = [("token_embd.weight", [H, V], "matrix"), ("output_norm.weight", [H], "norm")]
    if not tied:
        specs.append(("output.weight", [H, V], "matrix"))
    for b in range(L + n_mtp):
        p = f"blk.{b}."
        lay = [("attn_norm.weight", [H], "norm"), ("post_attention_norm.weight", [H], "norm")]
        if b >= L or qwen35moe_layer_is_full(hp, b):
            lay += [("attn_q.weight", [H, 2 * nh * hd], "matrix"),
                    ("attn_k.weight", [H, nkv * hd], "matrix"),
                    ("attn_v.weight", [H, nkv * hd], "matrix"),
                    ("attn_output.weight", [nh * hd, H], "matrix"),
                    ("attn_q_norm.weight", [hd], "norm"), ("attn_k_norm.weight", [hd], "norm")]
        else:
            lay += [("attn_qkv.weight", [H, 2 * nk * dk + nv * dv], "matrix"),
                    ("attn_gate.weight", [H, nv * dv], "matrix"),
                    ("ssm_beta.weight", [H, nv], "matrix"),
                    ("ssm_alpha.weight", [H, nv], "matrix"),
                    ("ssm_conv1d.weight", [kc, 2 * nk * dk + nv * dv], "conv"),
                    ("ssm_dt.bias", [nv], "dt"), ("ssm_a", [nv], "a"),
                    ("ssm_norm.weight", [dv], "ssm_norm"),
                    ("ssm_out.weight", [nv * dv, H], "matrix")]
        lay += [("ffn_gate_inp.weight", [H, E], "router"),
                ("ffn_gate_exps.weight", [H, I, E], "matrix"),
                ("ffn_up_exps.weight", [H, I, E], "matrix"),
                ("ffn_down_exps.weight", [I, H, E], "matrix")]
        if Is:
            lay += [("ffn_gate_inp_shexp.weight", [H, 1], "shexp_gate"),
                    ("ffn_gate_shexp.weight", [H, Is], "matrix"),
                    ("ffn_up_shexp.weight", [H, Is], "matrix"),
                    ("ffn_down_shexp.weight", [Is, H], "matrix")]
        if b == L:                       # mtp.fc / pre_fc_norm_* / norm (first MTP layer)
            lay += [("nextn.eh_proj.weight", [2 * H, H], "matrix"),
                    ("nextn.enorm.weight", [H], "norm"), ("nextn.hnorm.weight", [H], "norm"),
                    ("nextn.shared_head_norm.weight", [H], "norm")]
        specs += [(p + n, ne, k) for n, ne, k in lay]
    return specs


def hf_to_gguf(model_dir, out_path, type_of=None, fused_gate_up=False, split_max_tensors=None,
               vocab_gguf=None, file_type=None, no_mtp=False, name="cllm-ref"):
    """Convert a Qwen3.5-MoE HF/cllm safetensors directory into a qwen35moe GGUF as llama.cpp's
    convert_hf_to_gguf.py does. type_of(gguf_name) -> ggml type (id or name) for every tensor
    the converter may quantize (default F16); 1-D tensors, *_norm.weight, ffn_gate_inp,
    ffn_gate_inp_shexp, ssm_conv1d and names not ending in .weight stay F32; a type whose block
    does not divide the row length falls back to F16 (as gguf-py's QuantError does).
    fused_gate_up: ffn_gate_up_exps (gate rows first) instead of ffn_gate_exps + ffn_up_exps.
    split_max_tensors: write NAME-0000i-of-0000n.gguf files (out_path minus .gguf is the prefix).
    vocab_gguf: copy its tokenizer.* keys. Returns the list of written paths."""
    from safetensors_np import SafetensorsModel
    type_of = type_of or _default_type_of
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    hp = _text_hparams(cfg)
    n_layer = hp["num_hidden_layers"]
    nk, nv = hp["linear_num_key_heads"], hp["linear_num_value_heads"]
    dk, dv = hp["linear_key_head_dim"], hp["linear_value_head_dim"]
    E = hp["num_experts"]
    tied = cfg.get("tie_word_embeddings", hp.get("tie_word_embeddings", False))
    st = SafetensorsModel(model_dir)

    def load(n):
        a = st.get(n)
        return a.astype(np.float16) if st.dtype(n) == "F16" else a.astype(np.float32)

    names = []
    for n in st.keys():
        r = _hf_renamed(n, n_layer)
        if r is None or (no_mtp and n.startswith(("mtp.", "model.mtp."))):
            continue
        if r == "lm_head.weight" and tied:
            continue
        names.append((n, r))
    n_mtp = 0
    if not no_mtp:
        n_mtp = hp.get("mtp_num_hidden_layers", 0) or 0
        found = {int(r.split(".")[2]) for _, r in names if r.startswith("model.layers.")
                 and int(r.split(".")[2]) >= n_layer}
        if not n_mtp and found:
            n_mtp = max(found) - n_layer + 1
        if not found:
            n_mtp = 0

    out = []           # (gguf name, array in torch order)
    experts = {}       # bid -> {"gate_proj"/"up_proj"/"down_proj": {xid: array}}
    fuse_buf = {}

    def emit(gname, a):
        m = re.match(r"blk\.(\d+)\.ffn_(gate|up)_exps\.weight$", gname)
        if fused_gate_up and m:
            b = fuse_buf.setdefault(int(m.group(1)), {})
            b[m.group(2)] = a
            if len(b) == 2:
                out.append((f"blk.{m.group(1)}.ffn_gate_up_exps.weight",
                            np.concatenate([b["gate"], b["up"]], axis=1)))
                del fuse_buf[int(m.group(1))]
            return
        out.append((gname, a))

    for hf, n in names:
        a = load(hf)
        if nk != nv and "linear_attn." in n:                   # V-head reorder, grouped -> tiled
            r = nv // nk
            if ".in_proj_qkv." in n:
                qk = 2 * dk * nk
                a = np.concatenate([a[:qk], _reorder_v(a[qk:], 0, nk, r, dv)], axis=0)
            elif ".in_proj_z." in n:
                a = _reorder_v(a, 0, nk, r, dv)
            elif ".in_proj_b." in n or ".in_proj_a." in n:
                a = _reorder_v(a, 0, nk, r, 1)
            elif n.endswith((".A_log", ".dt_bias")):
                a = _reorder_v(a, 0, nk, r, 1)
            elif ".conv1d" in n:
                a = np.squeeze(a)
                qk = 2 * dk * nk
                a = np.concatenate([a[:qk], _reorder_v(a[qk:], 0, nk, r, dv)], axis=0)
            elif ".out_proj." in n:
                a = _reorder_v(a, 1, nk, r, dv)
        if n.endswith(".A_log"):   # torch.exp in the source dtype; here correctly rounded
            a = (-np.exp(a.astype(np.float64))).astype(a.dtype)
        elif "conv1d" in n:
            a = np.squeeze(a)
        elif n.endswith("norm.weight") and not n.endswith("linear_attn.norm.weight"):
            a = a + a.dtype.type(1)
        m = re.match(r"model\.layers\.(\d+)\.mlp\.experts\.(.*)$", n)
        if m:
            bid, rest = int(m.group(1)), m.group(2)
            if rest in ("gate_up_proj", "gate_up_proj.weight"):
                ff = a.shape[-2] // 2
                emit(f"blk.{bid}.ffn_gate_exps.weight", a[..., :ff, :])
                emit(f"blk.{bid}.ffn_up_exps.weight", a[..., ff:, :])
            elif rest in ("down_proj", "down_proj.weight"):
                emit(f"blk.{bid}.ffn_down_exps.weight", a)
            else:
                xm = re.match(r"(\d+)\.(gate_proj|up_proj|down_proj)\.weight$", rest)
                if not xm:
                    raise ValueError(f"can not map tensor {hf!r}")
                d = experts.setdefault(bid, {})
                d.setdefault(xm.group(2), {})[int(xm.group(1))] = a
                if sum(len(v) for v in d.values()) == 3 * E:
                    for w in ("down_proj", "gate_proj", "up_proj"):
                        emit(f"blk.{bid}.ffn_{w[:-5]}_exps.weight",
                             np.stack([d[w][x] for x in range(E)]))
                    del experts[bid]
            continue
        emit(_gguf_name(n), a)
    if experts or fuse_buf:
        raise ValueError(f"unprocessed experts in blocks {sorted(experts) + sorted(fuse_buf)}")

    tensors, counts = [], {}
    for gname, a in out:
        if a.ndim <= 1 or gname.endswith("_norm.weight") or gname.endswith(_F32_KEEP) \
                or not gname.endswith(".weight"):
            t = F32
        else:
            t = type_id(type_of(gname))
            if a.shape[-1] % BLOCK[t][0]:
                t = F16
            counts[t] = counts.get(t, 0) + a.size
        tensors.append(Tensor.from_array(gname, a, t))
    if file_type is None:
        main = max(counts, key=counts.get) if counts else F32
        file_type = FILE_TYPE.get(main, 0)
    kv = qwen35moe_metadata(cfg, file_type, n_mtp, name)
    if vocab_gguf:
        v = GGUFFile(vocab_gguf)
        for k, val in v.kv.items():
            if k.startswith("tokenizer."):
                kv[k] = val
    if split_max_tensors:
        prefix = out_path[:-5] if out_path.endswith(".gguf") else out_path
        return write_gguf_split(prefix, kv, tensors, max_tensors=split_max_tensors)
    write_gguf(out_path, kv, tensors)
    return [out_path]


def gguf_to_hf_config(g):
    """config.json (qwen3_5_moe, nested text_config) describing a qwen35moe GGUF."""
    g = g if isinstance(g, GGUFFile) else GGUFFile(g)
    A = g.value("general.architecture") + "."
    n_mtp = g.value(A + "nextn_predict_layers", 0)
    n_layer = g.value(A + "block_count") - n_mtp
    hd = g.value(A + "attention.key_length")
    hv = g.value(A + "ssm.time_step_rank")
    t = {"model_type": "qwen3_5_moe_text",
         "hidden_size": g.value(A + "embedding_length"), "num_hidden_layers": n_layer,
         "vocab_size": g.tensors["token_embd.weight"]["ne"][1],
         "num_attention_heads": g.value(A + "attention.head_count"),
         "num_key_value_heads": g.value(A + "attention.head_count_kv"), "head_dim": hd,
         "linear_num_key_heads": g.value(A + "ssm.group_count"), "linear_num_value_heads": hv,
         "linear_key_head_dim": g.value(A + "ssm.state_size"),
         "linear_value_head_dim": g.value(A + "ssm.inner_size") // hv,
         "linear_conv_kernel_dim": g.value(A + "ssm.conv_kernel"),
         "num_experts": g.value(A + "expert_count"),
         "num_experts_per_tok": g.value(A + "expert_used_count"),
         "moe_intermediate_size": g.value(A + "expert_feed_forward_length"),
         "shared_expert_intermediate_size": g.value(A + "expert_shared_feed_forward_length", 0),
         "rms_norm_eps": g.value(A + "attention.layer_norm_rms_epsilon"),
         "max_position_embeddings": g.value(A + "context_length", 4096),
         "full_attention_interval": g.value(A + "full_attention_interval", 4),
         "layer_types": ["full_attention" if f"blk.{i}.attn_q.weight" in g.tensors
                         else "linear_attention" for i in range(n_layer)],
         "rope_parameters": {"rope_type": "default",
                             "rope_theta": g.value(A + "rope.freq_base", 10000.0),
                             "partial_rotary_factor": g.value(A + "rope.dimension_count") / hd,
                             "mrope_section": g.value(A + "rope.dimension_sections")},
         "attn_output_gate": True, "hidden_act": "silu", "mlp_only_layers": [],
         "mtp_num_hidden_layers": n_mtp}
    tied = "output.weight" not in g.tensors
    t["tie_word_embeddings"] = tied
    return {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
            "text_config": t, "tie_word_embeddings": tied}


def gguf_to_hf_arrays(g, prefix="model.language_model."):
    """Invert hf_to_gguf: every tensor dequantized (float32 values, returned as float64) under its
    HF name, V heads back to grouped order, norms -1 (in float32), A_log = log(-ssm_a), conv1d
    [C, 1, K], experts as fused experts.gate_up_proj [E, 2I, H] / experts.down_proj [E, H, I],
    blk.{n_layer+i} as mtp.*."""
    g = g if isinstance(g, GGUFFile) else GGUFFile(g)
    A = g.value("general.architecture") + "."
    n_mtp = g.value(A + "nextn_predict_layers", 0)
    n_layer = g.value(A + "block_count") - n_mtp
    nk, nv = g.value(A + "ssm.group_count"), g.value(A + "ssm.time_step_rank")
    dk, dv = g.value(A + "ssm.state_size"), g.value(A + "ssm.inner_size") // nv
    inv_layer = {v: k for k, v in _LAYER_MAP.items()}
    inv_top = {v: k for k, v in _MTP_TOP.items()}
    res, gate_up = {}, {}
    for gname in g.tensors:
        a = g.array(gname)
        if gname == "token_embd.weight":
            hf = prefix + "embed_tokens.weight"
        elif gname == "output_norm.weight":
            hf = prefix + "norm.weight"
        elif gname == "output.weight":
            hf = "lm_head.weight"
        else:
            m = re.match(r"blk\.(\d+)\.(.*)$", gname)
            if not m:
                raise ValueError(f"unknown tensor {gname}")
            bid, rest = int(m.group(1)), m.group(2)
            if rest in ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_gate_up_exps.weight"):
                gate_up.setdefault(bid, {})[rest[len("ffn_"):-len("_exps.weight")]] = a
                continue
            if rest == "ffn_down_exps.weight":
                sub = "mlp.experts.down_proj"
            elif rest in inv_layer:
                sub = inv_layer[rest]
            else:
                raise ValueError(f"unknown tensor {gname}")
            if bid >= n_layer:
                top = sub.rsplit(".", 1)[0]
                if top in inv_top:
                    hf = f"mtp.{inv_top[top]}.weight"
                else:
                    hf = f"mtp.layers.{bid - n_layer}.{sub}"
            else:
                hf = f"{prefix}layers.{bid}.{sub}"
        a = np.asarray(a, np.float32)
        if hf.endswith("A_log"):
            a = np.log(-a.astype(np.float64))
        elif gname.endswith("norm.weight") and not gname.endswith("ssm_norm.weight"):
            a = a - np.float32(1)                  # the converter's +1 (exact in float32)
        if hf.endswith("conv1d.weight"):
            a = a[:, None, :]
        if nk != nv and "linear_attn." in hf:
            r = nv // nk
            if ".in_proj_qkv." in hf or "conv1d.weight" in hf:
                qk = 2 * dk * nk
                a = np.concatenate([a[:qk], _unreorder_v(a[qk:], 0, nk, r, dv)], axis=0)
            elif ".in_proj_z." in hf:
                a = _unreorder_v(a, 0, nk, r, dv)
            elif ".in_proj_b." in hf or ".in_proj_a." in hf or hf.endswith(("A_log", "dt_bias")):
                a = _unreorder_v(a, 0, nk, r, 1)
            elif ".out_proj." in hf:
                a = _unreorder_v(a, 1, nk, r, dv)
        res[hf] = a.astype(np.float64)
    for bid, d in gate_up.items():
        gu = d["gate_up"] if "gate_up" in d else np.concatenate([d["gate"], d["up"]], axis=1)
        base = f"mtp.layers.{bid - n_layer}." if bid >= n_layer else f"{prefix}layers.{bid}."
        res[base + "mlp.experts.gate_up_proj"] = gu.astype(np.float64)
    return res


def gguf_to_ref_dir(gguf_path, out_dir):
    """config.json + F32 model.safetensors of the GGUF's exact (dequantized) weights, for
    ref_forward.py MODEL_DIR (every value is the GGUF's float32 value; A_log is stored F64)."""
    from safetensors_np import write_safetensors
    g = GGUFFile(gguf_path)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(gguf_to_hf_config(g), f, indent=1)
    w = gguf_to_hf_arrays(g)
    # A_log = log(-ssm_a) in F64 so that -exp(A_log) gives ssm_a back as closely as the dict does
    write_safetensors(os.path.join(out_dir, "model.safetensors"), w, "F32",
                      {n: "F64" for n in w if n.endswith("A_log")})
    return out_dir


# ----------------------------------------------------------------------------- CLI

def _parse_types(spec):
    """'Q4_K' or 'glob=TYPE,glob=TYPE,...' (first match wins; '*' for the rest)."""
    if "=" not in spec:
        t = type_id(spec)
        return lambda n: t
    rules = [(p.split("=")[0], type_id(p.split("=")[1])) for p in spec.split(",") if p]

    def f(n):
        for pat, t in rules:
            if fnmatch.fnmatch(n, pat):
                return t
        return F16
    return f


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sp = ap.add_subparsers(dest="cmd", required=True)
    c = sp.add_parser("convert")
    c.add_argument("model_dir")
    c.add_argument("out")
    c.add_argument("--type", "--types", dest="types", default="F16")
    c.add_argument("--fused-gate-up", action="store_true")
    c.add_argument("--split", type=int, default=0, metavar="MAX_TENSORS")
    c.add_argument("--vocab")
    c.add_argument("--no-mtp", action="store_true")
    r = sp.add_parser("to-ref")
    r.add_argument("gguf")
    r.add_argument("out_dir")
    d = sp.add_parser("dump")
    d.add_argument("gguf")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "convert":
            for p in hf_to_gguf(a.model_dir, a.out, _parse_types(a.types), a.fused_gate_up,
                                a.split or None, a.vocab, no_mtp=a.no_mtp):
                print(p)
        elif a.cmd == "to-ref":
            print(gguf_to_ref_dir(a.gguf, a.out_dir))
        else:
            g = GGUFFile(a.gguf)
            for k, v in g.kv.items():
                s = repr(v)
                print(f"{k} = {s if len(s) < 200 else s[:200] + '...'}")
            for n, i in g.tensors.items():
                print(f"{n} {TYPE_NAMES.get(i['type'], i['type'])} {i['ne']}")
    except (ValueError, KeyError, OSError) as e:
        print(f"gguf_np: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
