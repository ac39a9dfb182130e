#!/usr/bin/env bash
# Set up llama.cpp as the peer strata is compared against (not run by CI).
#
#   bash bench/llama_cpp/build.sh --dir DIR                   # CPU build + parity tool
#   BACKEND=cuda bash bench/llama_cpp/build.sh --dir DIR      # llama-bench with CUDA (nvcc)
#   BACKEND=vulkan bash bench/llama_cpp/build.sh --dir DIR    # llama-bench with Vulkan (glslc, Vulkan headers)
#   bash bench/llama_cpp/build.sh --dir DIR --pack FILE.tar.xz
#
#   --dir DIR   the llama.cpp checkout, outside the repo (e.g. ~/llama.cpp; or set
#               LLAMA_DIR): required. The other bench scripts take it as --llama DIR.
#
# 1. Fetches the npm package node-llama-cpp (it ships llama.cpp's full source as the git
#    bundle llama/gitRelease.bundle) and clones that bundle to DIR. Skipped when DIR is
#    already a checkout or a source tree. --pack then writes that source (no .git, models,
#    docs or the backends other than CPU, CUDA and Vulkan: ~5 MB) as a
#    tarball to carry to a machine without network (the device machine), where
#    `tar -xJf FILE -C DIR2` and --dir DIR2 build it; it records the commit in
#    .node-llama-cpp-commit.
# 2. Builds the CPU library and tools there in build/ (Release, -march=native without AMX,
#    no HTTPS); with BACKEND=cuda|vulkan, llama-bench with that backend in build-$BACKEND/
#    (CUDA for CUDA_ARCH, default native: the GPU of the build machine).
# 3. (CPU build only) Builds bench/llama_cpp/parity_tool against it in DIR/build-parity.
# Idempotent: rerunning only rebuilds what changed. Prints where the binaries are.
#
# Environment: LLAMA_DIR (when no --dir), NLC_VERSION (node-llama-cpp version, default 3.22.1),
# NLC_WORK (download dir, default /tmp/nlc), JOBS (default: nproc), NATIVE (ON|OFF, default ON),
# BACKEND (cpu|cuda|vulkan, default cpu), CUDA_ARCH (default native), GLSLC (the glslc
# the Vulkan build uses; default: CMake's search).
#
# AMX is left out (-mno-amx-tile -mno-amx-int8 -mno-amx-bf16): Debian 12's GCC 12.2 drops
# the stores that fill ggml's AMX tile configuration before ldtilecfg
# (ggml/src/ggml-cpu/amx/mmq.cpp, ggml_tile_config_init), so on AMX CPUs the first tile
# instruction raises SIGILL in any batched matmul on Q4_0/Q4_1/Q8_0/K-quant weights.
# (clang 14 spells the macro __AMXINT8__, so ggml builds no AMX code with it; forced on,
# AMX still aborts deepseek2 Q8_0/Q4_K at context creation in this llama.cpp version.)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage() { sed -n '2,35p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }
NLC_VERSION=${NLC_VERSION:-3.22.1}
NLC_WORK=${NLC_WORK:-/tmp/nlc}
JOBS=${JOBS:-$(nproc)}
NATIVE=${NATIVE:-ON}
BACKEND=${BACKEND:-cpu}
CUDA_ARCH=${CUDA_ARCH:-native}
pack=
llama=${LLAMA_DIR:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) llama=$2; shift 2 ;;
    --pack) pack=$(realpath -m "$2"); shift 2 ;;
    -h|--help) usage ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$llama" ] || { echo "build.sh: give --dir DIR (where llama.cpp is, or is to be cloned, outside the repo)" >&2; exit 2; }
LLAMA_DIR=$(realpath -m "$llama")
case "$BACKEND" in
  cpu) build=$LLAMA_DIR/build ;;
  cuda|vulkan) build=$LLAMA_DIR/build-$BACKEND ;;
  *) echo "build.sh: BACKEND must be cpu, cuda or vulkan, not $BACKEND" >&2; exit 2 ;;
esac
flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
# node-llama-cpp 3.22.1 bundles llama.cpp tag v0.5.0 (ggml 0.25.1) as this single squashed commit.
EXPECTED_COMMIT_3_22_1=de3ff815ea7d559ee917f063901b8986f038abc6

for tool in git cmake g++; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing (apt-get install git cmake g++)" >&2; exit 1; }
done

# ---- 1. source ----
if [ ! -e "$LLAMA_DIR/.git" ] && [ ! -f "$LLAMA_DIR/CMakeLists.txt" ]; then
  command -v npm >/dev/null || { echo "build.sh: npm is missing (apt-get install npm)" >&2; exit 1; }
  mkdir -p "$NLC_WORK"
  (
    cd "$NLC_WORK"
    tgz=node-llama-cpp-$NLC_VERSION.tgz
    [ -f "$tgz" ] || npm pack "node-llama-cpp@$NLC_VERSION" >/dev/null
    rm -rf package && tar xzf "$tgz"
  )
  bundle=$NLC_WORK/package/llama/gitRelease.bundle
  [ -f "$bundle" ] || { echo "build.sh: $bundle not found in node-llama-cpp@$NLC_VERSION" >&2; exit 1; }
  git -c advice.detachedHead=false clone --quiet "$bundle" "$LLAMA_DIR"
  cp "$NLC_WORK/package/llama/llama.cpp.info.json" "$LLAMA_DIR/.git/node-llama-cpp-info.json" 2>/dev/null || true
fi
if [ -e "$LLAMA_DIR/.git" ]; then
  commit=$(git -C "$LLAMA_DIR" rev-parse HEAD)
else
  commit=$(cat "$LLAMA_DIR/.node-llama-cpp-commit" 2>/dev/null || echo unknown)
fi
tag=$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$LLAMA_DIR/.git/node-llama-cpp-info.json" 2>/dev/null || true)
if [ "$NLC_VERSION" = 3.22.1 ] && [ "$commit" != "$EXPECTED_COMMIT_3_22_1" ]; then
  echo "build.sh: note: $LLAMA_DIR is at $commit, not the $EXPECTED_COMMIT_3_22_1 that node-llama-cpp 3.22.1 ships" >&2
fi

if [ -n "$pack" ]; then
  echo "$commit" > "$LLAMA_DIR/.node-llama-cpp-commit"
  tar -C "$LLAMA_DIR" --exclude=./.git --exclude='./build*' --exclude=./models --exclude=./docs \
    --exclude=./benches --exclude='./tools/server/public*' --exclude=./tools/server/webui --exclude=./tools/ui \
    $(for b in cann et hexagon metal musa opencl openvino sycl virtgpu webgpu zdnn zendnn; do
        printf -- '--exclude=./ggml/src/ggml-%s ' "$b"; done) \
    -cJf "$pack" .
  echo "build.sh: wrote $pack ($(du -h "$pack" | cut -f1)), llama.cpp commit $commit"
  exit 0
fi

start=$(date +%s)
if [ "$BACKEND" != cpu ]; then
  # ---- 2'. llama-bench on a GPU backend ----
  if [ "$BACKEND" = cuda ]; then
    backend_flags=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH")
  else
    backend_flags=(-DGGML_VULKAN=ON ${GLSLC:+-DVulkan_GLSLC_EXECUTABLE="$GLSLC"})
  fi
  CC=gcc CXX=g++ cmake -S "$LLAMA_DIR" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE="$NATIVE" -DLLAMA_OPENSSL=OFF \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=ON "${backend_flags[@]}" >/dev/null
  cmake --build "$build" -j "$JOBS" --target llama-bench
  echo "build.sh: llama.cpp ($BACKEND) built in $(( $(date +%s) - start )) s"
  echo "llama.cpp ${commit} ($BACKEND): $build/bin/llama-bench"
  exit 0
fi

# ---- 2. llama.cpp (CPU) ----
# (re)configuring is cheap and keeps an existing build dir on these settings
CC=gcc CXX=g++ cmake -S "$LLAMA_DIR" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DGGML_NATIVE="$NATIVE" -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON >/dev/null
cmake --build "$build" -j "$JOBS" --target \
  llama llama-bench llama-simple llama-completion llama-perplexity llama-quantize llama-gguf
echo "build.sh: llama.cpp built in $(( $(date +%s) - start )) s"

# ---- 3. parity tool ----
parity=$LLAMA_DIR/build-parity
CC=gcc CXX=g++ cmake -S "$here" -B "$parity" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_CPP_DIR="$LLAMA_DIR" -DLLAMA_CPP_BUILD_DIR="$build" >/dev/null
cmake --build "$parity" -j "$JOBS"

bin=$build/bin
cat <<EOF

llama.cpp ${tag:-?} commit $commit (from node-llama-cpp@$NLC_VERSION)
  library      $bin/libllama.so (+ libggml*.so)
  llama-bench  $bin/llama-bench
  llama-completion $bin/llama-completion   (llama-cli needs LLAMA_BUILD_SERVER)
  llama-simple $bin/llama-simple
  llama-perplexity $bin/llama-perplexity
  llama-quantize   $bin/llama-quantize
  parity_tool  $parity/parity_tool
  gguf-py      $LLAMA_DIR/gguf-py   (PYTHONPATH for bench/llama_cpp/make_tiny_gguf.py)
EOF
