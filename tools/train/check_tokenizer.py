#!/usr/bin/python3
"""Compare bpe.Tokenizer (Python) with the HF reference tokenizer (npm @anush008/tokenizers).
Usage: check_tokenizer.py TOKENIZER_JSON CORPUS_DIR [N_LINES]
Needs: cd /tmp/tokcheck && npm install @anush008/tokenizers   (scratch dir, not the repo)."""
import json, os, random, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe

tj, corpus = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 400
rng = random.Random(0)
docs = [json.loads(l)["text"] for l in open(os.path.join(corpus, "test.jsonl"), encoding="utf-8")]
lines = []
for d in rng.sample(docs, min(n // 2, len(docs))):
    lines.append(d)                      # whole documents (incl. ChatML specials)
    lines.extend(rng.sample(d.split("\n"), 1))
lines += [
    "Hello world", "  leading spaces and trailing   ", "tabs\tand\r\nCRLF\n\n\nnewlines",
    "don't WE'LL it's I'M you'RE", "numbers 1234567 and 3.14159", "café naïve e\u0301 (NFD e + acute)",
    "Ａｂｃ１２３ full-width", "emoji 😀🎉 and ZWJ 👩\u200d💻", "नमस्ते दुनिया (Devanagari marks)",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nhello<|im_end|>",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<|endoftext|><|endoftext|>x<|im_end", "???!!! ... ---",
    "日本語のテキスト、한국어 텍스트", "   \n   \n", "", " ", "a  b   c", "x\u00a0y\u3000z",
]
lines = lines[:max(n, 0) + 40]
tmp = "/tmp/tokcheck/lines.jsonl"
with open(tmp, "w", encoding="utf-8") as f:
    for l in lines:
        if l:
            f.write(json.dumps(l, ensure_ascii=False) + "\n")
lines = [l for l in lines if l]
env = dict(os.environ, NODE_PATH="/tmp/tokcheck/node_modules")
res = subprocess.run(["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_tokenizer.js"), tj, tmp],
                     capture_output=True, text=True, env=env, check=True).stdout.strip().split("\n")
tok = bpe.Tokenizer(tj)
bad = 0
ntok = 0
for l, r in zip(lines, res):
    r = json.loads(r)
    mine = tok.encode(l)
    ntok += len(mine)
    if mine != r["ids"]:
        bad += 1
        if bad <= 5:
            print("MISMATCH", repr(l[:80]), mine[:20], r["ids"][:20])
    import unicodedata
    if tok.decode(mine) != unicodedata.normalize("NFC", l) or r["dec"] != unicodedata.normalize("NFC", l):
        print("DECODE MISMATCH", repr(l[:60]), repr(r["dec"][:60]))
print(f"{len(lines)} strings, {ntok} tokens, {bad} mismatches")
sys.exit(1 if bad else 0)
