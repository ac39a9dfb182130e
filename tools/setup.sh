#!/usr/bin/env bash
# A new machine, one command: install dependencies, build, run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
bash tools/build.sh
model=tests/fixtures/models/ds_yarn_grouped
echo "== strata generate on a tiny DeepSeek-V3-shaped checkpoint ($model)"
./build/strata generate --model "$model" --prompt-ids 1,2,3,4,5 -n 16 --json
