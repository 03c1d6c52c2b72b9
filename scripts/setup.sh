#!/usr/bin/env bash
# Installs what layerbench needs from Debian's packages (only what is missing), then
# configures and builds into build/. Run as root on Debian 12 (or with sudo).
# usage: scripts/setup.sh [--test]   (--test: also python3, matplotlib and pandas, with
# which the tests read traces back and draw the plots, and Slurm and munge, which the
# sweep --slurm test starts as a single-node cluster)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake make gcc g++ git libyaml-dev libjansson-dev libopenblas-dev libopenblas-openmp-dev libbenchmark-dev libdnnl-dev)
# --test: also what the test suite reads results back with (scripts/test.sh)
if [ "${1:-}" = "--test" ]; then
  packages+=(python3 python3-matplotlib python3-pandas slurmctld slurmd slurm-client munge)
  shift
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
