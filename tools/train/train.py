#!/usr/bin/python3
"""Train the tiny Qwen3.5-MoE model on CPU and export it in HF layout.

  /usr/bin/python3 tools/train/train.py --corpus /tmp/cllm_corpus --tok /tmp/cllm_tok \
      --run /tmp/cllm_run --steps N --minutes M [--threads 1] [--seed 1234]

Writes RUN/log.jsonl, RUN/ckpt.pt and an HF export RUN/hf/ (config.json, model.safetensors,
generation_config.json, tokenizer files) every --ckpt-minutes and at the end.
The LR schedule (warmup + cosine) follows progress = max(step/steps, elapsed/minutes), so the run
ends on time even when the CPU is shared.
"""
import argparse, json, math, os, random, shutil, sys, time
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe
from model import Qwen35MoeText, hf_state_dict, save_safetensors


def text_config(a, n_tok):
    nl = a.layers
    return {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "bos_token_id": None,
        "dtype": "bfloat16",
        "eos_token_id": n_tok,  # <|endoftext|>
        "full_attention_interval": 4,
        "head_dim": a.head_dim,
        "hidden_act": "silu",
        "hidden_size": a.hidden,
        "initializer_range": 0.02,
        "layer_types": ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(nl)],
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": a.lin_dk,
        "linear_num_key_heads": a.lin_nk,
        "linear_num_value_heads": a.lin_nv,
        "linear_value_head_dim": a.lin_dv,
        "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 4096,
        "model_type": "qwen3_5_moe_text",
        "moe_intermediate_size": a.moe_inter,
        "mtp_num_hidden_layers": 0,
        "mtp_use_dedicated_embeddings": False,
        "num_attention_heads": a.heads,
        "num_experts": a.experts,
        "num_experts_per_tok": a.topk,
        "num_hidden_layers": nl,
        "num_key_value_heads": a.kv_heads,
        "output_router_logits": False,
        "pad_token_id": None,
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "mrope_interleaved": True,
            "mrope_section": a.mrope_section,
            "partial_rotary_factor": 0.25,
            "rope_theta": a.rope_theta,
            "rope_type": "default",
        },
        "router_aux_loss_coef": a.aux_coef,
        "shared_expert_intermediate_size": a.shared_inter,
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": a.vocab_size,
    }


def full_config(tc):
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "text_config": tc,
        "tie_word_embeddings": False,
        "transformers_version": "4.57.0.dev0",
    }


def export(model, cfg, tok_dir, out_dir, n_tok):
    os.makedirs(out_dir, exist_ok=True)
    save_safetensors(os.path.join(out_dir, "model.safetensors"), hf_state_dict(model),
                     f32_names=("A_log",))
    json.dump(full_config(cfg), open(os.path.join(out_dir, "config.json"), "w"), indent=2)
    gen = {"bos_token_id": None, "do_sample": True, "eos_token_id": [n_tok + 2, n_tok],
           "pad_token_id": n_tok, "temperature": 0.7, "top_k": 20, "top_p": 0.8,
           "transformers_version": "4.57.0.dev0"}
    json.dump(gen, open(os.path.join(out_dir, "generation_config.json"), "w"), indent=2)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, f), os.path.join(out_dir, f))


GEN_PROMPT = "<|im_start|>assistant\n<think>\n"


def encode_split(tok, path, eot, weights, chat_split=0.0, seed=0):
    """chat_split: fraction of chat documents whose last assistant turn is tokenized the way a
    server sees it with thinking on: encode(prompt up to '<think>\n') + encode(rest). Whole-text
    tokenization merges '<think>' '\n\n' '</think>', so the prompt's lone '\n' would otherwise
    only ever be followed by non-empty reasoning in training."""
    docs = [json.loads(l) for l in open(path, encoding="utf-8")]
    r = random.Random(seed)
    ids = []
    for d in docs:
        i = d["text"].rfind(GEN_PROMPT)
        if d["kind"] == "chat" and i >= 0 and r.random() < chat_split:
            j = i + len(GEN_PROMPT)
            t = tok.encode(d["text"][:j]) + tok.encode(d["text"][j:]) + [eot]
        else:
            t = tok.encode(d["text"]) + [eot]
        for _ in range(weights.get(d["kind"], 1)):
            ids.extend(t)
    return np.array(ids, dtype=np.int32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="/tmp/cllm_corpus")
    ap.add_argument("--tok", default="/tmp/cllm_tok")
    ap.add_argument("--run", default="/tmp/cllm_run")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--minutes", type=float, default=75)
    ap.add_argument("--ckpt-minutes", type=float, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--lin-nk", type=int, default=2)
    ap.add_argument("--lin-nv", type=int, default=4)
    ap.add_argument("--lin-dk", type=int, default=48)
    ap.add_argument("--lin-dv", type=int, default=48)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--topk", type=int, default=2)
    ap.add_argument("--moe-inter", type=int, default=64)
    ap.add_argument("--shared-inter", type=int, default=128)
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--bench", type=int, default=0, help="time N steps and exit")
    ap.add_argument("--resume", default="", help="continue from this ckpt.pt (model + AdamW state)")
    ap.add_argument("--chat-split", type=float, default=0.0, help="see encode_split")
    a = ap.parse_args()
    rot = int(a.head_dim * 0.25) // 2
    a.mrope_section = [rot - 2 * (rot // 3), rot // 3, rot // 3]

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    np.random.seed(a.seed)
    os.makedirs(a.run, exist_ok=True)
    tok = bpe.Tokenizer(os.path.join(a.tok, "tokenizer.json"))
    n_tok = len(tok.vocab)
    eot = tok.added["<|endoftext|>"]
    cache = os.path.join(a.run, "tokens.npz")
    if os.path.exists(cache):
        z = np.load(cache)
        tr, te = z["train"], z["test"]
    else:
        tr = encode_split(tok, os.path.join(a.corpus, "train.jsonl"), eot, {"poem": 3},
                          a.chat_split, a.seed)
        te = encode_split(tok, os.path.join(a.corpus, "test.jsonl"), eot, {})
        np.savez(cache, train=tr, test=te)
    print(f"train tokens {len(tr)}, test tokens {len(te)}", flush=True)

    cfg = text_config(a, n_tok)
    model = Qwen35MoeText(cfg)
    nparam = sum(p.numel() for p in model.parameters())
    print(f"params {nparam} ({nparam/1e6:.2f}M)", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    nodecay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    step0 = 0
    if a.resume:
        ck = torch.load(a.resume)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step0 = ck["step"]
        print(f"resumed from {a.resume} at step {step0}", flush=True)
    rng = np.random.default_rng(a.seed)
    T = a.seq

    def batch():
        st = rng.integers(0, len(tr) - T - 1, a.batch)
        x = np.stack([tr[s:s + T + 1] for s in st]).astype(np.int64)
        return torch.from_numpy(x[:, :-1]), torch.from_numpy(x[:, 1:])

    te_starts = np.arange(0, len(te) - T - 1, T)
    eval_sub = te_starts[np.linspace(0, len(te_starts) - 1, 16).astype(int)]

    @torch.no_grad()
    def evaluate(starts):
        model.eval()
        tot, n = 0.0, 0
        for i in range(0, len(starts), 16):
            x = np.stack([te[s:s + T + 1] for s in starts[i:i + 16]]).astype(np.int64)
            x = torch.from_numpy(x)
            lg = model(x[:, :-1])
            tot += F.cross_entropy(lg.reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1), reduction="sum").item()
            n += x[:, 1:].numel()
        model.train()
        return tot / n

    meta = dict(vars(a), params=nparam, train_tokens=int(len(tr)), test_tokens=int(len(te)),
                argv=sys.argv)
    json.dump(meta, open(os.path.join(a.run, "meta.json"), "w"), indent=2)
    log = open(os.path.join(a.run, "log.jsonl"), "a")
    t0 = time.time()
    last_ck = t0
    step = 0
    budget = a.minutes * 60
    model.train()
    while True:
        el = time.time() - t0
        prog = max(step / a.steps, el / budget)
        if prog >= 1.0 or (a.bench and step >= a.bench):
            break
        if step < a.warmup:
            lr = a.lr * (step + 1) / a.warmup
        else:
            lr = a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(prog, 1.0))))
        for gparam in opt.param_groups:
            gparam["lr"] = lr
        x, y = batch()
        ts = time.time()
        lg = model(x)
        loss = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1))
        aux = model.aux_loss()
        (loss + a.aux_coef * aux).backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        rec = dict(step=step0 + step, loss=loss.item(), aux=float(aux), lr=lr, gnorm=float(gn),
                   t=round(time.time() - t0, 1), dt=round(time.time() - ts, 3))
        if step % 50 == 0 or step == 1:
            rec["test_loss"] = evaluate(eval_sub)
            print(json.dumps(rec), flush=True)
        log.write(json.dumps(rec) + "\n")
        log.flush()
        if time.time() - last_ck > a.ckpt_minutes * 60:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step0 + step},
                       os.path.join(a.run, "ckpt.pt"))
            export(model, cfg, a.tok, os.path.join(a.run, "hf"), n_tok)
            last_ck = time.time()
            print(f"checkpoint at step {step0 + step}", flush=True)
    if a.bench:
        print(f"bench: {(time.time()-t0)/step:.3f} s/step", flush=True)
        return
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step0 + step},
               os.path.join(a.run, "ckpt.pt"))
    export(model, cfg, a.tok, os.path.join(a.run, "hf"), n_tok)
    final = dict(step=step0 + step, wall_s=round(time.time() - t0, 1), final="fp32",
                 test_loss_full=evaluate(te_starts))
    final["test_ppl_full"] = math.exp(final["test_loss_full"])
    log.write(json.dumps(final) + "\n")
    print(json.dumps(final), flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
