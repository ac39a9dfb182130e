#!/usr/bin/env bash
# strata's Vulkan backend measured for issue 20 (not run by CI; made for the H200
# machine: docs/vulkan.md says how strata and llama.cpp are built there).
#
#   bash bench/gpu_bench.sh vram MODEL.gguf [--strata BIN] [--llama-vulkan BIN]
#        [--llama-cuda BIN] [--cpu] [-p 512] [-n 128] [-r 5] [-t THREADS] [--out DIR]
#   bash bench/gpu_bench.sh stream [--model PACK] [--size GB] [--vram GiB] [--ram GiB]
#        [--strata BIN] [-n 64] [-r 3] [-t THREADS] [--prompts "512 4096"] [--out DIR]
#        [--models DIR] [--parts "decode ttft streams"] [--strata-args "..."]
#
# vram: strata against llama.cpp's Vulkan and CUDA builds on one GGUF held entirely in
# VRAM. Engines (each left out when its binary is not given or not found):
#   strata-vulkan  strata generate --device vulkan --warmup ... --json
#   strata-cpu     the same with --device cpu --threads T (with --cpu)
#   llama-vulkan   llama-bench -ngl 99 (a build with GGML_VULKAN)
#   llama-cuda     llama-bench -ngl 99 (a build with GGML_CUDA)
# Tests: prefill of P prompt tokens (pp, tok/s = P / time to the first token) and decode
# of N tokens (tg; llama.cpp from an empty context, strata after 64 prompt tokens). Every engine warms up first and is timed
# without the load (llama-bench's own warm-up run; strata's --warmup), with its weights
# and experts in VRAM. R rounds; each round runs every engine once, in an order that
# alternates forward and backward so drift falls on all alike; medians and ranges.
# Writes DIR/raw.jsonl (one line per measurement) and DIR/summary.md (default DIR: a new
# folder under $TMPDIR or /tmp), and prints the summary: each test's median per engine
# and the ratios the goals name (strata-vulkan ÷ llama-vulkan, ÷ llama-cuda), and the
# dispatches strata-vulkan records a decode token (generate --json's stats.device).
#
# stream: a pack several times larger than --vram + --ram (default: synthesized, Kimi-K2
# shape with all 384 experts, --size GB, default 12; kept in --models DIR, default
# ${XDG_CACHE_HOME:-~/.cache}/strata/bench-models, or $MODELS when set), experts cold
# from the drive (sync + drop_caches before each run: needs root), on the GPU (--device
# vulkan --vram V, default 1) and on the CPU (T threads), both under --ram R (default 2):
#   decode    N tokens sampled (temperature 1, seed = round): the experts' GB/s while
#             decoding (stats.experts.decode.gbps) ÷ the drive's ceiling, `strata probe`
#             with expert-sized reads, run before and after the rounds (their mean);
#   TTFT      bench/ttft_bench.sh on the pack for 512 and 4096 tokens (--prompts), per device;
#   streams   bench/serve_bench.sh on the GPU: 4 concurrent streams vs 1, with one seed
#             (identical routing) and with different seeds.
# Writes DIR/summary.md and each part's logs under DIR.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n '2,37p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }

[ $# -ge 1 ] || usage
mode=$1; shift
case "$mode" in
  vram) [ $# -ge 1 ] || usage; model=$1; shift ;;
  stream) exec bash "$repo/bench/gpu_stream_bench.sh" "$@" ;;
  *) usage ;;
esac
strata=$repo/build/strata
llama_vulkan=
llama_cuda=
cpu=0
P=512; N=128; R=5
threads=$(nproc)
out=
while [ $# -gt 0 ]; do
  case "$1" in
    --strata) strata=$2; shift 2 ;;
    --llama-vulkan) llama_vulkan=$2; shift 2 ;;
    --llama-cuda) llama_cuda=$2; shift 2 ;;
    --cpu) cpu=1; shift ;;
    -p) P=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    -r) R=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "gpu_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -f "$model" ] || { echo "gpu_bench.sh: $model: not found" >&2; exit 2; }
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/gpu_bench.XXXXXX")
mkdir -p "$out"
raw=$out/raw.jsonl
: > "$raw"

engines=()
[ -x "$strata" ] && engines+=(strata-vulkan)
[ -x "$strata" ] && [ "$cpu" = 1 ] && engines+=(strata-cpu)
[ -n "$llama_vulkan" ] && [ -x "$llama_vulkan" ] && engines+=(llama-vulkan)
[ -n "$llama_cuda" ] && [ -x "$llama_cuda" ] && engines+=(llama-cuda)
[ ${#engines[@]} -gt 0 ] || { echo "gpu_bench.sh: no engine found" >&2; exit 2; }
echo "gpu_bench.sh: model $model; engines ${engines[*]}; pp$P, tg$N, $R rounds; logs in $out"

ids() { python3 -c "import sys; print(','.join(str(10 + i % 1000) for i in range(int(sys.argv[1]))))" "$1"; }
pp_ids=$(ids "$P")
# strata's decode runs after 64 prompt tokens, whose warm-up run has put most
# experts in VRAM (llama.cpp's are all there from the load).
tg_ids=$(ids 64)
record() {  # engine test tok_s [dispatches a decode token]
  printf '{"engine":"%s","test":"%s","tok_s":%s%s}\n' "$1" "$2" "$3" "${4:+,\"dispatches_per_token\":$4}" >> "$raw"
}

run_strata() {  # engine device round
  local engine=$1 device=$2 r=$3 log=$out/$1.r$3
  "$strata" generate --model "$model" --device "$device" --threads "$threads" --warmup --prompt-ids "$pp_ids" -n 1 \
    --temperature 0 --ignore-eos --json > "$log.pp.json" 2> "$log.pp.err" || { cat "$log.pp.err" >&2; exit 1; }
  record "$engine" "pp$P" "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["stats"]; print(s["prompt_tokens"]/s["prefill_s"])' "$log.pp.json")"
  "$strata" generate --model "$model" --device "$device" --threads "$threads" --warmup --prompt-ids "$tg_ids" -n "$((N + 1))" \
    --temperature 0 --ignore-eos --json > "$log.tg.json" 2> "$log.tg.err" || { cat "$log.tg.err" >&2; exit 1; }
  record "$engine" "tg$N" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["stats"]["decode_tok_s"])' "$log.tg.json")" \
    "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["stats"].get("device", {}).get("decode", {}).get("dispatches_per_token", ""))' "$log.tg.json")"
}

run_llama() {  # engine binary round
  local engine=$1 bin=$2 r=$3 log=$out/$1.r$3
  "$bin" -m "$model" -ngl 99 -t "$threads" -p "$P" -n 0 -r 1 -o json > "$log.pp.json" 2> "$log.pp.err" \
    || { cat "$log.pp.err" >&2; exit 1; }
  record "$engine" "pp$P" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["samples_ts"][0])' "$log.pp.json")"
  "$bin" -m "$model" -ngl 99 -t "$threads" -p 0 -n "$N" -r 1 -o json > "$log.tg.json" 2> "$log.tg.err" \
    || { cat "$log.tg.err" >&2; exit 1; }
  record "$engine" "tg$N" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["samples_ts"][0])' "$log.tg.json")"
}

for r in $(seq 1 "$R"); do
  order=("${engines[@]}")
  if [ $((r % 2)) = 0 ]; then
    order=()
    for ((i = ${#engines[@]} - 1; i >= 0; i--)); do order+=("${engines[i]}"); done
  fi
  for e in "${order[@]}"; do
    case "$e" in
      strata-vulkan) run_strata "$e" vulkan "$r" ;;
      strata-cpu) run_strata "$e" cpu "$r" ;;
      llama-vulkan) run_llama "$e" "$llama_vulkan" "$r" ;;
      llama-cuda) run_llama "$e" "$llama_cuda" "$r" ;;
    esac
  done
  echo "round $r/$R done"
done

python3 - "$raw" "$out/summary.md" "$model" "$threads" <<'EOF'
import json, statistics, sys
raw, summary, model, threads = sys.argv[1:]
rows = [json.loads(l) for l in open(raw)]
tests = sorted({r["test"] for r in rows}, key=lambda t: (t[:2] != "pp", t))
engines = list(dict.fromkeys(r["engine"] for r in rows))
med = {}
lines = [f"model `{model}`; strata-cpu at {threads} threads; medians (min-max) of tok/s", "",
         "| test | " + " | ".join(engines) + " |", "|---|" + "---|" * len(engines)]
for t in tests:
    cells = []
    for e in engines:
        v = [r["tok_s"] for r in rows if r["engine"] == e and r["test"] == t]
        if not v:
            cells.append("-")
            continue
        med[e, t] = statistics.median(v)
        cells.append(f"{med[e, t]:.1f} ({min(v):.1f}-{max(v):.1f}, n={len(v)})")
    lines.append(f"| {t} | " + " | ".join(cells) + " |")
lines.append("")
goals = {("tg", "llama-vulkan"): 1.0, ("tg", "llama-cuda"): 0.8, ("pp", "llama-vulkan"): 1.0}
for t in tests:
    for peer in ("llama-vulkan", "llama-cuda", "strata-cpu"):
        if ("strata-vulkan", t) in med and (peer, t) in med:
            ratio = med["strata-vulkan", t] / med[peer, t]
            goal = goals.get((t[:2], peer))
            lines.append(f"- {t}: strata-vulkan / {peer} = {ratio:.2f}x"
                         + (f" (goal >= {goal}x: {'met' if ratio >= goal else 'not met'})" if goal else ""))
# What a GPU decode token records (generate --json's stats.device): most dispatches cost
# a few microseconds whatever their work (docs/vulkan.md).
for t in tests:
    d = [r["dispatches_per_token"] for r in rows if r["engine"] == "strata-vulkan" and r["test"] == t
         and "dispatches_per_token" in r]
    if d:
        lines.append(f"- {t}: strata-vulkan records {statistics.median(d):.0f} dispatches a decode token")
open(summary, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
