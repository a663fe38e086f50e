#!/usr/bin/env bash
# Builds ampgrad and runs the main job: `ampgrad train` on Fashion-MNIST (the CNN, AMP on).
# Without a GPU it trains on the CPU (bf16 autocast), all 60,000 images as well.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
./build/bin/ampgrad train --plot build/train.png "$@"
