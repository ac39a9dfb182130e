#!/usr/bin/env bash
# Runs ctest in a build folder and, when a test fails, runs the failed ones
# again one at a time and then prints what each printed the first time: CI
# keeps only the log's tail, and a test that passes on its second run (a
# flaky one, which is still a failure) would otherwise leave no trace of why.
#   bash tools/ctest_report.sh BUILD [ctest args ...]
set -uo pipefail
build=$1
shift
if ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "$@"; then
  exit 0
fi
tmp=$build/Testing/Temporary
cp "$tmp/LastTest.log" "$tmp/FirstRun.log"
cp "$tmp/LastTestsFailed.log" "$tmp/FirstRunFailed.log"
echo "=== the failed tests again, one at a time ==="
ctest --test-dir "$build" --rerun-failed --output-on-failure
# Each failed test's section of the first run's log (its last 80 lines).
while IFS=: read -r _ name; do
  echo "=== what $name printed in the first run ==="
  awk -v n="$name" '$2 == "Test:" && $3 == n { on = 1 } on { print } on && index($0, "\"" n "\" end time") { exit }' \
    "$tmp/FirstRun.log" | tail -n 80
done <"$tmp/FirstRunFailed.log"
exit 1
