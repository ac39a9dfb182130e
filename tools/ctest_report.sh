#!/usr/bin/env bash
# Runs ctest in a build folder and, when a test fails, runs the failed ones
# again one at a time and then prints what each printed the first time: CI
# keeps only the log's tail, and a test that passes on its second run (a
# flaky one, which is still a failure) would otherwise leave no trace of why.
#   bash tools/ctest_report.sh BUILD [ctest args ...]
set -uo pipefail
build=$1
shift
tmp=$build/Testing/Temporary
rm -f "$tmp/LastTestsFailed.log" "$tmp/FirstRunFailed.log"  # lists from an earlier run are not this one's
if ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "$@"; then
  exit 0
fi
cp "$tmp/LastTest.log" "$tmp/FirstRun.log"
[ -f "$tmp/LastTestsFailed.log" ] && cp "$tmp/LastTestsFailed.log" "$tmp/FirstRunFailed.log"
echo "=== the failed tests again, one at a time ==="
ctest --test-dir "$build" --rerun-failed --output-on-failure
# Each failed test's section of the first run's log (its last 80 lines). A
# parameterized test's line carries its parameter after the name ("Test:
# NAME  # GetParam() = ..."), so the name is matched as the line's start
# after "Test: ", and passed through the environment (awk -v would read
# backslashes in it as escapes).
if [ -f "$tmp/FirstRunFailed.log" ]; then
  while IFS=: read -r _ name || [ -n "$name" ]; do
    echo "=== what $name printed in the first run ==="
    N="$name" awk 'BEGIN { n = ENVIRON["N"] }
      !on { p = index($0, " Test: "); if (p) { rest = substr($0, p + 7); if (rest == n || index(rest, n "  #") == 1) on = 1 } }
      on { print }
      on && index($0, "\"" n "\" end time") { exit }' "$tmp/FirstRun.log" | tail -n 80
  done <"$tmp/FirstRunFailed.log"
fi
exit 1
