#!/usr/bin/env bash
# `ampgrad bench step` of an older build against this one, in turns, on the GPU machine.
#
# Here (builds the old commit in a worktree: its library, CLI and profile_step; ~15 min):
#   bash scripts/gpu_ab.sh pack OLD_COMMIT      -> dist/ab (this build + the old one, tarred)
# There (with the device tool: carry ["dist/ab"]), from the repository root:
#   bash dist/ab/gpu_ab.sh ab      rounds of old then new: ampgrad bench step, pinned to one
#                                  core (taskset -c 5, OMP_NUM_THREADS=1), then the median of
#                                  each row over the rounds and new / old
#                                  (ROUNDS=3, REPS=20, MODELS="mlp cnn wide lstm lstm_cells")
#   bash dist/ab/gpu_ab.sh sweep   the same rounds over settings of the new build: SETS, ';'
#                                  between settings, each environment assignments or "old"
#   bash dist/ab/gpu_ab.sh prof    profile_step MODEL 32 fp32|amp SAMPLES in both builds
#                                  (PMODEL=lstm_cells); name the samples here with
#                                  python3 benchmarks/host_profile.py SAMPLES build/bin
set -uo pipefail
if [ "${1:-}" = pack ]; then
  old_commit="${2:?usage: gpu_ab.sh pack OLD_COMMIT}"
  cd "$(dirname "$0")/.."
  repo="$(pwd)"
  wt=/tmp/ampgrad-old
  git worktree remove --force "$wt" 2>/dev/null || rm -rf "$wt"
  git worktree add -f "$wt" "$old_commit" >/dev/null
  cmake -S "$wt" -B "$wt/build" -DCMAKE_BUILD_TYPE=Release -DAMPGRAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  cmake --build "$wt/build" -j "$(nproc)" --target ampgrad_cli profile_step
  cmake --build build -j "$(nproc)" --target ampgrad_cli profile_step
  rm -rf dist/ab /tmp/ab_pack && mkdir -p dist/ab /tmp/ab_pack/old
  gomp="$(g++ -print-file-name=libgomp.so.1)"
  cp build/bin/libampgrad.so build/bin/ampgrad build/bin/profile_step "$gomp" scripts/gpu_ab.sh dist/ab/
  cp "$wt"/build/bin/libampgrad.so "$wt"/build/bin/ampgrad "$wt"/build/bin/profile_step "$gomp" /tmp/ab_pack/old/
  strip --strip-unneeded dist/ab/* /tmp/ab_pack/old/* 2>/dev/null || true
  chmod +x dist/ab/gpu_ab.sh
  tar czf dist/ab/old.tar.gz -C /tmp/ab_pack old  # two libraries exceed the 64 MiB carry
  git worktree remove --force "$wt"
  du -sh dist/ab
  exit 0
fi
here="$(cd "$(dirname "$0")" && pwd)"
old=/tmp/ab_old/old
[ -d "$old" ] || { mkdir -p /tmp/ab_old && tar xzf "$here/old.tar.gz" -C /tmp/ab_old; }
out="${OUT:-/tmp}"
dir_of() { [ "$1" = old ] && echo "$old" || echo "$here"; }
line() {  # a run's rows, one short field each
  grep -E '^\| (char|MLP|Fash|4x)' "$1" |
    awk -F'|' '{printf "%s/%s/%s/%s %s; ", substr($2,2,13),$3+0,substr($4,2,4),substr($5,2,5),$6+0}'
}
run_step() {  # NAME DIR ENV... : one bench step run, its JSON in /tmp/ab_runs
  local name="$1" d="$2"; shift 2
  env "$@" OMP_NUM_THREADS=1 LD_LIBRARY_PATH="$d" taskset -c 5 "$d/ampgrad" bench step \
    --models ${MODELS:-mlp cnn wide lstm lstm_cells} --reps "${REPS:-20}" --json "/tmp/ab_runs/$name.json" \
    >"/tmp/ab_runs/$name.txt" 2>&1
  echo "[$name] $(line "/tmp/ab_runs/$name.txt")"
}
summary() {  # medians over the rounds, and each setting against the first
  python3 - "$@" <<'PY'
import glob, json, statistics, sys
names = sys.argv[1:]
med = {}
for n in names:
    runs = {}
    for f in sorted(glob.glob(f"/tmp/ab_runs/{n}_r*.json")):
        for r in json.load(open(f)):
            if r.get("suite") == "step":
                runs.setdefault((r["model"], r["batch"], r["precision"], r["mode"]), []).append(r["ms"])
    med[n] = {k: statistics.median(v) for k, v in runs.items()}
base = names[0]
print("| case | batch | precision | mode | " + " | ".join(names) + " | " +
      " | ".join(f"{n} / {base}" for n in names[1:]) + " |")
print("|---" * (4 + 2 * len(names) - 1) + "|")
for k, v in med[base].items():
    vals = [med[n].get(k) for n in names]
    ratios = [f"{x / v:.3f}" if x else "" for x in vals[1:]]
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | " + " | ".join(f"{x:.3f}" if x else "" for x in vals) +
          " | " + " | ".join(ratios) + " |")
PY
}
mkdir -p /tmp/ab_runs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
case "${1:-ab}" in
  ab)
    for r in $(seq 1 "${ROUNDS:-3}"); do
      run_step "old_r$r" "$old" X=1
      run_step "new_r$r" "$here" X=1
    done
    summary old new ;;
  sweep)
    IFS=';' read -ra sets <<<"${SETS:?SETS: settings, ';' between them}"
    names=()
    for k in "${!sets[@]}"; do names+=("s$k"); echo "s$k: ${sets[$k]}"; done
    for r in $(seq 1 "${ROUNDS:-2}"); do
      for k in "${!sets[@]}"; do
        st="${sets[$k]}"
        if [ "$st" = old ]; then run_step "s${k}_r$r" "$old" X=1; else run_step "s${k}_r$r" "$here" $st; fi
      done
    done
    summary "${names[@]}" ;;
  prof)
    for b in new old; do
      d="$(dir_of $b)"
      for p in fp32 amp; do
        LD_LIBRARY_PATH="$d" taskset -c 5 "$d/profile_step" "${PMODEL:-lstm_cells}" 32 $p "$out/samples_${b}_$p.txt" 2>&1 | sed "s/^/[$b] /"
      done
    done ;;
  *) echo "usage: gpu_ab.sh pack OLD_COMMIT | ab | sweep | prof" >&2; exit 2 ;;
esac
