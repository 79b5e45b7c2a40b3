#!/usr/bin/python3
"""Train a small vision tower (model.VisionTower, docs/model.md "Vision tower") for models/tiny on
the FROZEN text trunk, with images made here: words the tiny model knows and numbers, rendered
with PIL in Debian's DejaVu fonts at random sizes, positions and colours.

  /usr/bin/python3 tools/train/train_vision.py --check                # tower vs tools/ref, M-RoPE
  /usr/bin/python3 tools/train/train_vision.py --model models/tiny --run /tmp/cllm_vis \\
      --steps N --minutes M [--threads 1]                              # train + export RUN/hf
  /usr/bin/python3 tools/train/train_vision.py --model DIR --eval-only  # held-out, torch
  /usr/bin/python3 tools/train/train_vision.py --eval-server URL       # held-out, a cllm server
  /usr/bin/python3 tools/train/train_vision.py --sample OUT.png        # the shipped sample image
  /usr/bin/python3 tools/train/train_vision.py --bound "The image says: {}."   # see below

--bound FMT fits free rows (no tower: every image row its own parameter) for six answers in FMT
and prints how far the frozen trunk can be steered from the image positions: the upper bound on
what any tower can do. "The image says: {}." stays at 0 of 6 exact (token accuracy ~0.73; the
word slot keeps ~6 nats), "{}." 2-4 of 6 (the word split as "h" "igh"), " {}." 6 of 6 in 100
steps: hence the answer format, the word with its leading space (a whole BPE token for most).

Each example is the chat prompt exactly as cllm's server builds it for models/tiny's string
template (the user content "<|vision_start|><|image_pad|><|vision_end|>\\nWhat does this image
say?", the pad expanded to the image's grid_h * grid_w / 4 tokens, the thinking-on generation
prompt) and the answer "\\n</think>\\n\\nWORD.<|im_end|>" (the word as written, a full stop). Loss = cross-entropy of
the answer tokens only; the tower's rows replace the pad embeddings, M-RoPE positions as the
engine gives them. Teacher-forced exact match of every answer token is the same thing as "greedy
decoding writes exactly the answer", so the held-out figures are greedy exact-match accuracy.

The export writes MODEL's files into RUN/hf with model.safetensors = MODEL's tensors with their
stored bytes and data offsets untouched + model.visual.* (BF16) appended after them, config.json
with vision_config and the vision token ids, tokenizer files with the three vision tokens, and
preprocessor_config.json (small pixel bounds: at most 16 merged tokens per image).
"""
import argparse, base64, io, json, math, os, random, struct, sys, time
import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw, ImageFont

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe
from model import VisionTower, load_hf, _bf16_bytes

VISION_CONFIG = {
    "model_type": "qwen3_5_moe_vision", "depth": 3, "hidden_size": 128, "hidden_act": "gelu_pytorch_tanh",
    "intermediate_size": 256, "num_heads": 4, "in_channels": 3, "patch_size": 16,
    "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 192,
    "num_position_embeddings": 64, "deepstack_visual_indexes": [], "initializer_range": 0.02}
VISION_TOKENS = [("<|vision_start|>", 4007), ("<|vision_end|>", 4008), ("<|image_pad|>", 4009)]
IMAGE_PAD = 4009
MIN_PIXELS, MAX_PIXELS = 32 * 32, 64 * 64 * 4
QUESTION = "What does this image say?"
ANSWER = " {}."  # a space, the word as written, a full stop (--bound: why not a sentence)

FONT_DIR = "/usr/share/fonts/truetype/dejavu/"
TRAIN_FONTS = ["DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf",
               "DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf",               # fonts-dejavu-core
               "DejaVuSans-Oblique.ttf", "DejaVuSansCondensed.ttf", "DejaVuSerifCondensed.ttf",
               "DejaVuSansMono-Oblique.ttf"]                                 # fonts-dejavu-extra
HELD_FONTS = ["DejaVuSerif-Italic.ttf", "DejaVuSansCondensed-BoldOblique.ttf"]  # never in training
TRAIN_WORDS = """LORD God Lord king Israel people house land father son earth heaven water light fire
bread gold blood sword peace life death love spirit flesh city Jerusalem Moses David Jesus Egypt
Judah Aaron Saul Jacob Solomon Samuel Christ priest prophet servant children heart voice word
name day night sea field altar mount glory faith soul wife brother daughter woman man men holy
great good evil seven three four five ten hundred thousand law book Bible kingdom eyes hand head
face mouth year time place way tabernacle congregation offering beast nations wicked righteous
young old high first dead fear bless drink walk stand live reign sight cities heard""".split()
HELD_WORDS = """lamb tree stone wind river Abraham Paul Peter Babylon temple gate wine silver
garden star sun moon rain mountain bird""".split()


def number_split():
    """0..99: a fixed 10% never shown in training (held-out numbers)."""
    r = random.Random(77)
    nums = list(range(100))
    held = set(r.sample(nums, 10))
    return [n for n in nums if n not in held], sorted(held)


TRAIN_NUMS, HELD_NUMS = number_split()
# "fixed": the text centred (+-2 px) at 90% of the largest size that fits, canvas 0.9-1.5x the
# grid; "free": anywhere, 45-100% of that size, canvas 0.6-2x, some rotated or noisy. The tower
# (3 blocks, 16x16 patches, from scratch, ~1000 steps) learns "fixed" in tens of steps and had
# not left chance on "free" after hundreds (MODEL_CARD.md "Vision tower").
LAYOUT = "fixed"
# (height, width) the images are resized to: multiples of 32, area <= MAX_PIXELS
GRIDS = [(32, 96), (32, 128), (32, 160), (32, 192), (64, 64), (64, 96), (64, 128), (64, 160),
         (64, 192), (64, 256), (96, 96), (96, 128), (96, 160), (128, 128), (32, 256)]


# ---------------------------------------------------------------- images
def smart_resize(h, w, factor=32, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS):
    """HF Qwen2-VL smart_resize (round-half-even, floor when shrinking, ceil when growing)."""
    hb, wb = round(h / factor) * factor, round(w / factor) * factor
    if hb * wb > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        hb = max(factor, math.floor(h / beta / factor) * factor)
        wb = max(factor, math.floor(w / beta / factor) * factor)
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    return hb, wb


def preprocess(img, rh, rw, P=16, m=2):
    """PIL RGB image -> resized (BICUBIC) to rw x rh, rescale 1/255, normalise (mean = std = 0.5),
    [gh * gw, 3 * 2 * P * P] float32 rows in the processor's order (h/m, w/m, m, m), each row
    (channel, temporal (two identical frames), py, px)."""
    if img.size != (rw, rh):
        img = img.resize((rw, rh), Image.BICUBIC)
    a = (np.asarray(img, dtype=np.uint8).astype(np.float64) * (1 / 255)).astype(np.float32)
    a = (a - np.float32(0.5)) / np.float32(0.5)
    chw = a.transpose(2, 0, 1)
    gh, gw = rh // P, rw // P
    x = np.stack([chw, chw]).reshape(2, 3, gh // m, m, P, gw // m, m, P)
    return np.ascontiguousarray(x.transpose(2, 5, 3, 6, 1, 0, 4, 7).reshape(gh * gw, 3 * 2 * P * P))


def _colours(r):
    """A light background and dark ink, random tints."""
    return tuple(r.randrange(190, 256) for _ in range(3)), tuple(r.randrange(0, 90) for _ in range(3))


def render(text, font, rh, rw, r, min_px=11, layout="free"):
    """text drawn on a canvas that resizes to rw x rh (scale 0.6-2x of it, aspect kept), at a
    random size, position and colours, sometimes rotated a little or noisy. None when the text
    cannot fit at a legible size."""
    s = r.uniform(0.6, 2.0) if layout == "free" else r.uniform(0.9, 1.5)
    W, H = max(8, round(rw * s)), max(8, round(rh * s))
    # largest size that fits in 94% of the width and 85% of the height
    probe = ImageFont.truetype(FONT_DIR + font, 100)
    x0, y0, x1, y1 = probe.getbbox(text)
    fmax = int(100 * min(0.94 * W / (x1 - x0), 0.85 * H / (y1 - y0)))
    fmin = math.ceil(min_px * s * 100 / max(1, (y1 - y0)) * 1.0)  # cap/x-height >= ~min_px after resize
    if fmax < fmin:
        return None
    size = r.randint(max(fmin, int(0.45 * fmax)), fmax) if layout == "free" else max(fmin, int(0.9 * fmax))
    f = ImageFont.truetype(FONT_DIR + font, size)
    bx0, by0, bx1, by1 = f.getbbox(text)
    tw, th = bx1 - bx0, by1 - by0
    bg, fg = _colours(r)
    img = Image.new("RGB", (W, H), bg)
    d = ImageDraw.Draw(img)
    if r.random() < 0.2:  # a second, faint background shade
        bg2 = tuple(min(255, max(0, c + r.randint(-40, 40))) for c in bg)
        d.rectangle([r.randrange(W), r.randrange(H), r.randrange(W), r.randrange(H)], fill=bg2)
    if layout == "free":
        x = r.randint(0, max(0, W - tw)) - bx0
        y = r.randint(0, max(0, H - th)) - by0
    else:  # centred, a few pixels of jitter
        x = (W - tw) // 2 - bx0 + r.randint(-2, 2)
        y = (H - th) // 2 - by0 + r.randint(-2, 2)
    d.text((x, y), text, font=f, fill=fg)
    if layout == "free" and r.random() < 0.25:
        img = img.rotate(r.uniform(-6, 6), resample=Image.BICUBIC, fillcolor=bg)
    if r.random() < 0.25:
        a = np.asarray(img).astype(np.int16) + np.random.default_rng(r.randrange(1 << 30)).integers(
            -20, 21, (H, W, 3))
        img = Image.fromarray(a.clip(0, 255).astype(np.uint8))
    return img


def pick_text(r, split):
    """A word or number of split 'train' / 'held_words' / 'held_nums'."""
    if split == "held_words":
        return r.choice(HELD_WORDS)
    if split == "held_nums":
        return str(r.choice(HELD_NUMS))
    if r.random() < 0.7:
        return r.choice(TRAIN_WORDS)
    k = r.random()
    pool = [n for n in TRAIN_NUMS if (n < 10 if k < 0.3 else n >= 10)]
    return str(r.choice(pool))


def make_example(r, grid, split="train", fonts=TRAIN_FONTS):
    """(image resized to grid, text) for one example."""
    rh, rw = grid
    for _ in range(100):
        text = pick_text(r, split)
        img = render(text, r.choice(fonts), rh, rw, r, layout=LAYOUT)
        if img is not None:
            return img.resize((rw, rh), Image.BICUBIC) if img.size != (rw, rh) else img, text
    raise RuntimeError(f"nothing fits in {grid}")


# ---------------------------------------------------------------- prompt
class Prompt:
    """Token ids of the chat prompt around the image and of the answer, as cllm builds them."""

    def __init__(self, tok):
        self.tok = tok
        content = "<|vision_start|><|image_pad|><|vision_end|>\n" + QUESTION
        # models/tiny's template for one user message and the (thinking-on) generation prompt
        text = "<|im_start|>user\n" + content + "<|im_end|>\n<|im_start|>assistant\n<think>\n"
        try:
            import jinja2
            tmpl = json.load(open(os.path.join(tok.dir, "tokenizer_config.json")))["chat_template"]
            assert text == jinja2.Environment().from_string(tmpl).render(
                messages=[{"role": "user", "content": content}], add_generation_prompt=True)
        except ImportError:  # python3-jinja2 not installed: checked against cllm's /tokenize instead
            pass
        ids = tok.encode(text)
        assert ids.count(IMAGE_PAD) == 1, text
        k = ids.index(IMAGE_PAD)
        self.before, self.after = ids[:k], ids[k + 1:]
        self.text = text

    def answer_ids(self, word):
        return self.tok.encode("\n</think>\n\n" + ANSWER.format(word)) + [4002]

    def ids(self, n_img):
        return self.before + [IMAGE_PAD] * n_img + self.after


def rope_index(n_before, gh, gw, n_after, m=2):
    """3-D positions of [text n_before][image (1, gh, gw)][text n_after] (docs/model.md M-RoPE):
    text t = h = w = index; image token at (st, st + row, st + col) over the merged grid; the
    text after resumes at st + max(gh, gw) / m."""
    pos = [[i, i, i] for i in range(n_before)]
    st = n_before
    for row in range(gh // m):
        for col in range(gw // m):
            pos.append([st, st + row, st + col])
    cur = st + max(gh, gw) // m
    pos += [[cur + i] * 3 for i in range(n_after)]
    return torch.tensor(pos, dtype=torch.long)


def batch_tensors(prompt, texts, gh, gw, eot=4000):
    """ids [B, T], pos3 [T, 3], loss target [B, T] (-100 outside the answers), image mask."""
    n_img = gh * gw // 4
    base = prompt.ids(n_img)
    answers = [prompt.answer_ids(t) for t in texts]
    La = max(len(a) for a in answers)
    T = len(base) + La
    ids = torch.full((len(texts), T), eot, dtype=torch.long)
    tgt = torch.full((len(texts), T), -100, dtype=torch.long)
    for b, a in enumerate(answers):
        ids[b, :len(base)] = torch.tensor(base)
        ids[b, len(base):len(base) + len(a)] = torch.tensor(a)
        tgt[b, len(base) - 1:len(base) - 1 + len(a)] = torch.tensor(a)
    k = len(prompt.before)
    pos3 = rope_index(k, gh, gw, T - k - n_img)
    return ids, pos3, tgt, ids == IMAGE_PAD


def run_batch(trunk, tower, prompt, imgs, texts, rms_penalty=0.0, aux_weight=0.0):
    """(loss, per-example all-answer-tokens-argmax-correct) for same-size images."""
    rw, rh = imgs[0].size
    px = torch.from_numpy(np.stack([preprocess(im, rh, rw) for im in imgs]))
    gh, gw = rh // 16, rw // 16
    ids, pos3, tgt, mask = batch_tensors(prompt, texts, gh, gw)
    img_rows = tower(px, gh, gw)
    rows = img_rows.reshape(-1, tower.vc["out_hidden_size"])
    rms = rows.pow(2).mean()
    # auxiliary: the mean row, through the trunk's final norm and lm_head, names the answer's
    # first token (a direct, image-dependent signal; through the frozen trunk alone the tower
    # first settles on one constant steering for every image)
    first = torch.tensor([prompt.answer_ids(t)[3] for t in texts])
    aux = F.cross_entropy(trunk.lm_head(trunk.norm(img_rows.mean(1))), first)
    h = trunk.hidden(ids, input_embeds=(mask, rows), pos3=pos3)
    sel = tgt != -100  # the lm_head only where an answer token is predicted
    logits = trunk.lm_head(h[sel])
    t = tgt[sel]
    # + a small penalty on the rows' mean square: every layer reads them through an RMSNorm, so
    # without it their scale only grows, and Adam's steps on their direction shrink with it
    loss = F.cross_entropy(logits, t) + rms_penalty * rms + aux_weight * aux
    with torch.no_grad():
        wrong = torch.zeros(len(texts), dtype=torch.long).index_add_(
            0, sel.nonzero()[:, 0], (logits.argmax(-1) != t).long())
    return loss, wrong == 0, float(rms) ** 0.5


# ---------------------------------------------------------------- held-out sets
def heldout_sets(n=200):
    """Fixed held-out images (seeded; never the training stream's seed): name -> [(img, text)].
    seen_words: train words/numbers, train fonts, new renderings; new_fonts: train words in
    the two held-out fonts; new_numbers: numbers never trained on; new_words: words never
    trained on (the tower learns a closed vocabulary: expected near 0)."""
    out = {}
    for name, split, fonts, seed in [("seen_words", "train", TRAIN_FONTS, 9001),
                                     ("new_fonts", "train", HELD_FONTS, 9002),
                                     ("new_numbers", "held_nums", TRAIN_FONTS, 9003),
                                     ("new_words", "held_words", TRAIN_FONTS, 9004)]:
        r = random.Random(seed)
        out[name] = [make_example(r, r.choice(GRIDS), split, fonts) for _ in range(n)]
    return out


def eval_torch(trunk, tower, prompt, sets):
    res = {}
    with torch.no_grad():
        for name, ex in sets.items():
            by = {}
            for img, t in ex:
                by.setdefault(img.size, []).append((img, t))
            hits = 0
            for group in by.values():
                _, hit, _ = run_batch(trunk, tower, prompt, [g[0] for g in group], [g[1] for g in group])
                hits += int(hit.sum())
            res[name] = hits / len(ex)
    return res


def eval_server(url, sets, model="tiny"):
    """Greedy chat requests with each held-out image as a PNG data: URL; exact match of the
    content with the expected sentence."""
    import urllib.request
    res, fails = {}, {}
    for name, ex in sets.items():
        hits = 0
        for img, t in ex:
            buf = io.BytesIO()
            img.save(buf, format="PNG")
            body = {"model": model, "temperature": 0, "max_tokens": 24, "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {
                    "url": "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()}},
                {"type": "text", "text": QUESTION}]}],
                "mm_processor_kwargs": {"min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS}}
            rq = urllib.request.Request(url.rstrip("/") + "/v1/chat/completions",
                                        data=json.dumps(body).encode(),
                                        headers={"Content-Type": "application/json"})
            got = json.load(urllib.request.urlopen(rq))["choices"][0]["message"]["content"] or ""
            if got.strip() == ANSWER.format(t).strip():
                hits += 1
            else:
                fails.setdefault(name, []).append((t, got))
        res[name] = hits / len(ex)
    return res, fails


# ---------------------------------------------------------------- export
def write_with_visual(src, dst, tower):
    """dst = src's tensors with their bytes and data offsets untouched (the trunk and the MTP
    head stay bitwise the same) + model.visual.* in BF16 appended after the last of them.
    safetensors only asks that the data be contiguous, not sorted by name."""
    with open(src, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        old = json.loads(f.read(n))
        data = f.read()
    header = {k: v for k, v in old.items() if k != "__metadata__" and not k.startswith("model.visual.")}
    end = max(v["data_offsets"][1] for v in header.values())
    assert sorted((v["data_offsets"] for v in header.values()))[-1][1] == end
    data = data[:end]
    blobs = []
    for k, t in sorted(tower.state_dict().items()):
        b = _bf16_bytes(t)
        header["model.visual." + k] = {"dtype": "BF16", "shape": list(t.shape),
                                       "data_offsets": [end, end + len(b)]}
        blobs.append(b)
        end += len(b)
    header["__metadata__"] = old.get("__metadata__", {"format": "pt"})
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        f.write(data)
        for b in blobs:
            f.write(b)


def add_vision_tokens(model_dir, out_dir):
    tj = json.load(open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8"))
    have = {a["content"] for a in tj["added_tokens"]}
    for c, i in VISION_TOKENS:
        if c not in have:
            tj["added_tokens"].append(dict(id=i, content=c, single_word=False, lstrip=False, rstrip=False,
                                           normalized=False, special=True))
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)  # as bpe.py writes it
    tc = json.load(open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8"))
    for c, i in VISION_TOKENS:
        tc["added_tokens_decoder"][str(i)] = {"content": c, "lstrip": False, "normalized": False,
                                              "rstrip": False, "single_word": False, "special": True}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, ensure_ascii=False, indent=2)


def export(model_dir, out_dir, tower):
    import shutil
    os.makedirs(out_dir, exist_ok=True)
    for fn in os.listdir(model_dir):
        p = os.path.join(model_dir, fn)
        if os.path.isfile(p) and fn not in ("model.safetensors", "config.json"):
            shutil.copy(p, os.path.join(out_dir, fn))
    add_vision_tokens(model_dir, out_dir)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    cfg["image_token_id"] = IMAGE_PAD
    cfg["vision_start_token_id"] = 4007
    cfg["vision_end_token_id"] = 4008
    cfg["vision_config"] = VISION_CONFIG
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    pp = {"do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
          "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "merge_size": 2,
          "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS, "patch_size": 16,
          "temporal_patch_size": 2, "rescale_factor": 1 / 255,
          "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
          "image_processor_type": "Qwen2VLImageProcessorFast"}
    with open(os.path.join(out_dir, "preprocessor_config.json"), "w") as f:
        json.dump(pp, f, indent=2)
        f.write("\n")
    write_with_visual(os.path.join(model_dir, "model.safetensors"),
                      os.path.join(out_dir, "model.safetensors"), tower)


def load_tower(model_dir):
    from model import load_safetensors
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    tower = VisionTower(cfg["vision_config"])
    sd = {k[len("model.visual."):]: v for k, v in load_safetensors(os.path.join(model_dir, "model.safetensors")).items()
          if k.startswith("model.visual.")}
    tower.load_state_dict(sd)
    return tower


def load_trunk(model_dir):
    """The text trunk from its stored BF16 weights, frozen (load_hf skips mtp.* and
    model.visual.*)."""
    trunk, _ = load_hf(model_dir)
    trunk.eval()
    for p in trunk.parameters():
        p.requires_grad_(False)
    return trunk


class Tok(bpe.Tokenizer):
    def __init__(self, model_dir):
        super().__init__(os.path.join(model_dir, "tokenizer.json"))
        self.dir = model_dir
        for c, i in VISION_TOKENS:  # models/tiny before the export has no vision tokens yet
            self.added.setdefault(c, i)
            self.id2tok.setdefault(i, c)


# ---------------------------------------------------------------- checks
def soft_prompt_bound(model_dir, fmt, steps=100):
    trunk, tok = load_trunk(model_dir), Tok(model_dir)
    pr = Prompt(tok)
    words = ["light", "Moses", "water", "king", "42", "seven"]
    pr.answer_ids = lambda w: tok.encode("\n</think>\n\n" + fmt.format(w)) + [4002]
    ids, pos3, tgt, mask = batch_tensors(pr, words, 4, 8)
    torch.manual_seed(0)
    rows = torch.nn.Parameter(torch.randn(len(words) * 8, 192) * 0.05)
    opt = torch.optim.Adam([rows], lr=0.05)
    sel = tgt != -100
    for _ in range(steps + 1):
        lg = trunk.lm_head(trunk.hidden(ids, input_embeds=(mask, rows), pos3=pos3)[sel])
        loss = F.cross_entropy(lg, tgt[sel])
        opt.zero_grad()
        loss.backward()
        opt.step()
    ok = (lg.argmax(-1) == tgt[sel]).long()
    wrong = torch.zeros(len(words), dtype=torch.long).index_add_(0, sel.nonzero()[:, 0], 1 - ok)
    print(f"{fmt!r}: loss {loss.item():.3f}, token accuracy {ok.float().mean().item():.3f}, "
          f"exact {int((wrong == 0).sum())} of {len(words)}")


def check(model_dir):
    """The torch tower against tools/ref/vision_ref.py (float64 numpy, written from the docs) on
    random weights and three grids; M-RoPE with equal positions == plain RoPE; the prompt's ids."""
    import tempfile
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
    import vision_ref
    torch.manual_seed(0)
    tower = VisionTower(VISION_CONFIG)
    with torch.no_grad():
        for p in tower.parameters():  # biases and norms far from their init, as trained ones are
            p.add_(torch.randn_like(p) * 0.05)
    with tempfile.TemporaryDirectory() as d:
        from model import save_safetensors
        save_safetensors(os.path.join(d, "model.safetensors"),
                         {"model.visual." + k: v for k, v in tower.state_dict().items()}, f32_names=("",))
        json.dump({"vision_config": VISION_CONFIG}, open(os.path.join(d, "config.json"), "w"))
        ref = vision_ref.VisionModel(d)
        worst = 0.0
        for gh, gw in [(2, 2), (4, 6), (8, 8), (6, 16), (10, 14)]:
            px = np.random.default_rng(gh * 100 + gw).standard_normal((gh * gw, 1536)).astype(np.float32)
            with torch.no_grad():
                out = tower(torch.from_numpy(px)[None], gh, gw)[0].double().numpy()
            r = ref.encode(px, (1, gh, gw))
            err = np.abs(out - r).max() / max(1.0, np.abs(r).max())
            worst = max(worst, err)
            print(f"tower vs vision_ref grid {gh}x{gw}: max rel err {err:.2e} (max|ref| {np.abs(r).max():.2f})")
        assert worst <= 1e-5, worst
    trunk = load_trunk(model_dir)
    ids = torch.randint(0, 4000, (2, 40))
    with torch.no_grad():
        a = trunk(ids)
        b = trunk(ids, pos3=torch.arange(40)[:, None].repeat(1, 3))
    print(f"text forward, M-RoPE with t = h = w vs 1-D: max |diff| {(a - b).abs().max():.2e}")
    assert (a - b).abs().max() < 1e-5
    tok = Tok(model_dir)
    pr = Prompt(tok)
    print("prompt:", repr(pr.text))
    print("ids before the pad:", pr.before, "after:", pr.after)
    print("answer ids for 'light':", pr.answer_ids("light"))
    print("OK")


# ---------------------------------------------------------------- training
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/tiny")
    ap.add_argument("--run", default="/tmp/cllm_vis")
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--minutes", type=float, default=38)
    ap.add_argument("--ckpt-minutes", type=float, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--rms-penalty", type=float, default=0.003, help="x mean square of the tower's rows")
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--log", default="tools/train/tiny_vision_train_log.jsonl")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--eval-only", action="store_true", help="held-out accuracy of MODEL's tower (torch)")
    ap.add_argument("--eval-server", default="", metavar="URL")
    ap.add_argument("--eval-n", type=int, default=200)
    ap.add_argument("--sample", default="", metavar="PNG")
    ap.add_argument("--sample-word", default="light")
    ap.add_argument("--export-only", default="", metavar="TOWER_PT")
    ap.add_argument("--bound", default="", metavar="FMT")
    ap.add_argument("--words", type=int, default=0, help="train on the first N words of TRAIN_WORDS only")
    ap.add_argument("--init", default="", metavar="TOWER_PT", help="start from this tower")
    ap.add_argument("--aux", type=float, default=0.5, help="weight of the first-token auxiliary loss")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.words:
        del TRAIN_WORDS[a.words:]
    if a.check:
        return check(a.model)
    if a.bound:
        return soft_prompt_bound(a.model, a.bound)
    if a.sample:
        r = random.Random(5)
        bg, fg = (250, 244, 228), (40, 30, 120)
        img = Image.new("RGB", (192, 64), bg)
        f = ImageFont.truetype(FONT_DIR + "DejaVuSerif-Bold.ttf", 38)
        x0, y0, x1, y1 = f.getbbox(a.sample_word)
        ImageDraw.Draw(img).text(((192 - (x1 - x0)) // 2 - x0, (64 - (y1 - y0)) // 2 - y0), a.sample_word,
                                 font=f, fill=fg)
        img.save(a.sample, optimize=True)
        return 0
    if a.eval_server:
        res, fails = eval_server(a.eval_server, heldout_sets(a.eval_n))
        print(json.dumps(res))
        for k, v in fails.items():
            print(k, v[:8])
        return 0
    trunk = load_trunk(a.model)
    tok = Tok(a.model)
    prompt = Prompt(tok)
    if a.eval_only:
        print(json.dumps(eval_torch(trunk, load_tower(a.model), prompt, heldout_sets(a.eval_n))))
        return 0
    torch.manual_seed(a.seed)
    tower = VisionTower(VISION_CONFIG)
    os.makedirs(a.run, exist_ok=True)
    if a.export_only:
        tower.load_state_dict(torch.load(a.export_only)["tower"])
        export(a.model, os.path.join(a.run, "hf"), tower)
        return 0
    if a.init:  # continue from a saved tower (fresh AdamW state and schedule)
        ck = torch.load(a.init)
        tower.load_state_dict(ck["tower"])
    decay = [p for n, p in tower.named_parameters() if p.dim() >= 2]
    nodecay = [p for n, p in tower.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.98))
    held = heldout_sets(64)
    r = random.Random(a.seed)
    log = open(a.log, "a" if a.init else "w")
    t0 = time.time()
    last_ck = t0
    losses, accs = [], []
    step0 = ck["step"] if a.init else 0  # steps counted on from the earlier run in the log
    step = 0
    while step < a.steps:
        el = time.time() - t0
        if el > a.minutes * 60:
            break
        prog = max(step / a.steps, el / (a.minutes * 60))
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, prog))))
        for g in opt.param_groups:
            g["lr"] = lr
        grid = r.choice(GRIDS)
        ex = [make_example(r, grid) for _ in range(a.batch)]
        tower.train()
        loss, hit, rrms = run_batch(trunk, tower, prompt, [e[0] for e in ex], [e[1] for e in ex], a.rms_penalty, a.aux)
        opt.zero_grad()
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(tower.parameters(), 1.0)
        opt.step()
        step += 1
        losses.append(loss.item())
        accs.append(hit.float().mean().item())
        rec = {"step": step0 + step, "t": round(time.time() - t0, 1), "lr": lr, "loss": round(loss.item(), 4),
               "acc": round(accs[-1], 3), "gnorm": round(float(gn), 3), "rows_rms": round(rrms, 3), "grid": grid}
        if step % a.eval_every == 0:
            tower.eval()
            rec["heldout"] = eval_torch(trunk, tower, prompt, held)
            print(step, rec["heldout"], flush=True)
        log.write(json.dumps(rec) + "\n")
        log.flush()
        if step % 20 == 0:
            print(f"step {step} t {time.time() - t0:.0f}s lr {lr:.2e} loss {np.mean(losses[-20:]):.4f} "
                  f"acc {np.mean(accs[-20:]):.3f} rows rms {rrms:.3f}", flush=True)
        if time.time() - last_ck > a.ckpt_minutes * 60:
            torch.save({"tower": tower.state_dict(), "step": step}, os.path.join(a.run, "tower.pt"))
            last_ck = time.time()
    torch.save({"tower": tower.state_dict(), "step": step0 + step}, os.path.join(a.run, "tower.pt"))
    tower.eval()
    export(a.model, os.path.join(a.run, "hf"), tower)
    res = eval_torch(trunk, load_tower(os.path.join(a.run, "hf")), prompt, heldout_sets(a.eval_n))
    fin = {"final": True, "steps": step0 + step, "minutes": round((time.time() - t0) / 60, 1), "heldout_bf16": res}
    log.write(json.dumps(fin) + "\n")
    print(json.dumps(fin))
    return 0


if __name__ == "__main__":
    sys.exit(main())
