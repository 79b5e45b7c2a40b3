#!/usr/bin/python3
"""Reads and writes fuzz/fuzz_quant_load.c inputs (format in that file's header comment).

  quant_load_input.py FILE      prints flags, quantization_config and the tensor records
As a module: parse(bytes) -> (flags, qc_bytes, [[lin, suf, dtype, dims, data], ...]) and
build(flags, qc_bytes, records) -> bytes; used to hand-make the hand_* seeds and the
tests/data/quant_load/ regression inputs (e.g. an odd-sized U8 record before a tensor to
misalign it)."""
import struct
import sys

SUF = ["qweight", "qzeros", "scales", "g_idx", "weight_packed", "weight_scale",
       "weight_zero_point", "weight_shape", "weight_g_idx", "weight"]
DT = ["F32", "F16", "BF16", "F64", "F8_E4M3", "F8_E5M2", "I64", "I32", "I16", "I8", "U64", "U32",
      "U16", "U8", "BOOL"]


def parse(b):
    flags = b[0]
    ql = struct.unpack_from("<H", b, 1)[0]
    qc = b[3:3 + ql]
    p = 3 + ql
    recs = []
    while p + 4 <= len(b):
        lin, suf, dt, nd = b[p:p + 4]
        nd %= 4
        p += 4
        if p + 2 * nd + 2 > len(b):
            break
        dims = list(struct.unpack_from("<%dH" % nd, b, p))
        p += 2 * nd
        n = struct.unpack_from("<H", b, p)[0]
        p += 2
        if n > len(b) - p:
            break
        recs.append([lin, suf, dt, dims, b[p:p + n]])
        p += n
    return flags, qc, recs


def build(flags, qc, recs):
    out = bytes([flags]) + struct.pack("<H", len(qc)) + qc
    for lin, suf, dt, dims, data in recs:
        out += bytes([lin, suf, dt, len(dims)]) + struct.pack("<%dH" % len(dims), *dims)
        out += struct.pack("<H", len(data)) + data
    return out


if __name__ == "__main__":
    f, qc, r = parse(open(sys.argv[1], "rb").read())
    print("flags", f, "quantization_config", qc.decode(errors="replace"))
    for lin, suf, dt, dims, data in r:
        print(lin, SUF[suf % len(SUF)], DT[dt % len(DT)], dims, len(data), "bytes")
