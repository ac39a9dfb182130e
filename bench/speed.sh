#!/usr/bin/env bash
# Prefill and decode speed of llama.cpp (llama-bench) and strata on one model (not run by CI).
#
#   bash bench/speed.sh MODEL.gguf --llama DIR [-p 512] [-n 128] [-d 0] [-r 5] [-t THREADS]
#        [--strata BIN] [--strata-model PATH] [--llama-only] [--bench-args '...']
#
# --llama DIR: the llama.cpp checkout built by bench/llama_cpp/build.sh (its
#   build/bin/llama-bench runs); without it, LLAMA_DIR or LLAMA_BENCH must be set.
# --strata BIN: default build/strata of this repository.
#
# llama.cpp: llama-bench -m MODEL -p P -n 0 and -p 0 -n N -d D, -r R repetitions, all
#   cores by default, mmap and flash-attn at llama-bench's defaults; prints the median
#   of the per-repetition tok/s (pp = prefill of P tokens, tg = decode of N tokens after
#   D tokens of context).
# strata (when a binary is found and the model loads): R repetitions of
#   strata generate --model M --prompt-ids <P ids> -n 1 --temperature 0 --ignore-eos --json
#     -> prefill tok/s = P / stats.prefill_s
#   strata generate --model M --prompt-ids <max(D,1) ids> -n N+1 --temperature 0 --ignore-eos --json
#     -> stats.decode_tok_s (N decode steps after the prompt)
#   with the median of each. --strata-model gives strata a different path (e.g. the HF
#   directory) to the same weights; by default it reads MODEL itself.
#
# Environment: LLAMA_DIR (when no --llama), LLAMA_BENCH (the llama-bench binary itself), STRATA.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-/usr/bin/python3}

usage() { sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }

[ $# -ge 1 ] || usage
model=$1; shift
case "$model" in -h|--help) usage ;; esac
P=512; N=128; D=0; R=5
threads=$(nproc)
strata=${STRATA:-}
strata_model=
llama=
llama_only=0
bench_args=
while [ $# -gt 0 ]; do
  case "$1" in
    -p) P=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    -d) D=$2; shift 2 ;;
    -r) R=$2; shift 2 ;;
    -t|--threads) threads=$2; shift 2 ;;
    --strata) strata=$2; shift 2 ;;
    --strata-model) strata_model=$2; shift 2 ;;
    --llama) llama=$2; shift 2 ;;
    --llama-only) llama_only=1; shift ;;
    --bench-args) bench_args=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "speed.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -f "$model" ] || [ -d "$model" ] || { echo "speed.sh: $model: not found" >&2; exit 2; }
if [ -n "$llama" ] || [ -z "${LLAMA_BENCH:-}" ]; then
  llama=${llama:-${LLAMA_DIR:-}}
  [ -n "$llama" ] || { echo "speed.sh: give --llama DIR (a llama.cpp checkout built by bench/llama_cpp/build.sh)" >&2; exit 2; }
  LLAMA_BENCH=$llama/build/bin/llama-bench
fi
[ -x "$LLAMA_BENCH" ] || { echo "speed.sh: $LLAMA_BENCH missing; run bash bench/llama_cpp/build.sh --dir DIR" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median_py='
import json, statistics, sys
for path in sys.argv[1:]:
    for t in json.load(open(path)):
        kind = "pp%d" % t["n_prompt"] if t["n_gen"] == 0 else "tg%d" % t["n_gen"]
        if t.get("n_depth"):
            kind += "@d%d" % t["n_depth"]
        s = t["samples_ts"]
        print("llama.cpp %12s: median %9.2f tok/s  (min %.2f, max %.2f, n=%d; %d threads, %s kv, fa %s, %s)"
              % (kind, statistics.median(s), min(s), max(s), len(s), t["n_threads"], t["type_k"],
                 {-1: "auto", 0: "off", 1: "on"}.get(t.get("flash_attn"), t.get("flash_attn")), t["model_type"]))'
echo "llama.cpp: $LLAMA_BENCH  model $model"
# shellcheck disable=SC2086
"$LLAMA_BENCH" -m "$model" -p "$P" -n 0 -r "$R" -t "$threads" -o json $bench_args > "$tmp/pp.json" 2> "$tmp/pp.err" \
  || { cat "$tmp/pp.err" >&2; exit 1; }
# shellcheck disable=SC2086
"$LLAMA_BENCH" -m "$model" -p 0 -n "$N" -d "$D" -r "$R" -t "$threads" -o json $bench_args > "$tmp/tg.json" 2> "$tmp/tg.err" \
  || { cat "$tmp/tg.err" >&2; exit 1; }
"$PY" -c "$median_py" "$tmp/pp.json" "$tmp/tg.json"

[ "$llama_only" = 1 ] && exit 0
[ -n "$strata" ] || strata=$repo/build/strata
if [ -z "$strata" ] || [ ! -x "$strata" ]; then
  echo "strata: no binary found (pass --strata BIN); skipped"
  exit 0
fi
m=${strata_model:-$model}
ids() { "$PY" -c "import sys; print(','.join(str(10 + i % 1000) for i in range(int(sys.argv[1]))))" "$1"; }
pp_ids=$(ids "$P")
tg_ids=$(ids "$(( D > 0 ? D : 1 ))")
for r in $(seq 1 "$R"); do
  if ! "$strata" generate --model "$m" --prompt-ids "$pp_ids" -n 1 --temperature 0 --ignore-eos \
       --threads "$threads" --json > "$tmp/s_pp_$r.json" 2> "$tmp/s.err"; then
    echo "strata: generate failed on $m:"; sed 's/^/  /' "$tmp/s.err" | tail -5; exit 0
  fi
  "$strata" generate --model "$m" --prompt-ids "$tg_ids" -n "$(( N + 1 ))" --temperature 0 --ignore-eos \
    --threads "$threads" --json > "$tmp/s_tg_$r.json"
done
"$PY" - "$tmp" "$R" "$P" "$N" "$D" "$threads" <<'EOF'
import json, statistics, sys
tmp, R, P, N, D, T = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
pp = [json.load(open(f"{tmp}/s_pp_{r}.json"))["stats"] for r in range(1, R + 1)]
tg = [json.load(open(f"{tmp}/s_tg_{r}.json"))["stats"] for r in range(1, R + 1)]
pps = [s["prompt_tokens"] / s["prefill_s"] for s in pp]
tgs = [s["decode_tok_s"] for s in tg]
rss = max(s.get("peak_rss_bytes", 0) for s in pp + tg)
d = f"@d{D}" if int(D) else ""
print(f"strata    {'pp' + P:>12}: median {statistics.median(pps):9.2f} tok/s  (min {min(pps):.2f}, max {max(pps):.2f}, n={R}; {T} threads)")
print(f"strata    {'tg' + N + d:>12}: median {statistics.median(tgs):9.2f} tok/s  (min {min(tgs):.2f}, max {max(tgs):.2f}, n={R}; peak RSS {rss / 2**30:.2f} GiB)")
EOF
