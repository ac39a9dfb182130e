#!/usr/bin/env bash
# Two strata binaries side by side on one model: prefill and decode speed,
# runs alternating A, B, A, B... so that drift of the machine hits both alike
# (not run by CI). For refactors that must not change speed.
#
#   bash bench/ab_speed.sh A_BIN B_BIN MODEL [-p 512] [-n 64] [-r 5] [-t THREADS] [--args '...']
#
# Per repetition and binary:
#   generate --prompt-ids <P ids> -n 1   -> prefill tok/s = P / stats.prefill_s
#   generate --prompt-ids <1 id> -n N+1  -> stats.decode_tok_s
# both greedy with --ignore-eos --heat none plus --args (e.g. '--ram 2 --stream').
# Prints the median of each and B / A.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
a=$1 b=$2 model=$3; shift 3
P=512 N=64 R=5 threads=$(nproc) args=
while [ $# -gt 0 ]; do
  case "$1" in
    -p) P=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    -r) R=$2; shift 2 ;;
    -t|--threads) threads=$2; shift 2 ;;
    --args) args=$2; shift 2 ;;
    *) echo "ab_speed.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pp_ids=$(python3 -c "print(','.join(str(10 + i % 1000) for i in range($P)))")
for r in $(seq 1 "$R"); do
  for side in a b; do
    bin=${!side}
    # shellcheck disable=SC2086
    "$bin" generate --model "$model" --prompt-ids "$pp_ids" -n 1 --temperature 0 --ignore-eos --heat none \
      --threads "$threads" --json $args > "$tmp/${side}_pp_$r.json"
    # shellcheck disable=SC2086
    "$bin" generate --model "$model" --prompt-ids 10 -n "$((N + 1))" --temperature 0 --ignore-eos --heat none \
      --threads "$threads" --json $args > "$tmp/${side}_tg_$r.json"
  done
done
python3 - "$tmp" "$R" "$P" "$N" "$threads" "$a" "$b" <<'PY'
import json, statistics, sys
tmp, R, P, N, T, A, B = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
def runs(side, kind):
    return [json.load(open(f"{tmp}/{side}_{kind}_{r}.json"))["stats"] for r in range(1, R + 1)]
res = {}
for side in "ab":
    pp = [s["prompt_tokens"] / s["prefill_s"] for s in runs(side, "pp")]
    tg = [s["decode_tok_s"] for s in runs(side, "tg")]
    res[side] = (statistics.median(pp), statistics.median(tg), pp, tg)
print(f"A = {A}\nB = {B}\n{T} threads, {R} alternating repetitions, medians (min-max)")
for i, name in ((0, f"prefill pp{P}"), (1, f"decode tg{N}")):
    a, b = res["a"][i], res["b"][i]
    ra, rb = res["a"][i + 2], res["b"][i + 2]
    print(f"{name:>14}: A {a:9.2f} tok/s ({min(ra):.2f}-{max(ra):.2f})  B {b:9.2f} tok/s ({min(rb):.2f}-{max(rb):.2f})  B/A {b / a:.3f}")
PY
