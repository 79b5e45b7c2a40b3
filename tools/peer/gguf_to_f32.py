#!/usr/bin/python3
"""Dev tool, outside CI: the F32 GGUF of a GGUF's exact weights, written one tensor at a time.

Every quantized tensor is dequantized with tools/ref/gguf_np.py's `dequantize` (bitwise gguf-py's,
tools/ref/check_gguf_np_vs_ggufpy.py) and stored as F32 under the same name and shape; F32
tensors are copied byte for byte; the metadata is the source's with general.file_type 0. So
llama.cpp on the output computes in float what it computes on the source file save its 8-bit
activation rounding: the comparison gguf_vs_llama.sh makes with gguf_to_ref_dir + hf_to_gguf,
without the in-memory F32 dict and the intermediate safetensors (at full width those are 10+ GB
each; here the peak is one tensor, e.g. token_embd 248320 x 2048 = 2 GB).

  /usr/bin/python3 tools/peer/gguf_to_f32.py IN.gguf OUT.gguf
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import gguf_np as G  # noqa: E402

CHUNK_ROWS = 16384


def main():
    src, dst = sys.argv[1], sys.argv[2]
    g = G.GGUFFile(src)
    kv = dict(g.kv)
    kv["general.file_type"] = G.u32(0)
    names = list(g.tensors)  # file order
    infos = [(n, G.F32, g.tensors[n]["ne"], G.tensor_nbytes(G.F32, g.tensors[n]["ne"]))
             for n in names]
    head, align = G.gguf_header(kv, infos)
    t0 = time.time()
    with open(dst, "wb") as f:
        f.write(head)
        for (n, _, ne, nbytes) in infos:
            i = g.tensors[n]
            raw, rows, rb = g.raw(n), int(np.prod(ne[1:], dtype=np.int64)), G.row_bytes(i["type"], ne[0])
            done = 0
            for r0 in range(0, rows, CHUNK_ROWS):  # bounded memory: a chunk of rows at a time
                r1 = min(rows, r0 + CHUNK_ROWS)
                b = G.dequantize(raw[r0 * rb:r1 * rb], r1 - r0, ne[0], i["type"])
                b = np.ascontiguousarray(b, dtype="<f4").tobytes()
                f.write(b)
                done += len(b)
            assert done == nbytes, n
            f.write(b"\0" * ((align - nbytes % align) % align))
    print(f"wrote {dst}: {len(names)} tensors, {os.path.getsize(dst) / 1e9:.2f} GB in "
          f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
