#!/bin/bash
# Batch-1 speculative decoding against the peers on one GGUF (issue 31's "quarter shape" row):
# the quarter shape of Qwen3.5-35B-A3B with its MTP layer (random Q4_0 weights, written by
# tools/ref/make_gguf_random.py when missing), every engine on that one file, 2 threads, decode
# tok/s of 128 tokens:
#   llama.cpp     llama-server /completion (fixed short prompt, n_predict 128, ignore_eos,
#                 temperature 0, timings.predicted_per_second), plain and --spec-type draft-mtp
#                 at each synthetic rate (--spec-draft-n-max K --spec-synth-rates: llama.cpp takes
#                 UNCONDITIONAL per-position rates, so conditional p becomes p, p^2, ..., p^K);
#                 also llama-bench tg128 plain
#   ik_llama.cpp  llama-bench tg128 -rtr 1, plain (when built); both peers' llama-bench runs are
#                 taken before cllm's runs and again after them, and the table takes the best
#   cllm          `cllm bench` tg128, plain and --speculative-config mtp with
#                 "synthetic_acceptance": p (conditional per-position, as cllm defines it), its
#                 own choice of k (cap K) and, with "fixed_k": true, k = 1..K
# Synthetic acceptance draws the accept decisions at the given rate while the real draft, verify
# and rollback work is done (the output is not the model's): it measures the cost side of
# speculation on random weights. Each figure is the best of ROUNDS runs after one warmup
# (llama-bench and cllm bench warm up themselves). Prints one markdown table: t/s, acceptance,
# ratio to the best peer plain decode and to llama.cpp draft-mtp at the same rate, the 1-minute
# load average when each figure was taken, and uptime at start and end. Long (about 30 min on 2
# cores: every cllm configuration is a process that loads the model) and machine-dependent: not
# part of CI.
#
#   PEER_DIR=/work/peer scripts/bench-spec-peer.sh
#
# Environment (all optional but PEER_DIR):
#   PEER_DIR   peer folder: llama.cpp-src/build/bin/{llama-server,llama-bench}, models/
#   IK_BUILD   ik_llama.cpp build folder with bin/llama-bench (default $PEER_DIR/ik/build; skipped
#              when absent)
#   GGUF       the file every engine runs (default $PEER_DIR/models/q35-L10-mtp-q4_0.gguf; written
#              from configs/qwen3.5-35b-a3b-quarter.json with mtp_num_hidden_layers 1, mix q4_0,
#              the Qwen3.5 vocabulary of llama.cpp-src/models/ggml-vocab-qwen35.gguf, when missing)
#   CLLM       the cllm binary (default build/cllm)
#   CLLM_MODEL the model cllm runs (default $GGUF, the peers' file): e.g. a W4A16 model directory
#              written by `cllm synth --scheme w4a16` from the same quarter config with
#              mtp_num_hidden_layers 1, to set cllm's own format beside the peers' Q4_0 in one run
#              (the table's title names both)
#   RATES      conditional acceptance rates (default "0.5 0.65 0.8")
#   K          draft cap (default 3); KMODES which cllm k choices (default "auto 1 2 3": auto = its
#              own choice under cap K, a number = fixed k; MODE@N adds "draft_vocab_size": N, e.g.
#              "auto auto@32768": the head's lm_head pass over the first N ids only)
#   ROUNDS (2), THREADS (2), PORT (18297), OUT (results folder, default a new /tmp folder)
#   REPORT_ONLY set (with OUT = an earlier run's folder): run nothing, print that run's table
#   LOCK       a file to flock around every engine run (shared boxes: one big process at a time)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
: "${PEER_DIR:?set PEER_DIR to the llama.cpp peer folder (see ../shared/peer/README.md)}"
PEER_DIR=$(realpath -m "$PEER_DIR")
LB=$PEER_DIR/llama.cpp-src/build/bin
IK_BUILD=$(realpath -m "${IK_BUILD:-$PEER_DIR/ik/build}")
GGUF=$(realpath -m "${GGUF:-$PEER_DIR/models/q35-L10-mtp-q4_0.gguf}")
CLLM=$(realpath -m "${CLLM:-$SRC/build/cllm}")
CLLM_MODEL=$(realpath -m "${CLLM_MODEL:-$GGUF}")
RATES=${RATES:-0.5 0.65 0.8}
K=${K:-3}
KMODES=${KMODES:-auto $(seq -s ' ' 1 "$K")}
ROUNDS=${ROUNDS:-2}
T=${THREADS:-2}
PORT=${PORT:-18297}
OUT=${OUT:-$(mktemp -d /tmp/bench-spec-peer.XXXXXX)}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
LOCK=${LOCK:+$(realpath -m "$LOCK")}
PY=/usr/bin/python3
PROMPT="The quick brown fox jumps over the lazy dog. Once upon a time"
log() { echo "bench-spec-peer: $*" >&2; }
load1() { cut -d' ' -f1 /proc/loadavg; }
locked() { if [ -n "${LOCK:-}" ]; then flock "$LOCK" "$@"; else "$@"; fi; }

# Unconditional per-position rates of conditional rate p: p, p^2, ..., p^K (comma-separated).
uncond() { $PY -c "import sys; p=float(sys.argv[1]); print(','.join(repr(round(p**(i+1), 9)) for i in range(int(sys.argv[2]))))" "$1" "$K"; }

if [ -z "${REPORT_ONLY:-}" ]; then
    for b in llama-server llama-bench; do
        [ -x "$LB/$b" ] || {
            log "no $LB/$b (build the peer first: ../shared/peer/RECIPE.sh)"
            exit 1
        }
    done
    [ -x "$CLLM" ] || {
        log "no cllm binary at $CLLM (build first or set CLLM)"
        exit 1
    }
    if [ ! -f "$GGUF" ]; then
        log "writing the quarter MTP GGUF to $GGUF"
        $PY - "$SRC/configs/qwen3.5-35b-a3b-quarter.json" "$OUT/quarter-mtp.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c.get("text_config", c)["mtp_num_hidden_layers"] = 1
json.dump(c, open(sys.argv[2], "w"), indent=2)
EOF
        $PY "$SRC/tools/ref/make_gguf_random.py" --config "$OUT/quarter-mtp.json" --mix q4_0 \
            --vocab-gguf "$PEER_DIR/llama.cpp-src/models/ggml-vocab-qwen35.gguf" --out "$GGUF" >&2
    fi
fi

SERVER_PID=""
stop_server() {
    if [ -n "$SERVER_PID" ]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    fi
}
trap stop_server EXIT

# One llama-server configuration: start, one warmup request, ROUNDS timed requests (responses
# to OUT/name.rN.json, the load average to OUT/name.rN.load), stop.
llama_server() {
    local name=$1
    shift
    log "llama-server: $name"
    if [ -n "${LOCK:-}" ]; then # the whole server's life under the lock
        exec 9>>"$LOCK"
        flock 9
    fi
    (cd "$OUT" && exec "$LB/llama-server" -m "$GGUF" -t "$T" -c 1024 -np 1 --port "$PORT" \
        --no-webui "$@" >"$OUT/$name.log" 2>&1) &
    SERVER_PID=$!
    local i
    for i in $(seq 1 600); do
        curl -sf "localhost:$PORT/health" >/dev/null 2>&1 && break
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 1
    done
    local body
    body=$($PY -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "n_predict": 128,
        "ignore_eos": True, "temperature": 0, "cache_prompt": False}))' "$PROMPT")
    if ! curl -sf --max-time 900 "localhost:$PORT/completion" -d "$body" >"$OUT/$name.warmup.json"; then
        log "$name: no answer (see $OUT/$name.log)"
        stop_server
        [ -n "${LOCK:-}" ] && flock -u 9
        return 0
    fi
    for r in $(seq 1 "$ROUNDS"); do
        load1 >"$OUT/$name.r$r.load"
        curl -sf --max-time 900 "localhost:$PORT/completion" -d "$body" >"$OUT/$name.r$r.json" ||
            log "$name round $r failed"
    done
    stop_server
    [ -n "${LOCK:-}" ] && flock -u 9
    return 0
}

# llama-bench tg128, ROUNDS repetitions (its own warmup run first): samples_ts in OUT/name.json.
llama_bench() {
    local name=$1 bin=$2
    shift 2
    log "llama-bench: $name"
    load1 >"$OUT/$name.load"
    (cd "$OUT" && locked "$bin" -m "$GGUF" -t "$T" -p 0 -n 128 -r "$ROUNDS" -o json "$@" \
        >"$OUT/$name.json" 2>"$OUT/$name.err") || log "$name failed (see $OUT/$name.err)"
}

# cllm bench: tg128 listed ROUNDS times with -r 1 (best of ROUNDS in one process: every process
# loads the model), each a run without speculation and one with it on the one engine, in
# alternating order (the spec row's spec_vs_plain); JSON to OUT/name.json.
cllm_bench() {
    local name=$1 spec=$2 ns
    ns=$(printf '128,%.0s' $(seq 1 "$ROUNDS"))
    log "cllm bench: $name $spec"
    load1 >"$OUT/$name.load"
    (cd "$OUT" && locked "$CLLM" bench "$CLLM_MODEL" -t "$T" -p 16 -n "${ns%,}" -r 1 --no-sweep --json \
        --speculative-config "$spec" >"$OUT/$name.json" 2>"$OUT/$name.err") ||
        log "$name failed (see $OUT/$name.err)"
}

if [ -z "${REPORT_ONLY:-}" ]; then
    uptime >"$OUT/uptime.start"
    echo "$CLLM_MODEL" >"$OUT/cllm-model"
    echo "$RATES" >"$OUT/rates"
    echo "$KMODES" >"$OUT/kmodes"
    llama_server ll-plain
    for p in $RATES; do
        llama_server "ll-mtp-$p" --spec-type draft-mtp --spec-draft-n-max "$K" \
            --spec-synth-rates "$(uncond "$p")"
    done
    peer_plain() { # $1: suffix of the result names
        llama_bench "ll-bench$1" "$LB/llama-bench"
        if [ -x "$IK_BUILD/bin/llama-bench" ]; then
            llama_bench "ik-bench$1" "$IK_BUILD/bin/llama-bench" -rtr 1
        else
            log "no ik_llama.cpp at $IK_BUILD: skipped"
        fi
    }
    peer_plain ""
    for p in $RATES; do
        for mode in $KMODES; do
            m=${mode%@*} dv=""
            [ "$mode" != "$m" ] && dv=",\"draft_vocab_size\":${mode#*@}"
            if [ "$m" = auto ]; then
                s="{\"method\":\"mtp\",\"num_speculative_tokens\":$K,\"synthetic_acceptance\":$p$dv}"
            else
                s="{\"method\":\"mtp\",\"num_speculative_tokens\":$m,\"synthetic_acceptance\":$p,\"fixed_k\":true$dv}"
            fi
            cllm_bench "cllm-$mode-$p" "$s"
        done
    done
    # the peers' plain decode again after cllm's runs (a noisy host's swings over the run fall
    # on both sides; the table takes the best of the two)
    peer_plain ".2"
    uptime >"$OUT/uptime.end"
fi

$PY - "$OUT" "$GGUF" "$K" <<'EOF'
import glob, json, os, re, sys
out, gguf, K = sys.argv[1], sys.argv[2], int(sys.argv[3])
rates = open(f"{out}/rates").read().split()
kmodes = open(f"{out}/kmodes").read().split()
def rd(p):
    try: return open(p).read()
    except OSError: return ""
cmodel = rd(f"{out}/cllm-model").strip() or gguf
def load(p):
    v = rd(p).strip()
    return float(v) if v else None
rows = []  # (engine, config, rate, tps, accept, note, load)
def server(name):
    best, note, ld = None, "", []
    for f in sorted(glob.glob(f"{out}/{name}.r*.json")):
        try: t = json.loads(rd(f))["timings"]
        except Exception: continue
        ld.append(load(f[:-5] + ".load"))
        v = t.get("predicted_per_second")
        if v and (best is None or v > best[0]): best = (v, t)
    if best is None: return None, None, "", None
    t = best[1]; acc = None
    if t.get("draft_n"):
        acc = t["draft_n_accepted"] / t["draft_n"]
        note = f"{t['draft_n_accepted']}/{t['draft_n']} drafts accepted"
    m = re.findall(r"mean len = +([\d.]+)", rd(f"{out}/{name}.log"))
    if m: note += f", mean len {m[-1]} (last request)"
    return best[0], acc, note, max([x for x in ld if x is not None], default=None)
def bench(name):
    s = []
    for f in (f"{out}/{name}.json", f"{out}/{name}.2.json"):  # before and after cllm's runs
        t = rd(f); i = t.find("[")
        try:
            r = json.loads(t[i:t.rfind("]") + 1])
            s += [x for row in r if row.get("n_gen") for x in row.get("samples_ts", [row["avg_ts"]])]
        except Exception: pass
    return max(s) if s else None
def bload(name):
    v = [x for x in (load(f"{out}/{name}.load"), load(f"{out}/{name}.2.load")) if x is not None]
    return max(v) if v else None
def cllm(name):
    try: j = json.loads(rd(f"{out}/{name}.json"))
    except Exception: return None, None, None, ""
    plain = [x["avg_ts"] for x in j.get("tests", []) if x["test"].startswith("tg") and "speculative" not in x]
    spec = [(x["avg_ts"], x["speculative"]) for x in j.get("tests", []) if x["test"].startswith("tg") and "speculative" in x]
    ratios = sorted(x["spec_vs_plain"] for x in j.get("tests", []) if "spec_vs_plain" in x)
    sb = max(spec) if spec else (None, "")
    acc = None
    m = re.search(r"([\d.]+)% accepted", sb[1] or "")
    if m: acc = float(m.group(1)) / 100
    note = sb[1]
    if ratios:  # each row's spec run against the plain run beside it on the same engine
        n = len(ratios); med = ratios[n // 2] if n % 2 else (ratios[n // 2 - 1] + ratios[n // 2]) / 2
        note = f"{med:.3f}x the alternated plain runs (median of {n} pairs, {ratios[0]:.3f}-{ratios[-1]:.3f}); " + note
    return max(plain) if plain else None, sb[0], acc, note
v, a, n, l = server("ll-plain"); rows.append(("llama.cpp", "llama-server plain", "-", v, a, n, l))
rows.append(("llama.cpp", "llama-bench tg128 plain", "-", bench("ll-bench"), None, "before and after cllm's runs", bload("ll-bench")))
if os.path.exists(f"{out}/ik-bench.json"):
    rows.append(("ik_llama.cpp", "llama-bench tg128 -rtr 1 plain", "-", bench("ik-bench"), None, "before and after cllm's runs", bload("ik-bench")))
mtp = {}
for p in rates:
    v, a, n, l = server(f"ll-mtp-{p}"); mtp[p] = v
    rows.append(("llama.cpp", f"draft-mtp n_max {K}", p, v, a, n, l))
cplain, cl = [], []
for p in rates:
    for m in kmodes:
        pl, v, a, n = cllm(f"cllm-{m}-{p}")
        if pl: cplain.append((pl, load(f"{out}/cllm-{m}-{p}.load")))
        k, _, dv = m.partition("@")
        cfg = (f"mtp auto k (cap {K})" if k == "auto" else f"mtp fixed k {k}") + (f", draft vocab {dv}" if dv else "")
        cl.append(("cllm", cfg, p, v, a, n, load(f"{out}/cllm-{m}-{p}.load")))
if cplain:
    b = max(cplain)
    rows.append(("cllm", f"plain (best of {len(cplain)} processes' rows)", "-", b[0], None, "", b[1]))
rows += cl
peer_plain = [r[3] for r in rows if r[0] != "cllm" and r[2] == "-" and r[3]]
best = max(peer_plain) if peer_plain else None
f = lambda x, d=2: "-" if x is None else f"{x:.{d}f}"
same = os.path.realpath(cmodel) == os.path.realpath(gguf)
print(f"\n# bench-spec-peer: peers on {os.path.basename(gguf)}, cllm on "
      + ("the same file" if same else os.path.basename(cmodel.rstrip("/")))
      + f", batch 1, best of the rounds; best peer plain decode {f(best)} t/s")
print("| engine | configuration | synthetic acceptance (conditional) | decode t/s | accepted share of drafts | / best peer plain | / llama.cpp draft-mtp same rate | load avg 1 min | notes |")
print("|---|---|---|---:|---:|---:|---:|---:|---|")
for e, c, p, v, a, n, l in rows:
    r1 = f(v / best) if v and best else "-"
    r2 = f(v / mtp[p]) if v and p in mtp and mtp[p] else "-"
    print(f"| {e} | {c} | {p} | {f(v)} | {f(a, 3)} | {r1} | {r2} | {f(l)} | {n} |")
print(f"\nstart: {rd(out + '/uptime.start').strip()}\nend:   {rd(out + '/uptime.end').strip()}\nlogs: {out}")
EOF
