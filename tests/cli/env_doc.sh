#!/usr/bin/env bash
# docs/env.md is the option table of src/cli/options.c printed (`cllm --list-env md`), so the
# page cannot drift from what cllm reads; the variables are parsed once at start-up, a bad value
# refused naming the variable, and --act16 wins over CLLM_ACT16.
set -u
. "$CLLM_SRC/tests/lib/check.sh"
BIN=$CLLM_BIN
SRC=$CLLM_SRC
T=${CLLM_TMP:-/tmp}/env_doc
rm -rf "$T" && mkdir -p "$T"
"$BIN" --list-env md >"$T/env.md" 2>&1
if cmp -s "$T/env.md" "$SRC/docs/env.md"; then
  ok "docs/env.md equals cllm --list-env md"
else
  bad "docs/env.md differs from cllm --list-env md (regenerate: cllm --list-env md > docs/env.md)"
  diff "$SRC/docs/env.md" "$T/env.md" | head -20
fi
# every variable src/ names in a getenv is a row of the table
"$BIN" --list-env names >"$T/names"
for v in $(grep -rhoE 'getenv\("[A-Z_0-9]+"\)' "$SRC/src" | sed -E 's/getenv\("(.*)"\)/\1/' | sort -u); do
  grep -qx "$v" "$T/names" || bad "$v is read in src/ but missing from the option table"
done
for v in $(grep -rhoE '"(CLLM|VLLM)_[A-Z_0-9]+"' "$SRC/src/cli/options.c" | tr -d '"' | sort -u); do
  grep -q "\`$v\`" "$SRC/docs/env.md" || bad "$v: not documented in docs/env.md"
done
ok "every variable read is in the table and documented"
expect_rc 2 "bad --list-env format refused" "$BIN" --list-env html
CLLM_ACT16=fast "$BIN" cpuinfo >"$T/out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "CLLM_ACT16=fast: expected int, int8 or float" "$T/out" &&
  ok "a bad CLLM_ACT16 refused at start-up naming it (rc 2)" || bad "CLLM_ACT16=fast: rc $rc: $(cat "$T/out")"
CLLM_LM_SCREEN=5000 "$BIN" cpuinfo >"$T/out" 2>&1
[ $? = 2 ] && grep -q "CLLM_LM_SCREEN=5000" "$T/out" && ok "CLLM_LM_SCREEN out of range refused" ||
  bad "CLLM_LM_SCREEN=5000: $(cat "$T/out")"
CLLM_ISA=ref "$BIN" cpuinfo >"$T/out" 2>&1
grep -qi "tier.*ref" "$T/out" && ok "CLLM_ISA=ref forces the ref tier" || bad "CLLM_ISA=ref: $(cat "$T/out")"
check_exit
