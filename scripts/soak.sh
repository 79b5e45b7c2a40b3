#!/bin/bash
# Soak at saturation: scripts/soak.sh DURATION_S [OUTDIR]
#
# Starts `cllm serve` on a small model with deliberately small pools (4 sequences, 1 MiB of KV =
# 64 blocks, 16 queued requests, so admission control and preemption are exercised) and drives it
# for DURATION_S with, all at once:
#   open loop   cllm bench-serve at --request-rate above what one core serves (429s expected)
#   closed loop cllm bench-serve --users with think time: the well-behaved users whose p99 TTFT
#               is bounded
#   multi-turn  cllm bench-serve --multi-turn over chat (prefix-cache churn)
#   misbehaving scripts/soak_clients.py: n=2, stop strings, streams abandoned mid-way, requests
#               closed before their first token, over-length prompts, malformed bodies, slowloris
#               connections (cut by --client-header-timeout, 10 s here), streams never read
#               (cancelled by --send-timeout, 5 s here)
# It samples /metrics and the server's RSS every SOAK_SAMPLE_S seconds (samples.tsv, rss.png with
# gnuplot) and at the end asserts:
#   - no 5xx at all (no drain happens during the run, so not even 503s)
#   - every 429 is an admission rejection counted with its reason (the limits were hit)
#   - no unexpected outcome in the misbehaving clients (each style's documented answer); runs of
#     30 s or more: the slowloris connections were cut by the header deadline, and a never-read
#     stream was cut by the send deadline
#   - at idle: nothing running, waiting or in flight (no stuck request), KV blocks and state
#     slots used back to 0, no request finished with "error"
#   - RSS growth after warm-up < SOAK_RSS_PCT_PER_10MIN (default 1) % per 10 minutes; runs shorter
#     than 10 minutes check SOAK_RSS_PCT_SHORT (default 10) % in total instead (one allocator arena
#     growing in a 60 s run is not a leak rate)
#   - p99 TTFT of the closed-loop users < SOAK_TTFT_P99_S (default 10 s)
#   - SIGTERM afterwards exits 0
# and writes summary.txt with the figures. Env: CLLM_BIN (default build/cllm), SOAK_MODEL
# (default models/tiny), SOAK_RATE (open-loop req/s, default 25), SOAK_PORT.
set -u
DUR=${1:?usage: scripts/soak.sh DURATION_S [OUTDIR]}
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${2:-/tmp/cllm-soak-$$}
BIN=${CLLM_BIN:-$SRC/build/cllm}
MODEL=${SOAK_MODEL:-$SRC/models/tiny}
RATE=${SOAK_RATE:-25}
SAMPLE=${SOAK_SAMPLE_S:-5}
TTFT_MAX=${SOAK_TTFT_P99_S:-10}
RSS_RATE_MAX=${SOAK_RSS_PCT_PER_10MIN:-1}
RSS_SHORT_MAX=${SOAK_RSS_PCT_SHORT:-10}
PORT=${SOAK_PORT:-$((20000 + RANDOM % 20000))}
MML=1024
HDR_T=10
SEND_T=5
U="http://127.0.0.1:$PORT"
mkdir -p "$OUT"
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done
    [ -n "${SPID:-}" ] && kill "$SPID" 2> /dev/null
}
trap cleanup EXIT

# a random port another process holds: the server exits with 'address already in use' (or, worse,
# another server answers /health): only our own live process counts as up; up to five ports
for try in 1 2 3 4 5; do
    "$BIN" serve "$MODEL" --port "$PORT" --served-model-name soak --max-model-len $MML \
        --kv-cache-memory 1MiB --max-num-seqs 4 --max-num-queued-reqs 16 --threads 1 \
        --shutdown-timeout 20 --stats-interval 30 --disable-log-requests \
        --client-header-timeout $HDR_T --send-timeout $SEND_T > "$OUT/server.log" 2>&1 &
    SPID=$!
    up=0
    for _ in $(seq 300); do
        kill -0 $SPID 2> /dev/null || break
        [ "$(curl -s -o /dev/null -w '%{http_code}' $U/health)" = 200 ] && kill -0 $SPID 2> /dev/null && {
            up=1
            break
        }
        sleep 0.1
    done
    [ $up = 1 ] && break
    kill -0 $SPID 2> /dev/null || ! grep -q "address already in use" "$OUT/server.log" || [ -n "${SOAK_PORT:-}" ] || {
        PORT=$((20000 + RANDOM % 20000))
        U="http://127.0.0.1:$PORT"
        continue
    }
    break
done
[ $up = 1 ] || {
    bad "server did not start"
    cat "$OUT/server.log"
    exit 1
}

metric() { # metric NAME_REGEX [FILE]: sum of the matching samples in $OUT/m.txt
    awk -v re="$1" '$0 !~ /^#/ && $1 ~ re { s += $2 } END { printf "%.0f\n", s }' "${2:-$OUT/m.txt}"
}
snap() { curl -s -m 5 $U/metrics > "$OUT/m.txt"; }
# baseline: the /health polls above got 503 "loading" (documented) before the model was ready
snap
cp "$OUT/m.txt" "$OUT/metrics_start.txt"

BS=("$BIN" bench-serve --url "$U" --duration "$DUR" --timeout 120 -q)
"${BS[@]}" --request-rate "$RATE" --random-input-len 100 --random-output-len 48 --seed 1 \
    --save-result "$OUT/open.json" > "$OUT/open.txt" 2>&1 &
pids+=($!)
"${BS[@]}" --users 3 --think-time 1-3 --random-input-len 64 --random-output-len 32 --seed 2 \
    --save-result "$OUT/closed.json" > "$OUT/closed.txt" 2>&1 &
pids+=($!)
"${BS[@]}" --backend openai-chat --users 2 --multi-turn 4 --think-time 0.5-1.5 \
    --random-input-len 48 --random-output-len 24 --seed 3 \
    --save-result "$OUT/multiturn.json" > "$OUT/multiturn.txt" 2>&1 &
pids+=($!)
/usr/bin/python3 "$SRC/scripts/soak_clients.py" "$PORT" "$DUR" "$OUT/clients.json" \
    --workers 3 --slowloris 4 --nonreaders 2 --send-timeout $SEND_T --max-model-len $MML \
    > "$OUT/clients.txt" 2>&1 &
pids+=($!)

# sampler: t, RSS, gauges and counters, every $SAMPLE s while the drivers run
t0=$(date +%s)
echo -e "t_s\trss_kb\trunning\twaiting\tin_flight\tkv_used\tslots_used\tpreemptions\thttp_429\thttp_5xx" > "$OUT/samples.tsv"
sample() {
    snap
    rss=$(awk '/^VmRSS:/ {print $2}' /proc/$SPID/status 2> /dev/null)
    echo -e "$(($(date +%s) - t0))\t${rss:-0}\t$(metric '^vllm:num_requests_running')\t$(metric '^vllm:num_requests_waiting')\t$(metric '^cllm_requests_in_flight')\t$(metric '^cllm_kv_blocks_used')\t$(metric '^cllm_state_slots_used')\t$(metric '^vllm:num_preemptions_total')\t$(metric 'code="429"')\t$(($(metric 'code="5[0-9][0-9]"') - $(metric 'code="5[0-9][0-9]"' "$OUT/metrics_start.txt")))" >> "$OUT/samples.tsv"
}
while :; do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null && alive=1; done
    [ $alive = 0 ] && break
    kill -0 $SPID 2> /dev/null || { bad "server died during the soak"; break; }
    sample
    sleep "$SAMPLE"
done
for p in "${pids[@]}"; do wait "$p"; done
pids=()

# idle: everything accepted has finished or was cancelled by its client
idle=0
for _ in $(seq 60); do
    snap
    if [ "$(metric '^vllm:num_requests_running')" = 0 ] && [ "$(metric '^vllm:num_requests_waiting')" = 0 ] &&
        [ "$(metric '^cllm_requests_in_flight')" = 0 ]; then
        idle=1
        break
    fi
    sleep 0.5
done
sample
cp "$OUT/m.txt" "$OUT/metrics_final.txt"
[ $idle = 1 ] && ok "idle: nothing running, waiting or in flight" || bad "stuck requests at the end: $(grep -E '^(vllm:num_requests_(running|waiting)|cllm_requests_in_flight)' $OUT/m.txt)"
kv=$(metric '^cllm_kv_blocks_used')
slots=$(metric '^cllm_state_slots_used')
[ "$kv" = 0 ] && [ "$slots" = 0 ] && ok "KV blocks and state slots back to 0" || bad "at idle: kv blocks $kv, state slots $slots"
h5=$(($(metric 'code="5[0-9][0-9]"') - $(metric 'code="5[0-9][0-9]"' "$OUT/metrics_start.txt")))
[ "$h5" = 0 ] && ok "no 5xx" || bad "$h5 responses with 5xx"
h429=$(metric '^cllm_http_responses_total.*code="429"')
rej=$(awk '$1 ~ /^cllm_admission_rejections_total/ && $1 !~ /draining/ {s += $2} END {printf "%.0f\n", s}' "$OUT/m.txt")
[ "$h429" = "$rej" ] && ok "every 429 is a counted admission rejection ($h429)" || bad "429s $h429 vs admission rejections $rej"
errs=$(metric 'finished_reason="error"')
[ "$errs" = 0 ] && ok "no request finished with error" || bad "$errs requests finished with error"
unexp=$(/usr/bin/python3 -c "import json; print(json.load(open('$OUT/clients.json'))['n_unexpected'])" 2> /dev/null)
[ "${unexp:-x}" = 0 ] && ok "misbehaving clients: every answer as documented" || bad "misbehaving clients: ${unexp:-no result} unexpected (see $OUT/clients.json)"
if [ "$DUR" -ge 30 ]; then
    hdr=$(metric 'cllm_http_deadline_closes_total.*reason="header_timeout"')
    snd=$(metric 'cllm_http_deadline_closes_total.*reason="send_timeout"')
    cut=$(/usr/bin/python3 -c "import json; print(json.load(open('$OUT/clients.json'))['counts'].get('nonreader', {}).get('cut_by_server', 0))" 2> /dev/null)
    [ "$hdr" -gt 0 ] && ok "slowloris: $hdr connections cut by --client-header-timeout" || bad "slowloris: no connection cut by the header deadline"
    [ "$snd" -gt 0 ] && [ "${cut:-0}" -gt 0 ] && ok "never-read streams: $snd cut by --send-timeout" || bad "never-read streams: $snd send_timeout cuts, ${cut:-?} seen by the clients"
fi

# RSS after warm-up
/usr/bin/python3 - "$OUT" "$DUR" "$RSS_RATE_MAX" "$RSS_SHORT_MAX" > "$OUT/rss.txt" << 'EOF'
import sys
out, dur, rate_max, short_max = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
rows = [l.split("\t") for l in open(out + "/samples.tsv").read().splitlines()[1:]]
pts = [(float(r[0]), float(r[1])) for r in rows if float(r[1]) > 0]
warm = max(20.0, dur / 10)
after = [p for p in pts if p[0] >= warm] or pts[-1:]
w, e = after[0], pts[-1]
growth = (e[1] - w[1]) / w[1] * 100
span = max(e[0] - w[0], 1)
per10 = growth / span * 600
if span >= 600:
    ok = per10 < rate_max
    rule = f"{per10:.3f} %/10min < {rate_max}"
else:
    ok = growth < short_max
    rule = f"{growth:.2f} % total < {short_max} (run under 10 min)"
print(f"rss_start_kb {pts[0][1]:.0f} rss_warm_kb {w[1]:.0f} (t={w[0]:.0f}s) rss_end_kb {e[1]:.0f} "
      f"(t={e[0]:.0f}s) growth {growth:.2f}% = {per10:.3f} %/10min; {rule}: {'ok' if ok else 'FAIL'}")
EOF
grep -q ": ok$" "$OUT/rss.txt" && ok "RSS: $(cat $OUT/rss.txt)" || bad "RSS: $(cat $OUT/rss.txt)"

# well-behaved users' TTFT
p99=$(/usr/bin/python3 -c "import json; print(json.load(open('$OUT/closed.json'))['p99_ttft_ms'] / 1000)" 2> /dev/null)
/usr/bin/python3 -c "import sys; sys.exit(0 if float('${p99:-inf}') < $TTFT_MAX else 1)" &&
    ok "closed-loop users: p99 TTFT ${p99} s < $TTFT_MAX s" || bad "closed-loop users: p99 TTFT ${p99:-?} s (bound $TTFT_MAX s)"

kill -TERM $SPID
wait $SPID
rc=$?
SPID=
[ $rc = 0 ] && ok "SIGTERM after the soak: exit 0" || bad "SIGTERM after the soak: exit $rc"

# figures
/usr/bin/python3 - "$OUT" > "$OUT/summary.txt" << 'EOF'
import json, re, sys
out = sys.argv[1]
m = {}
for l in open(out + "/metrics_final.txt"):
    if l.startswith("#"): continue
    k, _, v = l.rpartition(" ")
    try: m[k] = float(v)
    except ValueError: pass
def s(pat): return int(sum(v for k, v in m.items() if re.search(pat, k)))
def by(prefix, label):
    return ", ".join(re.search(label + '="([^"]*)"', k).group(1) + ": " + str(int(v))
                     for k, v in sorted(m.items()) if k.startswith(prefix))
m0 = {}
for l in open(out + "/metrics_start.txt"):
    if l.startswith("#"): continue
    k, _, v = l.rpartition(" ")
    try: m0[k] = float(v)
    except ValueError: pass
print("server (from /metrics at the end; the start-up /health polls are in metrics_start.txt):")
print("  HTTP responses by code: " + by("cllm_http_responses_total", "code"))
print("  finished by reason: " + by("vllm:request_success_total", "finished_reason"))
print(f"  cancelled on client disconnect: {s('^cllm_requests_cancelled_on_disconnect_total')}")
print("  connections cut by a deadline: " + by("cllm_http_deadline_closes_total", "reason"))
print("  admission rejections (429): " + by("cllm_admission_rejections_total", "reason"))
print(f"  preemptions: {s('^vllm:num_preemptions_total')}")
tot = s('^cllm_http_responses_total')
e5 = s('^cllm_http_responses_total.*code="5') - int(sum(v for k, v in m0.items() if re.search('^cllm_http_responses_total.*code="5', k)))
print(f"  5xx error rate: {e5}/{tot} = {100.0 * e5 / max(tot, 1):.4f} %")
print(f"  prefix cache: {s('^vllm:prefix_cache_hits_total')} of {s('^vllm:prefix_cache_queries_total')} tokens hit")
for name in ("open", "closed", "multiturn"):
    try: j = json.load(open(f"{out}/{name}.json"))
    except (OSError, ValueError): print(f"{name}: no result"); continue
    print(f"{name}: {j['completed']} completed, {j['failed']} failed {j.get('errors_by_kind', {})}; "
          f"TTFT p50 {j['median_ttft_ms']:.1f} p99 {j['p99_ttft_ms']:.1f} ms; "
          f"ITL p50 {j['median_itl_ms']:.2f} p99 {j['p99_itl_ms']:.2f} ms")
c = json.load(open(out + "/clients.json"))
print("misbehaving clients: " + json.dumps(c["counts"], sort_keys=True))
print(open(out + "/rss.txt").read().strip())
EOF
cat "$OUT/summary.txt"
if command -v gnuplot > /dev/null; then
    gnuplot -e "set terminal pngcairo size 900,400 noenhanced; set output '$OUT/rss.png'; set title 'cllm serve RSS during the soak'; set xlabel 'seconds'; set ylabel 'RSS (MiB)'; set key off; plot '$OUT/samples.tsv' using 1:(\$2/1024) skip 1 with lines lw 2" 2> /dev/null ||
        gnuplot -e "set terminal png size 900,400; set output '$OUT/rss.png'; set xlabel 'seconds'; set ylabel 'RSS (MiB)'; set key off; plot '$OUT/samples.tsv' using 1:(\$2/1024) skip 1 with lines" 2> /dev/null
fi
echo "soak: $([ $fail = 0 ] && echo PASS || echo FAIL) ($DUR s, results in $OUT)"
exit $fail
