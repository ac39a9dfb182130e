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
# The carried glslc (CMake finds it on PATH).
export PATH="$_strata_usr/bin${PATH:+:$PATH}"
# NVIDIA's Vulkan driver: the ICD file the driver ships names libGLX_nvidia.so.0,
# whose vkCreateInstance fails without an X server (the loader reports "Could
# not get 'vkCreateInstance'"); libEGL_nvidia.so.0 carries the same driver and
# works headless. So on a machine with it, the loader is pointed there.
if ldconfig -p 2>/dev/null | grep -q libEGL_nvidia.so.0; then
  _icd="${TMPDIR:-/tmp}/strata_nvidia_icd.json"
  printf '{"file_format_version":"1.0.1","ICD":{"library_path":"libEGL_nvidia.so.0","api_version":"1.3.0"}}\n' > "$_icd"
  export VK_ICD_FILENAMES="$_icd" VK_DRIVER_FILES="$_icd"
  unset _icd
fi
unset _strata_usr
