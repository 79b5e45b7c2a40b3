#!/usr/bin/env bash
# scripts/run.sh prints a curl hint for the address `cllm serve` will use: the port and host of
# its arguments (both spellings, the last one wins, 0.0.0.0 -> localhost, IPv6 in brackets), the
# served model name and an auth header when --api-key is given; the arguments reach serve
# unchanged. run.sh runs here in a copy of the tree whose install, build and cllm are stubs.
set -u
SRC=${CLLM_SRC:?}
T=${CLLM_TMP:-/tmp}/run_hint
rm -rf "$T" && mkdir -p "$T/tree/scripts" "$T/tree/build"
. "$SRC/tests/lib/check.sh"
cp "$SRC/scripts/run.sh" "$T/tree/scripts/"
printf '#!/bin/sh\nexit 0\n' > "$T/tree/scripts/install-deps.sh"
printf '#!/bin/sh\nexit 0\n' > "$T/tree/scripts/build.sh"
printf '#!/bin/sh\necho "cllm args: $*"\n' > "$T/tree/build/cllm"
chmod +x "$T/tree/scripts/"*.sh "$T/tree/build/cllm"

# hint ARGS...: run.sh's output
hint() { bash "$T/tree/scripts/run.sh" "$@" 2>&1; }
check() { # check DESC WANT_URL ARGS...
    local desc=$1 want=$2
    shift 2
    local out
    out=$(hint "$@")
    if grep -qxF "serving models/tiny on http://$want — try:" <<< "$out" &&
        grep -qF "  curl $want/v1/chat/completions " <<< "$out" &&
        grep -qxF "cllm args: serve models/tiny${*:+ $*}" <<< "$out"; then
        ok "$desc: $want"
    else
        bad "$desc: want $want"
        echo "$out"
    fi
}
check "no arguments" 127.0.0.1:8000
check "--port N" 127.0.0.1:8080 --port 8080
check "--port=N" 127.0.0.1:9001 --port=9001 --threads 2
check "last --port wins" 127.0.0.1:9002 --port 8080 --port=9002
check "--host 0.0.0.0" localhost:8081 --host 0.0.0.0 --port 8081
check "--host=ADDR" 10.1.2.3:8000 --host=10.1.2.3
check "IPv6 host" "[::1]:8082" --host ::1 --port 8082
out=$(hint --served-model-name qwen --api-key sk-x)
grep -q '"model":"qwen"' <<< "$out" && ok "served model name in the hint" || { bad "model name"; echo "$out"; }
grep -q "Authorization: Bearer <the --api-key>" <<< "$out" && ! grep -q sk-x <<< "${out%%cllm args*}" &&
    ok "auth header in the hint, the key not printed" || { bad "api key hint"; echo "$out"; }
out=$(hint)
! grep -q Authorization <<< "$out" && grep -q '"model":"tiny"' <<< "$out" && ok "defaults: no auth header, model tiny" ||
    { bad "defaults"; echo "$out"; }
check_exit
