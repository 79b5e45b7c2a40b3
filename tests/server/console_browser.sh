#!/bin/bash
# Web console (issue 17) in a real browser: headless Chromium (Debian `chromium`) driven by
# playwright-core (package.json) against real `cllm serve` processes on models/tiny — page load
# without console errors, streamed chat, stop cancels server-side, thinking toggle, escaping of
# model HTML, dashboard rising under `cllm bench-serve` and back to idle, the requests table,
# --api-key 401 then the key prompt, --console-log-prompts, --no-console, phone width; images
# (issue 34) on a synthetic vision model: attach (keyboard), paste and drop make chips, type and
# size refusals, image_url parts before the text, resent in later turns, thumbnails, storage and
# body limits, and on a text-only model (no tower) the button off and the server's 400 in the chat.
# CLLM_CONSOLE_ONLY=images (comma list of plain,images,gone,spec,key,off) runs parts alone.
# Skips (77) when node, chromium or playwright-core is missing.
# CLLM_CONSOLE_SHOTS=DIR also writes the screenshots (docs/console-*.png come from this).
T=${CLLM_TMP:-/tmp}/console_browser.$$
mkdir -p "$T"
trap 'rm -rf "$T"' EXIT
MODEL="$CLLM_SRC/models/tiny"
command -v node >/dev/null || { echo "skip: no node"; exit 77; }
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
[ -n "$CHROMIUM" ] || { echo "skip: no chromium (apt install chromium)"; exit 77; }
[ -d "$CLLM_SRC/node_modules/playwright-core" ] || { echo "skip: no playwright-core (npm ci)"; exit 77; }
[ -f "$MODEL/model.safetensors" ] || { echo "skip: no $MODEL"; exit 77; }
export CLLM_BIN CLLM_SRC MODEL T CHROMIUM SHOTS=${CLLM_CONSOLE_SHOTS:-}
# the browser and its fetches stay local; a proxy setting must not capture 127.0.0.1
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
# One run of the page checks; on failure the servers' log tails, then the FAIL lines last, so a
# log cut in the middle (CI keeps the head and the tail) still names what failed.
run() {
  timeout 600 node "$CLLM_SRC/tests/server/console_browser.mjs" | tee "$T/out.txt"
  local rc=${PIPESTATUS[0]}
  if [ $rc != 0 ]; then
    for f in "$T"/*.log; do echo "== $f"; tail -20 "$f"; done
    echo "== what failed (exit $rc):"
    grep -A3 '^FAIL' "$T/out.txt" || echo "no FAIL line: the run was killed or crashed"
  fi
  return $rc
}
run && exit 0
# A check failed once on a loaded CI machine (2026-12-06) and never in 30+ runs here, loaded or
# not: a second run tells a timing flake (reported above, then passing) from a real failure
# (failing twice).
echo "== the browser checks failed; running them once more"
run || exit 1
echo "FLAKY: the first run failed (its FAIL lines are above), the second passed"
exit 0
