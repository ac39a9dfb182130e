#!/usr/bin/env bash
# Aggregate decode rate of concurrent streams vs one stream on `strata serve`
# (issue 6: concurrent sequences decoded in one batch share expert reads).
# Not run by CI.
#
#   bash bench/serve_bench.sh MODEL [--ram GIB] [--tokens N] [--streams K] [--runs R] [--same-seed]
#        [--strata BIN]
#
# Starts `strata serve MODEL --ram GIB`, then R times (alternating): one
# request of N tokens alone, and K requests of N tokens at once
# (temperature 1, different seeds unless --same-seed, ignore_eos). Prints per-run aggregate tok/s
# (tokens generated / wall time from first request sent to last response) and
# the medians' ratio K-streams / 1-stream; and, from the server's expert bytes read
# around each phase (prompt reads included), the ideal ratio K × (one stream's bytes
# per step ÷ the K streams' bytes per step: their union) and the share of it reached
# (issue 20's goal for different seeds: at least 0.9).
# --same-seed: the K requests share one seed, so they generate the same tokens and
# pick the same experts at every step: the most that sharing reads can give, which
# separates what routing costs from what the batched compute costs.
# --strata BIN: default $STRATA, else build/strata of this repository.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STRATA=${STRATA:-$repo/build/strata}
usage() { sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
model=$1; shift
ram=0; tokens=32; streams=4; runs=3; same_seed=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ram) ram=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --streams) streams=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --same-seed) same_seed=1; shift ;;
    --strata) STRATA=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "serve_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
log=$(mktemp)
args=(serve "$model" --port 0 --max-running "$streams")
[ "$ram" != 0 ] && args+=(--ram "$ram")
# STRATA_ARGS: more arguments for `strata serve` (e.g. "--device vulkan --vram 1").
read -r -a extra <<< "${STRATA_ARGS:-}"
args+=(${extra[@]+"${extra[@]}"})
"$STRATA" "${args[@]}" 2> "$log" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$log"' EXIT
url=
for _ in $(seq 600); do
  url=$(grep -o 'http://[^ ]*' "$log" | head -1 || true)
  kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
  [ -n "$url" ] && curl -sf "$url/health" >/dev/null 2>&1 && break
  sleep 0.2
done
[ -n "$url" ] || { cat "$log"; exit 1; }
echo "serving $model at $url (ram ${ram} GiB); $tokens tokens per request"
one() {  # seed -> completion tokens
  curl -s "$url/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"Once upon a time\", \"max_tokens\": $tokens, \"temperature\": 1, \"seed\": $1, \"ignore_eos\": true}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["completion_tokens"])'
}
now() { date +%s.%N; }
# The server's expert bytes read so far; nan when /metrics does not say (the
# summary then leaves the bytes out).
read_bytes() { curl -s "$url/metrics" | awk '/^strata_expert_bytes_read_total/ {v = $2} END {print (v == "" ? "nan" : v)}'; }
singles=(); multis=(); single_bytes=(); multi_bytes=()
for r in $(seq "$runs"); do
  b0=$(read_bytes); t0=$(now); n=$(one $((r * 100))); t1=$(now); b1=$(read_bytes)
  single_bytes+=("$(python3 -c "print((float('$b1') - float('$b0')) / $n)")")
  s=$(python3 -c "print($n / ($t1 - $t0))"); singles+=("$s")
  t0=$(now)
  total=0
  for k in $(seq "$streams"); do one $((r * 100 + (same_seed ? 1 : k))) > "$log.$k" & done
  wait $(jobs -p | grep -v "^$pid$") 2>/dev/null || true
  for k in $(seq "$streams"); do total=$((total + $(cat "$log.$k"))); rm -f "$log.$k"; done
  t1=$(now); b2=$(read_bytes)
  multi_bytes+=("$(python3 -c "print((float('$b2') - float('$b1')) / $tokens)")")
  m=$(python3 -c "print($total / ($t1 - $t0))"); multis+=("$m")
  echo "run $r: 1 stream $s tok/s; $streams streams $m tok/s aggregate"
done
curl -s "$url/metrics" | grep -E '^strata_(expert|generated)' || true
python3 - "${singles[*]}" "${multis[*]}" "$streams" "${single_bytes[*]}" "${multi_bytes[*]}" <<'PY'
import statistics, sys
med = lambda s: statistics.median(float(x) for x in s.split())
a, b, k, sb, mb = med(sys.argv[1]), med(sys.argv[2]), int(sys.argv[3]), med(sys.argv[4]), med(sys.argv[5])
ideal = k * sb / mb if mb > 0 and sb > 0 else float("nan")  # nan: a phase read nothing, or no metrics
share = f", {b / a / ideal:.2f} of the ideal" if ideal == ideal else ""
if sb == sb and mb == mb:
    print(f"expert bytes a step: 1 stream {sb / 1e6:.1f} MB, {k} streams {mb / 1e6:.1f} MB; ideal ratio {ideal:.2f}x")
print(f"median: 1 stream {a:.2f} tok/s, {k} streams {b:.2f} tok/s, ratio {b / a:.2f}x{share}")
PY
