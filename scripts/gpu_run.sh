#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with dist/ unpacked from dist/gpu.tar.xz
# (scripts/gpu_pack.sh; docs/developing.md). Results go to $OUT when it is set (a few files:
# the device tool brings back at most eight), each suite's whole log to /tmp/ampgrad_logs.
#   tests               every test binary, the [cuda] cases for real; the failing cases' output
#                       in $OUT/failures.txt
#   memcheck [SUITE..]  the [cuda] cases of the suites named (default: all) under
#                       compute-sanitizer memcheck, the op table at its two smallest sizes
#   bench               ampgrad bench all, PyTorch's steps beside it and the GPT-2 124M step:
#                       the files scripts/bench_report.py turns into docs/benchmarks.md
#   ab                  the build in dist/old against this one, in turns: ampgrad bench step
#                       (every model) and gpt2_step, ROUNDS rounds (3), and the medians' ratios
#   speedups            this build with the speed-ups on and off (AMPGRAD_SPEEDUPS=0), and the
#                       scaler's step and update in one launch and apart (--fold-ab), in turns
#   train               the Fashion-MNIST CNN, fp16 AMP and float32 (with dist/data)
#   profile MODEL BATCH a per-kernel device-time table (ncu) of one graphed AMP step
# Usage: bash dist/gpu/gpu_run.sh MODE [ARGS]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dist="$(cd "$here/.." && pwd)"
repo="$(cd "$dist/.." && pwd)"
out="${OUT:-/tmp}"
logs=/tmp/ampgrad_logs
mkdir -p "$logs"
what="${1:-tests}"
shift || true
export LD_LIBRARY_PATH="$here:${LD_LIBRARY_PATH:-}"
export AMPGRAD_CLI="$here/ampgrad"  # test_cli runs this command
export AMPGRAD_TEST_DATA_DIR="$repo/tests/data"  # reference files of test_float8 and test_gpt
[ -d "$dist/data" ] && export AMPGRAD_TEST_DATA="$dist/data"
# NCCL: libnccl.so.2 on the loader's path, else the one PyTorch ships.
if [ -z "${AMPGRAD_NCCL_LIBRARY:-}" ] && ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2; then
  nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null)
  [ -f "$nccl" ] && export AMPGRAD_NCCL_LIBRARY="$nccl"
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/card.txt"
stage() { echo "=== [${SECONDS} s] $*"; }
status=0

case "$what" in
tests)
  for t in "$here"/test_*; do
    n=$(basename "$t")
    "$t" > "$logs/$n.log" 2>&1
    rc=$?
    echo "$n: $(grep -E '^(All tests passed|test cases:)' "$logs/$n.log" | tail -n 1) $( [ $rc -eq 0 ] || echo "EXIT $rc")"
    [ $rc -eq 0 ] || status=1
  done
  grep -h -B 3 -A 15 "FAILED" "$logs"/test_*.log > "$out/failures.txt" || true
  [ -s "$out/failures.txt" ] && echo "failures: $out/failures.txt"
  ;;
memcheck)
  suites=("$@")
  [ ${#suites[@]} -gt 0 ] || suites=($(cd "$here" && ls test_*))
  for n in "${suites[@]}"; do
    t="$here/$n"
    names=$("$t" --list-test-names-only "[cuda]" 2>/dev/null)
    [ -n "$names" ] || continue
    stage "memcheck $n [cuda]"
    AMPGRAD_TEST_QUICK=1 timeout "${MEMCHECK_TIMEOUT:-300}" compute-sanitizer --tool memcheck --leak-check no --report-api-errors no --error-exitcode 9 \
      "$t" "[cuda]" > "$logs/memcheck_$n.log" 2>&1
    rc=$?
    tail -n 2 "$logs/memcheck_$n.log" | tee -a "$out/memcheck.txt"
    [ $rc -eq 0 ] || status=1
  done
  ;;
bench)
  stage "ampgrad bench all"
  "$here/ampgrad" bench all --device cuda --json "$out/gpu.json" > "$out/bench_all.md" 2>&1 || status=1
  grep -c "^|" "$out/bench_all.md"
  if python3 -c "import torch" 2>/dev/null; then
    stage "PyTorch's steps beside ampgrad's"
    python3 "$repo/benchmarks/compare_torch.py" "$out/gpu.json" --suites step --reps 15 2>&1 | grep "^|" \
      > "$out/compare_step.md"
  fi
  stage "GPT-2 124M"
  for amp in bf16 fp16; do "$here/gpt2_step" --amp $amp | tee -a "$out/gpt2.txt"; done
  ;;
ab)
  rounds="${ROUNDS:-3}"
  [ -x "$dist/old/ampgrad" ] || { echo "no dist/old: pack with scripts/gpu_pack.sh OLD_COMMIT"; exit 1; }
  mkdir -p /tmp/ab
  for r in $(seq 1 "$rounds"); do
    for side in old new; do
      d="$here"; [ $side = old ] && d="$dist/old"
      stage "round $r: $side: bench step"
      LD_LIBRARY_PATH="$d" "$d/ampgrad" bench step --device cuda --reps "${REPS:-15}" \
        --json "/tmp/ab/step_${side}_$r.json" > "/tmp/ab/step_${side}_$r.md" 2>&1 || status=1
      stage "round $r: $side: gpt2_step"
      LD_LIBRARY_PATH="$d" "$d/gpt2_step" --amp bf16 | tee -a "$out/ab_gpt2_$side.txt"
    done
  done
  python3 - /tmp/ab "$rounds" <<'PY' | tee "$out/ab.md"
import json, statistics, sys, re, glob
d, rounds = sys.argv[1], int(sys.argv[2])
med = {}
for side in ("old", "new"):
    runs = {}
    for f in glob.glob(f"{d}/step_{side}_*.json"):
        for r in json.load(open(f)):
            if r.get("suite") == "step" and not r.get("ab"):
                runs.setdefault((r["model"], r["batch"], r["precision"], r["mode"]), []).append(r["ms"])
    med[side] = {k: statistics.median(v) for k, v in runs.items()}
print("| model | batch | precision | mode | old ms | new ms | new / old |")
print("|---|---|---|---|---|---|---|")
for k, v in sorted(med["old"].items()):
    n = med["new"].get(k)
    if n: print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {v:.4g} | {n:.4g} | {n / v:.3f} |")
PY
  for side in old new; do
    echo "gpt2_step $side: $(grep -o 'ms/step [0-9.]*' "$out/ab_gpt2_$side.txt" | awk '{print $2}' | sort -n | tr '\n' ' ')"
  done
  cp "/tmp/ab/step_new_$rounds.json" "$out/step.json"
  ;;
speedups)
  mkdir -p /tmp/su
  for r in 1 2; do
    for s in 1 0; do
      stage "round $r: AMPGRAD_SPEEDUPS=$s bench step --fold-ab"
      AMPGRAD_SPEEDUPS=$s "$here/ampgrad" bench step --device cuda --reps 15 --fold-ab --models mlp cnn lstm gpt gpt_tiny \
        --json "/tmp/su/su${s}_$r.json" > /dev/null 2>&1 || status=1
    done
  done
  python3 - /tmp/su <<'PY' | tee "$out/speedups.txt"
import json, statistics, sys, glob
rows = {}
for s in ("1", "0"):
    for f in glob.glob(f"{sys.argv[1]}/su{s}_*.json"):
        for r in json.load(open(f)):
            if r.get("suite") == "step" and "AMP" in r["precision"]:
                rows.setdefault((r["model"], r["batch"], r["precision"], r["mode"]), {}).setdefault(s, []).append(r["ms"])
print("| model | batch | AMP variant | mode | speed-ups on, ms | off, ms | off / on |")
print("|---|---|---|---|---|---|---|")
for k, v in sorted(rows.items()):
    if "1" in v and "0" in v:
        on, off = statistics.median(v["1"]), statistics.median(v["0"])
        print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {on:.4g} | {off:.4g} | {off / on:.3f} |")
PY
  ;;
train)
  [ -d "$dist/data" ] || { echo "no dist/data: pack with scripts/gpu_pack.sh --data"; exit 1; }
  for amp in fp16 off; do
    stage "ampgrad train --model cnn --amp $amp"
    "$here/ampgrad" train --model cnn --amp "$amp" --epochs 5 --data "$dist/data" 2>&1 | grep -v " step " \
      | tee -a "$out/train.log"
  done
  ;;
profile)
  model="${1:-gpt}" batch="${2:-32}"
  ncu --profile-from-start off --graph-profiling node --metrics gpu__time_duration.sum --csv \
    "$here/profile_step" "$model" "$batch" amp graph > "$out/ncu_$model.csv" 2> "$out/ncu_$model.err" || status=1
  python3 "$repo/benchmarks/ncu_summary.py" "$out/ncu_$model.csv" --launches | tee "$out/ncu_$model.txt" | head -n 40
  ;;
*)
  echo "gpu_run.sh: unknown mode '$what' (tests, memcheck, bench, ab, speedups, train, profile)"
  exit 2
  ;;
esac
exit $status
