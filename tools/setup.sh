#!/usr/bin/env bash
# A new machine, one command: install dependencies, build, run the main job -
# `strata demo`: on first use it synthesizes a ~3 GB Kimi-K3-shaped model
# into ~/.cache/strata/demo and packs it (about 10 GB of free disk at peak),
# then runs it under a RAM budget well below its size with the experts
# streamed cold from the drive.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
bash tools/build.sh
echo "== strata demo"
./build/strata demo
