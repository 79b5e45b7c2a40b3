#!/usr/bin/python3
"""Dev tool, outside CI: a copy of a GGUF with chosen tensors re-encoded in another type.

Tensors whose name matches a glob of RULES ('glob=TYPE,glob=TYPE', first match wins; a glob
'@Q6_K' matches the tensors of that type) are
dequantized (tools/ref/gguf_np.py) and quantized again to TYPE, a chunk of rows at a time; the
others are copied byte for byte; metadata unchanged. For bisecting an engine disagreement by
tensor type: make the variant, then compare engines on it as gguf_full_check.sh does (llama.cpp on
gguf_to_f32.py's F32 twin of the variant against cllm on the variant).

  /usr/bin/python3 tools/peer/gguf_retype.py IN.gguf OUT.gguf 'output.weight=Q8_0,@Q6_K=Q8_0'
"""
import fnmatch
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import gguf_np as G  # noqa: E402

CHUNK_ROWS = 16384


def main():
    src, dst, spec = sys.argv[1], sys.argv[2], sys.argv[3]
    rules = [(p.split("=")[0], G.type_id(p.split("=")[1])) for p in spec.split(",") if p]
    g = G.GGUFFile(src)
    names = list(g.tensors)

    def new_type(n):
        for pat, t in rules:
            src_t = G.TYPE_NAMES[g.tensors[n]["type"]]
            if (pat[1:] == src_t) if pat.startswith("@") else fnmatch.fnmatch(n, pat):
                return t
        return g.tensors[n]["type"]

    infos = [(n, new_type(n), g.tensors[n]["ne"], G.tensor_nbytes(new_type(n), g.tensors[n]["ne"]))
             for n in names]
    head, align = G.gguf_header(g.kv, infos)
    changed = 0
    with open(dst, "wb") as f:
        f.write(head)
        for (n, t, ne, nbytes) in infos:
            i = g.tensors[n]
            raw = g.raw(n)
            if t == i["type"]:
                f.write(raw)
            else:
                changed += 1
                rows, rb = int(np.prod(ne[1:], dtype=np.int64)), G.row_bytes(i["type"], ne[0])
                for r0 in range(0, rows, CHUNK_ROWS):
                    r1 = min(rows, r0 + CHUNK_ROWS)
                    x = G.dequantize(raw[r0 * rb:r1 * rb], r1 - r0, ne[0], i["type"])
                    f.write(G.quantize(x, t))
            f.write(b"\0" * ((align - nbytes % align) % align))
    print(f"wrote {dst}: {changed} of {len(names)} tensors re-encoded")


if __name__ == "__main__":
    main()
