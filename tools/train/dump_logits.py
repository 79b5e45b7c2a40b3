#!/usr/bin/python3
"""Golden logits from the PyTorch reference forward (float32 math) for cllm's tests.

  /usr/bin/python3 tools/train/dump_logits.py [MODEL_DIR=models/tiny] [OUT_DIR=tests/golden/tiny]

For each fixed prompt below writes OUT_DIR/<name>.f32 = raw little-endian float32
[n_tokens][vocab_size] (logits of every position, vocab_size from config.json, i.e. padded rows
included) and OUT_DIR/<name>.json = {"token_ids", "shape", "text", ...}.
Weights are read from model.safetensors (BF16 -> float32 exactly) and all math is float32.
The GDN layers use the token-by-token recurrence (docs/model.md §2.4); the chunked form (chunk 64) is run
too and the max |difference| is recorded in the sidecar.
"""
import json, os, sys
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import load_hf

PROMPTS = {  # token ids for models/tiny/tokenizer.json; "text" is what they decode to
    "kjv_short": ("In the beginning God created the heaven and the earth.",
                  [73, 110, 258, 2876, 419, 2917, 286, 258, 919, 267, 258, 739, 46]),
    "chat_think": ("<|im_start|>user\nWhich book is this from? \"Jesus wept.\"<|im_end|>\n"
                   "<|im_start|>assistant\n<think>\n",
                   [4001, 366, 10, 783, 701, 327, 416, 374, 63, 729, 74, 279, 306, 3431, 860,
                    4002, 10, 4001, 367, 10, 4003, 10]),
    "zh_poem": ("《静夜思》\n李白\n床前明月光，疑是地上霜。",
                [389, 2521, 1095, 1779, 505, 2426, 10, 956, 138, 1914, 1323, 1086, 2304, 796, 150,
                 145, 450, 1789, 1065, 1642, 156, 311]),
    "single": ("And", [869]),
    "kjv_long": ("Genesis 1\n1:1 In the beginning God created the heaven and the earth.\n1:2 And the earth "
                 "was without form, and void; and darkness was upon the face of the deep. And the Spirit "
                 "of God moved upon the face of the waters.\n1:3 And God said, Let there be light: and "
                 "there was light.\n1:4 And God saw the light, that it was good: and God divided the "
                 "light from the darkness.\n",
                 [71, 2008, 32, 49, 10, 49, 58, 49, 1427, 258, 2876, 419, 2917, 286, 258, 919, 267,
                  258, 739, 284, 49, 58, 50, 309, 258, 739, 397, 1250, 333, 109, 44, 267, 517, 111,
                  323, 59, 267, 2207, 397, 469, 258, 1224, 268, 258, 3151, 46, 309, 258, 2024, 268,
                  419, 3296, 469, 258, 1224, 268, 258, 1545, 284, 49, 58, 51, 309, 419, 420, 44, 1244,
                  415, 301, 1385, 58, 267, 415, 397, 1385, 284, 49, 58, 52, 309, 419, 1031, 258, 1385,
                  44, 307, 362, 397, 845, 58, 267, 419, 3566, 258, 1385, 374, 258, 2207, 284]),
}


def main():
    mdir = sys.argv[1] if len(sys.argv) > 1 else "models/tiny"
    odir = sys.argv[2] if len(sys.argv) > 2 else "tests/golden/tiny"
    torch.set_num_threads(1)
    os.makedirs(odir, exist_ok=True)
    model, cfg = load_hf(mdir)
    model.eval()
    try:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import bpe
        tok = bpe.Tokenizer(os.path.join(mdir, "tokenizer.json"))
    except Exception:
        tok = None
    for name, (text, ids) in PROMPTS.items():
        if tok is not None:
            assert tok.encode(text) == ids, (name, tok.encode(text))
        x = torch.tensor([ids])
        with torch.no_grad():
            model.set_recurrent(True)
            lr = model(x)[0].float()
            model.set_recurrent(False)
            lc = model(x)[0].float()
        a = lr.numpy().astype("<f4")
        a.tofile(os.path.join(odir, f"{name}.f32"))
        top = a.argmax(-1).tolist()
        side = {"text": text, "token_ids": ids, "shape": list(a.shape), "dtype": "float32",
                "layout": "row-major [n_tokens][vocab_size], raw little-endian, no header",
                "model": "models/tiny", "gdn": "token-by-token recurrence, float32",
                "max_abs_diff_vs_chunked64": float((lr - lc).abs().max()),
                "argmax_per_position": top}
        json.dump(side, open(os.path.join(odir, f"{name}.json"), "w"), ensure_ascii=False, indent=1)
        print(name, a.shape, "chunked-vs-recurrent max diff", side["max_abs_diff_vs_chunked64"])


if __name__ == "__main__":
    main()
