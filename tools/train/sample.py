#!/usr/bin/python3
"""Generate from an exported tiny model (PyTorch reference forward, full recompute per token).

  /usr/bin/python3 tools/train/sample.py MODEL_DIR [--chat] [--no-think] [--greedy] [--seed 0]
        [--max-new 60] PROMPT...

--chat renders PROMPT as one user message through tokenizer_config.json's chat_template with
Jinja2 (add_generation_prompt=True, enable_thinking unless --no-think). Sampling uses
generation_config.json (temperature, top_k, top_p) and stops on its eos ids.
"""
import argparse, json, os, sys
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe
from model import load_hf


def render(mdir, messages, think=True):
    import jinja2
    tc = json.load(open(os.path.join(mdir, "tokenizer_config.json")))
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(tc["chat_template"]).render(messages=messages, add_generation_prompt=True,
                                                        enable_thinking=think)


def generate(model, ids, gen, n, greedy, g, n_real):
    out = []
    eos = set(gen["eos_token_id"])
    for _ in range(n):
        with torch.no_grad():
            lg = model(torch.tensor([ids + out]))[0, -1].float()
        lg[n_real:] = -float("inf")  # padded vocab rows
        if greedy:
            t = int(lg.argmax())
        else:
            lg = lg / gen["temperature"]
            v, i = lg.topk(gen["top_k"])
            p = torch.softmax(v, -1)
            keep = (p.cumsum(-1) - p) < gen["top_p"]
            p = p * keep
            t = int(i[torch.multinomial(p / p.sum(), 1, generator=g)])
        out.append(t)
        if t in eos:
            break
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prompt", nargs="+")
    ap.add_argument("--chat", action="store_true")
    ap.add_argument("--no-think", action="store_true")
    ap.add_argument("--greedy", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new", type=int, default=60)
    a = ap.parse_args()
    torch.set_num_threads(1)
    model, cfg = load_hf(a.model)
    model.eval()
    tok = bpe.Tokenizer(os.path.join(a.model, "tokenizer.json"))
    gen = json.load(open(os.path.join(a.model, "generation_config.json")))
    n_real = len(tok.id2tok)
    g = torch.Generator().manual_seed(a.seed)
    for p in a.prompt:
        text = render(a.model, [{"role": "user", "content": p}], not a.no_think) if a.chat else p
        ids = tok.encode(text)
        out = generate(model, ids, gen, a.max_new, a.greedy, g, n_real)
        print(json.dumps({"prompt": text, "completion": tok.decode(out)}, ensure_ascii=False))


if __name__ == "__main__":
    main()
