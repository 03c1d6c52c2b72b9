#!/usr/bin/env bash
# Runs the whole test suite under AddressSanitizer (with LeakSanitizer) and
# UndefinedBehaviorSanitizer: a build in build-asan/ with -DLAYERBENCH_SANITIZE=ON and the
# cuda backend off (the CUDA runtime does not run under ASan without extra options, and
# CI has no GPU). Any report fails the test that triggered it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAYERBENCH_SANITIZE=ON -DLAYERBENCH_CUDA=OFF >/dev/null
cmake --build build-asan -j"$(nproc)" >/dev/null
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:strict_string_checks=1
# LeakSanitizer's tracer crashes scanning the dynamic TLS of the dlopen'ed oneDNN (which
# any test that opens --backend all or onednn loads), so TLS is not scanned (use_tls=0:
# that can only report more); scripts/lsan.supp says what is suppressed and why.
# The list of suppressions used is not printed at exit (print_suppressions=0): it went to
# stderr after the output that tests read, and nothing in it is a finding.
export LSAN_OPTIONS=use_tls=0:print_suppressions=0:suppressions=$PWD/scripts/lsan.supp
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cd build-asan
ctest --output-on-failure -j2 "$@"
