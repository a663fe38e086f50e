#!/usr/bin/env bash
# Builds ampgrad and runs every test with CTest. CUDA tests skip (and say so) without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh "$@"
cd build
ctest --output-on-failure
