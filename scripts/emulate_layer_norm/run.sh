#!/usr/bin/env bash
# Runs the layer norm kernels (cuda/layer_norm.cu, Note [Layer norm kernels]) on the CPU: a
# std::thread per CUDA thread, barriers for __syncthreads and the warp shuffles. It checks
# add_layer_norm's claim (Note [Add and layer norm] in ops/norm.cpp): the kernels given the
# residual (forward) and the sum's gradient (backward) write the same bits as the pair of ops,
# the add done first and the sum's gradient preloaded as the engine's pending sum (`acc`), in
# the register kernels (their columns one by one and in groups of 4, each warp of the backward
# taking several rows) and the loop kernels; and both against float64. Not the hardware's
# rounding (the host compiles the same arithmetic, without nvcc's contractions), nor speed.
# The kernel bodies are taken from the .cu file as they are.
# Usage: bash scripts/emulate_layer_norm/run.sh [CUDA_INCLUDE_DIR]   (default /usr/local/cuda/include;
# needs a C++20 compiler, $CXX or g++, and python3). CTest runs it as layer_norm_emulated.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
inc="${1:-/usr/local/cuda/include}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$here/../../cuda/layer_norm.cu" "$work/kernel_body.inc" <<'PY'
import sys
s = open(sys.argv[1]).read()
body = s[s.index('// ---- Layer norm ----'):s.index('// Elements per lane for a row')]
body = body.replace('extern __shared__ unsigned char ln_smem[];', 'unsigned char* ln_smem = g_dyn_smem;')
body = body.replace('__shared__ ', 'static ')  # one block at a time: a static is the block's shared memory
for w in ['__global__', '__device__', '__forceinline__', '#pragma unroll']:
    body = body.replace(w, '')
open(sys.argv[2], 'w').write(body)
PY
cp "$here/harness.cpp" "$work/"
"${CXX:-g++}" -std=c++20 -O1 -I"$inc" -pthread "$work/harness.cpp" -o "$work/harness"
"$work/harness"
