#!/usr/bin/python3
"""Train an MTP head (docs/model.md §2.7) on the FROZEN trunk of an exported tiny model.

  /usr/bin/python3 tools/train/train_mtp.py --model models/tiny --corpus /tmp/cllm_corpus \
      --run /tmp/cllm_mtp --steps N --minutes M [--threads 1]

The trunk is loaded from MODEL/model.safetensors (its BF16 values, as the server runs it) and
never updated. Per step: trunk final-normed hidden h_p and embed(t_{p+1}) without gradient, the
MTP module on top, loss = cross-entropy of t_{p+2} through the trunk's (frozen) lm_head, plus the
MTP layer's router aux loss. At the end (and every --ckpt-minutes) RUN/hf/ gets MODEL's files
with model.safetensors = MODEL's tensors byte for byte + the mtp.* tensors in BF16, and
config.json with mtp_num_hidden_layers 1. `--eval-only RUN/hf` reports held-out acceptance;
`--export-only RUN/mtp.pt` rewrites RUN/hf from a saved head. MODEL may already carry an MTP
head: load_hf skips mtp.* and the export replaces them.
"""
import argparse, json, math, os, random, shutil, struct, sys, time
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe
from model import MTP, load_hf, load_safetensors, _bf16_bytes
from train import encode_split


def mtp_tensors(mtp):
    """The checkpoint's names for the MTP module. Official Qwen3.5 checkpoints (and cllm's
    tensor plan) store the MTP layer's routed experts per expert even where the main layers are
    fused: experts.{e}.gate_proj / up_proj [I, H] (rows 0..I-1 / I..2I-1 of gate_up_proj[e]) and
    experts.{e}.down_proj [H, I]."""
    out = {}
    for k, t in mtp.state_dict().items():
        if k.endswith("mlp.experts.gate_up_proj"):
            base, I = "mtp." + k[:-len("gate_up_proj")], t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = t[e, :I]
                out[f"{base}{e}.up_proj.weight"] = t[e, I:]
        elif k.endswith("mlp.experts.down_proj"):
            base = "mtp." + k[:-len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = t[e]
        else:
            out["mtp." + k] = t
    return out


def load_mtp(mtp, path):
    """Inverse of mtp_tensors: mtp.* of a safetensors file into the module."""
    sd = {n[4:]: t for n, t in load_safetensors(path).items() if n.startswith("mtp.")}
    own = {}
    for k, t in mtp.state_dict().items():
        if k.endswith("mlp.experts.gate_up_proj"):
            b = k[:-len("gate_up_proj")]
            own[k] = torch.stack([torch.cat([sd[f"{b}{e}.gate_proj.weight"], sd[f"{b}{e}.up_proj.weight"]])
                                  for e in range(t.shape[0])])
        elif k.endswith("mlp.experts.down_proj"):
            b = k[:-len("down_proj")]
            own[k] = torch.stack([sd[f"{b}{e}.down_proj.weight"] for e in range(t.shape[0])])
        else:
            own[k] = sd[k]
    mtp.load_state_dict(own)


def write_with_mtp(src, dst, mtp):
    """dst = src's tensors with their stored bytes untouched (so the trunk is bitwise the same)
    + mtp.* in BF16 (RNE, as save_safetensors). Names sorted as save_safetensors writes them;
    `mtp.` sorts after `model.language_model.`, so the trunk's data offsets do not move."""
    with open(src, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        old = json.loads(f.read(n))
        data = f.read()
    blobs = {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
             for k, v in old.items() if k != "__metadata__" and not k.startswith("mtp.")}
    for k, t in mtp_tensors(mtp).items():
        blobs[k] = ("BF16", list(t.shape), _bf16_bytes(t))
    header, off = {}, 0
    for k in sorted(blobs):
        dt, shp, b = blobs[k]
        header[k] = {"dtype": dt, "shape": shp, "data_offsets": [off, off + len(b)]}
        off += len(b)
    header["__metadata__"] = old.get("__metadata__", {"format": "pt"})
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for k in sorted(blobs):
            f.write(blobs[k][2])


def export(model_dir, out_dir, mtp):
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(model_dir):
        if f not in ("model.safetensors", "config.json") and os.path.isfile(os.path.join(model_dir, f)):
            shutil.copy(os.path.join(model_dir, f), os.path.join(out_dir, f))
    write_with_mtp(os.path.join(model_dir, "model.safetensors"),
                   os.path.join(out_dir, "model.safetensors"), mtp)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    cfg["text_config"]["mtp_num_hidden_layers"] = 1
    json.dump(cfg, open(os.path.join(out_dir, "config.json"), "w"), indent=2)


@torch.no_grad()
def mtp_chain_eval(trunk, mtp, toks, k, T=256):
    """Teacher-forced acceptance on a token stream, in non-overlapping windows of T.
    Draft j (1..k) from position p: row input = (t_{p+j}, hidden = h_p for j = 1 else the MTP's
    own output of draft j-1), at MTP position p+j-1, attending over the MTP rows 0..p built from
    the trunk's hidden (what the engine's MTP KV holds after a verify) plus the chain's own
    earlier drafts -- exactly the engine's chained draft when drafts 1..j-1 were accepted.
    Counts, per j: hits vs the text token t_{p+j+1} and vs the trunk's greedy token at p+j, each
    conditional on all earlier drafts of the chain agreeing with the same reference.
    Returns dict: n rows, text[j], greedy[j] (cumulative-agreement counts)."""
    lay = mtp.layers[0]
    at = lay.self_attn
    res = {"n": 0, "text": [0] * k, "greedy": [0] * k}
    for s in range(0, len(toks) - T - k - 1, T):
        x = torch.from_numpy(toks[s:s + T + k + 1].astype(np.int64))[None]
        hid = trunk.hidden(x)                 # [1, T+k+1, H]
        greedy = trunk.lm_head(hid).argmax(-1)[0]   # greedy[q] = trunk's pick for t_{q+1}
        emb = trunk.embed_tokens(x)
        P = T                                  # chain starts p = 0..T-1
        # step 1 over the whole window: the MTP KV the engine holds (rows from trunk hidden)
        xin = mtp.fc(torch.cat([mtp.pre_fc_norm_embedding(emb[:, 1:P + 1]),
                                mtp.pre_fc_norm_hidden(hid[:, :P])], -1))
        xn = lay.input_layernorm(xin)
        K1, V1 = _kv(at, xn, torch.arange(P))
        a = _attn(at, xn, torch.arange(P), K1, V1, [], [])
        h = xin + a
        h = h + lay.mlp(lay.post_attention_layernorm(h))
        out = mtp.norm(h)
        ok_t = torch.ones(P, dtype=torch.bool)
        ok_g = torch.ones(P, dtype=torch.bool)
        extraK, extraV = [], []
        pidx = torch.arange(P)
        for j in range(1, k + 1):
            if j > 1:  # chained row: token t_{p+j}, hidden = previous output, position p+j-1
                xin = mtp.fc(torch.cat([mtp.pre_fc_norm_embedding(emb[:, pidx + j]),
                                        mtp.pre_fc_norm_hidden(out)], -1))
                xn = lay.input_layernorm(xin)
                kj, vj = _kv(at, xn, pidx + j - 1)
                a = _attn(at, xn, pidx + j - 1, K1, V1, extraK + [kj], extraV + [vj])
                extraK.append(kj)
                extraV.append(vj)
                h = xin + a
                h = h + lay.mlp(lay.post_attention_layernorm(h))
                out = mtp.norm(h)
            pred = trunk.lm_head(out).argmax(-1)[0]
            ok_t &= pred == x[0, pidx + j + 1]
            ok_g &= pred == greedy[pidx + j]
            res["text"][j - 1] += int(ok_t.sum())
            res["greedy"][j - 1] += int(ok_g.sum())
        res["n"] += P
    return res


def _kv(at, xn, pos):
    """K/V of the MTP attention for rows xn [1,P,H] at positions pos [P]: [P, nkv, hd] after
    k_norm + RoPE (model.GatedAttention's math, per-row positions)."""
    from model import rope_tables, apply_rope
    P = xn.shape[1]
    k = at.k_norm(at.k_proj(xn).reshape(P, at.nkv, at.hd))
    v = at.v_proj(xn).reshape(P, at.nkv, at.hd)
    cos, sin = rope_tables(int(pos.max()) + 1, at.rot, at.theta)
    k = apply_rope(k.transpose(0, 1), cos[pos], sin[pos], at.rot).transpose(0, 1)
    return k, v


def _attn(at, xn, pos, K1, V1, eK, eV):
    """Row i (chain start p = i) attends over K1 rows 0..i and its chain's own rows eK (one per
    earlier chained draft, [P, nkv, hd] each). Returns o_proj output [1,P,H]."""
    from model import rope_tables, apply_rope
    P = xn.shape[1]
    qg = at.q_proj(xn).reshape(P, at.nh, 2 * at.hd)
    q, gate = qg[..., :at.hd], qg[..., at.hd:]
    q = at.q_norm(q)
    cos, sin = rope_tables(int(pos.max()) + 1, at.rot, at.theta)
    q = apply_rope(q.transpose(0, 1), cos[pos], sin[pos], at.rot)        # [nh, P, hd]
    rep = at.nh // at.nkv
    Kb = K1.transpose(0, 1).repeat_interleave(rep, 0)                      # [nh, P, hd]
    Vb = V1.transpose(0, 1).repeat_interleave(rep, 0)
    sc = (q @ Kb.transpose(-1, -2)) * at.hd ** -0.5                        # [nh, P, P]
    sc = sc.masked_fill(torch.ones(P, P, dtype=torch.bool).triu(1), float("-inf"))
    if eK:
        E = torch.stack([e.transpose(0, 1).repeat_interleave(rep, 0) for e in eK], 2)  # [nh,P,J,hd]
        EV = torch.stack([e.transpose(0, 1).repeat_interleave(rep, 0) for e in eV], 2)
        se = (q[:, :, None, :] * E).sum(-1) * at.hd ** -0.5                # [nh, P, J]
        w = torch.softmax(torch.cat([sc, se], -1), -1)
        o = w[..., :P] @ Vb + (w[..., P:, None] * EV).sum(2)
    else:
        o = torch.softmax(sc, -1) @ Vb
    o = o.transpose(0, 1) * torch.sigmoid(gate)                            # [P, nh, hd]
    return at.o_proj(o.reshape(1, P, -1))


def heldout_split(tok, path, eot):
    """Held-out tokens per document kind (kjv / poem / chat) and all together."""
    docs = [json.loads(l) for l in open(path, encoding="utf-8")]
    out = {}
    for d in docs:
        out.setdefault(d["kind"], []).extend(tok.encode(d["text"]) + [eot])
    return {k: np.array(v, dtype=np.int32) for k, v in out.items()}


def report(trunk, mtp, tok, corpus, k):
    eot = tok.added["<|endoftext|>"]
    rows = {}
    for kind, ids in sorted(heldout_split(tok, os.path.join(corpus, "test.jsonl"), eot).items()):
        r = mtp_chain_eval(trunk, mtp, ids, k)
        rows[kind] = r
        print(f"held-out {kind}: rows {r['n']}; teacher-forced, cumulative per draft position "
              f"vs text: " + " ".join(f"{c / r['n']:.3f}" for c in r["text"]) +
              " | vs trunk greedy: " + " ".join(f"{c / r['n']:.3f}" for c in r["greedy"]), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/tiny")
    ap.add_argument("--corpus", default="/tmp/cllm_corpus")
    ap.add_argument("--run", default="/tmp/cllm_mtp")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--minutes", type=float, default=20)
    ap.add_argument("--ckpt-minutes", type=float, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--chat-split", type=float, default=0.5, help="as train.py phase 2")
    ap.add_argument("--eval-k", type=int, default=3)
    ap.add_argument("--eval-only", default="", help="a model dir with mtp.* tensors: report and exit")
    ap.add_argument("--export-only", default="", metavar="MTP_PT",
                    help="write RUN/hf from a saved RUN/mtp.pt and exit")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    os.makedirs(a.run, exist_ok=True)
    tok = bpe.Tokenizer(os.path.join(a.model, "tokenizer.json"))
    eot = tok.added["<|endoftext|>"]

    trunk, cfg = load_hf(a.model)   # the trunk only (mtp.* skipped)
    trunk.eval()
    trunk.requires_grad_(False)
    mtp = MTP(cfg)
    if a.eval_only:
        load_mtp(mtp, os.path.join(a.eval_only, "model.safetensors"))
        mtp.eval()
        report(trunk, mtp, tok, a.corpus, a.eval_k)
        return
    if a.export_only:
        mtp.load_state_dict(torch.load(a.export_only)["mtp"])
        export(a.model, os.path.join(a.run, "hf"), mtp)
        return
    mtp.init_from_trunk(trunk)

    cache = os.path.join(a.run, "tokens.npz")
    if os.path.exists(cache):
        tr = np.load(cache)["train"]
    else:
        tr = encode_split(tok, os.path.join(a.corpus, "train.jsonl"), eot, {"poem": 3},
                          a.chat_split, a.seed)
        np.savez(cache, train=tr)
    te = np.concatenate(list(heldout_split(tok, os.path.join(a.corpus, "test.jsonl"), eot).values()))
    print(f"train tokens {len(tr)}, test tokens {len(te)}", flush=True)
    nparam = sum(p.numel() for p in mtp.parameters())
    print(f"mtp params {nparam}", flush=True)

    decay = [p for n, p in mtp.named_parameters() if p.dim() >= 2]
    nodecay = [p for n, p in mtp.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    rng = np.random.default_rng(a.seed)
    T = a.seq

    def loss_on(x):
        """x [B, T+2]: trunk on x[:, :T] -> h_p; MTP rows p = 0..T-1 read embed(x[p+1]);
        target x[p+2]."""
        with torch.no_grad():
            hid = trunk.hidden(x[:, :T])
            emb = trunk.embed_tokens(x[:, 1:T + 1])
        out = mtp(emb, hid)
        lg = trunk.lm_head(out)
        return F.cross_entropy(lg.reshape(-1, lg.shape[-1]), x[:, 2:].reshape(-1)), lg

    te_starts = np.arange(0, len(te) - T - 2, T)
    eval_sub = te_starts[np.linspace(0, len(te_starts) - 1, 8).astype(int)]

    @torch.no_grad()
    def evaluate(starts):
        mtp.eval()
        tot, hit, n = 0.0, 0, 0
        for i in range(0, len(starts), 8):
            x = torch.from_numpy(np.stack([te[s:s + T + 2] for s in starts[i:i + 8]]).astype(np.int64))
            l, lg = loss_on(x)
            tot += l.item() * x[:, 2:].numel()
            hit += int((lg.argmax(-1) == x[:, 2:]).sum())
            n += x[:, 2:].numel()
        mtp.train()
        return tot / n, hit / n

    l0, acc0 = evaluate(eval_sub)
    print(json.dumps({"step": 0, "test_loss": l0, "test_acc1": acc0}), flush=True)
    log = open(os.path.join(a.run, "log.jsonl"), "a")
    log.write(json.dumps({"step": 0, "test_loss": l0, "test_acc1": acc0}) + "\n")
    t0 = last_ck = time.time()
    step, budget = 0, a.minutes * 60
    mtp.train()
    while True:
        prog = max(step / a.steps, (time.time() - t0) / budget)
        if prog >= 1.0:
            break
        lr = a.lr * (step + 1) / a.warmup if step < a.warmup else \
            a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(prog, 1.0))))
        for g in opt.param_groups:
            g["lr"] = lr
        st = rng.integers(0, len(tr) - T - 2, a.batch)
        x = torch.from_numpy(np.stack([tr[s:s + T + 2] for s in st]).astype(np.int64))
        ts = time.time()
        loss, _ = loss_on(x)
        aux = mtp.aux_loss()
        (loss + a.aux_coef * aux).backward()
        gn = torch.nn.utils.clip_grad_norm_(mtp.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        rec = dict(step=step, loss=loss.item(), aux=float(aux), lr=lr, gnorm=float(gn),
                   t=round(time.time() - t0, 1), dt=round(time.time() - ts, 3))
        if step % 50 == 0 or step == 1:
            rec["test_loss"], rec["test_acc1"] = evaluate(eval_sub)
            print(json.dumps(rec), flush=True)
        log.write(json.dumps(rec) + "\n")
        log.flush()
        if time.time() - last_ck > a.ckpt_minutes * 60:
            torch.save({"mtp": mtp.state_dict(), "step": step}, os.path.join(a.run, "mtp.pt"))
            export(a.model, os.path.join(a.run, "hf"), mtp)
            last_ck = time.time()
    torch.save({"mtp": mtp.state_dict(), "step": step}, os.path.join(a.run, "mtp.pt"))
    export(a.model, os.path.join(a.run, "hf"), mtp)
    # what ships is BF16: evaluate the rounded weights
    with torch.no_grad():
        for p in mtp.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    fl, facc = evaluate(te_starts)
    final = dict(step=step, wall_s=round(time.time() - t0, 1), test_loss_full_bf16=fl,
                 test_acc1_full_bf16=facc)
    log.write(json.dumps(final) + "\n")
    print(json.dumps(final), flush=True)
    mtp.eval()
    rows = report(trunk, mtp, tok, a.corpus, a.eval_k)
    json.dump(rows, open(os.path.join(a.run, "heldout.json"), "w"), indent=1)
    print("done", flush=True)


if __name__ == "__main__":
    main()
