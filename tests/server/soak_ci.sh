#!/bin/bash
# The CI soak: scripts/soak.sh for 60 s on models/tiny (every driver style at once, asserts on
# 5xx, 429 accounting, idle pools, stuck requests, RSS, exit on SIGTERM). The TTFT bound is loose
# here (60 s: a hang detector, not a speed check; CI boxes are shared) and the RSS check is the
# short-run total (scripts/soak.sh explains).
command -v curl > /dev/null || exit 77
SOAK_TTFT_P99_S=60 SOAK_RATE=15 CLLM_BIN="$CLLM_BIN" bash "$CLLM_SRC/scripts/soak.sh" 60 "$CLLM_TMP/soak_ci"
