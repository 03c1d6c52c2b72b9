#!/usr/bin/env bash
# Install what is missing, build, and run the whole test suite (CTest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
cd build
ctest --output-on-failure -j2 "$@"
