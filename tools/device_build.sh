#!/usr/bin/env bash
# Run THERE (the device machine: Ubuntu 24.04, no network) from the repo root,
# after `run` carried .deb (made here by tools/device_deps.sh): configures and
# builds strata (Release, Ninja, all cores) into build-device/ against
# .deb/prefix. Then: source tools/device_env.sh; ctest --test-dir build-device
#   bash tools/device_build.sh [SOURCE_DIR [BUILD_DIR [cmake -D... ...]]]
# (another source tree, e.g. an older commit for an A/B, builds the same way)
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-.}
build=${2:-build-device}
shift $(( $# < 2 ? $# : 2 ))
[ -d .deb/prefix/usr ] || { echo "no .deb/prefix: run tools/device_deps.sh here and carry .deb" >&2; exit 1; }
source tools/device_env.sh
echo "== host: $(. /etc/os-release && echo "$PRETTY_NAME"), $(nproc) cores; $(c++ --version | head -1)"
echo "== cmake $(cmake --version | head -1 | cut -d' ' -f3), ninja $(ninja --version)"
echo "== prefix $PWD/.deb/prefix/usr is searched first (CMAKE_PREFIX_PATH, PKG_CONFIG_PATH, LD_LIBRARY_PATH)"
# --disable-new-dtags: the build RPATH (.deb/prefix) becomes DT_RPATH, which also
# serves libcpp-httplib's own needs, so binaries run even without device_env.sh.
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags \
  ${PKG_CONFIG:+-DPKG_CONFIG_EXECUTABLE="$PKG_CONFIG"} "$@"
# Where each dependency came from (carried .deb/prefix or the system): the cache says.
echo "== dependencies resolved to:"
grep -E '^(GTest|benchmark|nlohmann_json|CLI11)_DIR:|^pkgcfg_lib_[A-Z0-9]+_[^:]*:FILEPATH|^PKG_CONFIG_EXECUTABLE:' "$build/CMakeCache.txt" | sed 's/^/   /'
time cmake --build "$build" -j"$(nproc)"
echo "== built: $build/strata; test with: source tools/device_env.sh && ctest --test-dir $build -j$(nproc) -E server_e2e"
