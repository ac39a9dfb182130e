#!/usr/bin/env bash
# Run THERE (the device machine, no network): builds llama.cpp's llama-bench
# with CUDA and with Vulkan, the peers of bench/gpu_bench.sh, in the
# background, so the builds (about 6 minutes) go on while later calls build
# strata; everything lives under /tmp, which outlasts a call while the
# machine is held. Carried from here:
#   .carry/llama-src.tar.xz   LLAMA_DIR=/tmp/llama-src bash bench/llama_cpp/build.sh --pack .carry/llama-src.tar.xz
#   .carry/peer-prefix.tar.xz bash tools/device_deps.sh --peer && tar -cJf .carry/peer-prefix.tar.xz .deb-peer/prefix
#
#   bash tools/device_peer.sh          # start both builds, return at once
#   bash tools/device_peer.sh --wait   # block until both are done; print the binaries
# PEERS="vulkan" (or "cuda") in the environment of both calls builds only that one.
# The binaries: /tmp/llama/build-cuda/bin/llama-bench, /tmp/llama/build-vulkan/bin/llama-bench
# (run the Vulkan one with the loader of .deb/prefix: source tools/device_env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
L=/tmp/llama
P=/tmp/peer
PEERS=${PEERS:-cuda vulkan}
for b in $PEERS; do
  case "$b" in cuda|vulkan) ;; *) echo "device_peer.sh: PEERS names cuda and/or vulkan, not '$b'" >&2; exit 2 ;; esac
done
if [ "${1:-}" = --wait ]; then
  for b in $PEERS; do
    [ -f "$L/$b.log" ] || { echo "device_peer.sh: no $b build under $L (start one: bash tools/device_peer.sh)" >&2; exit 1; }
    for _ in $(seq 180); do [ -f "$L/$b.rc" ] && break; sleep 5; done
    [ -f "$L/$b.rc" ] || { echo "device_peer.sh: the $b build is still running after 15 minutes" >&2; exit 1; }
    echo "llama.cpp $b: exit $(cat "$L/$b.rc"); $(tail -n 1 "$L/$b.log")"
  done
  exit 0
fi
mkdir -p "$L" "$P"
[ -f "$L/CMakeLists.txt" ] || tar -xJf .carry/llama-src.tar.xz -C "$L"
[ -d "$P/.deb-peer" ] || tar -xJf .carry/peer-prefix.tar.xz -C "$P"
usr=$P/.deb-peer/prefix/usr
for b in $PEERS; do rm -f "$L/$b.rc"; done
# Debian 13's glslc finds its libshaderc beside it; CMake finds the Vulkan
# headers, loader and SPIR-V headers in the prefix.
case " $PEERS " in *" cuda "*)
setsid bash -c "LLAMA_DIR=$L BACKEND=cuda JOBS=10 bash bench/llama_cpp/build.sh > $L/cuda.log 2>&1; echo \$? > $L/cuda.rc" \
  < /dev/null > /dev/null 2>&1 &
esac
case " $PEERS " in *" vulkan "*)
setsid bash -c "export LD_LIBRARY_PATH=$usr/lib/x86_64-linux-gnu CMAKE_PREFIX_PATH=$usr PATH=$usr/bin:\$PATH GLSLC=$usr/bin/glslc;
  LLAMA_DIR=$L BACKEND=vulkan JOBS=6 bash bench/llama_cpp/build.sh > $L/vulkan.log 2>&1; echo \$? > $L/vulkan.rc" \
  < /dev/null > /dev/null 2>&1 &
esac
echo "llama.cpp builds ($PEERS) started in $L (logs <backend>.log); bash tools/device_peer.sh --wait"
