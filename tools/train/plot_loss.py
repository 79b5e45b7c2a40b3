#!/usr/bin/python3
"""Plot RUN/log.jsonl (train loss, smoothed, and periodic held-out loss) to OUT.png.
  /usr/bin/python3 tools/train/plot_loss.py LOG.jsonl models/tiny/loss.png [PHASE2_FIRST_STEP]"""
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

recs = [json.loads(l) for l in open(sys.argv[1])]
tr = [r for r in recs if "loss" in r]
te = [r for r in recs if "test_loss" in r]
s, ema, xs, ys = None, [], [], []
for r in tr:
    s = r["loss"] if s is None else 0.95 * s + 0.05 * r["loss"]
    xs.append(r["step"]); ys.append(r["loss"]); ema.append(s)
fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
ax.plot(xs, ys, color="#9ecae1", lw=0.6, label="train loss (per step)")
ax.plot(xs, ema, color="#08519c", lw=1.5, label="train loss (EMA 0.95)")
ax.plot([r["step"] for r in te], [r["test_loss"] for r in te], "o-", color="#d94801", ms=3,
        lw=1, label="held-out loss (16x256-token sample)")
fin = [r for r in recs if "test_loss_full" in r]
if fin:
    for f in fin:
        ax.plot([f["step"]], [f["test_loss_full"]], "*", color="#d94801", ms=9)
    ax.axhline(fin[-1]["test_loss_full"], color="#d94801", ls=":", lw=1,
               label=f"held-out loss, full test split (final {fin[-1]['test_loss_full']:.3f})")
ax.set_ylim(bottom=max(0, min(ema) - 0.5), top=min(9, max(ys) + 0.2))
if len(sys.argv) > 3:
    ax.axvline(int(sys.argv[3]), color="gray", ls="--", lw=0.8)
    ax.text(int(sys.argv[3]), ax.get_ylim()[1] * 0.97, "phase 2: chat-split fine-tune \u2192 ", ha="right",
            fontsize=7, va="top", color="gray")
ax.set_xlabel("step (8 x 256 tokens)")
ax.set_ylabel("cross-entropy (nats/token)")
ax.set_title("cllm tiny Qwen3.5-MoE (4.9M params) on KJV + Chinese poems + ChatML")
ax.grid(alpha=0.3)
ax.legend(fontsize=8, loc="center right")
fig.tight_layout()
fig.savefig(sys.argv[2])
print("wrote", sys.argv[2])
