#!/usr/bin/env bash
# A Kimi-K3-shaped model streamed under a RAM budget: tokens/s, time to first token, and
# the experts' read rate against the drive's probed ceiling (not run by CI).
#
#   bash bench/k3_stream_bench.sh [--size GB] [--experts E] [--ram GiB] [--runs R] [--tokens N]
#        [--prompt-len P] [--threads T] [--out DIR] [--models DIR] [--strata BIN]
#
#   --size GB       the synthesized model (default 16): strata synth --preset kimi-k3 --size GB
#                   --experts E --vocab 16384 --quant mxfp4 --seed 1 (K3's published layout:
#                   bf16 trunk, compressed-tensors MXFP4 experts), kept in --models DIR, then packed
#   --experts E     routed experts per layer (default 896, K3's own: a token's 16 of 896 spread
#                   over the cache as the real model's do; the size then comes off the width
#                   and the layers)
#   --ram GiB       strata's --ram budget (default 4): the trunk, the KV cache and state, the
#                   step buffers, and an expert cache of what is left
#   --runs R        rounds (default 3); a round runs each row once, rows in ABAB / BABA order
#   --tokens N      tokens generated per run (default 64), sampled (temperature 1, seed 1) so
#                   that routing varies as in real text
#   --prompt-len P  prompt ids 1000 + 37·i mod 16000, i < P (default 256)
#   --threads T     (default: all cores)
#   --out DIR       results (default: a new folder under $TMPDIR or /tmp)
#   --models DIR    where the synthesized model and its pack are kept between runs
#                   (default ${XDG_CACHE_HOME:-~/.cache}/strata/bench-models, or $MODELS when set)
#   --strata BIN    the strata binary (default build/strata of this repository, else
#                   build-device/strata)
#
# Rows, each run after sync + drop_caches (when root; experts are read with O_DIRECT anyway):
#   pack      strata generate --model M.pack --prompt-ids IDS -n N --temperature 1 --seed 1
#               --ignore-eos --ram RAM --heat none --threads T --json
#   in place  the same on the synthesized HF directory (the published shards, read in place)
# then the same command without --ram on the HF directory (everything in RAM): every streamed
# run must give exactly its tokens. `strata probe` runs on the pack's expert file with reads
# of one expert blob before the first and after the last round; the ceiling is their mean.
# Figures per run, from generate's JSON stats:
#   ttft_s                    the prompt's prefill (its experts read once each, cold);
#   decode_tok_s              generated tokens after the first / decode seconds;
#   read GB/s while reading   decode bytes the drives transferred / seconds they were busy;
#   ÷ ceiling                 that over the probe; wall GB/s: decode bytes / decode seconds.
# Output: setup.txt, commands.txt, runs.jsonl, logs/, summary.md (medians and ranges).
#
# Environment: STRATA (when no --strata), MODELS (when no --models), PYTHON.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
MODELS=${MODELS:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/strata/bench-models}

usage() { sed -n '2,41p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }

size=16; experts=896; ram=4; runs=3; tokens=64; plen=256; threads=$(nproc); out=; strata=${STRATA:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size=$2; shift 2 ;;
    --experts) experts=$2; shift 2 ;;
    --ram) ram=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --prompt-len) plen=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --strata) strata=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done

if [ -z "$strata" ]; then
  for c in "$repo/build/strata" "$repo/build-device/strata"; do [ -x "$c" ] && strata=$c && break; done
fi
[ -n "$strata" ] && [ -x "$strata" ] || { echo "no strata binary (--strata BIN)" >&2; exit 1; }
out=${out:-$(mktemp -d "${TMPDIR:-/tmp}/k3_stream_bench.XXXXXX")}
mkdir -p "$out/logs" "$MODELS"
cp "$strata" "$out/strata"  # a rebuild during the run must not mix binaries
strata=$out/strata

hf=$MODELS/k3-${size}g-e${experts}
pack=$hf.pack
if [ ! -f "$hf/config.json" ]; then
  "$strata" synth --preset kimi-k3 --size "$size" --experts "$experts" --vocab 16384 --quant mxfp4 --seed 1 \
    --out "$hf" --force
fi
[ -f "$pack/manifest.json" ] || "$strata" pack "$hf" --out "$pack" -q
expert_file=$(ls "$pack"/strata-experts-*.bin | head -1)
blob=$($PY -c "import json,sys; m=json.load(open(sys.argv[1])); print(max(e[2] for l in m['experts'] for e in l))" \
  "$pack/manifest.json")
block_mib=$($PY -c "print(max(1, round($blob / 2**20)))")
ids=$($PY -c "print(','.join(str(1000 + 37 * i % 16000) for i in range($plen)))")

cold() { sync; [ "$(id -u)" = 0 ] && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
probe() {  # $1: label
  "$strata" probe "$expert_file" --block "$block_mib" --depths 1,4,8,16 --seconds 4 --rounds 2 --json \
    --out "$out/logs/probe-$1.json" > /dev/null 2> "$out/logs/probe-$1.log"
}
gen() {  # $1: label, $2: model, then extra flags
  local label=$1 model=$2; shift 2
  local cmd=("$strata" generate --model "$model" --prompt-ids "$ids" -n "$tokens" --temperature 1 --seed 1
             --ignore-eos --heat none --threads "$threads" --json "$@")
  echo "${cmd[*]}" | sed "s/$ids/IDS/" >> "$out/commands.txt"
  cold
  "${cmd[@]}" > "$out/logs/$label.json" 2> "$out/logs/$label.log"
}

{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB; $(uname -r)"
  echo "strata: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "model: $hf ($(du -sb "$hf" | cut -f1) bytes), pack $pack; largest expert blob $blob bytes"
  echo "args: size $size experts $experts ram $ram runs $runs tokens $tokens prompt $plen threads $threads"
  "$strata" synth --preset kimi-k3 --size "$size" --experts "$experts" --vocab 16384 --quant mxfp4 --seed 1 --dry-run \
    | sed -n '1,6p'
} > "$out/setup.txt"

probe before
for r in $(seq 1 "$runs"); do
  if [ $((r % 2)) = 1 ]; then order="pack inplace"; else order="inplace pack"; fi
  for row in $order; do
    if [ "$row" = pack ]; then gen "$row-$r" "$pack" --ram "$ram"; else gen "$row-$r" "$hf" --ram "$ram"; fi
  done
done
probe after
gen inram "$hf"

$PY - "$out" "$runs" <<'EOF'
import json, os, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def load(name):
    with open(os.path.join(out, "logs", name + ".json")) as f:
        return json.load(f)
probes = [load("probe-" + p)["combined"]["best_gbps"] for p in ("before", "after")]
ceiling = sum(probes) / 2
ref = load("inram")["tokens"]
rows, all_same = {}, True
with open(os.path.join(out, "runs.jsonl"), "w") as jl:
    for row in ("pack", "inplace"):
        for r in range(1, runs + 1):
            j = load(f"{row}-{r}")
            s = j["stats"]
            d = s["experts"]["decode"]
            busy = sum(x["busy_s"] for x in d["drives"])
            drive_b = sum(x["bytes"] for x in d["drives"])
            decode_s = (len(j["tokens"]) - 1) / s["decode_tok_s"] if s["decode_tok_s"] else 0
            rec = dict(row=row, run=r, ttft_s=s["ttft_s"], decode_tok_s=s["decode_tok_s"],
                       read_gbps=drive_b / 1e9 / busy if busy else 0,
                       wall_gbps=d["bytes_read"] / 1e9 / decode_s if decode_s else 0,
                       hit_rate=d["hit_rate"], io_wait_share=d["io_wait_share"],
                       gb_per_token=d["bytes_read"] / 1e9 / max(1, len(j["tokens"]) - 1),
                       prefill_unique_gb=s["experts"]["prefill"]["unique_bytes"] / 1e9,
                       prefill_read_gbps=(s["experts"]["prefill"]["unique_bytes"] / 1e9 / s["ttft_s"]),
                       same_tokens=j["tokens"] == ref, peak_rss_gb=s["peak_rss_bytes"] / 1e9,
                       budget_gb=s["memory"]["budget"] / 1e9)
            all_same &= rec["same_tokens"]
            jl.write(json.dumps(rec) + "\n")
            rows.setdefault(row, []).append(rec)
def med(xs): return statistics.median(xs)
def fmt(row, key, f="%.2f"):
    xs = [x[key] for x in rows[row]]
    return (f % med(xs)) + " (" + (f % min(xs)) + "–" + (f % max(xs)) + ")"
with open(os.path.join(out, "setup.txt")) as f:
    setup = f.read()
lines = ["# k3_stream_bench summary", "", "```", setup.strip(), "```", "",
         f"probe (expert-sized reads, best depth): {probes[0]:.2f} GB/s before, {probes[1]:.2f} after; "
         f"ceiling {ceiling:.2f} GB/s", "",
         "| row | TTFT s | prefill experts GB/s | decode tok/s | read GB/s while reading | ÷ ceiling | "
         "wall GB/s | GB/token | hit rate | peak RSS GB / budget |", "|---|---|---|---|---|---|---|---|---|---|"]
for row in rows:
    ratio = [x["read_gbps"] / ceiling for x in rows[row]]
    lines.append(f"| {row} | {fmt(row, 'ttft_s')} | {fmt(row, 'prefill_read_gbps')} | {fmt(row, 'decode_tok_s')} | "
                 f"{fmt(row, 'read_gbps')} | {med(ratio):.2f} ({min(ratio):.2f}–{max(ratio):.2f}) | "
                 f"{fmt(row, 'wall_gbps')} | {fmt(row, 'gb_per_token', '%.3f')} | {fmt(row, 'hit_rate')} | "
                 f"{med([x['peak_rss_gb'] for x in rows[row]]):.2f} / {rows[row][0]['budget_gb']:.2f} |")
lines += ["", f"medians (range) over {runs} runs per row; prefill experts GB/s = the prompt's distinct experts' "
          "bytes / TTFT.", f"every streamed run gave exactly the in-RAM run's tokens: {'yes' if all_same else 'NO'}"]
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
echo "results in $out" >&2
