#!/bin/bash
# Copies the web console's vendored libraries (exact versions pinned in package.json) from
# node_modules into src/server/console/vendor/, with their licences. Run after `npm ci` when a
# version changes, then rebuild (cmake embeds the folder) and commit the copies.
set -euo pipefail
cd "$(dirname "$0")/.."
nm=node_modules v=src/server/console/vendor
[ -d $nm/marked ] || { echo "console-vendor: run npm ci first" >&2; exit 1; }
mkdir -p $v
cp $nm/marked/lib/marked.umd.js $nm/dompurify/dist/purify.min.js \
   $nm/uplot/dist/uPlot.iife.min.js $nm/uplot/dist/uPlot.min.css $v/
cp $nm/marked/LICENSE $v/LICENSE.marked
cp $nm/dompurify/LICENSE $v/LICENSE.dompurify
cp $nm/uplot/LICENSE $v/LICENSE.uplot
for p in marked dompurify uplot; do
  echo "$p $(node -p "require('./$nm/$p/package.json').version")"
done
