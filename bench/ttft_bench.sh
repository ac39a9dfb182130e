#!/usr/bin/env bash
# Time to first token of long prompts on a streamed model with cold experts, against
# the drive bound (not run by CI).
#
#   bash bench/ttft_bench.sh [--model PACK_OR_GGUF] [--prompts "512 4096"] [--runs R]
#        [--ram GiB] [--threads T] [--out DIR] [--models DIR] [--strata BIN]
#
#   --model M     a pack directory or a GGUF (default: synthesize and pack one, below)
#   --prompts     prompt lengths in tokens (default "512 4096"); ids 1000 + 37·i
#   --runs R      runs per length (default 3); every run starts after sync + drop_caches
#   --ram GiB     strata's --ram budget (default 6); the prompt's experts are read from
#                 the drives whatever the budget, since every run starts cold
#   --out DIR     results (default: a new folder under $TMPDIR or /tmp)
#   --models DIR  where the synthesized model and its pack are kept between runs
#                 (default ${XDG_CACHE_HOME:-~/.cache}/strata/bench-models, or $MODELS when set)
#   --strata BIN  the strata binary (default build/strata of this repository)
#
# The default model is Kimi-K2-shaped with all 384 routed experts per layer (top-8), so
# that a prompt's tokens spread over many experts as in the real model:
#   strata synth --preset kimi-k2 --experts 384 --hidden 1536 --size 4 --format gguf
#     --quant q8_0+mxfp4 --seed 1   then   strata pack
# Each run: strata generate --model M --prompt-ids IDS -n 1 --temperature 0 --ram R
#   --heat none --threads T --json; the figures come from its stats:
#   ttft_s                      prompt in, first token's logits out (prefill);
#   experts.prefill.unique_bytes  bytes of the distinct experts the prompt needs;
#   experts.prefill.bytes_read    bytes read for them (read amplification = the ratio).
# The drive bound is unique_bytes / (the combined read speed of `strata probe` on the
# pack's drives, expert-sized reads, run first): the time the drives alone would need.
# The goal is TTFT / drive bound <= 1.3. Needs root (drop_caches).
#
# Environment: STRATA (when no --strata), MODELS (when no --models), PYTHON, STRATA_ARGS
# (more arguments for every strata generate, e.g. "--device vulkan --vram 1").
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
MODELS=${MODELS:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/strata/bench-models}

usage() { sed -n '2,32p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }

model=; prompts="512 4096"; runs=3; ram=6; threads=$(nproc); out=; strata=${STRATA:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --prompts) prompts=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --ram) ram=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --strata) strata=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "ttft_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

read -r -a extra <<< "${STRATA_ARGS:-}"
strata=${strata:-$repo/build/strata}
[ -x "$strata" ] || { echo "ttft_bench.sh: no strata binary at $strata (--strata BIN)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "ttft_bench.sh: needs root (drop_caches)" >&2; exit 2; }

out=${out:-$(mktemp -d "${TMPDIR:-/tmp}/ttft_bench.XXXXXX")}
mkdir -p "$out/logs"
cp "$strata" "$out/strata"  # a rebuild during the run does not mix binaries
strata=$out/strata
show() { echo "+ $*" | tee -a "$out/commands.txt" >&2; }

# ---- model ----
if [ -z "$model" ]; then
  gguf=$MODELS/ttft-kimi-k2-e384-h1536-4g.gguf
  if [ ! -f "$gguf" ]; then
    mkdir -p "$MODELS"
    show "$strata" synth --preset kimi-k2 --experts 384 --hidden 1536 --size 4 --format gguf --quant q8_0+mxfp4 --seed 1 --out "$gguf"
    "$strata" synth --preset kimi-k2 --experts 384 --hidden 1536 --size 4 --format gguf --quant q8_0+mxfp4 --seed 1 --out "$gguf" > "$out/logs/synth.log" 2>&1
  fi
  model=${gguf%.gguf}.pack
  if [ ! -f "$model/manifest.json" ]; then
    show "$strata" pack "$gguf" --out "$model" -q
    "$strata" pack "$gguf" --out "$model" -q > "$out/logs/pack.log" 2>&1
  fi
fi
[ -e "$model" ] || { echo "ttft_bench.sh: $model: not found" >&2; exit 2; }

# ---- drive ceiling: expert-sized reads on the directory holding the experts ----
probe_dir=$model
[ -d "$model" ] || probe_dir=$(dirname "$model")
expert_mb=$("$PY" - "$model" <<'EOF'
import json, os, sys
m = sys.argv[1]
if os.path.isdir(m):
    man = json.load(open(os.path.join(m, "manifest.json")))
    lens = [e[2] for layer in man["experts"] for e in layer]  # [drive, offset, length, xxh3, layout]
    avg = sum(lens) / len(lens) if lens else 4 << 20
    print((int(avg) + 4095) // 4096 * 4096 / 2**20)  # whole 4 KiB pages, in MiB
else:
    print(4)
EOF
)
show "$strata" probe "$probe_dir" --block "$expert_mb" --out "$out/probe.json"
"$strata" probe "$probe_dir" --block "$expert_mb" --out "$out/probe.json" > "$out/logs/probe.log" 2>&1

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "strata: $(cd "$repo" && git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "model: $model"
  echo "threads: $threads, --ram $ram, cpu: $(nproc) cores, more arguments: ${STRATA_ARGS:-none}"
} > "$out/setup.txt"

# ---- runs ----
: > "$out/runs.jsonl"
for r in $(seq 1 "$runs"); do
  for p in $prompts; do
    ids=$("$PY" -c "print(','.join(str(1000 + 37 * i) for i in range($p)))")
    sync
    echo 3 > /proc/sys/vm/drop_caches
    log=$out/logs/p$p-r$r
    show "$strata" generate --model "$model" --prompt-ids "<$p ids>" -n 1 --temperature 0 --ram "$ram" --heat none --threads "$threads" --json --ctx $((p + 16)) ${extra[@]+"${extra[@]}"}
    if "$strata" generate --model "$model" --prompt-ids "$ids" -n 1 --temperature 0 --ram "$ram" --heat none \
        --threads "$threads" --json --ctx $((p + 16)) ${extra[@]+"${extra[@]}"} > "$log.json" 2> "$log.err"; then
      "$PY" - "$log.json" "$p" "$r" >> "$out/runs.jsonl" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["stats"]
e = s.get("experts", {}).get("prefill", {})
print(json.dumps({"prompt": int(sys.argv[2]), "run": int(sys.argv[3]), "ttft_s": s["ttft_s"],
                  "unique_bytes": e.get("unique_bytes", 0), "bytes_read": e.get("bytes_read", 0),
                  "read_amplification": e.get("read_amplification", 0), "io_wait_s": e.get("io_wait_s", 0),
                  "peak_rss_bytes": s.get("peak_rss_bytes", 0)}))
EOF
    else
      echo "{\"prompt\": $p, \"run\": $r, \"error\": true}" >> "$out/runs.jsonl"
    fi
    tail -n 1 "$out/runs.jsonl" >&2
  done
done

# ---- summary ----
"$PY" - "$out" <<'EOF' | tee "$out/summary.md"
import json, os, statistics, sys
out = sys.argv[1]
probe = json.load(open(os.path.join(out, "probe.json")))
gbps = probe["combined"]["best_gbps"]
runs = [json.loads(l) for l in open(os.path.join(out, "runs.jsonl")) if l.strip()]
print(f"drive ceiling (strata probe, expert-sized reads): {gbps:.2f} GB/s\n")
print("| prompt | TTFT median (min–max) | unique expert GB | read amplification | drive bound | TTFT / bound | I/O wait |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for p in sorted({r["prompt"] for r in runs}):
    ok = [r for r in runs if r["prompt"] == p and not r.get("error")]
    if not ok:
        print(f"| {p} | failed | | | | | |")
        continue
    t = [r["ttft_s"] for r in ok]
    u = statistics.median(r["unique_bytes"] for r in ok) / 1e9
    amp = statistics.median(r["read_amplification"] for r in ok)
    wait = statistics.median(r["io_wait_s"] for r in ok)
    bound = u / gbps if gbps else float("nan")
    med = statistics.median(t)
    print(f"| {p} | {med:.2f} s ({min(t):.2f}–{max(t):.2f}, n={len(t)}) | {u:.2f} | {amp:.2f} | {bound:.2f} s | "
          f"**{med / bound:.2f}** | {wait:.2f} s |")
EOF
echo "results in $out" >&2
