#!/usr/bin/env bash
# Runs on the GPU machine (from the repository root, with dist/gpu carried there):
# every test binary (the [cuda] cases run for real), then the [cuda] cases under
# compute-sanitizer memcheck (AMPGRAD_TEST_QUICK: the op table's two smallest sizes; memory
# errors only: the tests provoke API errors on purpose,
# an out-of-memory and a synchronization inside a graph capture), then the benchmarks. Logs go to $OUT when it is set.
# "profile" prints host time per step part and a per-kernel device-time table (ncu) of one
# training step of the small MLP, the CNN and the wide MLP (benchmarks/profile_step.cpp) and of conv2d
# forward + backward (benchmarks/profile_conv.cpp).
# "hostprof" samples where the host's time goes in the small MLP's fp32 and AMP steps
# (benchmarks/host_sampler.h) and writes the samples to $OUT; name them here, against the
# unstripped build: python3 benchmarks/host_profile.py FILE build/bin.
# "gpt" times the GPTs' steps beside PyTorch's and writes a per-kernel table (ncu, one replay
# of the graphed AMP step) of each to $OUT/ncu_gpt*.txt (docs/benchmarks.md, issue #27).
# "tile" checks and times the one-tile attention kernel (Note [Attention in one tile], off by
# default until this has passed once): its test case plain, under memcheck and racecheck,
# bench attention beside PyTorch (the short rows: the GPTs' attention, with and without the
# kernel), the GPTs' steps with AMPGRAD_TILE_SDP=0 and =1, and ncu tables of the small and
# tiny GPT's graphed step with it on ($OUT/ncu_gpt*_tile.txt).
# "step" runs the [cuda] cases of what the small GPT's step may take by default next (matmul
# tuning, add_layer_norm: test_cuda's and test_norm's, where carried), times the GPTs' steps
# with each of AMPGRAD_TILE_SDP and AMPGRAD_MATMUL_TUNING off and on (four runs), logs every
# cuBLASLt candidate the small GPT's AMP step times ($OUT/tuning_gpt.log) and writes ncu
# tables of both GPTs' graphed steps with both on ($OUT/ncu_gpt*_step.txt; four files in $OUT
# in all: the device tool brings back at most eight).
# "suites" runs "tests" in dist/gpu, dist/gpu2 and dist/gpu3, one after another (unpacked from
# dist/all.tar.xz, one carry: scripts/gpu_pack.sh), prints each suite's summary and writes the
# failing cases' output to $OUT/failures.txt.
# "verify" is the first call of a session that has code not yet run on a GPU: "suites", the
# attention suites again with the one-tile kernel off (AMPGRAD_TILE_SDP=0), its test case under
# memcheck and racecheck (what they report counted by kernel: cuDNN's flash kernels show
# racecheck hazards of their own, ours must show none), the GPTs' steps, bench attention --quick
# beside PyTorch (the GPTs' attention with the one-tile kernel and with cuDNN's) and an ncu
# table of the small GPT's graphed step; each stage says when it began and has a time limit.
# The GPTs' steps run with the weight gradients beside the stream on, then off (the default),
# and beside PyTorch's.
# "measure": where the small GPT's step stands, in a short call (its comment below).
# Usage: bash dist/gpu/gpu_run.sh [tests|suites|verify|measure|memcheck|bench|train|profile|gpt|tile|step|hostprof|all]  (default: all)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-/tmp}"
what="${1:-all}"
export LD_LIBRARY_PATH="$here:${LD_LIBRARY_PATH:-}"
export AMPGRAD_CLI="$here/ampgrad"  # test_cli runs the carried binary
# The reference files (tests/data) of the copied tree, for test_float8 and test_gpt.
export AMPGRAD_TEST_DATA_DIR="${AMPGRAD_TEST_DATA_DIR:-$(cd "$here/../.." && pwd)/tests/data}"
[ -d "$here/../data" ] && export AMPGRAD_TEST_DATA="$here/../data"  # test_cli's --gpus run
# NCCL (Note [Process group]): libnccl.so.2 on the loader's path, else the one PyTorch ships.
if [ -z "${AMPGRAD_NCCL_LIBRARY:-}" ] && ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2; then
  nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null)
  [ -f "$nccl" ] || nccl=$(find / -name libnccl.so.2 -not -path '*/proc/*' 2>/dev/null | head -n 1)
  [ -n "$nccl" ] && export AMPGRAD_NCCL_LIBRARY="$nccl" && echo "NCCL: $nccl"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
status=0
if [ "$what" = suites ]; then
  # One folder after another: at once, the three processes' caching allocators shared one
  # GPU, and on an H100 (80 GB) test_cuda's graph launch once found no memory left.
  for d in gpu gpu2 gpu3; do
    [ -d "$here/../$d" ] || { echo "dist/$d is missing: unpack dist/all.tar.xz"; status=1; continue; }
    mkdir -p "/tmp/suites_$d" && OUT="/tmp/suites_$d" bash "$here/../$d/gpu_run.sh" tests > "/tmp/suites_$d.txt" 2>&1
    echo "=== dist/$d: exit $?" >> "/tmp/suites_$d.txt"
    grep -v -e '^$' -e '^NCCL' "/tmp/suites_$d.txt"
  done
  grep -h -B 3 -A 15 "FAILED" /tmp/suites_gpu*/test_*.log > "$out/failures.txt" || true
  grep -q ": exit [1-9]" /tmp/suites_gpu*.txt && status=1
  exit $status
fi
if [ "$what" = verify ]; then
  repo="$(cd "$here/../.." && pwd)"
  stage() { echo "=== [${SECONDS} s] $*"; }
  stage "suites"
  timeout 330 bash "$here/gpu_run.sh" suites || status=1
  # The one-tile kernel is on by default: the suites that reach attention again with it off.
  for t in test_attention test_gpt; do
    stage "AMPGRAD_TILE_SDP=0 $t"
    AMPGRAD_TILE_SDP=0 timeout 60 "$here/$t" 2>&1 | tail -n 2
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
  case='attention: the one-tile kernel*'
  for tool in memcheck racecheck; do
    stage "$tool: $case (hazards and errors counted by kernel)"
    timeout 60 compute-sanitizer --tool $tool --print-limit 10000 "$here/test_attention" "$case" > "/tmp/$tool.txt" 2>&1
    tail -n 2 "/tmp/$tool.txt"
    # Device code is named "at KERNEL+0xOFFSET" (demangled: ours as ampgrad::cuda::(anonymous
    # namespace)::sdpa_tile_..._kernel(...)); host frames name the launching functions.
    grep -v "Host Frame" "/tmp/$tool.txt" | grep -E " at .*\+0x[0-9a-f]+" \
      | sed -E 's/.* at (.*)\+0x[0-9a-f]+.*/\1/' | sort | uniq -c
    grep -v "Host Frame" "/tmp/$tool.txt" | grep -E "sdpa_tile_(forward|backward)_kernel" && status=1
  done
  # Weight gradients beside the stream (Note [Weight gradients beside the stream]): on, then off
  # (the default).
  stage "bench step, the GPTs, AMPGRAD_OVERLAP_WGRAD=1"
  AMPGRAD_OVERLAP_WGRAD=1 timeout 45 "$here/ampgrad" bench step --device cuda --models gpt gpt_tiny --reps 15 2>&1 | grep "^|"
  stage "bench step, the GPTs"
  timeout 45 "$here/ampgrad" bench step --device cuda --models gpt gpt_tiny --reps 15 --json "$out/step.json" 2>&1 | grep "^|"
  timeout 90 python3 "$repo/benchmarks/compare_torch.py" "$out/step.json" --suites step --reps 15 2>&1 | grep "^|"
  stage "bench attention --quick (the GPTs' rows: the one-tile kernel and cuDNN's), beside PyTorch"
  timeout 90 "$here/ampgrad" bench attention --device cuda --quick --reps 15 --json "$out/attention.json" 2>&1 | grep "^|"
  timeout 90 python3 "$repo/benchmarks/compare_torch.py" "$out/attention.json" --suites attention --reps 15 2>&1 | grep "^|"
  stage "ncu: the small GPT's graphed AMP step"
  timeout 90 ncu --profile-from-start off --graph-profiling node --metrics gpu__time_duration.sum --csv \
    "$here/profile_step" gpt 32 amp graph > /tmp/ncu_gpt.csv 2> /tmp/ncu_gpt.err || tail -n 5 /tmp/ncu_gpt.err
  python3 "$repo/benchmarks/ncu_summary.py" /tmp/ncu_gpt.csv --launches > "$out/ncu_gpt.txt"
  grep -A 16 "kernels," "$out/ncu_gpt.txt"
  stage "done"
  exit $status
fi
if [ "$what" = measure ]; then
  # Where the small GPT's graphed step stands, without the whole suites: the suites of what
  # changed last (side stream, autocast, the GPT), the GPTs' steps with the weight gradients
  # beside the stream on and off, beside PyTorch's, the ncu table of the small GPT's graphed
  # AMP step, test_norm's [cuda] cases under memcheck and racecheck, and with
  # AMPGRAD_MEASURE_DETAIL=1 ncu's sections (speed of light, occupancy, warp states, memory) of
  # its memory-bound kernels ($OUT/ncu_detail.txt).
  repo="$(cd "$here/../.." && pwd)"
  stage() { echo "=== [${SECONDS} s] $*"; }
  for t in gpu2/test_side_stream gpu/test_gpt gpu/test_norm gpu3/test_amp; do
    stage "$t"
    LD_LIBRARY_PATH="$here/../${t%%/*}:$LD_LIBRARY_PATH" timeout 90 "$here/../$t" > "$out/$(basename "$t").log" 2>&1
    rc=$?; tail -n 2 "$out/$(basename "$t").log"; [ $rc -eq 0 ] || status=1
  done
  for o in 1 0; do
    stage "bench step, the GPTs, AMPGRAD_OVERLAP_WGRAD=$o"
    AMPGRAD_OVERLAP_WGRAD=$o timeout 45 "$here/ampgrad" bench step --device cuda --models gpt gpt_tiny --reps 15 --json "$out/step$o.json" 2>&1 | grep "^|"
  done
  timeout 90 python3 "$repo/benchmarks/compare_torch.py" "$out/step0.json" --suites step --reps 15 2>&1 | grep "^|" \
    | tee "$out/compare_step.md"
  for tool in memcheck racecheck; do
    stage "$tool: test_norm [cuda]"
    LD_LIBRARY_PATH="$here:$LD_LIBRARY_PATH" AMPGRAD_TEST_QUICK=1 timeout 120 compute-sanitizer --tool $tool \
      --error-exitcode 9 "$here/test_norm" "[cuda]" > "/tmp/$tool.txt" 2>&1
    rc=$?; tail -n 3 "/tmp/$tool.txt"; [ $rc -eq 0 ] || status=1
  done
  stage "ncu: the small GPT's graphed AMP step"
  timeout 90 ncu --profile-from-start off --graph-profiling node --metrics gpu__time_duration.sum --csv \
    "$here/profile_step" gpt 32 amp graph > /tmp/ncu_gpt.csv 2> /tmp/ncu_gpt.err || tail -n 5 /tmp/ncu_gpt.err
  python3 "$repo/benchmarks/ncu_summary.py" /tmp/ncu_gpt.csv --launches > "$out/ncu_gpt.txt"
  cat "$out/ncu_gpt.txt" | head -n 60
  [ -n "${AMPGRAD_MEASURE_DETAIL:-}" ] || { stage "done"; exit $status; }
  stage "ncu sections: the step's memory-bound kernels"
  timeout 120 ncu --profile-from-start off --graph-profiling node \
    --kernel-name "regex:adam|ln_backward|ln_reg|unary_backward|check_unscale|binary|accumulate|embedding" \
    --launch-count 14 --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section LaunchStats "$here/profile_step" gpt 32 amp graph \
    > "$out/ncu_detail.txt" 2>&1 || tail -n 5 "$out/ncu_detail.txt"
  grep -E "^  [a-z_:<>(), 0-9A-Z]+\(|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Grid Size|Block Size|Stall" "$out/ncu_detail.txt" | head -n 150
  stage "done"
  exit $status
fi
if [ "$what" = all ] || [ "$what" = tests ]; then
  for t in "$here"/test_*; do
    echo "=== $(basename "$t")"
    "$t" 2>&1 | tee "$out/$(basename "$t").log" | tail -n 4
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
fi
if [ "$what" = all ] || [ "$what" = memcheck ]; then
  for t in "$here"/test_*; do
    # (captured, not piped into grep -q: under pipefail an early-closed pipe fails the test)
    names=$("$t" --list-test-names-only "[cuda]" 2>/dev/null)
    [ -n "$names" ] || continue
    echo "=== memcheck $(basename "$t") [cuda]"
    AMPGRAD_TEST_QUICK=1 compute-sanitizer --tool memcheck --leak-check no --report-api-errors no --error-exitcode 9 "$t" "[cuda]" 2>&1 \
      | tee "$out/memcheck_$(basename "$t").log" | tail -n 3
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  for b in "$here"/bench_*; do
    [ -x "$b" ] || continue
    echo "=== $(basename "$b")"
    "$b" 2>&1 | tee "$out/$(basename "$b").md"
  done
  echo "=== ampgrad bench all"
  "$here/ampgrad" bench all --json "$out/ampgrad_bench.json" 2>&1 | tee "$out/ampgrad_bench.md"
  repo="$(cd "$here/../.." && pwd)"
  if python3 -c "import torch" 2>/dev/null; then
    echo "=== PyTorch side by side"
    python3 "$repo/benchmarks/compare_torch.py" "$out/ampgrad_bench.json" 2>&1 | tee "$out/compare_torch.md"
  fi
fi
if [ "$what" = gpt ]; then
  repo="$(cd "$here/../.." && pwd)"
  "$here/ampgrad" bench step --device cuda --models gpt gpt_tiny --reps 15 --json "$out/step.json" 2>&1 | grep "^|"
  python3 "$repo/benchmarks/compare_torch.py" "$out/step.json" --suites step --reps 15 2>&1 | grep "^|"
  for c in "gpt 32" "gpt_tiny 8"; do
    set -- $c
    echo "=== profile_step $1 $2 amp graph"
    ncu --profile-from-start off --graph-profiling node --metrics gpu__time_duration.sum --csv \
      "$here/profile_step" $1 $2 amp graph > "$out/ncu_$1.csv" 2> "$out/ncu_$1.err"
    grep -h "ms per step" "$out/ncu_$1.csv" || tail -n 5 "$out/ncu_$1.err"
    python3 "$repo/benchmarks/ncu_summary.py" "$out/ncu_$1.csv" --launches > "$out/ncu_$1.txt"
    grep -A 14 "kernels," "$out/ncu_$1.txt"
  done
fi
if [ "$what" = tile ]; then
  repo="$(cd "$here/../.." && pwd)"
  case='attention: the one-tile kernel*'
  "$here/test_attention" 2>&1 | tail -n 4
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  for tool in memcheck racecheck; do
    echo "=== $tool: $case"
    compute-sanitizer --tool $tool --error-exitcode 9 "$here/test_attention" "$case" 2>&1 | tail -n 3
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
  "$here/ampgrad" bench attention --device cuda --reps 15 --json "$out/attention.json" 2>&1 | grep "^|"
  python3 "$repo/benchmarks/compare_torch.py" "$out/attention.json" --suites attention --reps 15 2>&1 | grep "^|"
  for tile in 0 1; do
    echo "=== AMPGRAD_TILE_SDP=$tile bench step"
    AMPGRAD_TILE_SDP=$tile "$here/ampgrad" bench step --device cuda --models gpt gpt_tiny --reps 15 2>&1 | grep "^|"
  done
  for c in "gpt 32" "gpt_tiny 8"; do
    set -- $c
    AMPGRAD_TILE_SDP=1 ncu --profile-from-start off --graph-profiling node --metrics gpu__time_duration.sum --csv \
      "$here/profile_step" $1 $2 amp graph > "$out/ncu_$1_tile.csv" 2> "$out/ncu_$1_tile.err"
    python3 "$repo/benchmarks/ncu_summary.py" "$out/ncu_$1_tile.csv" --launches > "$out/ncu_$1_tile.txt"
    grep -A 14 "kernels," "$out/ncu_$1_tile.txt"
  done
fi
if [ "$what" = step ]; then
  repo="$(cd "$here/../.." && pwd)"
  "$here/test_cuda" "cuda: matmul tuning*" 2>&1 | tail -n 3
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  if [ -x "$here/test_norm" ]; then
    "$here/test_norm" 2>&1 | tail -n 3
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  fi
  for tile in 0 1; do
    for tune in 0 1; do
      echo "=== AMPGRAD_TILE_SDP=$tile AMPGRAD_MATMUL_TUNING=$tune bench step"
      AMPGRAD_TILE_SDP=$tile AMPGRAD_MATMUL_TUNING=$tune "$here/ampgrad" bench step --device cuda --models gpt gpt_tiny \
        --reps 15 --json "/tmp/step_tile${tile}_tune${tune}.json" 2>&1 | grep "^|"
    done
  done
  cp /tmp/step_tile1_tune1.json "$out/step.json"
  python3 "$repo/benchmarks/compare_torch.py" "$out/step.json" --suites step --reps 15 2>&1 | grep "^|"
  AMPGRAD_MATMUL_TUNING=1 AMPGRAD_MATMUL_TUNING_LOG=1 "$here/profile_step" gpt 32 amp graph > /dev/null \
    2> "$out/tuning_gpt.log"
  echo "tuning: $(grep -c "candidate" "$out/tuning_gpt.log") candidates timed; choices:"
  grep "chose" "$out/tuning_gpt.log" | sort | uniq -c
  for c in "gpt 32" "gpt_tiny 8"; do
    set -- $c
    AMPGRAD_TILE_SDP=1 AMPGRAD_MATMUL_TUNING=1 ncu --profile-from-start off --graph-profiling node \
      --metrics gpu__time_duration.sum --csv "$here/profile_step" $1 $2 amp graph > "/tmp/ncu_$1_step.csv" \
      2> "/tmp/ncu_$1_step.err" || tail -n 5 "/tmp/ncu_$1_step.err"
    python3 "$repo/benchmarks/ncu_summary.py" "/tmp/ncu_$1_step.csv" --launches > "$out/ncu_$1_step.txt"
    grep -A 14 "kernels," "$out/ncu_$1_step.txt"
  done
fi
if [ "$what" = profile ]; then
  repo="$(cd "$here/../.." && pwd)"
  for c in "mlp 64 fp32" "mlp 64 amp" "cnn 128 fp32" "cnn 128 amp" "wide 4096 fp32" "wide 4096 amp"; do
    set -- $c
    echo "=== profile_step $c"
    ncu --profile-from-start off --metrics gpu__time_duration.sum --csv "$here/profile_step" $c \
      > "$out/ncu_$1_$2_$3.csv" 2> "$out/ncu_$1_$2_$3.err"
    grep -h "host us" "$out/ncu_$1_$2_$3.csv" || tail -n 5 "$out/ncu_$1_$2_$3.err"
    python3 "$repo/benchmarks/ncu_summary.py" "$out/ncu_$1_$2_$3.csv" | head -n 25
  done
  for c in "f16 nhwc 64 64 56 64" "tf32 nhwc 64 64 56 64" "f16 nchw 64 64 56 64"; do
    set -- $c
    echo "=== profile_conv $c"
    ncu --profile-from-start off --metrics gpu__time_duration.sum --csv "$here/profile_conv" $c \
      > "$out/ncu_conv_$1_$2.csv" 2> "$out/ncu_conv_$1_$2.err" || tail -n 5 "$out/ncu_conv_$1_$2.err"
    python3 "$repo/benchmarks/ncu_summary.py" "$out/ncu_conv_$1_$2.csv" | head -n 15
  done
fi
if [ "$what" = hostprof ]; then
  for p in fp32 amp; do
    "$here/profile_step" mlp 64 $p "$out/samples_mlp_64_$p.txt"
  done
fi
if [ "$what" = all ] || [ "$what" = train ]; then
  data="$here/../data"
  if [ -d "$data" ]; then
    for amp in fp16 off; do
      echo "=== ampgrad train --model cnn --amp $amp"
      "$here/ampgrad" train --model cnn --amp "$amp" --epochs 5 --data "$data" --metrics "$out/metrics_$amp.csv" \
        2>&1 | grep -v " step " | tee -a "$out/train.log"
    done
    repo="$(cd "$here/../.." && pwd)"
    if python3 -c "import torch" 2>/dev/null; then
      for amp in fp16 off; do
        echo "=== PyTorch twin: benchmarks/train_torch.py --amp $amp"
        python3 "$repo/benchmarks/train_torch.py" "$data" --amp "$amp" 2>&1 | tee -a "$out/train.log"
      done
    fi
  fi
fi
exit $status
