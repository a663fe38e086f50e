#!/usr/bin/env bash
# Builds ampgrad with CUDA here (no GPU needed) and packs what a GPU machine runs into one
# xz-compressed file, dist/gpu.tar.xz (docs/developing.md):
#   gpu/   libampgrad.so, every test binary, the ampgrad command, the benchmark programs and
#          scripts/gpu_run.sh
#   old/   with OLD_COMMIT: the library, the ampgrad command and gpt2_step of that commit, built
#          in a worktree, for `gpu_run.sh ab` (the same benchmarks in turns, old and new)
#   data/  with --data: the Fashion-MNIST files, for `gpu_run.sh train`
# Usage: scripts/gpu_pack.sh [OLD_COMMIT] [--data]
set -euo pipefail
cd "$(dirname "$0")/.."
old_commit="" data=0
for a in "$@"; do
  if [ "$a" = --data ]; then data=1; else old_commit="$a"; fi
done
bash scripts/build.sh -DAMPGRAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
# Beside the binaries, as the GPU machine may lack them: the fast CPU kernels' OpenMP runtime, fmt.
gomp="$(g++ -print-file-name=libgomp.so.1)"
fmtlib="$(ldd build/bin/libampgrad.so | awk '/libfmt/ {print $3}')"
rm -rf dist/gpu dist/old dist/data dist/gpu.tar.xz && mkdir -p dist/gpu
cp build/bin/libampgrad.so* build/bin/test_* build/bin/ampgrad build/bin/ampgrad-run "$gomp" "$fmtlib" scripts/gpu_run.sh dist/gpu/
for f in build/bin/bench_* build/bin/profile_* build/bin/gpt2_step; do [ -f "$f" ] && cp "$f" dist/gpu/; done
if [ -n "$old_commit" ]; then
  # The older build: its library, its command, and gpt2_step (public API only) compiled against it.
  wt=/tmp/ampgrad-old
  git worktree remove --force "$wt" 2>/dev/null || rm -rf "$wt"
  git worktree add -f "$wt" "$old_commit" >/dev/null
  cmake -S "$wt" -B "$wt/build" -DCMAKE_BUILD_TYPE=Release -DAMPGRAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DAMPGRAD_BUILD_TESTS=OFF -DAMPGRAD_BUILD_BENCHMARKS=OFF >/dev/null
  cmake --build "$wt/build" -j "$(nproc)" --target ampgrad_cli
  mkdir -p dist/old
  cp "$wt"/build/bin/libampgrad.so* "$wt"/build/bin/ampgrad "$gomp" "$fmtlib" dist/old/
  g++ -std=c++20 -O2 -DAMPGRAD_WITH_CUDA=1 -I"$wt/build/include" -I/usr/local/cuda/include \
    benchmarks/gpt2_step.cpp -o dist/old/gpt2_step -L"$wt/build/bin" -lampgrad -lfmt \
    -L/usr/local/cuda/lib64 -lcudart -Wl,-rpath,'$ORIGIN'
  git worktree remove --force "$wt"
fi
strip --strip-unneeded dist/gpu/* dist/old/* 2>/dev/null || true
chmod -x dist/gpu/libgomp.so.1 dist/old/libgomp.so.1 2>/dev/null || true
if [ "$data" = 1 ] && [ -d /usr/share/datasets/fashion-mnist ]; then
  mkdir -p dist/data && cp /usr/share/datasets/fashion-mnist/*.gz dist/data/
fi
folders=(gpu)
[ -d dist/old ] && folders+=(old)
[ -d dist/data ] && folders+=(data)
tar -C dist -cf - "${folders[@]}" | xz -T"$(nproc)" -6 > dist/gpu.tar.xz
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f1)
size=$(du -sb dist/gpu.tar.xz | cut -f1)
echo "dist/gpu.tar.xz: ${folders[*]}, $((size / 1000000)) MB; with the tree's $((tree / 1000000)) MB:" \
  "$([ $((size + tree)) -le $((64 * 1024 * 1024)) ] && echo "fits" || echo "DOES NOT FIT") the device tool's 64 MiB carry"
echo 'on the GPU machine: mkdir -p dist && tar -xJf dist/gpu.tar.xz -C dist && bash dist/gpu/gpu_run.sh tests'
