#!/usr/bin/env bash
# Builds ampgrad with CUDA here and packs what the GPU machine needs into dist/gpu:
# libampgrad.so, the test binaries, the benchmarks and the ampgrad command (all sm_90).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh -DAMPGRAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
rm -rf dist/gpu && mkdir -p dist/gpu
cp build/bin/libampgrad.so* dist/gpu/
# libampgrad needs libgomp (the fast CPU kernels' OpenMP team); the GPU machine may lack it,
# and the binaries find it beside them ($ORIGIN).
cp "$(g++ -print-file-name=libgomp.so.1)" dist/gpu/
for f in build/bin/test_* build/bin/bench_* build/bin/profile_* build/bin/ampgrad build/bin/ampgrad-run; do
  [ -f "$f" ] && cp "$f" dist/gpu/
done
strip --strip-unneeded dist/gpu/* 2>/dev/null || true
cp scripts/gpu_run.sh dist/gpu/
# The Fashion-MNIST files for the training run (30 MB), when the Debian package is here.
if [ -d /usr/share/datasets/fashion-mnist ]; then
  mkdir -p dist/data && cp /usr/share/datasets/fashion-mnist/*.gz dist/data/
fi
# dist/gpu and dist/data together exceed the device tool's 64 MiB carry: the runs that need
# the data (training, test_cli's and test_distributed's multi-GPU cases) carry dist/gpu_min.
rm -rf dist/gpu_min && mkdir -p dist/gpu_min
for f in libampgrad.so libgomp.so.1 ampgrad ampgrad-run test_cli test_distributed gpu_run.sh; do cp dist/gpu/$f dist/gpu_min/; done
du -sh dist/gpu dist/gpu_min dist/data 2>/dev/null
echo "packed dist/gpu and dist/gpu_min; run them there with the device tool:"
echo '  run(command="bash dist/gpu/gpu_run.sh tests", carry=["dist/gpu"], timeout_s=600)'
echo '  run(command="bash dist/gpu/gpu_run.sh memcheck", carry=["dist/gpu"], timeout_s=600)'
echo '  run(command="bash dist/gpu/gpu_run.sh bench", carry=["dist/gpu"], timeout_s=600)'
echo '  run(command="bash dist/gpu_min/gpu_run.sh tests", carry=["dist/gpu_min", "dist/data"], timeout_s=600)'
echo '  run(command="bash dist/gpu_min/gpu_run.sh train", carry=["dist/gpu_min", "dist/data"], timeout_s=600)'
echo '  (two GPUs: the same gpu_min runs with kind="nvidia-h200-x2")'
