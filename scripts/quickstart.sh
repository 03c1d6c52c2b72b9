#!/usr/bin/env bash
# Quick start: install what is missing, build, and profile ResNet-18 on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/bench run configs/resnet18.yaml "$@"
