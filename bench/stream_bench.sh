#!/usr/bin/env bash
# Cold-expert streaming benchmark: strata vs llama.cpp under a memory cap (not run by CI).
#
#   bash bench/stream_bench.sh --llama DIR [--model M.gguf | --size GB [--vocab V]] [--cap GiB]
#        [--runs R] [--tokens N] [--llama-tokens M] [--ra "8192 128"] [--seed S] [--out DIR]
#        [--models DIR] [--strata BIN]
#
# A synthesized model at least 2x the memory the process may use, decoded with cold
# caches and sampling (temperature 1, fixed seed) so routing varies as in real text.
# Needs root: a cgroup v1 memory cap, drop_caches and the drive's read_ahead_kb.
#
#   --llama DIR      the llama.cpp checkout built by bench/llama_cpp/build.sh (its
#                    build-parity/parity_tool runs); required unless PARITY_TOOL is set
#   --strata BIN     the strata binary (default build/strata of this repository)
#   --model M.gguf   the GGUF to use (default: synthesize one, see --size)
#   --size GB        size of the synthesized model (default 7.5): strata synth --preset
#                    kimi-k2 --hidden 2560 --size GB --vocab V --format gguf --quant
#                    q8_0+mxfp4 --seed 1, kept in --models DIR
#   --models DIR     where synthesized models (and their packs) are kept between runs
#                    (default ${XDG_CACHE_HOME:-~/.cache}/strata/bench-models, or $MODELS when set)
#   --vocab V        its vocabulary (default 16384). Scaled down to 7.5 GB with its full
#                    163840-token vocabulary, Kimi-K2 keeps 18 MoE layers of 704-wide experts
#                    and its output head holds 54% as many weights as the experts a token
#                    uses (Kimi-K2 itself: 5.6%); a decode step then spends 12% of its time
#                    in the head with no read to overlap. 16384 keeps Kimi-K2's ratio:
#                    163840 x L*8*3*704 / (60*8*3*2048) is 16.9k for L = 18 MoE layers and
#                    16.0k for the 17 that the 16384-token shape has.
#   --cap GiB        memory.limit_in_bytes of the cgroup every decode runs in (default 3);
#                    page cache counts against it; strata gets --ram CAP-0.3
#   --runs R         rounds (default 3); a round runs every row at each read-ahead (which
#                    read-ahead goes first alternates), engines in ABCD / DCBA order
#   --tokens N       tokens strata generates (default 96: a longer decode averages out the
#                    drive's second-to-second swings)
#   --llama-tokens M tokens llama.cpp generates (default 32; fewer if it is too slow)
#   --llama-timeout S  kill a llama.cpp run after S seconds (default 300) and report
#                    tok/s from the tokens it finished (parity_tool --progress)
#   --ra "A B"       read_ahead_kb values to run at (default "8192 128"); the original
#                    value is restored on exit, also on error or ^C
#   --seed S         sampling seed for both engines (default 1)
#   --prompt-len P   prompt ids 1000+37*i, i < P (default 16), the same for both engines
#   --out DIR        results dir (default: a new folder under $TMPDIR or /tmp)
#   --no-repack-check  skip the one llama.cpp run with its defaults (weight repacking on)
#
# Rows (each run starts after sync + drop_caches, inside the cgroup):
#   strata gguf          strata generate --model M.gguf --prompt-ids IDS -n N --temperature 1
#                          --seed S --ignore-eos --ram CAP-0.3 --heat none --threads T --json
#   strata pack          the same on `strata pack M.gguf` (packed once, outside the cgroup)
#   strata pack, no prefetch  the same with --prefetch off (prefetch is on by default)
#   (after the rounds)   strata generate on M.gguf unconstrained (no cgroup, no --ram): every
#                        capped strata run must give exactly its tokens (summary says so)
#   llama.cpp            parity_tool -m M.gguf --prompt-ids IDS -n M --temp 1 --seed S -t T
#                          --no-repack --progress   (mmap; otherwise llama.cpp's defaults)
# llama.cpp's default weight repacking copies the MXFP4 experts (AVX-512: mxfp4_8x8) into
# anonymous memory, more than the cap; one run with it on is made to show what happens.
# `strata probe` runs first on the directory of the expert blobs with expert-sized reads
# (--seconds 6: three rounds of 2 s per depth, each depth rated by its median). These
# virtual disks drift between ~1.0 and ~2.9 GB/s over minutes, so each strata run is
# also bracketed by two short probes of the expert file (depths 1 and 4, 2 x 1 s each,
# logs/<run>.probe-{before,after}.json) and rated against their mean ("÷ adjacent").
# Output: setup.txt, commands.txt, runs.jsonl (per run: rc, wall, cgroup peak, disk bytes
# read, cores busy with other processes), logs/, summary.md (medians, ranges, ratios,
# and the ratios over the runs with < 0.25 cores of other load). ~20 min with the defaults.
#
# Environment: STRATA (when no --strata; the binary is copied into the results dir so a
# rebuild during the run does not mix binaries), PARITY_TOOL (the parity_tool binary, when
# no --llama), MODELS (when no --models), PYTHON.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
MODELS=${MODELS:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/strata/bench-models}
llama=

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2; }

orig_args="$*"
model=; size=7.5; vocab=16384; cap=3; runs=3; tokens=96; llama_tokens=32; llama_timeout=300
ra_list="8192 128"; seed=1; prompt_len=16; out=; repack_check=1; ram_margin=0.3
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --vocab) vocab=$2; shift 2 ;;
    --cap) cap=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --llama-tokens) llama_tokens=$2; shift 2 ;;
    --llama-timeout) llama_timeout=$2; shift 2 ;;
    --ra) ra_list=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --prompt-len) prompt_len=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --llama) llama=$2; shift 2 ;;
    --strata) STRATA=$2; shift 2 ;;
    --no-repack-check) repack_check=0; shift ;;
    -h|--help) usage ;;
    *) echo "stream_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "stream_bench.sh: needs root (cgroup, drop_caches, read_ahead_kb)" >&2; exit 2; }
[ -d /sys/fs/cgroup/memory ] || { echo "stream_bench.sh: no cgroup v1 memory controller at /sys/fs/cgroup/memory" >&2; exit 2; }
llama=${llama:-${LLAMA_DIR:-}}
if [ -n "$llama" ]; then
  PARITY_TOOL=$llama/build-parity/parity_tool
elif [ -z "${PARITY_TOOL:-}" ]; then
  echo "stream_bench.sh: give --llama DIR (a llama.cpp checkout built by bench/llama_cpp/build.sh)" >&2; exit 2
fi
[ -x "$PARITY_TOOL" ] || { echo "stream_bench.sh: $PARITY_TOOL missing; run bash bench/llama_cpp/build.sh --dir DIR" >&2; exit 2; }
STRATA=${STRATA:-$repo/build/strata}
[ -x "$STRATA" ] || { echo "stream_bench.sh: no strata binary at $STRATA (--strata BIN)" >&2; exit 2; }

out=${out:-$(mktemp -d "${TMPDIR:-/tmp}/stream_bench.XXXXXX")}
mkdir -p "$out/logs"
cmdlog=$out/commands.txt
: > "$cmdlog"
say() { echo "$*" | tee -a "$out/bench.log"; }
show() { echo "+ $*" | tee -a "$cmdlog" >> "$out/bench.log"; echo "+ $*"; }

# Keep the binary that is measured fixed for the whole run.
cp "$STRATA" "$out/strata"
strata=$out/strata
threads=$(nproc)

# ---- model and pack (outside the cgroup) ----
if [ -z "$model" ]; then
  [[ "$vocab" =~ ^[0-9]+$ ]] || { echo "stream_bench.sh: --vocab $vocab: expected a number of tokens" >&2; exit 2; }
  vtag=v$vocab; [ $((vocab % 1024)) = 0 ] && vtag=v$((vocab / 1024))k
  model=$MODELS/stream-kimi-k2-h2560-$vtag-${size}g.gguf
  if [ ! -f "$model" ]; then
    mkdir -p "$MODELS"
    synth=("$strata" synth --preset kimi-k2 --hidden 2560 --size "$size" --vocab "$vocab" --format gguf
           --quant q8_0+mxfp4 --seed 1 --out "$model")
    show "${synth[@]}"
    "${synth[@]}" > "$out/logs/synth.log" 2>&1
  fi
fi
[ -f "$model" ] || { echo "stream_bench.sh: $model: not found" >&2; exit 2; }
pack=${model%.gguf}.pack
if [ ! -f "$pack/manifest.json" ]; then
  show "$strata" pack "$model" --out "$pack" --json -q
  "$strata" pack "$model" --out "$pack" --json -q > "$out/logs/pack.json" 2> "$out/logs/pack.err"
fi

# ---- cgroup, read-ahead (restored on any exit) ----
dev=$(lsblk -no PKNAME "$(df --output=source "$model" | tail -1)" 2>/dev/null | head -1)
[ -n "$dev" ] || dev=$(basename "$(df --output=source "$model" | tail -1)")
ra_file=/sys/block/$dev/queue/read_ahead_kb
[ -w "$ra_file" ] || { echo "stream_bench.sh: $ra_file not writable" >&2; exit 2; }
ra_orig=$(cat "$ra_file")
cg=/sys/fs/cgroup/memory/strata_stream_bench_$$
# CPU time of the measured process (cpuacct), to tell how busy the cores were with
# anything else during the run (this machine may be shared).
cpu_cg=/sys/fs/cgroup/cpuacct/strata_stream_bench_$$
[ -d /sys/fs/cgroup/cpuacct ] || cpu_cg=
cleanup() {
  echo "$ra_orig" > "$ra_file" || true
  [ -d "$cg" ] && rmdir "$cg" 2>/dev/null || true
  [ -n "$cpu_cg" ] && [ -d "$cpu_cg" ] && rmdir "$cpu_cg" 2>/dev/null || true
  echo "read_ahead_kb of $dev restored to $(cat "$ra_file")"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$cg"
[ -n "$cpu_cg" ] && mkdir -p "$cpu_cg"
cap_bytes=$("$PY" -c "print(int(float('$cap') * 2**30))")
echo "$cap_bytes" > "$cg/memory.limit_in_bytes"
ram=$("$PY" -c "print(round(float('$cap') - $ram_margin, 3))")
ids=$("$PY" -c "print(','.join(str(1000 + 37 * i) for i in range($prompt_len)))")

model_bytes=$(stat -c %s "$model")
trunk_bytes=$(stat -c %s "$pack"/trunk.*)
expert_len=$("$PY" -c "
import json, sys
m = json.load(open(sys.argv[1]))
print(max(e[2] for layer in m['experts'] for e in layer))" "$pack/manifest.json")
# every drive's expert file; the first one's directory gets the probe's test file below
mapfile -t expert_files < <("$PY" -c "
import json, os, sys
m = json.load(open(sys.argv[1]))
for d in m['drives']:
    print(os.path.normpath(os.path.join(os.path.dirname(sys.argv[1]), d['path'], d['file'])))" "$pack/manifest.json")
expert_dir=$(dirname "${expert_files[0]}")

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB RAM"
  echo "command: bash bench/stream_bench.sh $orig_args"
  echo "strata: $STRATA (copied to $strata), built $(date -u -r "$STRATA" +%Y-%m-%dT%H:%M:%SZ), md5 $(md5sum "$strata" | cut -c1-12), repo HEAD now $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo ?)$(git -C "$repo" diff --quiet -- src 2>/dev/null || echo ' + uncommitted src changes')"
  echo "llama.cpp: $PARITY_TOOL ($(git -C "$(dirname "$(dirname "$PARITY_TOOL")")" rev-parse --short HEAD 2>/dev/null || echo ?))"
  echo "model: $model ($model_bytes bytes), pack $pack (trunk $trunk_bytes bytes, expert blob $expert_len bytes)"
  echo "cap: $cap GiB = $cap_bytes bytes (cgroup $cg); strata --ram $ram; model/cap = $("$PY" -c "print(round($model_bytes / $cap_bytes, 2))"), trunk/cap = $("$PY" -c "print(round($trunk_bytes / $cap_bytes, 2))")"
  echo "drive: $dev, read_ahead_kb at start $ra_orig; runs at: $ra_list"
  echo "prompt ids ($prompt_len): $ids"
  echo "tokens: strata $tokens, llama.cpp $llama_tokens (timeout ${llama_timeout}s); seed $seed; threads $threads; runs $runs"
  echo "order: rounds of (each read-ahead, alternating which goes first) x (engines, ABCD then DCBA)"
} | tee "$out/setup.txt"
"$PY" -c "import sys; sys.exit(0 if $model_bytes >= 2 * $cap_bytes else 1)" \
  || say "WARNING: the model is smaller than 2x the cap"

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# ---- drive ceiling (before the decode runs) ----
# expert-sized reads: the blob length rounded up to 4 KiB (O_DIRECT), in MiB (exact in binary)
block_mib=$("$PY" -c "print((($expert_len + 4095) // 4096 * 4096) / 2**20)")
drop
show "$strata" probe "$expert_dir" --block "$block_mib" --seconds 6 --out "$out/probe.json"
"$strata" probe "$expert_dir" --block "$block_mib" --seconds 6 --out "$out/probe.json" 2>&1 | tee "$out/logs/probe.log"

# A short probe of the same drive right before and right after each strata run: these
# virtual disks drift between ~1.0 and ~2.9 GB/s over minutes, so a run is rated
# against the ceiling of its own minute as well as against the probe above.
probe_adjacent() {  # tag
  "$strata" probe "${expert_files[@]}" --block "$block_mib" --depths 1,4 --seconds 2 --rounds 2 --json \
    --out "$out/logs/$1.json" > /dev/null 2> "$out/logs/$1.err" || say "  probe $1 failed (see logs/$1.err)"
}

# ---- one decode run in the cgroup ----
runs_file=$out/runs.jsonl
: > "$runs_file"
run_one() {  # ra config run
  local ra=$1 cfg=$2 r=$3 tag="ra$1_$2_r$3" limit=0
  local -a cmd
  case "$cfg" in
    strata-gguf|strata-pack|strata-pack-noprefetch)
      local m=$model extra=()
      [ "$cfg" != strata-gguf ] && m=$pack
      [ "$cfg" = strata-pack-noprefetch ] && extra=(--prefetch off)
      cmd=("$strata" generate --model "$m" --prompt-ids "$ids" -n "$tokens" --temperature 1 --seed "$seed"
           --ignore-eos --ram "$ram" --heat none --threads "$threads" "${extra[@]}" --json) ;;
    llama|llama-repack)
      local extra=(--no-repack)
      [ "$cfg" = llama-repack ] && extra=()
      limit=$llama_timeout
      cmd=("$PARITY_TOOL" -m "$model" --prompt-ids "$ids" -n "$llama_tokens" --temp 1 --seed "$seed"
           -t "$threads" "${extra[@]}" --progress) ;;
  esac
  drop
  local strata_run=0
  [[ "$cfg" == strata-* ]] && strata_run=1
  # (before the counters below, so the run's disk bytes and other load leave it out)
  [ "$strata_run" = 1 ] && probe_adjacent "$tag.probe-before"
  echo 0 > "$cg/memory.max_usage_in_bytes"
  local fail0 oom0 rd0 rd1 load t0 t1 rc=0 busy0 busy1 cpu0=0 cpu1=0
  local procs="$cg/cgroup.procs"
  [ -n "$cpu_cg" ] && procs="$procs $cpu_cg/cgroup.procs"
  [ -n "$cpu_cg" ] && cpu0=$(cat "$cpu_cg/cpuacct.usage")
  busy0=$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat)
  fail0=$(cat "$cg/memory.failcnt")
  oom0=$(awk '/oom_kill /{print $2}' "$cg/memory.oom_control")
  rd0=$(awk '{print $3}' "/sys/block/$dev/stat")
  load=$(cut -d' ' -f1 /proc/loadavg)
  show "[cgroup $cap GiB, read_ahead_kb $ra] ${cmd[*]}"
  t0=$(date +%s.%N)
  if [ "$limit" -gt 0 ]; then
    timeout -s KILL "$limit" sh -c 'for f in $0; do echo $$ > "$f"; done; exec "$@"' "$procs" "${cmd[@]}" \
      > "$out/logs/$tag.json" 2> "$out/logs/$tag.err" || rc=$?
  else
    sh -c 'for f in $0; do echo $$ > "$f"; done; exec "$@"' "$procs" "${cmd[@]}" \
      > "$out/logs/$tag.json" 2> "$out/logs/$tag.err" || rc=$?
  fi
  t1=$(date +%s.%N)
  rd1=$(awk '{print $3}' "/sys/block/$dev/stat")
  busy1=$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat)
  [ -n "$cpu_cg" ] && cpu1=$(cat "$cpu_cg/cpuacct.usage")
  [ "$strata_run" = 1 ] && probe_adjacent "$tag.probe-after"
  local hz; hz=$(getconf CLK_TCK)
  # cores busy with other work on average during the run (all CPU time minus the run's own)
  local other; other=$("$PY" -c "w = $t1 - $t0; print(round(max(0.0, ($busy1 - $busy0) / $hz - ($cpu1 - $cpu0) / 1e9) / w, 2) if $cpu1 > 0 else 'null')")
  printf '{"ra":%s,"config":"%s","run":%s,"rc":%s,"wall_s":%s,"cg_peak":%s,"failcnt":%s,"oom_kills":%s,"disk_read_bytes":%s,"load1":%s,"other_cores":%s,"own_cpu_s":%s,"timeout_s":%s,"log":"%s"}\n' \
    "$ra" "$cfg" "$r" "$rc" "$("$PY" -c "print(round($t1 - $t0, 3))")" "$(cat "$cg/memory.max_usage_in_bytes")" \
    "$(( $(cat "$cg/memory.failcnt") - fail0 ))" "$(( $(awk '/oom_kill /{print $2}' "$cg/memory.oom_control") - oom0 ))" \
    "$(( (rd1 - rd0) * 512 ))" "$load" "$other" "$("$PY" -c "print(round(($cpu1 - $cpu0) / 1e9, 2))")" "$limit" "logs/$tag" >> "$runs_file"
  say "  -> rc $rc, $(tail -1 "$runs_file")"
}

# Rounds: each read-ahead once per round (which one goes first alternates), engines in
# balanced order within each block (ABCD, DCBA, ...), so slow drifts in the machine's
# load fall on all rows alike.
configs=(strata-gguf strata-pack strata-pack-noprefetch llama)
read -r -a ras <<< "$ra_list"
block=0
for r in $(seq 1 "$runs"); do
  ra_order=("${ras[@]}")
  if [ $(( r % 2 )) = 0 ]; then
    ra_order=(); for (( i=${#ras[@]}-1; i>=0; i-- )); do ra_order+=("${ras[$i]}"); done
  fi
  for ra in "${ra_order[@]}"; do
    echo "$ra" > "$ra_file"
    say "== round $r, read_ahead_kb $(cat "$ra_file")"
    if [ "$r" = 1 ] && [ "$block" = 0 ] && [ "$repack_check" = 1 ]; then
      run_one "$ra" llama-repack 1
    fi
    order=("${configs[@]}")
    if [ $(( block % 2 )) = 1 ]; then order=(llama strata-pack-noprefetch strata-pack strata-gguf); fi
    for cfg in "${order[@]}"; do run_one "$ra" "$cfg" "$r"; done
    block=$(( block + 1 ))
  done
done
echo "$ra_orig" > "$ra_file"

# ---- the same decode unconstrained: no cgroup, no --ram (every expert in memory) ----
# Every capped strata run must produce exactly these tokens.
free_cmd=("$strata" generate --model "$model" --prompt-ids "$ids" -n "$tokens" --temperature 1 --seed "$seed"
          --ignore-eos --heat none --threads "$threads" --json)
show "[unconstrained] ${free_cmd[*]}"
"${free_cmd[@]}" > "$out/logs/unconstrained.json" 2> "$out/logs/unconstrained.err" || say "unconstrained run failed"

# ---- summary ----
"$PY" - "$out" "$cap_bytes" "$tokens" "$llama_tokens" <<'EOF' | tee "$out/summary.md"
import json, os, statistics, sys
out, cap, n_strata, n_llama = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
runs = [json.loads(l) for l in open(os.path.join(out, "runs.jsonl"))]
probe = json.load(open(os.path.join(out, "probe.json")))
probe_gbps = probe["combined"]["best_gbps"]
names = {"strata-gguf": "strata (GGUF)", "strata-pack": "strata (pack)",
         "strata-pack-noprefetch": "strata (pack, --prefetch off)", "llama": "llama.cpp (mmap, --no-repack)",
         "llama-repack": "llama.cpp (mmap, defaults: repack on)"}

def load(r):
    """Adds the run's numbers to r; tok/s from the JSON, or from the progress lines."""
    base = os.path.join(out, r["log"])
    try:
        j = json.load(open(base + ".json"))
    except Exception:
        j = None
    r["ok"] = j is not None and r["rc"] == 0
    if r["config"].startswith("strata"):
        if not r["ok"]:
            return r
        s = j["stats"]
        d = s["experts"]["decode"]
        steps = max(s["generated_tokens"] - 1, 1)   # decode forwards (token 1 comes from the prefill)
        busy = sum(x["busy_s"] for x in d["drives"])
        dbytes = sum(x["bytes"] for x in d["drives"])
        r.update(tok_s=s["decode_tok_s"], prefill_s=s["prefill_s"], gbps_wall=d["gbps"],
                 gbps_busy=dbytes / 1e9 / busy if busy else 0.0,
                 needed_tok=d["bytes_needed"] / steps, read_tok=d["bytes_read"] / steps,
                 hit=d["hit_rate"], io_wait=d["io_wait_share"], rss=s["peak_rss_bytes"],
                 wait_ms=1e3 * d["io_wait_s"] / steps,
                 rest_ms=1e3 * (steps / s["decode_tok_s"] - d["io_wait_s"]) / steps if s["decode_tok_s"] else None,
                 pf_acc=d["prefetch"]["accuracy"], pf_issued=d["prefetch"]["issued"], pf_used=d["prefetch"]["used"],
                 tokens=s["generated_tokens"])
        adj = []
        for side in ("before", "after"):
            try:
                adj.append(json.load(open(f"{base}.probe-{side}.json"))["combined"]["best_gbps"])
            except (OSError, ValueError, KeyError):
                pass
        if len(adj) == 2:
            r["probe_adj"] = sum(adj) / 2
            r["wall_adj"] = r["gbps_wall"] / r["probe_adj"]
            r["busy_adj"] = r["gbps_busy"] / r["probe_adj"]
    else:
        if r["ok"]:
            s = j["stats"]
            r.update(tok_s=s["decode_tok_s"], prefill_s=s["prefill_s"], tokens=s["generated_tokens"], partial=False)
        else:
            # killed (timeout or OOM): tokens done from the --progress lines
            t = []
            for line in open(base + ".err", errors="replace"):
                p = line.split()
                if len(p) == 4 and p[0] == "token":
                    t.append(float(p[3]))
            r["tokens"] = len(t)
            if len(t) >= 2:
                r.update(tok_s=(len(t) - 1) / (t[-1] - t[0]), prefill_s=t[0], partial=True)
            elif len(t) == 1:
                r.update(prefill_s=t[0], partial=True)
    return r

runs = [load(r) for r in runs]

def med(vals, fmt):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    m = statistics.median(vals)
    if len(vals) == 1:
        return fmt.format(m)
    return f"{fmt.format(m)} ({fmt.format(min(vals))}–{fmt.format(max(vals))})"

gb = 1e9
QUIET = 0.25   # cores of other load below which a run counts as undisturbed
print(f"# stream_bench summary\n")
print(f"probe (O_DIRECT, {probe['combined']['best_block'] / 2**20:.2f} MiB reads): best {probe_gbps:.2f} GB/s "
      f"at depth {probe['combined']['best_depth']}\n")
print("Medians over runs (min–max). Expert GB/s: `wall` = bytes read / decode wall time "
      "(stats.experts.decode.gbps); `reading` = bytes / drive busy time (drives[].bytes / busy_s). "
      "Per token = per decode step (N-1 steps). ms/tok waiting / rest: decode time per step spent "
      "waiting on expert reads (io_wait_s) and the rest (compute). Adjacent probes: the best of "
      "`strata probe --depths 1,4 --seconds 2 --rounds 2` on the expert file right before and right "
      "after each strata run, averaged; `÷ adjacent` = the run's GB/s over that, median of the runs' "
      "ratios. Other load: cores busy with "
      "other processes during the run (/proc/stat minus the run's cpuacct).\n")
for ra in sorted({r["ra"] for r in runs}, reverse=True):
    rr = [r for r in runs if r["ra"] == ra]
    print(f"## read_ahead_kb {ra}\n")
    print("| engine | runs ok | decode tok/s | prefill s | expert GB/s wall (÷probe) | GB/s reading (÷probe) "
          "| adjacent probes GB/s | wall ÷ adjacent | reading ÷ adjacent "
          "| needed MB/tok | read MB/tok | hit rate | io_wait share | ms/tok waiting / rest | peak RSS GiB "
          "| cgroup peak GiB | disk read GB/run | other load (cores) |")
    print("|---" * 18 + "|")
    meds = {}
    for cfg in ["strata-gguf", "strata-pack", "strata-pack-noprefetch", "llama", "llama-repack"]:
        c = [r for r in rr if r["config"] == cfg]
        if not c:
            continue
        ok = [r for r in c if r["ok"]]
        def g(k, rs=ok):
            return [r.get(k) for r in rs]
        toks = [r.get("tok_s") for r in c if r.get("tok_s") is not None]
        meds[cfg] = statistics.median(toks) if toks else None
        tok_cell = med(toks, "{:.3f}")
        notes = []
        bad = [r for r in c if not r["ok"]]
        if bad:
            notes.append(", ".join(
                f"{'OOM-killed' if r['oom_kills'] else 'killed at the timeout' if r['rc'] in (124, 137) else 'rc ' + str(r['rc'])}"
                f" after {r.get('tokens', 0)} tokens, {r['wall_s']:.0f} s" for r in bad)
                + (": tok/s from the tokens done" if any(r.get("tok_s") for r in bad) else ""))
        if cfg.startswith("strata") and ok:
            row = [med(g("gbps_wall"), "{:.2f}") + f" ({statistics.median(g('gbps_wall')) / probe_gbps:.2f})",
                   med(g("gbps_busy"), "{:.2f}") + f" ({statistics.median(g('gbps_busy')) / probe_gbps:.2f})",
                   med(g("probe_adj"), "{:.2f}"), med(g("wall_adj"), "{:.2f}"), med(g("busy_adj"), "{:.2f}"),
                   med([v / 1e6 for v in g("needed_tok")], "{:.0f}"), med([v / 1e6 for v in g("read_tok")], "{:.0f}"),
                   med(g("hit"), "{:.2f}"), med(g("io_wait"), "{:.2f}"),
                   f"{statistics.median(g('wait_ms')):.0f} / {statistics.median(g('rest_ms')):.0f}",
                   med([v / 2**30 for v in g("rss")], "{:.2f}")]
        else:
            row = ["-"] * 11
        row.append(med([r["cg_peak"] / 2**30 for r in c], "{:.2f}"))
        row.append(med([r["disk_read_bytes"] / gb for r in c], "{:.1f}"))
        row.append(med([r.get("other_cores") for r in c], "{:.2f}"))
        print(f"| {names[cfg]} | {len(ok)}/{len(c)} | {tok_cell}{' — ' + '; '.join(notes) if notes else ''} | "
              f"{med([r.get('prefill_s') for r in c], '{:.1f}')} | " + " | ".join(row) + " |")
    print()
    for r in rr:
        if r["config"] == "strata-pack" and r["ok"]:
            print(f"- prefetch run {r['run']}: {r['pf_issued']} issued, {r['pf_used']} used, accuracy {r['pf_acc']:.2f}")
    if meds.get("llama"):
        for cfg in ["strata-gguf", "strata-pack", "strata-pack-noprefetch"]:
            if meds.get(cfg):
                print(f"- {names[cfg]} / llama.cpp decode: {meds[cfg] / meds['llama']:.1f}x")
        # the same on the runs the rest of the machine left alone
        quiet = {}
        for cfg in ["strata-gguf", "strata-pack", "strata-pack-noprefetch", "llama"]:
            v = [r["tok_s"] for r in rr if r["config"] == cfg and r.get("tok_s")
                 and r.get("other_cores") is not None and r["other_cores"] < QUIET]
            if v:
                quiet[cfg] = (statistics.median(v), len(v))
        if "llama" in quiet and len(quiet) > 1:
            print(f"- runs with other load < {QUIET} cores only: " + ", ".join(
                f"{names[c]} {m:.3f} tok/s (n={n})" for c, (m, n) in quiet.items()) + "; " + ", ".join(
                f"{names[c].split(' (')[0]} {c.split('-', 1)[1]} / llama.cpp {quiet[c][0] / quiet['llama'][0]:.1f}x"
                for c in quiet if c != "llama"))
        print()
over = [r for r in runs if r["config"].startswith("strata") and r.get("rss", 0) > cap]
print(f"strata peak RSS above the cap ({cap / 2**30:.2f} GiB): {len(over)} run(s)")
try:
    free = json.load(open(os.path.join(out, "logs", "unconstrained.json")))["tokens"]
    capped = [r for r in runs if r["config"].startswith("strata") and r["ok"]]
    def tokens_of(r):
        try:
            return json.load(open(os.path.join(out, r["log"] + ".json"))).get("tokens")
        except (OSError, ValueError):
            return None
    same = [r for r in capped if tokens_of(r) == free]
    print(f"strata runs whose tokens equal the unconstrained run's: {len(same)}/{len(capped)}"
          + ("" if len(same) == len(capped) else
             " — differ: " + ", ".join(r["log"] for r in capped if r not in same)))
except (OSError, ValueError, KeyError) as e:
    print(f"no unconstrained run to compare tokens with ({e})")
strata_fail = [r for r in runs if r["config"].startswith("strata") and not r["ok"]]
if strata_fail:
    print("strata runs that failed: " + ", ".join(f"{r['log']} (rc {r['rc']}, oom {r['oom_kills']})" for r in strata_fail))
print(f"\nload average (1 min) at the start of the runs: {min(r['load1'] for r in runs):.2f}–{max(r['load1'] for r in runs):.2f}")
print(f"tokens: strata -n {n_strata}, llama.cpp -n {n_llama}")
EOF
say "results in $out"
