#!/bin/bash
# How much of a text a draft vocabulary of the first N token ids covers (the MTP drafter's
# draft_vocab_size, docs/internals/spec.md): a draft can only be right where the target's token id
# is below N, so 1 - coverage bounds the acceptance a draft vocabulary of N can lose.
#   scripts/draft-vocab-coverage.sh MODEL_OR_TOKENIZER_DIR FILE... [N=4096,8192,16384,32768,65536]
# Prints, per file, its token count and the share of tokens with id < N for each N.
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,6p "$0"; exit 2; }
SRC=$(cd "$(dirname "$0")/.." && pwd)
CLLM=${CLLM:-$SRC/build/cllm}
DIR=$1; shift
NS=${NS:-4096,8192,16384,32768,65536}
for f in "$@"; do
  "$CLLM" tokenize "$DIR" -f "$f" --ids 2>/dev/null | /usr/bin/python3 -c '
import sys
ids = [int(x) for x in sys.stdin.read().split()]
ns = [int(n) for n in sys.argv[2].split(",")]
cov = " ".join("%d: %.3f" % (n, sum(i < n for i in ids) / max(1, len(ids))) for n in ns)
print("%-44s %8d tokens  %s" % (sys.argv[1][-44:], len(ids), cov))' "$f" "$NS"
done
