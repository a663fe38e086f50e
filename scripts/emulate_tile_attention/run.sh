#!/usr/bin/env bash
# Runs the one-tile attention kernels (cuda/attention_tile.cu, Note [Attention in one tile]) on
# the CPU: a std::thread per CUDA thread, barriers for __syncthreads and for the warp
# collectives, ldmatrix and mma.sync emulated from the PTX ISA's fragment layouts, against a
# float64 reference (forward, stats and every gradient). It checks the kernels' indexing,
# masking, padding and synchronization where no GPU is at hand; not the hardware's layouts
# themselves (the emulation is written from the same reading of the ISA), nor speed. The
# kernel bodies are taken from the .cu file as they are (helpers with inline PTX replaced).
# Usage: bash scripts/emulate_tile_attention/run.sh [CUDA_INCLUDE_DIR]   (default
# /usr/local/cuda/include; needs a C++20 compiler, $CXX or g++, and python3). CTest runs it as
# tile_attention_emulated where the CUDA headers are.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
inc="${1:-/usr/local/cuda/include}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$here/../../cuda/attention_tile.cu" "$work/kernel_body.inc" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
body = s[s.index('constexpr int kMaxTile'):s.index('TileOperand operand(const Tensor& t)')]
a, b = body.index('__device__ __forceinline__ uint32_t smem_address'), body.index('// Two floats rounded to T')
body = body[:a] + body[b:]  # the PTX helpers: emulated in harness.cpp
body = body.replace('extern __shared__ __align__(16) unsigned char smem_raw[];', 'unsigned char* smem_raw = g_smem;')
body = re.sub(r'__launch_bounds__\(\d+\)', '', body)
for w in ['__global__', '__device__', '__forceinline__', '#pragma unroll']:
    body = body.replace(w, '')
open(sys.argv[2], 'w').write(body)
PY
cp "$here/harness.cpp" "$work/"
"${CXX:-g++}" -std=c++20 -O1 -I"$inc" -pthread "$work/harness.cpp" -o "$work/harness"
"$work/harness"
