#!/usr/bin/python3
"""Independent float64 numpy reference of the vision tower and the image-token M-RoPE positions
of qwen3_5_moe (Qwen3.5 / Qwen3-VL style), written from docs/model.md "Vision tower" (never from
the C code, model/vision.c).

Usage:
  /usr/bin/python3 tools/ref/vision_ref.py MODEL_DIR --pixels PIXELS.f32 --grid T,H,W --out OUT.f32
reads raw float32 [T*H*W][in_channels*temporal_patch*patch*patch] patches in the processor's
order (t, h/merge, w/merge, merge row, merge column) and writes raw float32
[T*H*W/merge^2][out_hidden_size].

  /usr/bin/python3 tools/ref/vision_ref.py MODEL_DIR --rope-index IDS --grids T,H,W[;T,H,W...]
prints the 3-D positions (one "t h w" line per token) and the position delta.

Library:
  V = VisionModel(MODEL_DIR); out = V.encode(pixels, (t, h, w))
  pos3, delta = get_rope_index(tokens, image_token_id, [(t, h, w), ...], merge)
  ref_forward.forward(model, tokens, input_embeds=(idx, rows), mrope_positions=pos3)
"""
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_np import SafetensorsModel  # noqa: E402

_erf = np.frompyfunc(math.erf, 1, 1)


def gelu_tanh(x):
    """gelu_pytorch_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    """nn.GELU(): 0.5 x (1 + erf(x / sqrt 2))."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def layernorm(x, w, b, eps=1e-6):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def merge_order(a, h, w, m):
    """Raster-order rows a [h*w, ...] -> the processor's patch order (h/m, w/m, m, m)."""
    rest = a.shape[1:]
    return (a.reshape((h // m, m, w // m, m) + rest)
            .transpose((0, 2, 1, 3) + tuple(range(4, 4 + len(rest))))
            .reshape((h * w,) + rest))


class VisionModel:
    """vision_config + the model.visual.* tensors as float64."""

    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            raw = json.load(f)
        vc = raw.get("vision_config")
        if not vc:
            raise ValueError(f"{model_dir}: config has no vision_config")
        self.depth = int(vc.get("depth", 27))
        self.D = int(vc.get("hidden_size", 1152))
        self.heads = int(vc.get("num_heads", 16))
        self.F = int(vc.get("intermediate_size", 4304))
        self.P = int(vc.get("patch_size", 16))
        self.TP = int(vc.get("temporal_patch_size", 2))
        self.m = int(vc.get("spatial_merge_size", 2))
        self.C = int(vc.get("in_channels", 3))
        self.out = int(vc.get("out_hidden_size", 3584))
        self.npos = int(vc.get("num_position_embeddings", 2304))
        self.side = int(round(math.sqrt(self.npos)))
        if self.side * self.side != self.npos:
            raise ValueError("num_position_embeddings is not a square")
        if vc.get("hidden_act", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
            raise ValueError("vision hidden_act other than gelu_pytorch_tanh")
        if vc.get("deepstack_visual_indexes"):
            raise ValueError("deepstack_visual_indexes: not in this reference (Qwen3.5 has none)")
        self.hd = self.D // self.heads
        self.theta = 10000.0
        self.st = SafetensorsModel(model_dir)
        self._c = {}

    def w(self, name):
        full = "model.visual." + name
        if full not in self._c:
            self._c[full] = np.asarray(self.st.get(full), dtype=np.float64)
        return self._c[full]

    def pos_embed(self, h, w):
        """The side x side learned table bilinearly resampled to h x w (align_corners: the
        corners of both grids coincide), rows in raster order [h*w, D]."""
        tab = self.w("pos_embed.weight").reshape(self.side, self.side, self.D)

        def axis(n):
            src = np.linspace(0.0, self.side - 1, n)
            lo = np.floor(src).astype(np.int64)
            hi = np.minimum(lo + 1, self.side - 1)
            return lo, hi, src - lo

        h0, h1, dh = axis(h)
        w0, w1, dw = axis(w)
        dh, dw = dh[:, None, None], dw[None, :, None]
        g = ((1 - dh) * (1 - dw) * tab[h0][:, w0] + (1 - dh) * dw * tab[h0][:, w1]
             + dh * (1 - dw) * tab[h1][:, w0] + dh * dw * tab[h1][:, w1])
        return g.reshape(h * w, self.D)

    def rotary(self, h, w):
        """cos, sin [h*w, hd] in raster order: angles [row * inv | col * inv] (inv over hd/2
        dims with step 2, theta 10000), repeated for both halves of the head."""
        sd = self.hd // 2
        inv = self.theta ** (-np.arange(0, sd, 2, dtype=np.float64) / sd)
        rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        ang = np.concatenate([rows.reshape(-1, 1) * inv, cols.reshape(-1, 1) * inv], axis=1)
        ang = np.concatenate([ang, ang], axis=1)
        return np.cos(ang), np.sin(ang)

    def encode(self, pixels, grid):
        t, h, w = grid
        m, D, H, hd = self.m, self.D, self.heads, self.hd
        if h % m or w % m:
            raise ValueError("grid not divisible by the merge size")
        N = t * h * w
        pixels = np.asarray(pixels, dtype=np.float64).reshape(N, -1)
        Wp = self.w("patch_embed.proj.weight").reshape(D, -1)   # Conv3d, stride = kernel
        x = pixels @ Wp.T + self.w("patch_embed.proj.bias")
        x = x + np.tile(merge_order(self.pos_embed(h, w), h, w, m), (t, 1))
        cos, sin = self.rotary(h, w)
        cos = np.tile(merge_order(cos, h, w, m), (t, 1))[:, None, :]
        sin = np.tile(merge_order(sin, h, w, m), (t, 1))[:, None, :]

        def rope(a):   # a [N, H, hd]; rotate_half over the whole head
            rh = np.concatenate([-a[..., hd // 2:], a[..., :hd // 2]], axis=-1)
            return a * cos + rh * sin

        Nf = h * w
        for i in range(self.depth):
            b = f"blocks.{i}."
            xn = layernorm(x, self.w(b + "norm1.weight"), self.w(b + "norm1.bias"))
            qkv = (xn @ self.w(b + "attn.qkv.weight").T + self.w(b + "attn.qkv.bias"))
            qkv = qkv.reshape(N, 3, H, hd)
            q, k, v = rope(qkv[:, 0]), rope(qkv[:, 1]), qkv[:, 2]
            o = np.empty((N, H, hd))
            for f in range(t):     # each frame attends to itself only, both directions
                s_ = slice(f * Nf, (f + 1) * Nf)
                sc = np.einsum("qhd,khd->hqk", q[s_], k[s_]) / math.sqrt(hd)
                o[s_] = np.einsum("hqk,khd->qhd", softmax(sc), v[s_])
            x = x + o.reshape(N, D) @ self.w(b + "attn.proj.weight").T + self.w(b + "attn.proj.bias")
            xn = layernorm(x, self.w(b + "norm2.weight"), self.w(b + "norm2.bias"))
            u = gelu_tanh(xn @ self.w(b + "mlp.linear_fc1.weight").T + self.w(b + "mlp.linear_fc1.bias"))
            x = x + u @ self.w(b + "mlp.linear_fc2.weight").T + self.w(b + "mlp.linear_fc2.bias")
        xm = layernorm(x, self.w("merger.norm.weight"), self.w("merger.norm.bias"))
        xm = xm.reshape(N // (m * m), m * m * D)
        u = gelu_erf(xm @ self.w("merger.linear_fc1.weight").T + self.w("merger.linear_fc1.bias"))
        return u @ self.w("merger.linear_fc2.weight").T + self.w("merger.linear_fc2.bias")


def get_rope_index(tokens, image_token_id, grids, merge):
    """3-D (T, H, W) positions [n, 3] of a token list with images, and the position delta.
    Text: all three = a running index. Each run of image tokens takes the next grid (t, h, w)
    (its t*h*w/merge^2 tokens, in (t, h/merge, w/merge) order): (st + ti, st + row, st + col)
    over the merged grid, st the index after the text before it; the text after resumes at
    st + max(h, w) / merge (= the image's largest position + 1 for t = 1). delta = largest
    position + 1 - n: a later token at sequence index i has position i + delta on all three."""
    tokens = list(tokens)
    grids = list(grids)
    pos = np.zeros((len(tokens), 3), dtype=np.int64)
    i, cur, g = 0, 0, 0
    while i < len(tokens):
        if tokens[i] != image_token_id:
            pos[i] = cur
            cur += 1
            i += 1
            continue
        if g >= len(grids):
            raise ValueError("more image runs than grids")
        t, h, w = grids[g]
        g += 1
        lh, lw = h // merge, w // merge
        n = t * lh * lw
        if i + n > len(tokens) or any(x != image_token_id for x in tokens[i:i + n]):
            raise ValueError(f"image {g - 1}: expected {n} image tokens at {i}")
        tt, hh, ww = np.meshgrid(np.arange(t), np.arange(lh), np.arange(lw), indexing="ij")
        pos[i:i + n] = np.stack([tt.ravel(), hh.ravel(), ww.ravel()], axis=1) + cur
        cur += max(h, w) // merge
        i += n
    if g != len(grids):
        raise ValueError("fewer image runs than grids")
    delta = int(pos.max()) + 1 - len(tokens) if len(tokens) else 0
    return pos, delta


def main(argv=None):
    ap = argparse.ArgumentParser(description="float64 numpy vision tower reference (tools/ref)")
    ap.add_argument("model_dir")
    ap.add_argument("--pixels")
    ap.add_argument("--grid", help="T,H,W in patches")
    ap.add_argument("--out")
    ap.add_argument("--rope-index", metavar="IDS")
    ap.add_argument("--grids", help="T,H,W;T,H,W... for --rope-index")
    a = ap.parse_args(argv)
    try:
        if a.rope_index:
            with open(os.path.join(a.model_dir, "config.json")) as f:
                raw = json.load(f)
            toks = [int(x) for x in a.rope_index.replace(",", " ").split()]
            grids = [tuple(int(v) for v in g.split(",")) for g in (a.grids or "").split(";") if g]
            pos, delta = get_rope_index(toks, int(raw.get("image_token_id", 248056)), grids,
                                        int(raw["vision_config"].get("spatial_merge_size", 2)))
            for p in pos:
                print(*p)
            print("delta", delta)
            return 0
        V = VisionModel(a.model_dir)
        grid = tuple(int(v) for v in a.grid.split(","))
        pd = V.C * V.TP * V.P * V.P
        px = np.fromfile(a.pixels, dtype=np.float32)
        if px.size != grid[0] * grid[1] * grid[2] * pd:
            raise ValueError(f"--pixels: {px.size} floats, expected {grid[0] * grid[1] * grid[2] * pd}")
        V.encode(px.reshape(-1, pd), grid).astype(np.float32).tofile(a.out)
    except (ValueError, KeyError, OSError) as e:
        print(f"vision_ref: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
