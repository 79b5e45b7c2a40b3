#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
if [ -f package-lock.json ]; then
  # Reference tokenizers / template renderer used by some tests; skipped when already installed.
  [ -d node_modules ] && [ node_modules -nt package-lock.json ] || npm ci --no-audit --no-fund --loglevel=error
fi
scripts/build.sh
ctest --test-dir build --output-on-failure -j2 "$@"
