#!/usr/bin/env bash
# Run THERE (the device machine), from the repo root, after `run` carried
# .carry/deb-prefix-slim.tar.xz: builds this tree, then measures it and each
# variant, a patch on top of it, in one call (the device's time is short and
# a fresh machine takes minutes). For each of "base" and the patches in turn:
# apply the patch, rebuild (only what it touched), run
#   MEASURE NAME BUILD_DIR
# with its output under $OUT/variants/NAME/ (the env var VARIANT_OUT), then
# undo the patch. Before the first one, one untimed run warms the GPU's
# clocks (the first run of a call measures slow). Everything lands in
# $OUT/variants.tgz, one file (the device returns at most 8 files).
#
#   bash tools/device_variants.sh MEASURE_SCRIPT [PATCH.diff ...]
#
# MEASURE_SCRIPT is a bash script, run with NAME and BUILD_DIR as its
# arguments; patches are `git diff` output against this tree (make them here
# with `git diff > x.diff`, keep them untracked but not ignored so `run`
# carries them). Example MEASURE_SCRIPT:
#   m=/tmp/m.gguf; [ -f $m ] || "$2/strata" synth --preset qwen3-30b-a3b --size 3 --format gguf --out $m
#   bash bench/gpu_bench.sh vram $m --strata "$2/strata" -r 3 --out "$VARIANT_OUT/bench"
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
measure=$1; shift
rm -rf .deb && tar -xJf .carry/deb-prefix-slim.tar.xz
source tools/device_env.sh
build=/tmp/variants-build
bash tools/device_build.sh . "$build" -DSTRATA_BUILD_BENCH=OFF -DSTRATA_BUILD_TESTS=OFF > /tmp/variants-build.log 2>&1 ||
  { tail -30 /tmp/variants-build.log; exit 1; }
results=/tmp/variants
mkdir -p "$results"
warm=/tmp/variants-warm.gguf
"$build/strata" synth --preset qwen3-30b-a3b --size 0.5 --format gguf --out "$warm" > /dev/null 2>&1 &&
  "$build/strata" generate "$warm" --device vulkan --warmup --prompt-ids "$(seq -s, 100 611)" -n 64 > /dev/null 2>&1
for variant in base "$@"; do
  name=$(basename "$variant" .diff)
  if [ "$variant" != base ]; then
    git apply "$variant" || { echo "$name: does not apply"; continue; }
    cmake --build "$build" > "$results/$name.build.log" 2>&1 || { echo "$name: build failed"; tail -20 "$results/$name.build.log"; }
  fi
  export VARIANT_OUT=$results/$name
  mkdir -p "$VARIANT_OUT"
  bash "$measure" "$name" "$build" > "$VARIANT_OUT/measure.log" 2>&1
  echo "== $name"; tail -8 "$VARIANT_OUT/measure.log"
  if [ "$variant" != base ]; then
    git apply -R "$variant"
    cmake --build "$build" > /dev/null 2>&1
  fi
  tar -czf "$OUT/variants.tgz" -C /tmp variants
done
