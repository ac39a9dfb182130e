#!/usr/bin/env bash
# strata budget's predictions against real runs (issue 21): for each configuration,
# `strata budget` predicts decode tok/s and time to first token, then `strata
# generate` runs it with cold experts, and the table says how far off each
# prediction was. Goal: decode within ±20%, TTFT within ±30%. Not run by CI.
#
#   bash bench/budget_check.sh --out DIR [--models DIR] [--drive-a DIR] [--drive-b DIR]
#        [--rams "A B C"] [--prompt 512] [--tokens 32] [--runs 1] [--threads T] [--timeline]
#        [--heat-prompt N] [--drive-rate runs|probe]
#
#   --out DIR      results: commands.txt, logs/, results.jsonl, summary.md
#   --models DIR   where the two synthesized models are kept between runs
#                  (default DIR/models)
#   --drive-a DIR  the folder a one-drive pack's experts go to (default DIR/drive-a)
#   --drive-b DIR  the second folder of two-drive packs (default DIR/drive-b); on the
#                  same device as --drive-a, budget counts one drive (and says so),
#                  as the runs read it
#   --rams         RAM budgets in GiB (default "1.5 2.5 3.5"): each model runs at each,
#                  its experts on --drive-a; and at the middle one on both folders
#   --prompt N     prompt tokens for TTFT (default 512); ids 1000 + 37·i
#   --tokens N     generated tokens for decode (default 32; --ignore-eos)
#   --runs R       runs per configuration (default 1): the median is compared
#   --heat-prompt N  the prompt length of the run that records each pack's heat (default:
#                  --prompt's; rounds before session 40 used 256)
#   --drive-rate   how budget rates the drives (budget's --drive-rate, default runs): by what the
#                  check's earlier runs' reads got from them (the heat runs' first), else the probe
#   --timeline     each run also writes logs/timeline-CONFIG-RUN.json (generate --timeline) and
#                  logs/timeline-CONFIG-RUN.txt (tools/timeline_summary.py of it): where its time went
#
# Models (synthesized once, then packed per drive layout):
#   A: strata synth --preset kimi-k2 --experts 384 --hidden 1536 --size 4 --format gguf
#        --quant q8_0+mxfp4 --seed 1     (MLA, MXFP4 experts, top-8 of 384)
#   B: strata synth --preset qwen3-30b-a3b --size 3 --format gguf --quant q8_0 --seed 2
#                                        (GQA, Q8_0 experts, top-8 of 128)
# Each pack's expert heat comes from one earlier run of another prompt as long as the predicted
# one (ids 2000 + 41·i, 64 tokens, seed 1000), as a user's earlier runs of the same kind leave it:
# routing after a long context differs from routing after a short one (docs/PERFORMANCE.md).
# Every configuration: strata budget PACK --ram R --prompt N --heat HEAT --json (its hit rate from
# that heat), then (after sync + drop_caches where allowed) strata generate PACK --ram R --prompt-ids IDS
# -n TOKENS --ignore-eos --temperature 1 --seed RUN --heat (a fresh copy of HEAT) --profile none --json
# (sampled: greedy on random weights repeats itself, and its routing with it). Predicted decode is
# budget's by_drives entry for all the pack's drives (one per device); measured is the
# run's decode_tok_s and ttft_s; the run's cache hit rate is its hits less the prefetched
# experts it used (those were read). Without root the caches are not dropped, and
# summary.md says so (a warm page cache does not hold O_DIRECT reads, but the trunk's
# load is then faster). Every command runs with STRATA_HOME=DIR/strata-home: no saved probe, tuned profile
# or drive rates of earlier checks or runs (budget measures each drive now; the drive rates are the
# check's own runs', recorded as they finish).
#
# Environment: STRATA (default build/strata next to this script's repo), PYTHON.
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}

usage() { sed -n '2,50p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }

out=; models=; drive_a=; drive_b=; rams="1.5 2.5 3.5"; prompt=512; tokens=32; runs=1; threads=$(nproc)
heat_prompt=; heat_tokens=64; timeline=no; drive_rate=runs
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --drive-a) drive_a=$2; shift 2 ;;
    --drive-b) drive_b=$2; shift 2 ;;
    --rams) rams=$2; shift 2 ;;
    --prompt) prompt=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --timeline) timeline=yes; shift ;;
    --heat-prompt) heat_prompt=$2; shift 2 ;;
    --drive-rate) drive_rate=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "budget_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "budget_check.sh: give --out DIR" >&2; exit 2; }
heat_prompt=${heat_prompt:-$prompt}
case "$drive_rate" in runs|probe) ;; *) echo "budget_check.sh: --drive-rate takes runs or probe" >&2; exit 2 ;; esac
for n in "$prompt" "$tokens" "$runs" "$heat_prompt"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "budget_check.sh: --prompt, --tokens, --runs and --heat-prompt take whole numbers from 1" >&2; exit 2; }
done
strata=${STRATA:-$repo/build/strata}
[ -x "$strata" ] || { echo "budget_check.sh: no strata binary at $strata (set STRATA)" >&2; exit 2; }
models=${models:-$out/models}; drive_a=${drive_a:-$out/drive-a}; drive_b=${drive_b:-$out/drive-b}
mkdir -p "$out/logs" "$models" "$drive_a" "$drive_b"
export STRATA_HOME=$out/strata-home
rm -rf "$STRATA_HOME"
cp "$strata" "$out/strata"  # a rebuild during the run does not mix binaries
strata=$out/strata
: > "$out/results.jsonl"
show() { echo "+ $*" | tee -a "$out/commands.txt" >&2; }
show export STRATA_HOME="$STRATA_HOME"
run() { show "$@"; "$@"; }
dropped=no
drop_caches() { sync; if [ "$(id -u)" = 0 ] && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then dropped=yes; fi; }

synth_once() {  # NAME ARGS...
  local name=$1; shift
  [ -f "$models/$name.gguf" ] || run "$strata" synth "$@" --format gguf --out "$models/$name.gguf" > "$out/logs/synth-$name.log" 2>&1
}
synth_once a --preset kimi-k2 --experts 384 --hidden 1536 --size 4 --quant q8_0+mxfp4 --seed 1
synth_once b --preset qwen3-30b-a3b --size 3 --quant q8_0 --seed 2

pack_once() {  # NAME LAYOUT(1|2)
  local name=$1 layout=$2 pack=$models/$1-$2drive.pack
  if [ ! -f "$pack/manifest.json" ]; then
    local drives=(--drive "$drive_a/$name")
    [ "$layout" = 2 ] && drives+=(--drive "$drive_b/$name")
    mkdir -p "$drive_a/$name" "$drive_b/$name"
    run "$strata" pack "$models/$name.gguf" --out "$pack" "${drives[@]}" > "$out/logs/pack-$name-$layout.log" 2>&1
  fi
  echo "$pack"
}

ids=$($PY -c "print(','.join(str(1000 + 37 * i) for i in range($prompt)))")
mid=$(echo "$rams" | awk '{print $(int((NF + 1) / 2))}')
configs=()
for m in a b; do
  for r in $rams; do configs+=("$m 1 $r"); done
  configs+=("$m 2 $mid")
done

for c in "${configs[@]}"; do
  read -r m layout r <<< "$c"
  pack=$(pack_once "$m" "$layout")
  tag="$m-${layout}drive-ram$r"
  # The experts' heat, as a user's earlier runs leave it: one run of another prompt
  # and seed, once per pack. Budget reads it for the hit rate; each run starts from
  # a fresh copy of it (its hottest experts pinned, as the default heat file does).
  heat=$out/heat-$m-$layout-p$heat_prompt.json
  if [ ! -f "$heat" ]; then
    heat_ids=$($PY -c "print(','.join(str(2000 + 41 * i) for i in range($heat_prompt)))")
    run "$strata" generate "$pack" --ram "$r" --prompt-ids "$heat_ids" -n "$heat_tokens" --ignore-eos --temperature 1 \
      --seed 1000 --heat "$heat" --profile none --threads "$threads" > "$out/logs/heat-$m-$layout-p$heat_prompt.log" 2>&1
  fi
  run "$strata" budget "$pack" --ram "$r" --prompt "$prompt" --heat "$heat" --threads "$threads" --temperature 1 \
    --drive-rate "$drive_rate" --json \
    > "$out/logs/budget-$tag.json" 2> "$out/logs/budget-$tag.err"
  for i in $(seq 1 "$runs"); do
    drop_caches
    cp "$heat" "$out/heat-run.json"
    traced=()
    if [ "$timeline" = yes ]; then traced=(--timeline "$out/logs/timeline-$tag-$i.json"); fi
    run "$strata" generate "$pack" --ram "$r" --prompt-ids "$ids" -n "$tokens" --ignore-eos --temperature 1 --seed "$i" \
      --heat "$out/heat-run.json" --profile none \
      --threads "$threads" --json "${traced[@]}" > "$out/logs/run-$tag-$i.json" 2> "$out/logs/run-$tag-$i.err"
    if [ "$timeline" = yes ]; then
      "$PY" "$repo/tools/timeline_summary.py" "$out/logs/timeline-$tag-$i.json" > "$out/logs/timeline-$tag-$i.txt"
    fi
  done
  $PY - "$out" "$tag" "$m" "$layout" "$r" "$runs" >> "$out/results.jsonl" <<'EOF'
import json, statistics, sys
out, tag, model, layout, ram, runs = sys.argv[1:7]
b = json.load(open(f"{out}/logs/budget-{tag}.json"))
pred = b["by_drives"][-1] if b["by_drives"] else {"decode_tok_s": 0, "ttft_s": 0, "drives": 0}
runs_ = [json.loads(open(f"{out}/logs/run-{tag}-{i}.json").read().splitlines()[-1])["stats"] for i in range(1, int(runs) + 1)]
def decode(s):
    return s.get("experts", {}).get("decode", {})
def per_token(s):
    # The decode's tokens: the first comes from the prompt's step.
    return max(1, s["generated_tokens"] - 1)
def drive_rate(s, phase):
    # What the run's reads got from its drives: each drive's bytes over its busy time, summed over the
    # drives as budget sums their ceilings.
    d = s.get("experts", {}).get(phase, {}).get("drives", [])
    return sum(x["bytes"] / x["busy_s"] / 1e9 for x in d if x["busy_s"] > 0)
print(json.dumps({"config": tag, "model": model, "folders": int(layout), "ram_gib": float(ram),
                  "drives_counted": pred.get("drives", 0), "verdict": b.get("verdict", ""),
                  "predicted_decode": pred["decode_tok_s"], "measured_decode": statistics.median(s["decode_tok_s"] for s in runs_),
                  "predicted_ttft": pred["ttft_s"], "measured_ttft": statistics.median(s["ttft_s"] for s in runs_),
                  "hit_rate_predicted": b.get("hit_rate", 0),
                  # A decode token as budget sees it (reads and compute before their overlap) and as the runs
                  # spent it: waiting for reads, the rest, and the drives' busy time, in ms.
                  "predicted_read_ms": 1e3 * pred.get("token_read_s", 0),
                  "predicted_compute_ms": 1e3 * pred.get("token_compute_s", 0),
                  "token_ms": statistics.median(1e3 / s["decode_tok_s"] if s["decode_tok_s"] > 0 else 0 for s in runs_),
                  "waiting_ms": statistics.median(1e3 * decode(s).get("io_wait_s", 0) / per_token(s) for s in runs_),
                  "busy_ms": statistics.median(
                      1e3 * sum(x["busy_s"] for x in decode(s).get("drives", [])) / per_token(s) for s in runs_),
                  "drive_gbps_predicted": pred.get("gbps", 0),
                  "prompt_gbps_predicted": pred.get("prompt_gbps", pred.get("gbps", 0)),
                  # The drives' probes, and how many earlier runs' reads budget's rates came from (the fewest
                  # of any drive; 0: the probe's).
                  "drive_gbps_probed": sum(d.get("probe_gbps", d.get("gbps", 0)) for d in b.get("machine", {}).get("drives", [])),
                  "decode_rate_runs": min((d.get("decode_runs", 0) for d in b.get("machine", {}).get("drives", [])), default=0),
                  "prompt_rate_runs": min((d.get("prompt_runs", 0) for d in b.get("machine", {}).get("drives", [])), default=0),
                  "drive_gbps_prefill": statistics.median(drive_rate(s, "prefill") for s in runs_),
                  "drive_gbps_decode": statistics.median(drive_rate(s, "decode") for s in runs_),
                  # Bytes a decode token read, and the prefetch's reads for each miss: (demand reads + guesses
                  # issued and not cancelled before their reads) / (demand reads + guesses used), in experts;
                  # budget's factor and where it took it.
                  "read_mb_predicted": b.get("read_per_token_bytes", 0) / 1e6,
                  "read_mb_measured": statistics.median(decode(s).get("bytes_read", 0) / per_token(s) / 1e6 for s in runs_),
                  "read_factor_predicted": b.get("read_factor", b.get("machine", {}).get("prefetch_read_factor", 0)),
                  "read_factor_from": b.get("machine", {}).get("prefetch_read_factor_from", ""),
                  "read_factor_measured": statistics.median(
                      (d["misses"] + d["prefetch"]["issued"] - d["prefetch"]["cancelled"]) / (d["misses"] + d["prefetch"]["used"])
                      if d.get("misses", 0) + d.get("prefetch", {}).get("used", 0) else 0.0
                      for d in (decode(s) for s in runs_)),
                  # The cache's own share of a token's picks: hits less the prefetched experts used (which
                  # were read), as the prediction means it.
                  "hit_rate_measured": statistics.median(
                      (d["hits"] - d["prefetch"]["used"]) / d["requests"] if d["requests"] else 1.0
                      for d in (s["experts"]["decode"] for s in runs_)) if "experts" in runs_[0] else 1.0}))
EOF
done

$PY - "$out" "$dropped" "$prompt" "$tokens" "$runs" "$heat_prompt" > "$out/summary.md" <<'EOF'
import json, sys
out, dropped, prompt, tokens, runs, heat_prompt = sys.argv[1:7]
rows = [json.loads(l) for l in open(f"{out}/results.jsonl")]
err = lambda p, m: (p - m) / m * 100 if m else float("nan")
print(f"# strata budget: predicted vs measured ({len(rows)} configurations)\n")
print(f"Prompt {prompt} tokens, {tokens} generated, median of {runs} run(s); heat recorded after a {heat_prompt}-token prompt; "
      f"caches dropped before each run: {dropped}.\n")
print("| config | drives counted | cache hit rate pred / run | decode pred | decode run | error | TTFT pred (s) | TTFT run (s) | error |")
print("|---|---|---|---|---|---|---|---|---|")
worst_d = worst_t = 0.0
for r in rows:
    ed, et = err(r["predicted_decode"], r["measured_decode"]), err(r["predicted_ttft"], r["measured_ttft"])
    # A figure that could not be measured (nan) counts as missing the goal.
    worst_d = max(worst_d, abs(ed) if ed == ed else float("inf"))
    worst_t = max(worst_t, abs(et) if et == et else float("inf"))
    print(f"| {r['config']} | {r['drives_counted']} | {r['hit_rate_predicted']:.2f} / {r['hit_rate_measured']:.2f} "
          f"| {r['predicted_decode']:.2f} | {r['measured_decode']:.2f} | {ed:+.0f}% "
          f"| {r['predicted_ttft']:.2f} | {r['measured_ttft']:.2f} | {et:+.0f}% |")
print(f"\nLargest errors: decode {worst_d:.0f}% (goal 20%), TTFT {worst_t:.0f}% (goal 30%): "
      f"{'both within the goals' if worst_d <= 20 and worst_t <= 30 else 'NOT within the goals'}.")
def table(head, cells, needs=None):
    # One markdown table: a row per configuration that has the figure `needs` (where older results lack it).
    print("\n| config | " + " | ".join(head) + " |")
    print("|---" * (len(head) + 1) + "|")
    for r in rows:
        if needs is None or needs in r:
            print(f"| {r['config']} | " + " | ".join(cells(r)) + " |")
# A decode token: budget's reads and compute (before their overlap) against what the runs spent.
table(["predicted reads (ms)", "predicted compute (ms)", "run's token (ms)", "waiting for reads", "the rest", "drive busy"],
      lambda r: [f"{r['predicted_read_ms']:.1f}", f"{r['predicted_compute_ms']:.1f}", f"{r['token_ms']:.1f}",
                 f"{r['waiting_ms']:.1f}", f"{r['token_ms'] - r['waiting_ms']:.1f}", f"{r['busy_ms']:.1f}"], "token_ms")
# The drive as budget rated it (by its probe, or by the check's earlier runs' reads: their count) and as
# the runs' reads found it (bytes over busy time): where these part, the prediction's error is the drive's,
# not the model's.
def rates(r):
    ratio = lambda x, g: f"{x:.2f} ({x / g:.2f}x)" if g and x else "-"
    source = lambda n: f"{n} runs" if n else "probe"
    d, p = r.get("drive_gbps_predicted", 0), r.get("prompt_gbps_predicted", r.get("drive_gbps_predicted", 0))
    return [f"{r.get('drive_gbps_probed', d):.2f}",
            f"{p:.2f} ({source(r.get('prompt_rate_runs', 0))})", ratio(r.get("drive_gbps_prefill", 0), p),
            f"{d:.2f} ({source(r.get('decode_rate_runs', 0))})", ratio(r.get("drive_gbps_decode", 0), d)]
table(["probe GB/s", "budget's prompt rate (from)", "runs' prefill reads", "budget's decode rate (from)",
       "runs' decode reads"], rates)
# The model apart from the drive: budget's decode again with its reads at the rate the runs' decode reads
# got (and then at the bytes they read too), its compute as predicted, overlapped as budget overlaps them
# (R + C - RC / (R + C)). Within the goal here and not above, the drive moved between budget's probe and the run.
def model_alone(r):
    g, got, m = r.get("drive_gbps_predicted", 0), r.get("drive_gbps_decode", 0), r["measured_decode"]
    c, read = r["predicted_compute_ms"], r["predicted_read_ms"] * (g / got if g and got else 1.0)
    token = lambda x: x + c - (x * c / (x + c) if x + c > 0 else 0.0)
    at_rate = 1e3 / token(read) if token(read) > 0 else 0.0
    mb = r["read_mb_measured"] / r["read_mb_predicted"] if r.get("read_mb_predicted") else 1.0
    at_bytes = 1e3 / token(read * mb) if token(read * mb) > 0 else 0.0
    # And as budget --drive-rate probe would have predicted it: the reads at the probe's rate.
    probe = r.get("drive_gbps_probed", g)
    at_probe = 1e3 / token(r["predicted_read_ms"] * g / probe) if g and probe and token(r["predicted_read_ms"] * g / probe) > 0 else 0.0
    return [f"{at_probe:.2f} ({err(at_probe, m):+.0f}%)", f"{at_rate:.2f} ({err(at_rate, m):+.0f}%)",
            f"{at_bytes:.2f} ({err(at_bytes, m):+.0f}%)"]
table(["decode pred by the probe alone (error)", "at the runs' drive rate (error)", "and at the runs' bytes a token (error)"],
      model_alone, "read_mb_predicted")
# The bytes a decode token read, and the prefetch's reads for each miss (its wrong guesses), as budget took
# them (from the heat's guesses on record, or assumed) and as the runs did.
table(["MB read a token, budget / runs", "reads a miss, budget (from) / runs"],
      lambda r: [f"{r['read_mb_predicted']:.1f} / {r['read_mb_measured']:.1f}",
                 f"{r['read_factor_predicted']:.2f} ({r['read_factor_from']}) / {r['read_factor_measured']:.2f}"],
      "read_mb_predicted")
EOF
cat "$out/summary.md"
