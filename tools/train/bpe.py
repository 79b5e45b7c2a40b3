#!/usr/bin/python3
"""Byte-level BPE tokenizer for the tiny cllm model, HF tokenizer.json compatible.

Pipeline (identical to Qwen3.5, docs/model.md §4): added-token split -> NFC -> Split(regex, Isolated)
-> ByteLevel(add_prefix_space=false, use_regex=false) -> BPE (merges by rank) ; decoder ByteLevel.

The Python `re` module has no \\p{..} classes (and the `regex` module is not installed), so
the regex is rebuilt with explicit character classes generated from `unicodedata`
(L = Lu Ll Lt Lm Lo, M = Mn Mc Me, N = Nd Nl No, \\s = Unicode White_Space). The
tokenizer.json keeps the original \\p{..} pattern for Oniguruma.

Usage:
  bpe.py train CORPUS_DIR OUT_DIR [--vocab 4000]   -> OUT_DIR/tokenizer.json, tokenizer_config.json
"""
import json, os, re, sys, unicodedata
from collections import Counter, defaultdict

QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                  r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

ADDED = [  # (content, special)
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<think>", False), ("</think>", False), ("<tool_call>", False), ("</tool_call>", False),
    # image placeholders (train_vision.py; ids 4007-4009 with the 4000-token vocabulary)
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|image_pad|>", True),
]

WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006" \
              "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


def _class_ranges(prefixes):
    out, start, prev = [], None, None
    for cp in range(0x110000):
        ok = unicodedata.category(chr(cp))[0] in prefixes
        if ok and start is None:
            start = cp
        if not ok and start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, 0x10FFFF))
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
                   for a, b in out)


_PAT = None


def pattern():
    global _PAT
    if _PAT is None:
        L, M, N = _class_ranges("L"), _class_ranges("M"), _class_ranges("N")
        S = "".join(re.escape(c) for c in WHITE_SPACE)
        p = (rf"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n{L}{N}]?[{L}{M}]+|[{N}]"
             rf"| ?[^{S}{L}{M}{N}]+[\r\n]*|[{S}]*[\r\n]+|[{S}]+(?![^{S}])|[{S}]+")
        _PAT = re.compile(p)
    return _PAT


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()
U2B = {v: k for k, v in B2U.items()}


def pretokenize(text):
    """text without added tokens -> list of byte-level strings"""
    text = unicodedata.normalize("NFC", text)
    return ["".join(B2U[b] for b in m.group(0).encode("utf-8")) for m in pattern().finditer(text)]


def split_added(text, added=tuple(a for a, _ in ADDED)):
    """-> list of (piece, is_added). Leftmost-longest match of added tokens."""
    rx = re.compile("|".join(re.escape(a) for a in sorted(added, key=len, reverse=True)))
    out, pos = [], 0
    for m in rx.finditer(text):
        if m.start() > pos:
            out.append((text[pos:m.start()], False))
        out.append((m.group(0), True))
        pos = m.end()
    if pos < len(text):
        out.append((text[pos:], False))
    return out


def train(texts, n_vocab):
    words = Counter()
    for t in texts:
        for piece, is_added in split_added(t):
            if not is_added:
                words.update(pretokenize(piece))
    base = [B2U[b] for b in range(256)]
    vocab = {s: i for i, s in enumerate(base)}
    wlist = [(list(w), c) for w, c in words.items()]
    pair_counts = Counter()
    where = defaultdict(set)
    for wi, (syms, c) in enumerate(wlist):
        for a, b in zip(syms, syms[1:]):
            pair_counts[(a, b)] += c
            where[(a, b)].add(wi)
    merges = []
    while len(vocab) < n_vocab and pair_counts:
        # deterministic: highest count, then smallest pair
        best = max(pair_counts.items(), key=lambda kv: (kv[1], tuple(-ord(ch) for ch in kv[0][0] + "\0" + kv[0][1])))[0]
        if pair_counts[best] < 2:
            break
        a, b = best
        new = a + b
        merges.append(best)
        vocab[new] = len(vocab)
        for wi in list(where[best]):
            syms, c = wlist[wi]
            # remove old pair counts of this word
            for p in zip(syms, syms[1:]):
                pair_counts[p] -= c
                if pair_counts[p] <= 0:
                    del pair_counts[p]
            i, ns = 0, []
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    ns.append(new)
                    i += 2
                else:
                    ns.append(syms[i])
                    i += 1
            wlist[wi] = (ns, c)
            for p in zip(ns, ns[1:]):
                pair_counts[p] += c
                where[p].add(wi)
        del where[best]
        pair_counts.pop(best, None)
    return vocab, merges


class Tokenizer:
    def __init__(self, path):
        tj = json.load(open(path, encoding="utf-8"))
        self.vocab = tj["model"]["vocab"]
        self.ranks = {}
        for i, m in enumerate(tj["model"]["merges"]):
            a, b = m.split(" ") if isinstance(m, str) else m
            self.ranks[(a, b)] = i
        self.added = {t["content"]: t["id"] for t in tj["added_tokens"]}
        self.id2tok = {i: s for s, i in self.vocab.items()}
        self.id2tok.update({i: s for s, i in self.added.items()})
        self.cache = {}

    def bpe(self, w):
        if w in self.cache:
            return self.cache[w]
        syms = list(w)
        while len(syms) > 1:
            best, bi = None, -1
            for i in range(len(syms) - 1):
                r = self.ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            syms = syms[:bi] + [syms[bi] + syms[bi + 1]] + syms[bi + 2:]
        ids = [self.vocab[s] for s in syms]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        ids = []
        for piece, is_added in split_added(text, tuple(self.added)):
            if is_added:
                ids.append(self.added[piece])
            else:
                for w in pretokenize(piece):
                    ids.extend(self.bpe(w))
        return ids

    def decode(self, ids):
        out = []
        buf = bytearray()
        for i in ids:
            s = self.id2tok[i]
            if s in self.added:
                out.append(buf.decode("utf-8", errors="replace"))
                buf = bytearray()
                out.append(s)
            else:
                buf.extend(U2B[c] for c in s)
        out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)


CHAT_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- set ns = namespace(found=false, last_query_index=messages|length - 1) %}"
    "{%- for message in messages[::-1] %}"
    "{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if not ns.found and message.role == 'user' %}"
    "{%- set ns.found = true %}"
    "{%- set ns.last_query_index = index %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{%- set content = message.content %}"
    "{%- set reasoning_content = '' %}"
    "{%- if message.reasoning_content is string %}"
    "{%- set reasoning_content = message.reasoning_content %}"
    "{%- elif '</think>' in content %}"
    "{%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{%- if loop.index0 > ns.last_query_index %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)


def write(out_dir, vocab, merges):
    os.makedirs(out_dir, exist_ok=True)
    n = len(vocab)
    added = [dict(id=n + i, content=c, single_word=False, lstrip=False, rstrip=False,
                  normalized=False, special=sp) for i, (c, sp) in enumerate(ADDED)]
    tj = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN35_PATTERN}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                           "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")} for a in added},
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 4096,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)


def main():
    if len(sys.argv) < 4 or sys.argv[1] != "train":
        print(__doc__)
        sys.exit(2)
    corpus, out = sys.argv[2], sys.argv[3]
    nv = int(sys.argv[sys.argv.index("--vocab") + 1]) if "--vocab" in sys.argv else 4000
    texts = [json.loads(l)["text"] for l in open(os.path.join(corpus, "train.jsonl"), encoding="utf-8")]
    vocab, merges = train(texts, nv)
    write(out, vocab, merges)
    print(f"vocab {len(vocab)} (+{len(ADDED)} added), merges {len(merges)} -> {out}")


if __name__ == "__main__":
    main()
