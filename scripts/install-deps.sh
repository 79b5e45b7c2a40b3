#!/usr/bin/env bash
# Installs the Debian 12 packages cllm needs to build, test and train. Idempotent:
# packages already present are skipped, so a second run does no network work.
# Usage: scripts/install-deps.sh [--train]   (--train adds python3-torch and the corpora)
set -euo pipefail

pkgs=(build-essential cmake pkg-config clang clang-format libclang-rt-14-dev
      libjansson-dev libpcre2-dev libutf8proc-dev libxxhash-dev libmicrohttpd-dev
      libcurl4-openssl-dev python3-numpy prometheus gnuplot-nox
      libpng-dev libjpeg62-turbo-dev libwebp-dev # image input (src/image/)
      python3-pil # image preprocessing reference (tests/image/image_ref.sh)
      chromium # web console browser test (tests/server/console_browser.sh)
      gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user # NEON tier tests (tests/kernels/arm_kernels.sh)
      openmpi-bin libopenmpi-dev) # tensor parallel over MPI (src/dist/, tests/dist/)
if [ "${1:-}" = "--train" ]; then
  pkgs+=(python3-torch python3-matplotlib bible-kjv bible-kjv-text fortunes-zh
        fonts-dejavu-core fonts-dejavu-extra) # tools/train/train_vision.py renders its images
fi

# Node.js (reference tokenizers and templates for tests) may come from elsewhere (NodeSource);
# only ask apt for it when no node is on PATH.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  pkgs+=(nodejs npm)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
