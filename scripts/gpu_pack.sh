#!/usr/bin/env bash
# Builds ampgrad with CUDA here and packs what the GPU machine needs into dist/gpu:
# libampgrad.so, the test binaries, the benchmarks and the ampgrad command (all sm_90).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh -DAMPGRAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
rm -rf dist/gpu && mkdir -p dist/gpu
cp build/bin/libampgrad.so* dist/gpu/
for f in build/bin/test_* build/bin/bench_* build/bin/profile_* build/bin/ampgrad build/bin/ampgrad-run; do
  [ -f "$f" ] && cp "$f" dist/gpu/
done
strip --strip-unneeded dist/gpu/* 2>/dev/null || true
cp scripts/gpu_run.sh dist/gpu/
# The Fashion-MNIST files for the training run (26 MB), when the Debian package is here.
if [ -d /usr/share/datasets/fashion-mnist ]; then
  mkdir -p dist/data && cp /usr/share/datasets/fashion-mnist/*.gz dist/data/
fi
du -sh dist/gpu dist/data 2>/dev/null
echo "packed dist/gpu; run it there with the device tool:"
echo '  run(command="bash dist/gpu/gpu_run.sh tests", carry=["dist/gpu"], timeout_s=600)'
echo '  run(command="bash dist/gpu/gpu_run.sh memcheck", carry=["dist/gpu"], timeout_s=600)'
echo '  run(command="bash dist/gpu/gpu_run.sh bench", carry=["dist/gpu"], timeout_s=600)'
echo '  run(command="bash dist/gpu/gpu_run.sh train", carry=["dist/gpu", "dist/data"], timeout_s=600)'
