#!/usr/bin/env bash
# Installs the Debian packages ampgrad builds with, when they are missing. Idempotent.
set -euo pipefail
packages=(cmake g++ make libfmt-dev catch2 libcli11-dev nlohmann-json3-dev zlib1g-dev
          dataset-fashion-mnist fortunes gnuplot-nox libopenblas0 libdnnl-dev python3)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA toolkit found at /usr/local/cuda (the CUDA backend will be built)"
else
  echo "setup: no CUDA toolkit at /usr/local/cuda (building the CPU backend only)"
fi
