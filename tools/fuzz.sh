#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, STRATA_FUZZ=ON, clang) into their own
# build directory and runs each, or the ones named, for a given time; prints
# one summary line per target and exits non-zero if any found a crash.
#
#   tools/fuzz.sh [options] [target...]      targets: fuzz/<target>_fuzz.cpp
#     -t, --seconds N    time per target (default 60)
#     -n, --executions N stop a target once it has run N inputs (all its
#                        processes together), or at --seconds, whichever
#                        comes first
#     -j, --jobs N       parallel fuzzing processes per target (default: all cores)
#     -B, --build DIR    build directory (default build-fuzz)
#     --no-build         use the targets already built in DIR
#     --build-only       build the targets and stop
#     --keep-going       keep fuzzing a target after a finding (a long
#                        campaign: collects every crash, timeout and OOM)
#     --work DIR         corpora and findings (default DIR/fuzz-work); each
#                        target's grows across runs in DIR/<target>/corpus
#
# Findings are written to <work>/<target>/findings/ (crash-*, leak-*,
# timeout-*, oom-*); reproduce one with `<build>/fuzz/fuzz_<target> FILE`.
# Limits: -rss_limit_mb=2048 and -timeout=10, so memory blow-ups and hangs
# count as findings. No network is needed; the seeds are fuzz/corpus/.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
executions=0
jobs=$(nproc)
build=build-fuzz
work=""
do_build=1
do_run=1
keep_going=0
targets=()
while (($#)); do
  case "$1" in
    -t|--seconds) seconds=$2; shift 2 ;;
    -n|--executions) executions=$2; shift 2 ;;
    -j|--jobs) jobs=$2; shift 2 ;;
    -B|--build) build=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --build-only) do_run=0; shift ;;
    --keep-going) keep_going=1; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
work=${work:-$build/fuzz-work}

all=()
for f in fuzz/*_fuzz.cpp; do all+=("$(basename "$f" _fuzz.cpp)"); done
if ((${#targets[@]} == 0)); then targets=("${all[@]}"); fi
for t in "${targets[@]}"; do
  [[ -f fuzz/${t}_fuzz.cpp ]] || { echo "fuzz.sh: no target '$t' (have: ${all[*]})" >&2; exit 2; }
done

if ((do_build)); then
  command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is needed (apt-get install clang libclang-rt-dev)" >&2; exit 2; }
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$build" -DSTRATA_FUZZ=ON -DSTRATA_VULKAN=OFF -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
    "${launcher[@]}" >/dev/null
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]/#/fuzz_}"
fi
((do_run)) || exit 0

failed=0
summary=()
for t in "${targets[@]}"; do
  bin=$build/fuzz/fuzz_$t
  [[ -x $bin ]] || { echo "fuzz.sh: $bin is not built" >&2; exit 2; }
  bin=$(realpath "$bin")
  dir=$(realpath -m "$work/$t")
  mkdir -p "$dir/corpus" "$dir/findings"
  before=$(find "$dir/findings" -type f | wc -l)
  # GGUF seeds are whole small models (fuzz/corpus/gguf/).
  max_len=65536
  [[ $t == gguf ]] && max_len=262144
  opts=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=$max_len
        -artifact_prefix="$dir/findings/" -print_final_stats=1)
  # JSON syntax for every target, plus the target's own words.
  cat fuzz/dict/json.dict $( [[ -f fuzz/dict/$t.dict ]] && echo "fuzz/dict/$t.dict") >"$dir/dict"
  opts+=(-dict="$dir/dict")
  if ((jobs > 1)); then
    opts+=(-fork="$jobs")
    ((keep_going)) && opts+=(-ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1)
  fi
  # -runs counts every process's inputs in fork mode too.
  ((executions > 0)) && opts+=(-runs="$executions")
  log=$dir/last-run.log
  echo "fuzz.sh: $t for ${seconds}s on $jobs process(es), log $log" >&2
  started=$SECONDS
  set +e
  # New inputs go to the first corpus directory (the work one); the
  # committed seeds are only read.
  "$bin" "${opts[@]}" "$dir/corpus" "fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  set -e
  elapsed=$((SECONDS - started))
  # Executions: fork mode's last status line ("#N: cov: ..."), else the
  # final stats of a single process.
  if ((jobs > 1)); then
    execs=$(grep -oE '^#[0-9]+:' "$log" | tail -1 | tr -d '#:' || true)
  else
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  fi
  after=$(find "$dir/findings" -type f | wc -l)
  found=$((after - before))
  if ((rc != 0 && found == 0)) && ! grep -q 'Done [0-9]* runs\|INFO: fuzzed for\|exiting: 0' "$log"; then
    found=1  # died without leaving an artifact (e.g. the harness itself)
  fi
  line="fuzz: $t executions=${execs:-0} seconds=$elapsed crashes=$found"
  if ((found)); then
    failed=1
    line+=" findings=$dir/findings (see $log)"
  fi
  summary+=("$line")
  echo "$line"
done
echo "---" >&2
printf '%s\n' "${summary[@]}" >&2
exit $failed
