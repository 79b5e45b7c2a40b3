#!/usr/bin/python3
"""Held-out perplexity of an exported model (weights as stored, e.g. BF16, math in float32).
  /usr/bin/python3 tools/train/eval_ppl.py MODEL_DIR [RUN_DIR=/tmp/cllm_run] [--seq 256]
Uses the test split tokens cached by train.py (RUN/tokens.npz), non-overlapping 256-token windows,
every token after the first of each window scored (same as train.py's final evaluation)."""
import json, math, os, sys
import numpy as np
import torch
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import load_hf

mdir = sys.argv[1]
run = sys.argv[2] if len(sys.argv) > 2 and not sys.argv[2].startswith("--") else "/tmp/cllm_run"
T = int(sys.argv[sys.argv.index("--seq") + 1]) if "--seq" in sys.argv else 256
torch.set_num_threads(1)
m, cfg = load_hf(mdir)
m.eval()
te = np.load(os.path.join(run, "tokens.npz"))["test"]
starts = np.arange(0, len(te) - T - 1, T)
tot, n = 0.0, 0
with torch.no_grad():
    for i in range(0, len(starts), 16):
        x = torch.from_numpy(np.stack([te[s:s + T + 1] for s in starts[i:i + 16]]).astype(np.int64))
        lg = m(x[:, :-1])
        tot += F.cross_entropy(lg.reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1), reduction="sum").item()
        n += x[:, 1:].numel()
print(json.dumps({"model": mdir, "tokens_scored": n, "test_loss": tot / n, "test_ppl": math.exp(tot / n)}))
