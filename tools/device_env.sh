# Source this (bash) on the device machine to use the Debian 12 packages that
# tools/device_deps.sh unpacked into .deb/prefix: CMake's find_package, pkg-config
# and the loader look there first, then at whatever the system already has.
_strata_usr="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.deb/prefix/usr"
export CMAKE_PREFIX_PATH="$_strata_usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export PKG_CONFIG_PATH="$_strata_usr/lib/x86_64-linux-gnu/pkgconfig:$_strata_usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# Runtime libs (libcpp-httplib, liburing, libbenchmark, ...): device_build.sh's
# binaries find them through their RPATH anyway; this serves the carried
# pkgconf (libpkgconf) and binaries built some other way.
export LD_LIBRARY_PATH="$_strata_usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The image may have no pkg-config: use the carried pkgconf then (CMake reads PKG_CONFIG).
command -v pkg-config >/dev/null 2>&1 || export PKG_CONFIG="$_strata_usr/bin/pkgconf"
unset _strata_usr
