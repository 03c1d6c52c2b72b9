#!/usr/bin/env bash
# Fuzzes the config loader and the model analysis (fuzz/fuzz_config.c) with libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer, for SECONDS (default 60). Installs
# clang and its runtime from Debian's packages if they are missing, builds into
# build-fuzz/, seeds the corpus with every shipped and test config plus fuzz/seeds/,
# and keeps the corpus between runs (build-fuzz/corpus). A finding is saved as
# build-fuzz/crash-* (or leak-*, timeout-*) and the exit status is non-zero; replay it
# with build-fuzz/fuzz_config FILE.
# usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
scripts/setup.sh >/dev/null   # the project's own dependencies
missing=()
for p in clang libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=()
  [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAYERBENCH_FUZZ=ON \
  -DLAYERBENCH_CUDA=OFF >/dev/null
cmake --build build-fuzz --target fuzz_config -j"$(nproc)" >/dev/null
mkdir -p build-fuzz/corpus
cp configs/*.yaml tests/data/*.yaml fuzz/seeds/*.yaml build-fuzz/corpus/
echo "fuzz: $(ls build-fuzz/corpus | wc -l) inputs in the corpus, fuzzing for $seconds s"
exec build-fuzz/fuzz_config build-fuzz/corpus -dict=fuzz/config.dict -max_total_time="$seconds" -timeout=10 \
  -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 -artifact_prefix=build-fuzz/
