#!/usr/bin/env bash
# Builds ampgrad with CUDA here and packs what the GPU machine needs into dist/gpu, dist/gpu2
# and dist/gpu3: libampgrad.so, the test binaries, the benchmarks and the ampgrad command (sm_90).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh -DAMPGRAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
# The device tool carries at most 64 MiB with the working tree, and libampgrad.so alone is
# about 49 MB: the binaries go in three folders, each with the library, run one after another.
# dist/gpu: the CUDA-heavy suites, the benchmarks and the ampgrad command; dist/gpu3: the
# autocast and float8 suites; dist/gpu2: the other suites (gpu_run.sh runs the test_* beside
# it). With the tree (about 6 MB) each stays under the carry's 64 MiB.
rm -rf dist/gpu dist/gpu2 dist/gpu3 && mkdir -p dist/gpu dist/gpu2 dist/gpu3
first=(test_cuda test_nn test_attention test_gpt test_optim test_conv_cuda test_call_graphs test_faults test_norm)
third=(test_amp test_fp8 test_float8)
for d in dist/gpu dist/gpu2 dist/gpu3; do
  cp build/bin/libampgrad.so* "$d/"
  # libampgrad needs libgomp (the fast CPU kernels' OpenMP team); the GPU machine may lack
  # it, and the binaries find it beside them ($ORIGIN).
  cp "$(g++ -print-file-name=libgomp.so.1)" "$d/"
  cp scripts/gpu_run.sh "$d/"
done
# Suites without a [cuda] case (CPU-only: CI runs them) stay here.
cpu_only=(test_autograd test_core test_cpu_fast test_half test_inplace test_views)
for f in build/bin/test_*; do
  n=$(basename "$f")
  if [[ " ${cpu_only[*]} " == *" $n "* ]]; then continue; fi
  if [[ " ${first[*]} " == *" $n "* ]]; then cp "$f" dist/gpu/;
  elif [[ " ${third[*]} " == *" $n "* ]]; then cp "$f" dist/gpu3/;
  else cp "$f" dist/gpu2/; fi
done
for f in build/bin/bench_* build/bin/profile_* build/bin/ampgrad build/bin/ampgrad-run; do
  [ -f "$f" ] && cp "$f" dist/gpu/
done
cp build/bin/ampgrad dist/gpu2/  # test_cli runs it
strip --strip-unneeded dist/gpu/* dist/gpu2/* dist/gpu3/* 2>/dev/null || true
chmod -x dist/gpu/libgomp.so.1 dist/gpu2/libgomp.so.1 dist/gpu3/libgomp.so.1
# The Fashion-MNIST files for the training run (30 MB), when the Debian package is here.
if [ -d /usr/share/datasets/fashion-mnist ]; then
  mkdir -p dist/data && cp /usr/share/datasets/fashion-mnist/*.gz dist/data/
fi
# The runs that need the data (training, test_cli's and test_distributed's multi-GPU cases)
# carry dist/gpu_min, and the data in a call of their own just before (ignored folders a call
# carried stay on the machine while it is warm: 30 s idle).
rm -rf dist/gpu_min && mkdir -p dist/gpu_min
for f in libampgrad.so libgomp.so.1 ampgrad ampgrad-run gpu_run.sh; do cp dist/gpu/$f dist/gpu_min/; done
for f in test_cli test_distributed; do cp dist/gpu2/$f dist/gpu_min/; done
# One carry for all three folders: the library's three copies and the binaries, xz-compressed
# (about 39 MB; the folders alone are 55-62 MB each, and with the tree two of them passed the
# carry's 64 MiB once the library grew to 51.6 MB). gpu_run.sh suites unpacks nothing itself:
# the command printed below does, then runs every folder's tests, one folder after another.
tar -C dist -cf - gpu gpu2 gpu3 | xz -T"$(nproc)" -6 > dist/all.tar.xz
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f1)
for d in dist/gpu dist/gpu2 dist/gpu3 dist/all.tar.xz dist/gpu_min dist/data; do
  [ -e "$d" ] || continue
  size=$(du -sb "$d" | cut -f1)
  fits=$(( size + tree <= 64 * 1024 * 1024 ))
  echo "$d: $((size / 1000000)) MB, with the tree's $((tree / 1000000)) MB $([ $fits = 1 ] && echo "fits" || echo "DOES NOT FIT") in one carry"
done
echo "packed; all suites in one call (one folder after another, failures in \$OUT/failures.txt):"
echo '  run(command="mkdir -p dist && tar -xJf dist/all.tar.xz -C dist && bash dist/gpu/gpu_run.sh suites", carry=["dist/all.tar.xz"], timeout_s=600)'
echo '  (code never run on a GPU: gpu_run.sh verify in place of suites, the suites and then the checks and timings it adds)'
echo "  (then dist/gpu is unpacked there while the machine stays warm: gpu_run.sh step, tile, gpt ... with carry=[])"
echo "or one folder at a time, with the device tool:"
echo '  run(command="bash dist/gpu/gpu_run.sh tests", carry=["dist/gpu"], timeout_s=600)'
echo '  run(command="bash dist/gpu2/gpu_run.sh tests", carry=["dist/gpu2"], timeout_s=600)'
echo '  run(command="bash dist/gpu3/gpu_run.sh tests", carry=["dist/gpu3"], timeout_s=600)'
echo '  run(command="bash dist/gpu/gpu_run.sh memcheck", carry=["dist/gpu"], timeout_s=600)  (and dist/gpu2)'
echo '  run(command="bash dist/gpu/gpu_run.sh bench", carry=["dist/gpu"], timeout_s=600)'
echo '  run(command="true", carry=["dist/data"]), then at once:'
echo '  run(command="bash dist/gpu_min/gpu_run.sh train", carry=["dist/gpu_min"], timeout_s=600)'
echo '  (two GPUs: the same gpu_min runs with kind="nvidia-h200-x2")'
