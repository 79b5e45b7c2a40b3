#!/usr/bin/python3
"""The misbehaving half of scripts/soak.sh: clients cllm bench-serve does not model.

    soak_clients.py PORT DURATION_S OUT.json [--workers N] [--slowloris N] [--nonreaders N]
                    [--send-timeout S] [--max-model-len N]

Each worker loops until DURATION_S, picking one style per request:
  n2         completions n=2: 200 with two choices (or 429)
  long       250-word prompt, 500 tokens out: 200 with all 500 (preempted on the way, or 429)
  stop       streamed chat with stop strings: no stop string in the text, finish stop/length
  abandon    a long stream the client closes after a few chunks (server must cancel it)
  cancel     a long prompt sent, the socket closed before any byte comes back
  overlen    prompt + max_tokens over --max-model-len: 400 naming max_tokens
  malformed  broken bodies (truncated JSON, wrong types, bad roles, bad UTF-8): 400
plus N slowloris connections that dribble one header byte every 0.5 s and are replaced when the
server drops them (--client-header-timeout), and N non-readers: a long stream with a 4 KiB receive
buffer that is never read until --send-timeout + 5 s have passed; by then the server must have
cut it (no [DONE]: the engine request was cancelled) unless it finished inside the buffers. Writes the counts by style and outcome; an outcome that is not one of the
expected ones is listed under "unexpected" with the response head. Standard library only.
"""
import json
import random
import socket
import sys
import threading
import time

ARGS = sys.argv[1:]
PORT, DURATION, OUT = int(ARGS[0]), float(ARGS[1]), ARGS[2]


def opt(name, default):
    return int(ARGS[ARGS.index(name) + 1]) if name in ARGS else default


WORKERS, SLOW, MML = opt("--workers", 3), opt("--slowloris", 2), opt("--max-model-len", 1024)
NONREAD, SEND_TIMEOUT = opt("--nonreaders", 0), opt("--send-timeout", 30)
T_END = time.time() + DURATION
lock = threading.Lock()
counts = {}
unexpected = []
WORDS = "the a of river stone light over under quiet storm long road city night garden".split()


def count(style, outcome, detail=None):
    with lock:
        counts.setdefault(style, {}).setdefault(outcome, 0)
        counts[style][outcome] += 1
        if detail is not None and len(unexpected) < 50:
            unexpected.append({"style": style, "outcome": outcome, "detail": detail[:400]})


def text(n, rng):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def connect():
    s = socket.create_connection(("127.0.0.1", PORT), timeout=60)
    return s


def request(path, body):
    b = body if isinstance(body, bytes) else json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(b)}\r\nConnection: close\r\n\r\n").encode()
    return head + b


def read_all(s):
    data = b""
    while True:
        c = s.recv(65536)
        if not c:
            return data
        data += c


def status_of(resp):
    try:
        return int(resp.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def body_of(resp):
    i = resp.find(b"\r\n\r\n")
    return resp[i + 4:] if i >= 0 else b""


def dechunk(b):
    out, i = b"", 0
    while True:
        j = b.find(b"\r\n", i)
        if j < 0:
            return out
        try:
            n = int(b[i:j].split(b";")[0], 16)
        except ValueError:
            return out
        if n == 0:
            return out
        out += b[j + 2:j + 2 + n]
        i = j + 2 + n + 2


def classify(style, st, resp, ok):
    if st == 429:
        count(style, "429")
    elif st >= 500 or st == 0:
        count(style, f"http_{st}", resp[:400].decode("latin1"))
    elif ok:
        count(style, "ok")
    else:
        count(style, f"bad_{st}", resp[:400].decode("latin1"))


def do_n2(rng):
    s = connect()
    s.sendall(request("/v1/completions", {"prompt": text(20, rng), "max_tokens": 12, "n": 2,
                                          "temperature": 0.8}))
    r = read_all(s)
    s.close()
    st = status_of(r)
    ok = st == 200
    if ok:
        b = body_of(r)
        if b"transfer-encoding: chunked" in r[:r.find(b"\r\n\r\n")].lower():
            b = dechunk(b)
        try:
            ok = len(json.loads(b)["choices"]) == 2
        except (ValueError, KeyError):
            ok = False
    classify("n2", st, r, ok)


def do_stop(rng):
    stops = ["the", " of"]
    s = connect()
    s.sendall(request("/v1/chat/completions", {
        "messages": [{"role": "user", "content": text(15, rng)}], "max_tokens": 24,
        "stop": stops, "stream": True, "temperature": 1.0,
        "chat_template_kwargs": {"enable_thinking": False}}))
    r = read_all(s)
    s.close()
    st = status_of(r)
    ok = False
    if st == 200:
        out, fin = "", None
        for line in dechunk(body_of(r)).split(b"\n"):
            if line.startswith(b"data: {"):
                ch = json.loads(line[6:])
                for c in ch.get("choices", []):
                    out += c.get("delta", {}).get("content") or ""
                    fin = c.get("finish_reason") or fin
        ok = fin in ("stop", "length") and not any(x in out for x in stops) and \
            b"data: [DONE]" in r
    classify("stop", st, r, ok)


def do_abandon(rng):
    s = connect()
    s.sendall(request("/v1/completions", {"prompt": text(30, rng), "max_tokens": 600,
                                          "ignore_eos": True, "stream": True}))
    got, chunks = b"", 0
    while chunks < 3:
        c = s.recv(4096)
        if not c:
            break
        got += c
        chunks = got.count(b"data: ")
    s.close()
    st = status_of(got)
    classify("abandon", st, got, st == 200 and chunks >= 3)


def do_long(rng):
    # long prompt + long output: two of these overflow the soak's 64 KV blocks (preemption)
    s = connect()
    s.sendall(request("/v1/completions", {"prompt": text(250, rng), "max_tokens": 500,
                                          "ignore_eos": True}))
    r = read_all(s)
    s.close()
    st = status_of(r)
    classify("long", st, r, st == 200 and b'"completion_tokens":500' in r)


def do_cancel(rng):
    s = connect()
    s.sendall(request("/v1/completions", {"prompt": text(600, rng), "max_tokens": 50,
                                          "stream": rng.random() < 0.5}))
    s.close()
    count("cancel", "sent")


def do_overlen(rng):
    s = connect()
    s.sendall(request("/v1/completions", {"prompt": text(50, rng), "max_tokens": MML + 10}))
    r = read_all(s)
    s.close()
    st = status_of(r)
    classify("overlen", st, r, st == 400 and b'"param":"max_tokens"' in r)


MALFORMED = [
    b'{"prompt": "abc", "max_tokens": ',
    b'{"prompt": 12}',
    b'{"messages": [{"role": "wizard", "content": "hi"}]}',
    b'{"messages": [{"role": "tool", "content": "x"}]}',
    b'{"messages": "hi"}',
    b'{"prompt": "\xff\xfe bad utf8"}',
    b'[1, 2, 3]',
    b'{"prompt": "x", "max_tokens": 1e400}',
    b'{"prompt": "x", "temperature": "hot"}',
    b'{"prompt": "x", "n": 100000}',
    b'{"prompt": "x", "stop": [1, 2]}',
    b'{"prompt": "x", "logit_bias": {"abc": 1}}',
    b'{' * 200,
]


def do_malformed(rng):
    path = rng.choice(["/v1/completions", "/v1/chat/completions"])
    b = rng.choice(MALFORMED)
    s = connect()
    s.sendall(request(path, b))
    r = read_all(s)
    s.close()
    st = status_of(r)
    classify("malformed", st, r, st == 400 and b'"error"' in r)


STYLES = [do_n2, do_stop, do_abandon, do_cancel, do_overlen, do_malformed, do_long]


def worker(seed):
    rng = random.Random(seed)
    while time.time() < T_END:
        f = rng.choice(STYLES)
        try:
            f(rng)
        except OSError as e:
            count(f.__name__[3:], "socket_error", repr(e))
        time.sleep(rng.uniform(0.05, 0.3))


def slowloris(seed):
    rng = random.Random(seed)
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n"
    while time.time() < T_END:
        try:
            s = connect()
            count("slowloris", "opened")
            i = 0
            while time.time() < T_END:
                s.sendall(head[i % len(head):i % len(head) + 1] if i < len(head) else b"x")
                i += 1
                time.sleep(0.5)
            s.close()
        except OSError:
            count("slowloris", "dropped_by_server")
            time.sleep(rng.uniform(0.5, 1))


def nonreader(seed):
    rng = random.Random(seed)
    while time.time() < T_END - SEND_TIMEOUT - 10:
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(60)
            s.connect(("127.0.0.1", PORT))
            s.sendall(request("/v1/completions", {"prompt": text(20, rng), "max_tokens": 800,
                                                  "ignore_eos": True, "stream": True,
                                                  "logprobs": 5}))
            time.sleep(SEND_TIMEOUT + 5)
            r = read_all(s)
            s.close()
        except OSError as e:
            count("nonreader", "socket_error", repr(e))
            continue
        st = status_of(r)
        if st == 429:
            count("nonreader", "429")
        elif st == 200 and b"data: [DONE]" not in r:
            count("nonreader", "cut_by_server")
        elif st == 200:
            count("nonreader", "finished_in_buffers")
        else:
            count("nonreader", f"http_{st}", r[:400].decode("latin1"))


ths = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
ths += [threading.Thread(target=slowloris, args=(100 + i,)) for i in range(SLOW)]
ths += [threading.Thread(target=nonreader, args=(200 + i,)) for i in range(NONREAD)]
for t in ths:
    t.start()
for t in ths:
    t.join()
bad = sum(n for st in counts.values() for k, n in st.items()
          if k.startswith("http_5") or k == "http_0" or k.startswith("bad_"))
json.dump({"counts": counts, "unexpected": unexpected, "n_unexpected": bad}, open(OUT, "w"),
          indent=1)
print(json.dumps({"counts": counts, "n_unexpected": bad}))
