#!/usr/bin/env bash
# Builds ampgrad and runs the main job: `ampgrad demo`, a small MLP trained on synthetic data.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
./build/bin/ampgrad demo "$@"
