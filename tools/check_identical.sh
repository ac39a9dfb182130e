#!/usr/bin/env bash
# Refactoring check: runs two strata binaries on the reference fixture models
# (in RAM, streamed through a tiny expert cache, under a --ram budget, on a
# pack, at 1 and 2 threads, greedy and sampled) and fails unless every run
# gives the same tokens and bit-identical logits.
#   tools/check_identical.sh OLD_STRATA NEW_STRATA
set -euo pipefail
old=$1 new=$2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export STRATA_HOME=$work/home
fail=0 runs=0
compare() {  # model, extra flags...
  local model=$1; shift
  local args=(generate --model "$model" --prompt-ids 1,5,9,13,17,21,25,29 -n 6 --ignore-eos --json --logits --heat none "$@")
  "$old" "${args[@]}" 2>"$work/old.err" | python3 -c 'import json,sys; d=json.load(sys.stdin); d.pop("stats",None); print(json.dumps(d))' >"$work/old.json" || { echo "old failed: $model $*"; cat "$work/old.err"; fail=1; return; }
  "$new" "${args[@]}" 2>"$work/new.err" | python3 -c 'import json,sys; d=json.load(sys.stdin); d.pop("stats",None); print(json.dumps(d))' >"$work/new.json" || { echo "new failed: $model $*"; cat "$work/new.err"; fail=1; return; }
  runs=$((runs + 1))
  if ! cmp -s "$work/old.json" "$work/new.json"; then echo "DIFFERENT: $model $*"; fail=1; fi
}
for m in "$root"/tests/fixtures/models/*/; do
  m=${m%/}
  compare "$m" --temperature 0
  compare "$m" --temperature 0 --threads 1
  compare "$m" --temperature 1 --seed 7 --top-k 20
  compare "$m" --temperature 0 --stream --cache-experts 3 --prefetch on
  compare "$m" --temperature 0 --ram 0.3 --ctx 64
done
# A synthesized GGUF model and its pack (streamed from blobs, checksummed).
"$old" synth --preset kimi-k2 --size 0.05 --format gguf --quant q8_0+mxfp4 --out "$work/k2.gguf" >/dev/null 2>&1
"$old" pack "$work/k2.gguf" --out "$work/k2.pack" >/dev/null 2>&1
for m in "$work/k2.gguf" "$work/k2.pack"; do
  compare "$m" --temperature 0
  compare "$m" --temperature 1 --seed 3 --cache-experts 6 --verify always
  compare "$m" --temperature 0 --ram 0.3 --io pread
done
echo "$runs runs compared"
[ "$fail" = 0 ] && echo "all identical"
exit $fail
