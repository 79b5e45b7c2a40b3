#!/bin/bash
# cllm against llama.cpp (and ik_llama.cpp when built) on the quarter shape of Qwen3.5-35B-A3B
# (configs/qwen3.5-35b-a3b-quarter.json: real widths, 10 layers, random weights), same machine,
# same threads, run one after the other and interleaved with a read-bandwidth sweep, ROUNDS
# rounds; prints one table of medians: t/s per engine, cllm / best peer, % of the decode roofline
# (weight bytes per token / measured bandwidth), peak RSS (/usr/bin/time -v). Long (about 5 min a
# round on 2 cores) and machine-dependent: not part of CI.
#
#   PEER_DIR=/scratch/peer scripts/bench-peer.sh
#
# Environment (all optional but PEER_DIR):
#   PEER_DIR     llama.cpp peer folder (../shared/peer/RECIPE.sh layout: llama.cpp-src/build/bin,
#                models/q35-L10-q4_0.gguf, bw); built by that recipe when missing
#   PEER_RECIPE  folder holding RECIPE.sh, ik_recipe.sh, bw.c, roofline.py (default ../shared/peer)
#   IK_BUILD     ik_llama.cpp build folder with bin/llama-bench (default $PEER_DIR/ik/build);
#                when absent and IK_GIT names an ik_llama.cpp git snapshot, built from it, else
#                ik_llama.cpp is skipped
#   CLLM         the cllm binary (default build/cllm)
#   MODEL        cllm W4A16 quarter model (default $PEER_DIR/cllm-quarter-w4a16; written with
#                `cllm synth --scheme w4a16` when missing), or a .gguf file
#   GGUF         the file the peers run (default $PEER_DIR/models/q35-L10-q4_0.gguf)
#   SAME_FILE    set: cllm runs the peers' GGUF too (MODEL = GGUF), so the table compares engines
#                on one file, not formats (docs/model.md §8); the peers' bytes per token are then
#                cllm's figure for that file (the recipe's formula is for its Q4_0 file only)
#   EXTRA_MODELS more cllm model dirs, comma-separated, measured the same way (own columns); an
#                entry DIR@VAR=VALUE runs DIR with that environment variable set (e.g.
#                quarter-w4a16@CLLM_ACT16=int8: int8 activations, see README on CLLM_ACT16)
#   ROUNDS (3), THREADS (2), OUT (results folder, default a new /tmp/bench-peer.* folder)
#   REPORT_ONLY  set (with OUT = an earlier run's folder and the same MODEL/EXTRA_MODELS): run
#                nothing, print that run's table again
#   LOCK         a file to flock around every engine run (shared boxes: one big process at a time)
#   CLLM_ISA     passed through (e.g. avx2: compare against an AVX2-only llama.cpp build, made by
#                RECIPE.sh on a CPU without AVX-512)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
: "${PEER_DIR:?set PEER_DIR to the llama.cpp peer folder (see ../shared/peer/README.md)}"
PEER_DIR=$(realpath -m "$PEER_DIR") # every run starts in OUT (ik's llama-batched-bench
# writes llama.log into its working directory), so paths are made absolute first
RECIPE=${PEER_RECIPE:-$SRC/../shared/peer}
IK_BUILD=$(realpath -m "${IK_BUILD:-$PEER_DIR/ik/build}")
CLLM=$(realpath -m "${CLLM:-$SRC/build/cllm}")
MODEL=$(realpath -m "${MODEL:-$PEER_DIR/cllm-quarter-w4a16}")
ROUNDS=${ROUNDS:-3}
T=${THREADS:-2}
OUT=${OUT:-$(mktemp -d /tmp/bench-peer.XXXXXX)}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
LOCK=${LOCK:+$(realpath -m "$LOCK")}
LB=$PEER_DIR/llama.cpp-src/build/bin
GGUF=$(realpath -m "${GGUF:-$PEER_DIR/models/q35-L10-q4_0.gguf}")
[ -n "${SAME_FILE:-}" ] && MODEL=$GGUF
log() { echo "bench-peer: $*" >&2; }

# --- peers -----------------------------------------------------------------------------------
if [ ! -x "$LB/llama-bench" ] || [ ! -x "$LB/llama-batched-bench" ] || [ ! -f "$GGUF" ]; then
    [ -x "$RECIPE/RECIPE.sh" ] || [ -f "$RECIPE/RECIPE.sh" ] || {
        log "no llama.cpp in $PEER_DIR and no recipe at $RECIPE"
        exit 1
    }
    log "building llama.cpp + the Q4_0 GGUF with $RECIPE/RECIPE.sh (~15 min)"
    PEER_DIR=$PEER_DIR bash "$RECIPE/RECIPE.sh" >"$OUT/recipe.log" 2>&1
fi
BW=$PEER_DIR/bw
if [ ! -x "$BW" ]; then
    gcc -O2 -mavx2 -fopenmp -o "$OUT/bw" "$RECIPE/bw.c"
    BW=$OUT/bw
fi
IK=""
if [ -x "$IK_BUILD/bin/llama-bench" ]; then
    IK=$IK_BUILD/bin
elif [ -n "${IK_GIT:-}" ]; then
    log "building ik_llama.cpp from $IK_GIT (~20 min)"
    if IK_GIT=$IK_GIT PEER_DIR=$PEER_DIR bash "$RECIPE/ik_recipe.sh" >"$OUT/ik_recipe.log" 2>&1; then
        IK=$PEER_DIR/ik/build/bin
    else
        log "ik_llama.cpp build failed (see $OUT/ik_recipe.log): skipped"
    fi
else
    log "no ik_llama.cpp at $IK_BUILD (set IK_BUILD or IK_GIT): skipped"
fi

# --- cllm model ------------------------------------------------------------------------------
[ -x "$CLLM" ] || {
    log "no cllm binary at $CLLM (build first or set CLLM)"
    exit 1
}
if [ ! -f "$MODEL/config.json" ] && [ "${MODEL%.gguf}" = "$MODEL" ]; then
    log "writing the cllm W4A16 quarter model to $MODEL"
    "$CLLM" synth --config "$SRC/configs/qwen3.5-35b-a3b-quarter.json" --scheme w4a16 \
        --group-size 128 -q "$MODEL"
fi
MODELS=("$MODEL")
IFS=',' read -r -a extra <<<"${EXTRA_MODELS:-}"
for m in "${extra[@]}"; do
    [ -z "$m" ] && continue
    d=$(realpath -m "${m%%@*}")
    [ "$m" != "${m%%@*}" ] && d="$d@${m#*@}"
    MODELS+=("$d")
done

run() { # name round cmd...: stdout to OUT/name.rROUND.txt, stderr to .err, time -v to .time
    local name=$1 r=$2
    shift 2
    local f="$OUT/$name.r$r"
    log "round $r: $name"
    if [ -n "${LOCK:-}" ]; then
        (cd "$OUT" && flock "$LOCK" /usr/bin/time -v -o "$f.time" "$@" >"$f.txt" 2>"$f.err") ||
            log "$name failed (see $f.err)"
    else
        (cd "$OUT" && /usr/bin/time -v -o "$f.time" "$@" >"$f.txt" 2>"$f.err") ||
            log "$name failed (see $f.err)"
    fi
}

BB_ARGS=(-c 8192 -b 2048 -ub 512 -npp 128 -ntg 32 -npl 1,2,4,8)
[ -n "${REPORT_ONLY:-}" ] && ROUNDS=0 # OUT=<an earlier run's folder>: print its table again
[ "$ROUNDS" -gt 0 ] && uptime >"$OUT/uptime.start"
for r in $(seq 1 "$ROUNDS"); do
    run bw "$r" "$BW" "$T" 2 10
    run llama-bench "$r" "$LB/llama-bench" -m "$GGUF" -t "$T" -p 512 -n 128 -r 1 -o json
    run llama-batched "$r" "$LB/llama-batched-bench" -m "$GGUF" -t "$T" "${BB_ARGS[@]}"
    if [ -n "$IK" ]; then
        run ik-bench "$r" "$IK/llama-bench" -m "$GGUF" -t "$T" -p 512 -n 128 -r 1 -o json -rtr 1
        # ik's llama-batched-bench takes -rtr as a flag, its llama-bench as "-rtr 1"
        run ik-batched "$r" "$IK/llama-batched-bench" -m "$GGUF" -t "$T" "${BB_ARGS[@]}" -rtr
    fi
    run bw2 "$r" "$BW" "$T" 2 10
    for i in "${!MODELS[@]}"; do
        dir=${MODELS[$i]%%@*} envs=()
        [ "$dir" != "${MODELS[$i]}" ] && envs=("${MODELS[$i]#*@}")
        run "cllm$i-bench" "$r" env "${envs[@]}" "$CLLM" bench "$dir" -t "$T" -p 512 -n 128 -r 1 \
            --no-sweep
        run "cllm$i-batched" "$r" env "${envs[@]}" "$CLLM" bench "$dir" -t "$T" -p 128 -n 32 \
            -b 1,2,4,8 --no-table
    done
done
[ "$ROUNDS" -gt 0 ] && uptime >"$OUT/uptime.end"
[ -n "${REPORT_ONLY:-}" ] && ROUNDS=$(ls "$OUT"/bw.r*.txt 2>/dev/null | wc -l)

# Bytes per decoded token of the GGUF: the recipe's formula (weights only, like cllm's figure).
LLAMA_BYTES=$(/usr/bin/python3 "$RECIPE/roofline.py" 2>/dev/null |
    sed -n 's/^L10: .*weights \([0-9.]*\) MB\/token.*/\1/p')
LLAMA_BYTES=${LLAMA_BYTES:-650}
[ -n "${SAME_FILE:-}" ] && LLAMA_BYTES=0 # same file: cllm's measured bytes stand for every engine

/usr/bin/python3 - "$OUT" "$ROUNDS" "$LLAMA_BYTES" "$GGUF" "${IK:-none}" "${MODELS[@]}" <<'EOF'
import glob, json, os, re, statistics, sys
out, rounds, llama_mb, gguf, have_ik = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5] != "none"
models = sys.argv[6:]
def read(name, r):
    p = f"{out}/{name}.r{r}.txt"
    return open(p, errors="replace").read() if os.path.exists(p) else ""
def rss(name, r):
    p = f"{out}/{name}.r{r}.time"
    if not os.path.exists(p): return None
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(p).read())
    return int(m.group(1)) * 1024 / 1e9 if m else None
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
def bw(r):
    vals = []
    for n in ("bw", "bw2"):
        m = re.search(r"median ([\d.]+) GB/s", read(n, r))
        if m: vals.append(float(m.group(1)))
    return vals
def llama_bench(name, r):
    t = read(name, r); i = t.find("[")
    res = {}
    try:
        for row in json.loads(t[i:t.rfind("]") + 1]):
            if row.get("n_gen", 0) == 0: res["pp"] = row["avg_ts"]
            elif row.get("n_prompt", 0) == 0: res["tg"] = row["avg_ts"]
    except Exception:
        pass
    return res
def batched(name, r):  # PP TG B N_KV T_PP S_PP T_TG S_TG T S
    res = {}
    err = f"{out}/{name}.r{r}.err"  # ik's llama-batched-bench prints its table on stderr
    extra = open(err, errors="replace").read() if os.path.exists(err) else ""
    for line in (read(name, r) + "\n" + extra).splitlines():
        f = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(f) >= 10 and all(re.fullmatch(r"[\d.]+", x) for x in f[:10]):
            res[int(f[2])] = (float(f[5]), float(f[7]))
    return res
def cllm_bench(name, r):
    t = read(name, r); res = {}
    for m in re.finditer(r"\| (pp|tg)\d+ \| ([\d.]+) ", t): res[m.group(1)] = float(m.group(2))
    m = re.search(r"decode reads ([\d.]+) GB of weights per token", t)
    if m: res["bytes"] = float(m.group(1))
    return res

engines = [("llama.cpp", "llama-bench", "llama-batched", llama_bench)]
if have_ik: engines.append(("ik_llama.cpp", "ik-bench", "ik-batched", llama_bench))
specs = [m.partition("@") for m in models]  # (dir, "@", VAR=VALUE or "")
for i, (d, _, e) in enumerate(specs):
    label = os.path.basename(d.rstrip('/')) + (f" {e}" if e else "")
    engines.append((f"cllm {label}", f"cllm{i}-bench", f"cllm{i}-batched", cllm_bench))
B = [1, 2, 4, 8]
rows = {}  # metric -> engine -> [per round]
bws = []
raw = []
for r in range(1, rounds + 1):
    bws += bw(r)
    raw.append(f"round {r}: bandwidth sweeps {bw(r)} GB/s")
    for (e, nb, nbt, fn) in engines:
        a, b = fn(nb, r), batched(nbt, r)
        rows.setdefault("pp512 t/s", {}).setdefault(e, []).append(a.get("pp"))
        rows.setdefault("tg128 t/s", {}).setdefault(e, []).append(a.get("tg"))
        for bb in B:
            rows.setdefault(f"S_TG B={bb} t/s (PP 128, TG 32)", {}).setdefault(e, []).append(b.get(bb, (None, None))[1])
        for bb in B:
            rows.setdefault(f"S_PP B={bb} t/s", {}).setdefault(e, []).append(b.get(bb, (None, None))[0])
        rs = [x for x in (rss(nb, r), rss(nbt, r)) if x is not None]
        rows.setdefault("peak RSS GB", {}).setdefault(e, []).append(max(rs) if rs else None)
        if "bytes" in a: rows.setdefault("_bytes", {}).setdefault(e, []).append(a["bytes"])
        raw.append(f"  {e}: pp {a.get('pp')} tg {a.get('tg')} batched {b} rss {rs}")
bw_med = med(bws)
names = [e[0] for e in engines]
peers = [n for n in names if not n.startswith("cllm")]
def fmt(x, p=2): return "-" if x is None else f"{x:.{p}f}"
print(f"\n# bench-peer: {rounds} rounds, medians; read bandwidth (2 GiB sweep, median of {len(bws)} sweeps) {fmt(bw_med)} GB/s")
hdr = "| metric | " + " | ".join(names) + " | " + " | ".join(f"{n} / best peer" for n in names if n.startswith("cllm")) + " |"
print(hdr); print("|" + "---|" * (hdr.count("|") - 1))
bytes_per = {n: (llama_mb / 1000 if not n.startswith("cllm") else med(rows.get("_bytes", {}).get(n, []))) for n in names}
if not llama_mb:  # SAME_FILE: the peers read the bytes cllm reads from the same file
    for n in names:
        if not n.startswith("cllm"): bytes_per[n] = bytes_per.get(next(x for x in names if x.startswith("cllm")))
for metric, per in rows.items():
    if metric.startswith("_"): continue
    m = {n: med(per.get(n, [])) for n in names}
    cells = [fmt(m[n]) for n in names]
    lower_better = metric.startswith("peak RSS")
    pv = [m[p] for p in peers if m[p] is not None]
    best = (min(pv) if lower_better else max(pv)) if pv else None
    ratios = [fmt(m[n] / best) if best and m[n] is not None else "-" for n in names if n.startswith("cllm")]
    print(f"| {metric} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
print("| weight GB read per decoded token | " + " | ".join(fmt(bytes_per[n], 3) for n in names) + " | " + " | ".join("" for n in names if n.startswith("cllm")) + " |")
size = {n: os.path.getsize(gguf) / 1e9 if os.path.exists(gguf) else None for n in peers}
for i, (d, _, _) in enumerate(specs):
    size[names[len(peers) + i]] = (os.path.getsize(d) if d.endswith(".gguf") else sum(os.path.getsize(f) for f in glob.glob(f"{d}/*.safetensors"))) / 1e9
rss_m = {n: med(rows["peak RSS GB"].get(n, [])) for n in names}
print("| weight file GB | " + " | ".join(fmt(size[n], 2) for n in names) + " | " + " | ".join("" for n in names if n.startswith("cllm")) + " |")
print("| peak RSS / weight file | " + " | ".join(fmt(rss_m[n] / size[n]) if rss_m[n] and size[n] else "-" for n in names) + " | " + " | ".join("" for n in names if n.startswith("cllm")) + " |")
tg = {n: med(rows["tg128 t/s"].get(n, [])) for n in names}
roof = [fmt(100 * tg[n] * bytes_per[n] / bw_med, 1) if tg[n] and bytes_per[n] and bw_med else "-" for n in names]
print("| tg128 % of roofline (t/s x bytes / bandwidth) | " + " | ".join(roof) + " | " + " | ".join("" for n in names if n.startswith("cllm")) + " |")
print("\nraw numbers per round:")
print("\n".join(raw))
print(f"\nlogs: {out}")
EOF
echo "start: $(cat "$OUT/uptime.start")"
echo "end:   $(cat "$OUT/uptime.end")"
