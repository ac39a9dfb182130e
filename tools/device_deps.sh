#!/usr/bin/env bash
# Run HERE (Debian 12, with apt access): fetches the Debian 12 .debs of strata's
# build dependencies into .deb/ and unpacks them into .deb/prefix, for a machine
# that has a compiler, CMake and Ninja but no network and maybe none of these
# packages (the Ubuntu 24.04 device machine). Nothing is installed here.
# Then `run` with carry [".deb"] (plus the tokenizer models the tests read,
# see tools/device_build.sh) and, there, `bash tools/device_build.sh`.
#
#   bash tools/device_deps.sh --peer
# instead fills .deb-peer/prefix with what llama.cpp's Vulkan build needs there
# (the peer of bench/gpu_bench.sh), all from Debian 13: the Vulkan loader and
# headers, the SPIR-V headers and glslc, since Debian 12's glslc 2023.2
# cannot compile llama.cpp's cooperative-matrix shaders and its headers lack
# the extensions llama.cpp names (the binaries need glibc 2.38 and GCC 13's
# libstdc++: the device's Ubuntu 24.04 has both).
set -euo pipefail
cd "$(dirname "$0")/.."
peer=0
[ "${1:-}" = --peer ] && peer=1

# Explicit list rather than a dependency walk (which would pull libc6 etc.):
# the -dev packages CMakeLists.txt asks for, the runtime libraries their .so
# links point at, the .pc files cpp-httplib's Requires.private names (openssl,
# zlib, brotli: pkg-config fails without them), and pkgconf itself, since the
# device image may have no pkg-config. zlib1g's runtime is left out on purpose:
# every Ubuntu has libz.so.1, and a Debian one on LD_LIBRARY_PATH would shadow it.
# libcurl (src/remote) with the runtime libraries its .so needs (untested on
# the device so far: no device time was left when it was added). The Vulkan
# loader and its headers, and glslc (the shaders are compiled at build time);
# the driver is the machine's own (device_env.sh finds NVIDIA's). spirv-headers:
# only for llama.cpp's Vulkan build (the peer of bench/gpu_bench.sh).
packages=(
  libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian
  nlohmann-json3-dev libcli11-dev
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  libxxhash-dev libxxhash0 liburing-dev liburing2
  libcpp-httplib-dev libcpp-httplib0.11 libbrotli-dev libbrotli1
  libssl-dev libssl3 zlib1g-dev
  libcurl4-openssl-dev libcurl4 libnghttp2-14 librtmp1 libssh2-1 libpsl5 libunistring2 libldap-2.5-0 libgssapi-krb5-2
  pkgconf pkgconf-bin libpkgconf3
  libvulkan-dev libvulkan1 glslc libshaderc1 spirv-headers
)

dir=.deb
newer=()
if [ "$peer" = 1 ]; then
  dir=.deb-peer
  packages=()
  # Debian 12's Vulkan headers (1.3.239) lack what llama.cpp's Vulkan backend
  # names (VK_KHR_cooperative_matrix, VK_EXT_layer_settings): Debian 13's too.
  newer=(glslc/trixie libshaderc1/trixie libvulkan-dev/trixie libvulkan1/trixie spirv-headers/trixie)
fi
grep -qx "/$dir/" .git/info/exclude 2>/dev/null || echo "/$dir/" >> .git/info/exclude
rm -rf "$dir" && mkdir -p "$dir/prefix"
[ ${#packages[@]} -eq 0 ] || (cd "$dir" && apt-get download -q "${packages[@]}")
if [ ${#newer[@]} -gt 0 ]; then
  # Debian 13's index in a private apt state (the system's sources untouched).
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -f "$keyring" ] || { echo "device_deps.sh: $keyring missing (run this on Debian)" >&2; exit 1; }
  apt_dir=$(mktemp -d)
  trap 'rm -rf "$apt_dir"' EXIT
  echo "deb [signed-by=$keyring] http://deb.debian.org/debian trixie main" \
    > "$apt_dir/sources.list"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache"
  apt_opts=(-oDir::Etc::SourceList="$apt_dir/sources.list" -oDir::Etc::SourceParts=/dev/null
            -oDir::State::Lists="$apt_dir/lists" -oDir::Cache="$apt_dir/cache")
  apt-get -q "${apt_opts[@]}" update >/dev/null
  (cd "$dir" && apt-get download -q "${apt_opts[@]}" "${newer[@]}")
  rm -rf "$apt_dir"
fi
for f in "$dir"/*.deb; do dpkg -x "$f" "$dir/prefix"; done

# Trim to what a build needs (the carried tree is capped at 64 MiB): docs, man
# pages, gtest/gmock sources, static archives other than those CMake configs
# name (gtest, gmock: the only form Debian ships; benchmark_main; the
# GTest/benchmark configs fail if a file they list is missing), OpenSSL's
# engines and provider modules.
p=$dir/prefix
rm -rf "$p"/usr/share/{doc,man,lintian,aclocal} "$p"/usr/src \
       "$p"/usr/lib/x86_64-linux-gnu/{engines-3,ossl-modules}
find "$p" -name '*.a' ! -name 'libgtest*' ! -name 'libgmock*' ! -name 'libbenchmark*' -delete
# SPIR-V headers: only the current C/C++ ones (no grammars, no old versions).
rm -rf "$p"/usr/include/spirv/1.*
find "$p"/usr/include/spirv -type f ! -name '*.h' ! -name '*.hpp' ! -name '*.hpp11' -delete

# Relocatable .pc files: every variable that starts with /usr (prefix, but
# also liburing's libdir, gtest's libdir with no prefix at all, brotli's
# exec_prefix) now starts at the .pc file's own folder (${pcfiledir}/../../..
# is prefix/usr), so the tree works wherever it is carried.
find "$p" -name '*.pc' | while read -r pc; do
  d=$(dirname "${pc#"$p"/usr/}")   # e.g. lib/x86_64-linux-gnu/pkgconfig
  up=$(echo "$d" | sed 's#[^/]\+#..#g')
  sed -i -E -e "s#^([A-Za-z_]+)=/usr(/|\$)#\1=\${pcfiledir}/$up\2#" \
            -e "s#-([IL])/usr/#-\1\${pcfiledir}/$up/#g" "$pc"   # nlohmann_json.pc
done
# zlib1g-dev's libz.so is an absolute link to Debian's libz.so.1.2.13: dangling
# elsewhere, and nothing links it (only zlib.pc is needed, for cpp-httplib.pc).
rm -f "$p"/usr/lib/x86_64-linux-gnu/libz.so

echo "== $dir: $(ls "$dir"/*.deb | wc -l) packages; $(du -sh "$dir" | cut -f1) in all, prefix $(du -sh "$p" | cut -f1)"
