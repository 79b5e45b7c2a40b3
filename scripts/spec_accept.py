#!/usr/bin/python3
"""Speculative decoding on models/tiny's own language: acceptance per draft position and decode
speed with vs without speculation, on two workloads of held-out KJV chapters (every 20th chapter
from index 7, the split tools/train/build_corpus.py holds out):
  prose    -- the chapter's first verse, continued (greedy, 96 tokens);
  quote    -- the chapter's first eight verses, then its heading and first words again: the answer
              quotes the prompt (what extraction and report summaries do).
Starts `cllm serve` plain, then once per --speculative-config (same run, side by side: the machine
is noisy), sends the same requests one by one, reads vllm:spec_decode_* from /metrics. Usage:
  scripts/spec_accept.py [--bin build/cllm] [--model models/tiny] [--spec JSON]... [--mtp K] [--n 20]
--spec may be repeated (default: the n-gram config below); --mtp K adds
{"method": "mtp", "num_speculative_tokens": K} (the checkpoint's MTP head; models/tiny has one).
The acceptance by position divides each position's accepted count by the previous one's: exact
with "fixed_k": true; with the adaptive k a verify may draft fewer positions, so later
positions read low there."""
import argparse, json, os, re, socket, subprocess, sys, time, urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="build/cllm")
ap.add_argument("--model", default="models/tiny")
ap.add_argument("--corpus", default="tests/data/tokenizer/corpus/kjv.txt")
NGRAM = ('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, '
         '"prompt_lookup_max": 5}')
ap.add_argument("--spec", action="append", default=[], help="repeatable; default: " + NGRAM)
ap.add_argument("--mtp", type=int, default=0, metavar="K", help="also run method mtp with k = K")
ap.add_argument("--n", type=int, default=20, help="chapters per workload")
ap.add_argument("--threads", type=int, default=2)
a = ap.parse_args()
specs = list(a.spec) or [NGRAM]
if a.mtp:
    specs.append('{"method": "mtp", "num_speculative_tokens": %d}' % a.mtp)

# chapters as the training text writes them: "Book N\nN:V text" per verse
chapters, cur = [], None
for line in open(a.corpus, encoding="utf-8"):
    m = re.match(r"^(\S.*\S) (\d+)$", line.rstrip("\n"))
    if m and not line.startswith(" "):
        cur = {"head": line.strip(), "num": m.group(2), "verses": []}
        chapters.append(cur)
        continue
    v = re.match(r"^\s+(\d+) (.*)$", line)
    if cur is not None and v:
        cur["verses"].append([v.group(1), v.group(2)])
    elif cur is not None and cur["verses"] and line.strip():
        cur["verses"][-1][1] += " " + line.strip()
held = [c for i, c in enumerate(chapters) if i % 20 == 7 and len(c["verses"]) >= 9][: a.n]
if not held:
    sys.exit("no held-out chapters found in " + a.corpus)


def verse(c, i):
    n, t = c["verses"][i]
    return "%s:%s %s" % (c["num"], n, t)


work = {
    "prose": [c["head"] + "\n" + verse(c, 0) + "\n" for c in held],
    "quote": [c["head"] + "\n" + "\n".join(verse(c, i) for i in range(8)) + "\n\n" + c["head"]
              + "\n" + " ".join(verse(c, 0).split()[:4]) for c in held],
}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def metrics(url):
    out = {}
    for line in urllib.request.urlopen(url + "/metrics").read().decode().splitlines():
        m = re.match(r'^(vllm:spec_decode_\w+?)(?:_total)?\{([^}]*)\} (\S+)$', line)
        if m:
            pos = re.search(r'position="(\d+)"', m.group(2))
            out[m.group(1) + ("@" + pos.group(1) if pos else "")] = float(m.group(3))
    return out


def run(spec):
    port = free_port()
    url = "http://127.0.0.1:%d" % port
    cmd = [a.bin, "serve", a.model, "--port", str(port), "--threads", str(a.threads),
           "--kv-cache-memory", "64MiB", "--max-num-seqs", "4", "--stats-interval", "0"]
    if spec:
        cmd += ["--speculative-config", spec]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                if urllib.request.urlopen(url + "/health").status == 200:
                    break
            except Exception:
                time.sleep(0.1)
        res = {}
        for name, prompts in work.items():
            m0 = metrics(url)
            toks, secs, texts = 0, 0.0, []
            for pr in prompts:
                body = json.dumps({"prompt": pr, "max_tokens": 96, "temperature": 0,
                                   "ignore_eos": True}).encode()
                req = urllib.request.Request(url + "/v1/completions", body,
                                             {"Content-Type": "application/json"})
                t0 = time.time()
                r = json.loads(urllib.request.urlopen(req).read())
                secs += time.time() - t0
                toks += r["usage"]["completion_tokens"]
                texts.append(r["choices"][0]["text"])
            m1 = metrics(url)
            d = {k: m1.get(k, 0) - m0.get(k, 0) for k in m1}
            res[name] = {"tok_s": toks / secs, "tokens": toks, "texts": texts, "m": d}
        return res
    finally:
        p.terminate()
        p.wait()


def report(spec_cfg, spec):
    print("load average:", " ".join(open("/proc/loadavg").read().split()[:3]))
    print("spec config:", spec_cfg)
    for name in work:
        s, q = plain[name], spec[name]
        m = q["m"]
        drafts = m.get("vllm:spec_decode_num_drafts", 0)
        dt = m.get("vllm:spec_decode_num_draft_tokens", 0)
        acc = m.get("vllm:spec_decode_num_accepted_tokens", 0)
        per = []
        reach = drafts
        for i in range(16):
            k = "vllm:spec_decode_num_accepted_tokens_per_pos@%d" % i
            if k not in m:
                break
            per.append("%d: %.2f" % (i, m[k] / reach if reach else 0))
            reach = m[k]
        same = s["texts"] == q["texts"]
        print("%-6s %d requests, %d tokens: plain %.1f tok/s, spec %.1f tok/s (%.2fx); %d verifies, "
              "%.2f drafts/verify, %.2f tokens/verify, %.1f%% of drafts accepted; acceptance by "
              "position (of those reaching it) %s; outputs identical: %s"
              % (name, len(work[name]), s["tokens"], s["tok_s"], q["tok_s"],
                 q["tok_s"] / s["tok_s"], drafts, dt / drafts if drafts else 0,
                 1 + acc / drafts if drafts else 0, 100 * acc / dt if dt else 0, ", ".join(per),
                 same), flush=True)


plain = run(None)
for spec_cfg in specs:
    report(spec_cfg, run(spec_cfg))
