#!/usr/bin/env bash
# Issue 20's streamed goals, GPU and CPU side by side: `bash bench/gpu_bench.sh stream ...`
# (its header says what is measured; not run by CI; needs root for drop_caches).
#
#   bash bench/gpu_stream_bench.sh [--model PACK] [--size GB] [--vram GiB] [--ram GiB]
#        [--strata BIN] [-n 64] [-r 3] [-t THREADS] [--prompts "512 4096"] [--out DIR]
#        [--models DIR] [--parts "decode ttft streams"] [--strata-args "--io-depth 4 ..."]
# --parts runs some of the three (the device machine gives a call 10 minutes); a later
# call with the same --out adds the others, and the summary covers what DIR holds.
# --out DIR: default a new folder under $TMPDIR or /tmp. --models DIR: where the
# synthesized pack is kept between runs (default ${XDG_CACHE_HOME:-~/.cache}/strata/bench-models,
# or $MODELS when set). --strata BIN: default build/strata of this repository.
# --strata-args: more arguments for every strata run (generate, ttft_bench, serve).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODELS=${MODELS:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/strata/bench-models}
usage() { sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }
model=; size=12; vram=1; ram=2; N=64; R=3; threads=$(nproc); out=; prompts="512 4096"; parts="decode ttft streams"; more=
strata=$repo/build/strata
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --vram) vram=$2; shift 2 ;;
    --ram) ram=$2; shift 2 ;;
    --strata) strata=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    -r) R=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --prompts) prompts=$2; shift 2 ;;
    --parts) parts=$2; shift 2 ;;
    --strata-args) more=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "gpu_stream_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$strata" ] || { echo "gpu_stream_bench.sh: no strata binary at $strata (--strata)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "gpu_stream_bench.sh: needs root (drop_caches)" >&2; exit 2; }
strata=$(realpath "$strata")
# On the device machine tools/device_env.sh puts the carried Debian 12 libraries on
# LD_LIBRARY_PATH (for the build); the image's own curl (serve_bench.sh) then fails
# on Debian's libcurl ("undefined symbol: curl_global_trace"). strata finds them by
# its RPATH, so they leave the path here.
LD_LIBRARY_PATH=$(tr ':' '\n' <<< "${LD_LIBRARY_PATH:-}" | grep -v '/\.deb/prefix/' | paste -sd: || true)
export LD_LIBRARY_PATH
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/gpu_stream_bench.XXXXXX")
mkdir -p "$out" "$MODELS"
show() { echo "+ $*" | tee -a "$out/commands.txt" >&2; }

if [ -z "$model" ]; then
  gguf=$MODELS/stream-kimi-k2-e384-h1536-${size}g.gguf
  model=${gguf%.gguf}.pack
  if [ ! -f "$model/manifest.json" ]; then
    show "$strata" synth --preset kimi-k2 --experts 384 --hidden 1536 --size "$size" --format gguf --quant q8_0+mxfp4 --seed 1 --out "$gguf"
    "$strata" synth --preset kimi-k2 --experts 384 --hidden 1536 --size "$size" --format gguf --quant q8_0+mxfp4 \
      --seed 1 --out "$gguf" > "$out/synth.log" 2>&1
    show "$strata" pack "$gguf" --out "$model" -q
    "$strata" pack "$gguf" --out "$model" -q > "$out/pack.log" 2>&1
    rm -f "$gguf"  # the pack is what runs; the disk holds one copy
  fi
fi
[ -f "$model/manifest.json" ] || { echo "gpu_stream_bench.sh: $model is not a pack" >&2; exit 2; }

# The drive's ceiling for expert-sized reads, before and after the decode rounds.
expert_mb=$(python3 - "$model" <<'EOF'
import json, os, sys
man = json.load(open(os.path.join(sys.argv[1], "manifest.json")))
lens = [e[2] for layer in man["experts"] for e in layer]
print((int(sum(lens) / len(lens)) + 4095) // 4096 * 4096 / 2**20)
EOF
)
probe() {
  show "$strata" probe "$model" --block "$expert_mb" --out "$out/probe_$1.json"
  "$strata" probe "$model" --block "$expert_mb" --out "$out/probe_$1.json" > "$out/probe_$1.log" 2>&1
}
part() { [[ " $parts " == *" $1 "* ]]; }
if part decode; then
probe before

ids=$(python3 -c "print(','.join(str(1000 + 37 * i) for i in range(8)))")
: > "$out/decode.jsonl"
for r in $(seq 1 "$R"); do
  order=(vulkan cpu)
  [ $((r % 2)) = 0 ] && order=(cpu vulkan)
  for d in "${order[@]}"; do
    sync
    echo 3 > /proc/sys/vm/drop_caches
    log=$out/decode_${d}_r$r
    read -r -a dev <<< "--device $d $more"
    [ "$d" = vulkan ] && dev+=(--vram "$vram")
    show "$strata" generate --model "$model" "${dev[@]}" --ram "$ram" --threads "$threads" --prompt-ids "$ids" -n "$N" --temperature 1 --seed "$r" --heat none --json
    "$strata" generate --model "$model" "${dev[@]}" --ram "$ram" --threads "$threads" --prompt-ids "$ids" \
      -n "$N" --temperature 1 --seed "$r" --heat none --json > "$log.json" 2> "$log.err" || { cat "$log.err" >&2; exit 1; }
    python3 - "$log.json" "$d" "$r" >> "$out/decode.jsonl" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))["stats"]
e = s["experts"]["decode"]
print(json.dumps({"device": sys.argv[2], "round": int(sys.argv[3]), "tok_s": s["decode_tok_s"], "gbps": e["gbps"],
                  "bytes_read": e["bytes_read"], "hit_rate": e["hit_rate"], "io_wait_share": e["io_wait_share"],
                  "vram_hits": e["device"]["vram_hits"], "uploads": e["device"]["uploads"]}))
EOF
    tail -n 1 "$out/decode.jsonl" >&2
  done
done
probe after
fi

if part ttft; then
for d in vulkan cpu; do
  args="--device $d $more"
  [ "$d" = vulkan ] && args+=" --vram $vram"
  show "STRATA_ARGS=\"$args\"" bash bench/ttft_bench.sh --model "$model" --ram "$ram" --runs "$R" --threads "$threads"
  STRATA="$strata" STRATA_ARGS="$args" bash "$repo/bench/ttft_bench.sh" --model "$model" --ram "$ram" \
    --prompts "$prompts" --runs "$R" --threads "$threads" --out "$out/ttft_$d" > "$out/ttft_$d.log" 2>&1 || { tail "$out/ttft_$d.log" >&2; exit 1; }
done
fi

if part streams; then
for seeds in same different; do
  flag=; [ "$seeds" = same ] && flag=--same-seed
  show "STRATA_ARGS=\"--device vulkan --vram $vram $more\"" bash bench/serve_bench.sh "$model" --ram "$ram" --streams 4 --runs "$R" $flag
  STRATA="$strata" STRATA_ARGS="--device vulkan --vram $vram $more" bash "$repo/bench/serve_bench.sh" "$model" --ram "$ram" \
    --streams 4 --runs "$R" --tokens 32 $flag > "$out/streams_$seeds.log" 2>&1 || { tail "$out/streams_$seeds.log" >&2; exit 1; }
done
fi

python3 - "$out" "$model" "$vram" "$ram" "$threads" <<'EOF' | tee "$out/summary.md"
import json, os, statistics, sys
out, model, vram, ram, threads = sys.argv[1:]
print(f"pack `{model}`; --vram {vram} GiB (GPU), --ram {ram} GiB, CPU at {threads} threads")
probes = [os.path.join(out, f"probe_{w}.json") for w in ("before", "after")]
if os.path.exists(os.path.join(out, "decode.jsonl")) and all(os.path.exists(p) for p in probes):
    ceil = [json.load(open(p))["combined"]["best_gbps"] for p in probes]
    ceiling = sum(ceil) / 2
    rows = [json.loads(l) for l in open(os.path.join(out, "decode.jsonl"))]
    print(f"drive ceiling (expert-sized reads): {ceil[0]:.2f} GB/s before, {ceil[1]:.2f} after\n")
    print("| device | decode tok/s | expert GB/s | ÷ ceiling (goal 0.9) | RAM hit rate | I/O wait share |")
    print("| --- | --- | --- | --- | --- | --- |")
    for d in ("vulkan", "cpu"):
        r = [x for x in rows if x["device"] == d]
        if not r:
            continue
        med = lambda k: statistics.median(x[k] for x in r)
        print(f"| {d} | {med('tok_s'):.2f} | {med('gbps'):.2f} | **{med('gbps') / ceiling:.2f}** | {med('hit_rate'):.2f} | "
              f"{med('io_wait_share'):.2f} |")
else:
    print("decode: not run")
for d in ("vulkan", "cpu"):
    p = os.path.join(out, f"ttft_{d}", "summary.md")
    if os.path.exists(p):
        print(f"\nTTFT, {d} (goal: TTFT / bound <= 1.3):\n")
        print(open(p).read().strip())
for seeds in ("same", "different"):
    p = os.path.join(out, f"streams_{seeds}.log")
    lines = [l.strip() for l in open(p) if l.startswith(("median", "expert bytes"))] if os.path.exists(p) else []
    print(f"\n4 streams vs 1, {seeds} seeds: {'; '.join(lines) if lines else 'no result'}")
EOF
echo "results in $out" >&2
