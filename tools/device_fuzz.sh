#!/usr/bin/env bash
# The long fuzz campaign on a machine without clang (the Ubuntu device
# machine): the targets are built HERE and carried as one archive.
#
#   here:   tools/device_fuzz.sh pack [target...]
#           -> builds the targets (tools/fuzz.sh's build; all without names)
#              and writes .carry/fuzzers.tar.xz (~18 MB for all)
#   there:  run with carry [".carry", ".deb/prefix"] (tools/device_deps.sh):
#           bash tools/device_fuzz.sh run [tools/fuzz.sh options] [target...]
#           -> unpacks into build-fuzz/, runs tools/fuzz.sh --no-build with the
#              given options and copies logs, findings and the grown corpora
#              to $OUT/fuzz (when $OUT is set).
# The binaries link the Debian 12 libpcre2/liburing/libxxhash that
# device_env.sh puts on LD_LIBRARY_PATH; the ASan runtime is linked in.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  pack)
    shift
    bash tools/fuzz.sh --build-only "$@" >/dev/null
    mkdir -p .carry
    if (($#)); then
      tar -cJf .carry/fuzzers.tar.xz -C build-fuzz "${@/#/fuzz/fuzz_}"
    else
      tar -cJf .carry/fuzzers.tar.xz -C build-fuzz $(cd build-fuzz && ls fuzz/fuzz_*)
    fi
    ls -la .carry/fuzzers.tar.xz
    ;;
  run)
    shift
    source tools/device_env.sh
    mkdir -p build-fuzz
    tar -xJf .carry/fuzzers.tar.xz -C build-fuzz
    set +e
    bash tools/fuzz.sh --no-build -B build-fuzz "$@"
    rc=$?
    set -e
    if [[ -n ${OUT:-} ]]; then
      mkdir -p "$OUT/fuzz"
      (cd build-fuzz/fuzz-work && tar -czf "$OUT/fuzz/work.tar.gz" .)
    fi
    exit $rc
    ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
