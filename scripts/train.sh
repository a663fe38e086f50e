#!/usr/bin/env bash
# Builds ampgrad and runs the main job: `ampgrad train` on Fashion-MNIST (the CNN, AMP on).
# Without a GPU it trains on the CPU on a subset of the images, and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
./build/bin/ampgrad train --plot build/train.png "$@"
