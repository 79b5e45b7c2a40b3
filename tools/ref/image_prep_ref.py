#!/usr/bin/python3
"""Independent reference for src/image/: the HF Qwen2-VL image processor's arithmetic (the one
Qwen3-VL and Qwen3.5 use, patch 16) reimplemented in numpy, with PIL for decoding and resizing,
as the processor's PIL backend does (docs/model.md § image preprocessing):

  smart_resize      transformers' function (current form: no "< factor" error, max(factor, ...)
                    when shrinking), Python's round-half-even
  decode            PIL.Image.open(...).convert("RGB") (HF convert_to_rgb); 16-bit gray is the
                    one documented difference: PIL 9.4 clips mode "I" to 0..255, cllm takes the
                    high byte, so the reference takes it too
  resize            PIL Image.resize((w, h), Image.BICUBIC)
  rescale           (u8 as float64 * 1/255) as float32       (image_transforms.rescale)
  normalize         (x - mean) / std in float32              (image_transforms.normalize)
  patchify          reshape (t, T, C, h/m, m, P, w/m, m, P), transpose (0, 3, 6, 4, 7, 2, 1, 5, 8)

It never reads the C code. Used by tests/image/image_ref.sh:
  image_prep_ref.py gen DIR                  random images (PNG of every colour type and depth,
                                             JPEG gray/RGB/CMYK/progressive, WebP lossy,
                                             lossless, alpha) + DIR/manifest.json
  image_prep_ref.py check DIR MIN MAX        compares DIR/*.out (written by test_image prep)
  image_prep_ref.py resize-cases DIR N       N random resize cases: DIR/rs_*.rgb + rs.json
  image_prep_ref.py resize-check DIR         compares DIR/rs_*.out with PIL, bit for bit
  image_prep_ref.py smart-cases N            prints N "h w min max" lines
  image_prep_ref.py smart-check CASES OUT    compares test_image smart's answers
  image_prep_ref.py bomb FILE W H            a small PNG declaring W x H (zlib of zero rows)
Exit status 0 when everything matches, 1 with one line per difference."""
import json
import math
import os
import struct
import sys
import warnings
import zlib

import numpy as np
from PIL import Image

# PIL 9.4 suggests converting palette images with tRNS bytes to RGBA; convert("RGB") is the point
warnings.filterwarnings("ignore", "Palette images with Transparency")

PATCH, TEMPORAL, MERGE = 16, 2, 2
MEAN = STD = (0.5, 0.5, 0.5)
RESCALE = 1 / 255


def smart_resize(height, width, factor=32, min_pixels=65536, max_pixels=16777216):
    if max(height, width) / min(height, width) > 200:
        raise ValueError("absolute aspect ratio must be smaller than 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def decode_rgb(path):
    im = Image.open(path)
    if im.mode in ("I", "I;16", "I;16B"):  # 16-bit gray: the high byte (see the docstring)
        a = (np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8)
        return np.repeat(a[:, :, None], 3, axis=2)
    return np.asarray(im.convert("RGB"))


def preprocess(rgb, min_pixels, max_pixels):
    """(resized uint8 HWC, flat patches float32, (grid_t, grid_h, grid_w))"""
    h, w = rgb.shape[:2]
    rh, rw = smart_resize(h, w, PATCH * MERGE, min_pixels, max_pixels)
    resized = np.asarray(Image.fromarray(rgb).resize((rw, rh), Image.BICUBIC))
    x = (resized.astype(np.float64) * RESCALE).astype(np.float32)
    x = (x - np.array(MEAN, np.float32)) / np.array(STD, np.float32)
    x = x.transpose(2, 0, 1)[None]  # (frames, C, H, W)
    x = np.concatenate([x, np.repeat(x[-1:], TEMPORAL - 1, axis=0)], axis=0)
    gt, gh, gw = x.shape[0] // TEMPORAL, rh // PATCH, rw // PATCH
    x = x.reshape(gt, TEMPORAL, 3, gh // MERGE, MERGE, PATCH, gw // MERGE, MERGE, PATCH)
    x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return resized, x.reshape(gt * gh * gw, 3 * TEMPORAL * PATCH * PATCH), (gt, gh, gw)


# ---- test images ----
def png_raw(path, arr, ctype, depth, palette=None, trns=None):
    """A PNG of any colour type and depth from samples arr [h][w][channels] (no filter)."""
    h, w = arr.shape[:2]
    rows = []
    for y in range(h):
        s = arr[y].reshape(-1).astype(np.uint32)
        if depth == 16:
            b = s.astype(">u2").tobytes()
        elif depth == 8:
            b = s.astype(np.uint8).tobytes()
        else:
            bits = np.unpackbits(s.astype(np.uint8)[:, None], axis=1)[:, 8 - depth:]
            b = np.packbits(bits.reshape(-1)).tobytes()
        rows.append(b"\0" + b)

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0,
                                                             0, 0))
    if palette is not None:
        out += chunk(b"PLTE", palette.astype(np.uint8).tobytes())
    if trns is not None:
        out += chunk(b"tRNS", trns.astype(np.uint8).tobytes())
    out += chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b"")
    open(path, "wb").write(out)


def picture(rng, h, w):
    """Smooth colour gradients, edges and noise: what a resize has to get right."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    base = np.stack([128 + 100 * np.sin(x / (3 + w / 7) + c) * np.cos(y / (2 + h / 5) - c)
                     for c in range(3)], axis=2)
    base += np.where((x // 7 + y // 5) % 2 == 0, 40, -40)[:, :, None]
    base += rng.normal(0, 12, base.shape)
    return np.clip(base, 0, 255).astype(np.uint8)


def random_size(rng):
    kind = rng.integers(0, 5)
    if kind == 0:  # small, grown to min_pixels
        return int(rng.integers(1, 60)), int(rng.integers(1, 60))
    if kind == 1:  # extreme aspect (within 200)
        a, b = int(rng.integers(2, 12)), int(rng.integers(300, 1200))
        return (a, b) if rng.integers(0, 2) else (b, a)
    return int(rng.integers(16, 720)), int(rng.integers(16, 720))


def gen(d):
    rng = np.random.default_rng(34)
    os.makedirs(d, exist_ok=True)
    files = []

    def add(name):
        files.append(name)
        return os.path.join(d, name)
    i = 0
    png_types = [(0, 1), (0, 2), (0, 4), (0, 8), (0, 16), (4, 8), (4, 16), (3, 1), (3, 2),
                 (3, 4), (3, 8), (2, 8), (2, 16), (6, 8), (6, 16)]
    for rep in range(3):
        for ctype, depth in png_types:
            h, w = random_size(rng)
            ch = {0: 1, 4: 2, 2: 3, 6: 4, 3: 1}[ctype]
            pic = picture(rng, h, w).astype(np.uint32)
            full = np.concatenate([pic, rng.integers(0, 256, (h, w, 1))], axis=2)
            if depth == 16:  # a random low byte: cllm must ignore it as PIL does
                s = full * 256 + rng.integers(0, 256, full.shape)
            else:
                s = full >> (8 - depth)
            s = {1: s[:, :, :1], 2: s[:, :, [0, 3]], 3: s[:, :, :3], 4: s}[ch]
            pal = trns = None
            if ctype == 3:
                n = 1 << depth
                pal = rng.integers(0, 256, (n, 3))
                trns = rng.integers(0, 256, n)
            png_raw(add(f"png_{i:03d}_c{ctype}_d{depth}.png"), s, ctype, depth, pal, trns)
            i += 1
    for rep in range(4):
        for mode, opts in [("RGB", {}), ("L", {}), ("CMYK", {}),
                           ("RGB", {"progressive": True}), ("RGB", {"subsampling": 0}),
                           ("RGB", {"subsampling": 1, "quality": 60})]:
            h, w = random_size(rng)
            im = Image.fromarray(picture(rng, h, w))
            im = im.convert(mode) if mode != "CMYK" else im.convert("CMYK")
            im.save(add(f"jpg_{i:03d}_{mode}.jpg"), "JPEG", quality=opts.pop("quality", 90),
                    **opts)
            i += 1
        for mode, opts in [("RGB", {"quality": 80}), ("RGBA", {"quality": 85}),
                           ("RGB", {"lossless": True}), ("RGBA", {"lossless": True})]:
            h, w = random_size(rng)
            im = Image.fromarray(picture(rng, h, w))
            if mode == "RGBA":
                a = Image.fromarray(rng.integers(0, 256, (h, w)).astype(np.uint8))
                im = im.convert("RGBA")
                im.putalpha(a)
            im.save(add(f"webp_{i:03d}_{mode}.webp"), "WEBP", **opts)
            i += 1
    # sizes at the limits: 1x1, exact multiples, a 200:1 strip
    for h, w in [(1, 1), (32, 32), (256, 256), (2, 400), (400, 2), (1, 200)]:
        Image.fromarray(picture(rng, h, w)).save(add(f"png_{i:03d}_edge.png"))
        i += 1
    json.dump(files, open(os.path.join(d, "manifest.json"), "w"))
    print(f"{len(files)} images written")


def read_out(path, rgb_shape_known=False):
    b = open(path, "rb").read()
    hd = struct.unpack("<8i", b[:32])
    return hd, b[32:]


def compare(name, ref, got, fails):
    """Exact for integers, <= 1e-6 for floats; records one line per mismatch."""
    if ref.shape != got.shape:
        fails.append(f"{name}: shape {got.shape}, want {ref.shape}")
        return
    if ref.dtype == np.float32:
        d = float(np.max(np.abs(ref.astype(np.float64) - got))) if ref.size else 0.0
        if not d <= 1e-6:
            fails.append(f"{name}: max |diff| {d:g} > 1e-6")
        return d
    n = int(np.count_nonzero(ref != got))
    if n:
        fails.append(f"{name}: {n} of {ref.size} values differ")
    return n


def check(d, min_px, max_px):
    files = json.load(open(os.path.join(d, "manifest.json")))
    fails, worst, refused = [], 0.0, 0
    # the comparison itself can fail: a one-step change is reported
    probe = []
    compare("probe", np.zeros(4, np.uint8), np.array([0, 0, 1, 0], np.uint8), probe)
    compare("probe", np.zeros(4, np.float32), np.array([0, 0, 2e-6, 0], np.float32), probe)
    if len(probe) != 2:
        fails.append("the comparison does not catch a one-step change")
    for f in files:
        hd, rest = read_out(os.path.join(d, f + ".out"))
        rgb = decode_rgb(os.path.join(d, f))
        h, w = rgb.shape[:2]
        try:
            resized, patches, grid = preprocess(rgb, min_px, max_px)
        except ValueError:
            resized = None
        if resized is None or hd[0]:
            if not (resized is None and hd[0]):
                fails.append(f"{f}: refused by {'cllm' if hd[0] else 'the reference'} only "
                             f"({rest[:200]!r})")
            refused += 1
            continue
        if hd[1:3] != (w, h):
            fails.append(f"{f}: decoded {hd[1]}x{hd[2]}, want {w}x{h}")
            continue
        rh, rw = resized.shape[:2]
        if hd[3:5] != (rh, rw) or tuple(hd[5:8]) != grid:
            fails.append(f"{f}: resized {hd[3:5]} grid {hd[5:8]}, want {(rh, rw)} {grid}")
            continue
        o = 0
        got_rgb = np.frombuffer(rest, np.uint8, h * w * 3, o).reshape(h, w, 3)
        o += h * w * 3
        got_rs = np.frombuffer(rest, np.uint8, rh * rw * 3, o).reshape(rh, rw, 3)
        o += rh * rw * 3
        got_px = np.frombuffer(rest, np.float32, patches.size, o).reshape(patches.shape)
        compare(f"{f} decoded", rgb, got_rgb, fails)
        compare(f"{f} resized {w}x{h}->{rw}x{rh}", resized, got_rs, fails)
        worst = max(worst, compare(f"{f} pixels", patches, got_px, fails) or 0.0)
    for line in fails:
        print("DIFF", line)
    print(f"{len(files)} images at min_pixels {min_px}, max_pixels {max_px}: "
          f"{len(files) - refused} compared, {refused} refused by both, largest float "
          f"difference {worst:g}, {len(fails)} differences")
    return 1 if fails else 0


def resize_cases(d, n):
    rng = np.random.default_rng(35)
    cases = []
    for k in range(n):
        kind = k % 5
        w, h = int(rng.integers(1, 300)), int(rng.integers(1, 300))
        if kind == 0:  # strong shrink, antialiasing support far wider than 2
            ow, oh = max(1, w // int(rng.integers(5, 40))), max(1, h // int(rng.integers(5, 40)))
        elif kind == 1:  # strong growth
            ow, oh = w * int(rng.integers(2, 9)), h * int(rng.integers(2, 9))
        elif kind == 2:  # one side unchanged: only one pass runs
            ow, oh = (w, int(rng.integers(1, 400))) if rng.integers(0, 2) else \
                (int(rng.integers(1, 400)), h)
        else:
            ow, oh = int(rng.integers(1, 500)), int(rng.integers(1, 500))
        a = picture(rng, h, w) if k % 2 else rng.integers(0, 256, (h, w, 3)).astype(np.uint8)
        a.tofile(os.path.join(d, f"rs_{k}.rgb"))
        cases.append([k, w, h, ow, oh])
    json.dump(cases, open(os.path.join(d, "rs.json"), "w"))
    for k, w, h, ow, oh in cases:
        print(k, w, h, ow, oh)


def resize_check(d):
    fails = []
    cases = json.load(open(os.path.join(d, "rs.json")))
    for k, w, h, ow, oh in cases:
        a = np.fromfile(os.path.join(d, f"rs_{k}.rgb"), np.uint8).reshape(h, w, 3)
        ref = np.asarray(Image.fromarray(a).resize((ow, oh), Image.BICUBIC))
        got = np.fromfile(os.path.join(d, f"rs_{k}.out"), np.uint8)
        compare(f"resize {k}: {w}x{h} -> {ow}x{oh}", ref.reshape(-1), got, fails)
    for line in fails:
        print("DIFF", line)
    print(f"{len(cases)} resizes compared with PIL BICUBIC, {len(fails)} differ")
    return 1 if fails else 0


def smart_cases(n):
    rng = np.random.default_rng(36)
    for k in range(n):
        if k % 3 == 0:
            h, w = int(rng.integers(1, 100)), int(rng.integers(1, 100))
        else:
            h, w = int(rng.integers(1, 30000)), int(rng.integers(1, 30000))
        mn = int(rng.choice([65536, 1024, 3136, int(rng.integers(1, 10 ** 6))]))
        mx = int(rng.choice([16777216, 1003520, max(mn, int(rng.integers(1, 10 ** 7)))]))
        print(h, w, mn, max(mn, mx))


def smart_check(cases, out):
    fails, n = [], 0
    for line, got in zip(open(cases), open(out)):
        h, w, mn, mx = map(int, line.split())
        n += 1
        try:
            want = "%d %d" % smart_resize(h, w, 32, mn, mx)
        except ValueError:
            want = "ERR"
        if got.strip() != want:
            fails.append(f"smart_resize({h}, {w}, min {mn}, max {mx}): {got.strip()}, want {want}")
    for f in fails[:20]:
        print("DIFF", f)
    print(f"{n} smart_resize cases, {len(fails)} differ")
    return 1 if fails or n == 0 else 0


def bomb(path, w, h):
    """Gray 8-bit PNG declaring w x h; its IDAT inflates to 16 MB of zero rows (more would not
    change anything: the header is what must be refused)."""
    rows = zlib.compress(b"\0" * (16 << 20), 9)

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" +
                           chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) +
                           chunk(b"IDAT", rows) + chunk(b"IEND", b""))


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "gen":
        gen(argv[2])
    elif cmd == "check":
        return check(argv[2], int(argv[3]), int(argv[4]))
    elif cmd == "resize-cases":
        resize_cases(argv[2], int(argv[3]))
    elif cmd == "resize-check":
        return resize_check(argv[2])
    elif cmd == "smart-cases":
        smart_cases(int(argv[2]))
    elif cmd == "smart-check":
        return smart_check(argv[2], argv[3])
    elif cmd == "bomb":
        bomb(argv[2], int(argv[3]), int(argv[4]))
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
