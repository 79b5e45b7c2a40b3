#!/usr/bin/python3
"""Differential fuzz of speculative decoding against plain decoding (tests/server/spec_diff.sh).

  spec_diff.py generate CLLM MODEL CASES SEED
      random prompts (repeated motifs, so n-gram and suffix drafts find something), random
      speculative configs (every method, k 1..6, draft vocabularies, fixed k) and random engine
      flags (block size, KV and state dtypes, threads, sampling, a forced lm_head screen): a greedy
      `cllm generate` prints the same ids with the config as without it, a seeded sampled one
      the same ids twice; a config cllm refuses must name --speculative-config.
  spec_diff.py serve CLLM MODEL ROUNDS SEED SPECJSON [serve flags...]
      two servers, one with SPECJSON: each round sends 1..8 random /v1/completions requests
      or chat requests (greedy or seeded, streamed or not, logprobs, prompt_logprobs, echo, n,
      stop strings, json_object, json_schema, regex and choice, min_tokens, penalties) to both
      at once; every answer (status, texts, finish reasons, logprobs) must be the same. A request
      that gets no answer in FZ_TIMEOUT seconds (default 60) fails the run.

Either mode fails on a crash or a sanitizer report. Prompt lengths and max_tokens are drawn from
FZ_LENS and FZ_MAXT (comma lists) when set; FZ_IMAGES=1 puts small PNGs (PIL) into some chat
requests. In serve mode SPECJSON "-" runs the first server
without speculation, and FZ_A_EXTRA adds flags to the first server only (say a KV cache small
enough to preempt, against an ample one). Prints one line per failure and a summary; exit 1 on
any failure."""
import json
import os
import random
import shlex
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

V = 4000  # models/tiny's vocabulary below its special tokens


def env_list(name, default):
    return [int(x) for x in os.environ.get(name, default).split(",")]


def rand_prompt(rng, lens):
    L = rng.choice(lens)
    motif = [rng.randrange(V) for _ in range(rng.randint(1, 6))]
    toks = []
    while len(toks) < L:
        toks += motif if rng.random() < 0.6 else [rng.randrange(V)]
    return toks[:L]


def sanitizer(text):
    return "Sanitizer" in text or "runtime error" in text


# ---- generate ----

def rand_spec(rng):
    method = rng.choice(["mtp", "qwen3_5_mtp", "qwen3_next_mtp", "ngram", "suffix"])
    cfg = {"method": method, "num_speculative_tokens": rng.randint(1, 6)}
    if method == "ngram":
        lo = rng.randint(1, 4)
        if rng.random() < 0.7:
            cfg["prompt_lookup_min"] = lo
        if rng.random() < 0.7:
            cfg["prompt_lookup_max"] = lo + rng.randint(0, 4)
    if method == "suffix" and rng.random() < 0.5:
        cfg["suffix_decoding_max_tree_depth"] = rng.randint(1, 64)
        cfg["suffix_decoding_max_spec_factor"] = rng.choice([0.5, 1.0, 2.0, 4.0])
    if "mtp" in method and rng.random() < 0.3:
        cfg["draft_vocab_size"] = rng.choice([64, 65, 100, 1024, 3999, 4000, 4001, 100000])
    if rng.random() < 0.3:
        cfg["fixed_k"] = True
    if rng.random() < 0.2:
        cfg["disable_by_batch_size"] = rng.randint(1, 4)
    return cfg


def gen_run(cllm, model, args, env):
    p = subprocess.run([cllm, "generate", model] + args, capture_output=True, text=True, env=env,
                       timeout=300)
    return p.returncode, p.stdout, p.stderr


def ids_of(out):
    for line in out.splitlines():
        s = line.strip()
        if s and all(c.isdigit() or c in ", " for c in s):
            return s
    return out


def last_line(text):
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def fuzz_generate(cllm, model, cases, seed):
    rng = random.Random(seed)
    lens = env_list("FZ_LENS", "1,1,2,3,5,8,15,16,17,31,33,64")
    maxt = env_list("FZ_MAXT", "1,2,3,7,16,40")
    fails = compared = 0
    for it in range(cases):
        cfg = rand_spec(rng)
        base = ["--tokens", ",".join(map(str, rand_prompt(rng, lens))), "-n",
                str(rng.choice(maxt)), "--ids", "-t", str(rng.choice([1, 2]))]
        if rng.random() < 0.5:
            base.append("--ignore-eos")
        if rng.random() < 0.3:
            base += ["--block-size", str(rng.choice([1, 2, 4, 16]))]
        if rng.random() < 0.2:
            base += ["--kv-dtype", "bf16"]
        if rng.random() < 0.2:
            base += ["--ssm-dtype", "bf16"]
        elif rng.random() < 0.2:
            base += ["--gdn-prefill", rng.choice(["recurrent", "chunked"])]
        sampled = rng.random() < 0.3
        if sampled:
            base += ["--temperature", str(rng.choice([0.5, 1.0, 1.5])), "-s",
                     str(rng.randint(0, 99))]
            if rng.random() < 0.5:
                base += ["--top-k", str(rng.choice([1, 2, 5, 40]))]
            if rng.random() < 0.3:
                base += ["--top-p", "0.9"]
        elif rng.random() < 0.2:
            base += ["--repetition-penalty", "1.3"]
        env = dict(os.environ)
        if rng.random() < 0.3:
            env["CLLM_LM_SCREEN"] = str(rng.choice([2, 8, 64]))
        sargs = base + ["--speculative-config", json.dumps(cfg)]
        r0 = gen_run(cllm, model, base, env)
        r1 = gen_run(cllm, model, sargs, env)
        why = None
        if r0[0] < 0 or r1[0] < 0 or sanitizer(r0[2]) or sanitizer(r1[2]):
            why = "crash or sanitizer report"
        elif r0[0] != 0 and r1[0] != 0 and last_line(r0[2]) == last_line(r1[2]):
            pass  # both refused the same flags
        elif r0[0] != 0:
            why = "plain run failed"
        elif r1[0] != 0:
            if "--speculative-config" not in r1[2]:
                why = "speculative run failed without naming the config"
        elif not sampled:
            compared += 1
            if ids_of(r0[1]) != ids_of(r1[1]):
                why = "greedy ids differ"
        else:
            compared += 1
            if ids_of(r1[1]) != ids_of(gen_run(cllm, model, sargs, env)[1]):
                why = "seeded speculative run not reproducible"
        if why:
            fails += 1
            print(f"FAIL [{it}] {why}: CLLM_LM_SCREEN={env.get('CLLM_LM_SCREEN')} {sargs}")
            print(f"  plain rc {r0[0]}: {ids_of(r0[1])[:300]} {last_line(r0[2])[:200]}")
            print(f"  spec  rc {r1[0]}: {ids_of(r1[1])[:300]} {last_line(r1[2])[:200]}")
    print(f"generate: {cases} cases, {compared} compared, {fails} failures")
    return fails


# ---- serve ----

def start_server(cllm, model, port, args, logpath):
    with open(logpath, "w") as log:  # the child keeps its own copy of the descriptor
        p = subprocess.Popen([cllm, "serve", model, "--port", str(port)] + args, stdout=log,
                             stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
            return p
        except Exception:
            if p.poll() is not None:
                return None
            time.sleep(0.1)
    p.kill()
    return None


def sse_answer(raw):
    """A streamed answer folded into the non-streamed shape: per choice, the texts (or chat
    deltas) joined, the last finish reason, the logprobs' lists joined."""
    ch = {}
    for line in raw.decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        for c in ev.get("choices", []):
            d = ch.setdefault(c["index"], {"index": c["index"], "text": "", "finish_reason": None,
                                           "logprobs": None})
            d["text"] += c.get("text") or (c.get("delta") or {}).get("content") or ""
            d["finish_reason"] = c.get("finish_reason") or d["finish_reason"]
            lp = c.get("logprobs")
            if lp:
                if d["logprobs"] is None:
                    d["logprobs"] = {}
                for k, v in lp.items():
                    if isinstance(v, list):
                        d["logprobs"].setdefault(k, []).extend(v)
    return {"choices": list(ch.values())}


def post(port, body, timeout):
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, sse_answer(raw) if body.get("stream") else json.loads(raw)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()[:300]
    except Exception as e:  # a timeout or a dropped connection: no answer
        return -1, f"no answer: {e!r}"


WORDS = ["the", "LORD", "said", "unto", "Moses", "and", "land", "of", "Egypt", "king", "water",
         "{", "}", "\"name\":", "1", "2", ",", ".", "\n", "verse"]


_IMAGES = []


def rand_image(rng):
    """A data URL of a small random PNG (a few fixed ones, so prefix caching sees repeats), or
    None without PIL."""
    if not _IMAGES:
        try:
            import base64
            import io
            from PIL import Image
        except ImportError:
            return None
        irng = random.Random(99)
        for w, h in ((32, 32), (64, 48), (40, 96)):
            im = Image.frombytes("RGB", (w, h), bytes(irng.randrange(256) for _ in range(w * h * 3)))
            buf = io.BytesIO()
            im.save(buf, "PNG")
            _IMAGES.append("data:image/png;base64," + base64.b64encode(buf.getvalue()).decode())
    return rng.choice(_IMAGES)


def rand_request(rng, lens, maxt):
    b = {"prompt": rand_prompt(rng, lens), "max_tokens": rng.choice(maxt), "temperature": 0}
    if rng.random() < 0.25:  # chat: text through the template instead of token ids
        del b["prompt"]
        n = max(1, rng.choice(lens) // 2)
        text = " ".join(rng.choice(WORDS) for _ in range(n))
        img = rand_image(rng) if os.environ.get("FZ_IMAGES") and rng.random() < 0.4 else None
        content = text if not img else [{"type": "image_url", "image_url": {"url": img}},
                                        {"type": "text", "text": text}]
        b["messages"] = [{"role": "user", "content": content}]
    if rng.random() < 0.3:
        b["stream"] = True
    if "prompt" in b and rng.random() < 0.1:
        b["prompt_logprobs"] = rng.choice([0, 2])
    if "prompt" in b and rng.random() < 0.1:
        b["echo"] = True
    if rng.random() < 0.35:
        b["temperature"] = rng.choice([0.7, 1.0, 1.3])
        b["seed"] = rng.randint(0, 1000)
        if rng.random() < 0.5:
            b["top_k"] = rng.choice([1, 3, 20])
        if rng.random() < 0.3:
            b["top_p"] = 0.9
    if rng.random() < 0.25:
        if "messages" in b:
            b["logprobs"] = True
            b["top_logprobs"] = rng.choice([0, 1, 3])
        else:
            b["logprobs"] = rng.choice([0, 1, 3])
    if rng.random() < 0.2:
        b["n"] = rng.choice([2, 3])
    if rng.random() < 0.5:
        b["ignore_eos"] = True
    if rng.random() < 0.15:
        b["presence_penalty"] = 0.5
    if rng.random() < 0.15:
        b["min_tokens"] = 1
    g = rng.random()
    if g < 0.08:
        b["response_format"] = {"type": "json_object"}
    elif g < 0.12:
        b["response_format"] = {"type": "json_schema", "json_schema": {"name": "v", "schema": {
            "type": "object", "properties": {"book": {"type": "string", "maxLength": 12},
                                             "verse": {"type": "integer"}},
            "required": ["book", "verse"]}}}
    elif g < 0.16:
        b["structured_outputs"] = {"regex": rng.choice(["[0-9]{1,3}:[0-9]{1,3}", "(the|and) [a-z]+",
                                                        "[A-Z][a-z]* ?"])}
    elif g < 0.19:
        b["structured_outputs"] = {"choice": ["Moses", "Aaron", "the LORD", "Egypt"]}
    if rng.random() < 0.15:
        b["stop"] = [rng.choice(["a", "e", " the", "\n", "s"])]
    return b


def answer_key(resp):
    if not isinstance(resp, dict):
        return resp
    return [(c.get("index"), c.get("text") if "text" in c else (c.get("message") or {}).get(
             "content"), c.get("finish_reason"), json.dumps(c.get("logprobs"), sort_keys=True),
             json.dumps(c.get("prompt_logprobs"), sort_keys=True))
            for c in sorted(resp["choices"], key=lambda c: c["index"])] + [
            json.dumps(resp.get("prompt_logprobs"), sort_keys=True)]


def fuzz_serve(cllm, model, rounds, seed, spec, extra):
    rng = random.Random(seed)
    lens = env_list("FZ_LENS", "1,2,3,8,16,17,33,70")
    maxt = env_list("FZ_MAXT", "1,2,5,12,30")
    timeout = float(os.environ.get("FZ_TIMEOUT", "60"))
    tmp = os.environ.get("FZ_DIR", "/tmp")
    prng = random.Random(os.getpid())
    for _attempt in range(5):  # a port another test holds: try another pair (not a refusal)
        base = 20000 + prng.randrange(6000) * 2
        ports = (base, base + 1)
        logs = [os.path.join(tmp, f"spec_diff_{p}.log") for p in ports]
        a_args = ([] if spec == "-" else ["--speculative-config", spec]) + shlex.split(
            os.environ.get("FZ_A_EXTRA", ""))
        servers = [start_server(cllm, model, ports[0], a_args + extra, logs[0]),
                   start_server(cllm, model, ports[1], extra, logs[1])]
        if None not in servers or any(
                "address already in use" not in open(lp, errors="replace").read().lower()
                for lp, sv in zip(logs, servers) if sv is None):
            break
        for sv in servers:  # SIGTERM: mpirun passes it on to tensor-parallel ranks
            if sv:
                sv.terminate()
                try:
                    sv.wait(30)
                except subprocess.TimeoutExpired:
                    sv.kill()
                    sv.wait()
    fails = compared = 0
    try:
        if None in servers:
            print(f"FAIL a server did not start: see {logs}")
            return 1
        for r in range(rounds):
            reqs = [rand_request(rng, lens, maxt) for _ in range(rng.randint(1, 8))]
            out = [[None] * len(reqs), [None] * len(reqs)]

            def go(side, i):
                out[side][i] = post(ports[side], reqs[i], timeout)
            ts = [threading.Thread(target=go, args=(side, i)) for side in (0, 1)
                  for i in range(len(reqs))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            for i, b in enumerate(reqs):
                a, c = out[0][i], out[1][i]
                compared += 1
                if a[0] != c[0] or answer_key(a[1]) != answer_key(c[1]):
                    fails += 1
                    print(f"FAIL [{r}.{i}] request {json.dumps(b)}")
                    print(f"  spec  {a[0]} {json.dumps(answer_key(a[1]))[:500]}")
                    print(f"  plain {c[0]} {json.dumps(answer_key(c[1]))[:500]}")
            if any(s.poll() is not None for s in servers):
                fails += 1
                print(f"FAIL a server exited: see {logs}")
                break
        if fails == 0:
            met = urllib.request.urlopen(f"http://127.0.0.1:{ports[0]}/metrics", timeout=10)
            met = met.read().decode()
            def metric(name):
                v = [ln.split()[-1] for ln in met.splitlines() if ln.startswith(name + "{")]
                return v[0] if v else "-"
            print(f"serve: first server's drafts {metric('vllm:spec_decode_num_drafts_total')}, "
                  f"preemptions {metric('vllm:num_preemptions_total')}, prefix cache hits "
                  f"{metric('vllm:prefix_cache_hits_total')} tokens")
    finally:
        for s in servers:
            if s:
                s.terminate()
        for s in servers:
            if s:
                try:
                    s.wait(60)
                except subprocess.TimeoutExpired:
                    s.kill()
                    fails += 1
                    print("FAIL a server did not stop on SIGTERM")
    for lp in logs:
        if os.path.exists(lp) and sanitizer(open(lp, errors="replace").read()):
            fails += 1
            print(f"FAIL sanitizer report in {lp}")
    print(f"serve: {rounds} rounds, {compared} answers compared, {fails} failures")
    return fails


def main():
    if len(sys.argv) >= 6 and sys.argv[1] == "generate":
        return fuzz_generate(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    if len(sys.argv) >= 7 and sys.argv[1] == "serve":
        return fuzz_serve(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
                          sys.argv[6], sys.argv[7:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(1 if main() else 0)
