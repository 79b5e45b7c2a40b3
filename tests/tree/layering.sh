#!/usr/bin/env bash
# The module layering of docs/architecture.md holds (scripts/check-layering.py), and the check
# itself fails on a forbidden include, a private header, an unknown module, a stale exception,
# a function over 200 lines (unless listed) and a listed long function that got short.
set -u
. "$CLLM_SRC/tests/lib/check.sh"
SRC=$CLLM_SRC
T=${CLLM_TMP:-/tmp}/layering
rm -rf "$T" && mkdir -p "$T"
expect_rc 0 "tree follows the table" /usr/bin/python3 "$SRC/scripts/check-layering.py" "$SRC"
# a scratch tree: two modules, then one bad edit at a time
mk() { # mk [EXCEPTION_ROW]
  rm -rf "$T/r" && mkdir -p "$T/r/docs" "$T/r/src/base" "$T/r/src/kernels"
  printf '%s\n' '<!-- layering:begin -->' '| module | owns | may include | must not know |' \
    '|---|---|---|---|' '| `base` | x | — | all |' '| `kernels` | y | base | z |' \
    '<!-- layering:end -->' '<!-- layering-exceptions:begin -->' '| file | includes | why |' \
    '|---|---|---|' ${1:+"$1"} '<!-- layering-exceptions:end -->' >"$T/r/docs/architecture.md"
  echo '#include "base/a.h"' >"$T/r/src/kernels/k.c"
  : >"$T/r/src/base/a.h"
}
chk() { /usr/bin/python3 "$SRC/scripts/check-layering.py" "$T/r"; }
mk
expect_rc 0 "scratch tree clean" chk
mk && echo '#include "kernels/k.h"' >"$T/r/src/base/b.c"
expect_rc 1 "upward include refused" chk
grep -q "src/base/b.c:1: includes kernels/k.h: module base may not include kernels" "$T/out" &&
  ok "names file, line and rule" || bad "message: $(cat "$T/out")"
mk '| `src/base/b.c` | `kernels/k.h` | known |' && echo '#include "kernels/k.h"' >"$T/r/src/base/b.c"
expect_rc 0 "listed exception accepted" chk
mk && echo '#include "base/a_int.h"' >>"$T/r/src/kernels/k.c"
expect_rc 1 "private header refused" chk
mk && mkdir "$T/r/src/extra"
expect_rc 1 "unknown module refused" chk
mk '| `src/kernels/k.c` | `base/gone.h` | old |'
expect_rc 1 "stale exception refused" chk
grep -q "no longer occurs" "$T/out" && ok "stale exception named" || bad "stale: $(cat "$T/out")"
long_fn() { # long_fn N: src/base/f.c holds a function of N lines, with braces in a comment and a string
  { echo 'int f(int x) {'; echo '    /* } not a close */'; echo '    const char *s = "}";'
    for _ in $(seq $(($1 - 4))); do echo '    x++;'; done; echo '}'; } >"$T/r/src/base/f.c"
}
mk && long_fn 201
expect_rc 1 "function of 201 lines refused" chk
grep -q "src/base/f.c:1: f() is 201 lines" "$T/out" && ok "long function named" || bad "long: $(cat "$T/out")"
mk && long_fn 200
expect_rc 0 "function of 200 lines accepted" chk
mk && long_fn 201 && printf '%s\n' '<!-- long-functions:begin -->' '| file | function | why |' '|---|---|---|' \
  '| `src/base/f.c` | `f` | known |' '<!-- long-functions:end -->' >>"$T/r/docs/architecture.md"
expect_rc 0 "listed long function accepted" chk
mk && long_fn 50 && printf '%s\n' '<!-- long-functions:begin -->' '| file | function | why |' '|---|---|---|' \
  '| `src/base/f.c` | `f` | known |' '<!-- long-functions:end -->' >>"$T/r/docs/architecture.md"
expect_rc 1 "listed function that got short refused" chk
# the environment is read only by the option table (src/cli/options.c, docs/env.md)
mk && printf '%s\n' '#include <stdlib.h>' 'int f(void) { return getenv("CLLM_NEW") != 0; }' >"$T/r/src/kernels/e.c"
expect_rc 1 "getenv outside the option table refused" chk
grep -q 'src/kernels/e.c:2: getenv("CLLM_NEW")' "$T/out" && ok "getenv named with file and line" ||
  bad "getenv: $(cat "$T/out")"
mk && echo 'void g(void) { setenv("CLLM_ACT16", "int8", 1); }' >"$T/r/src/base/s.c"
expect_rc 1 "setenv outside the option table refused" chk
mk && printf '%s\n' '/* getenv("X") in a comment,' '   getenv("Y") too */' 'const char *s = "getenv(";' >"$T/r/src/base/c.c"
expect_rc 0 "getenv in comments and strings ignored" chk
mk && mkdir -p "$T/r/src/cli" && echo 'int f(void) { return getenv("CLLM_X") != 0; }' >"$T/r/src/cli/options.c"
printf '%s\n' '<!-- layering:begin -->' '| module | owns | may include | must not know |' '|---|---|---|---|' \
  '| `base` | x | — | all |' '| `kernels` | y | base | z |' '| `cli` | c | * | — |' '<!-- layering:end -->' \
  '<!-- layering-exceptions:begin -->' '| file | includes | why |' '|---|---|---|' \
  '<!-- layering-exceptions:end -->' >"$T/r/docs/architecture.md"
expect_rc 0 "getenv in the option table accepted" chk
check_exit
