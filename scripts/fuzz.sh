#!/usr/bin/env bash
# Fuzzes what parses input, with libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer,
# for SECONDS in all (default 60): a third on the config loader and the model analysis
# (fuzz/fuzz_config.c, seeded with every shipped and test config plus fuzz/seeds/), a
# sixth each on the CSV reader and `bench compare` (fuzz/fuzz_csv.c, seeded with
# fuzz/seeds_csv/), on a Hugging Face config.json read as a decoder (fuzz/fuzz_hf.c,
# seeded with every shipped and test config.json and fuzz/seeds_hf/) and on a
# safetensors header (fuzz/fuzz_safetensors.c, fuzz/seeds_st/), and the rest on the
# config loader again. Installs clang and its runtime from Debian's packages if they are
# missing, builds into build-fuzz/, and keeps the corpora between runs
# (build-fuzz/corpus*). A finding is saved as build-fuzz/crash-* (or leak-*, timeout-*)
# and the exit status is non-zero; replay it with build-fuzz/fuzz_config FILE (or
# fuzz_csv).
# usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
# libFuzzer reads -max_total_time=0 as no limit: every target gets at least a second
if ! [[ $seconds =~ ^[0-9]+$ ]] || [ "$seconds" -lt 6 ]; then
  echo "fuzz: SECONDS must be a whole number of at least 6 (a sixth of it for each of three targets), got '$seconds'" >&2
  exit 2
fi
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
cmake --build build-fuzz --target fuzz_config fuzz_csv fuzz_hf fuzz_safetensors -j"$(nproc)" >/dev/null
mkdir -p build-fuzz/corpus build-fuzz/corpus_csv build-fuzz/corpus_hf build-fuzz/corpus_st
cp configs/*.yaml tests/data/*.yaml fuzz/seeds/*.yaml build-fuzz/corpus/
cp fuzz/seeds_csv/*.csv build-fuzz/corpus_csv/
for f in configs/hf/*/config.json tests/data/hf/*/config.json; do cp "$f" "build-fuzz/corpus_hf/$(basename "$(dirname "$f")").json"; done
cp fuzz/seeds_hf/*.json build-fuzz/corpus_hf/
cp fuzz/seeds_st/* build-fuzz/corpus_st/
common=(-timeout=10 -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 -artifact_prefix=build-fuzz/)
sixth=$((seconds / 6))
echo "fuzz: the config loader, $(ls build-fuzz/corpus | wc -l) inputs in the corpus, $((seconds - 3 * sixth)) s"
build-fuzz/fuzz_config build-fuzz/corpus -dict=fuzz/config.dict -max_total_time=$((seconds - 3 * sixth)) "${common[@]}"
echo "fuzz: the CSV reader and compare, $(ls build-fuzz/corpus_csv | wc -l) inputs, $sixth s"
build-fuzz/fuzz_csv build-fuzz/corpus_csv -max_total_time=$sixth "${common[@]}"
echo "fuzz: config.json as a decoder, $(ls build-fuzz/corpus_hf | wc -l) inputs, $sixth s"
build-fuzz/fuzz_hf build-fuzz/corpus_hf -max_total_time=$sixth "${common[@]}"
echo "fuzz: a safetensors header, $(ls build-fuzz/corpus_st | wc -l) inputs, $sixth s"
build-fuzz/fuzz_safetensors build-fuzz/corpus_st -max_total_time=$sixth "${common[@]}"
