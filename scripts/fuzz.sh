#!/usr/bin/env bash
# Builds the libFuzzer targets with clang, ASan and UBSan into build-fuzz/ and runs each for
# FUZZ_SECONDS (default 60). Any crash, sanitizer report or failed check fails the script; the
# input that triggered it is left in build-fuzz/fuzz/ (crash-*).
#   scripts/fuzz.sh                 # both targets, 60 s each
#   FUZZ_SECONDS=600 scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export INSTALL_TEST_PACKAGES=1
SECONDS_EACH="${FUZZ_SECONDS:-60}"
# Packages first (clang among them), through the normal set-up, without building.
SETUP_ONLY=1 scripts/setup.sh
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPS_FUZZ=ON \
  -DPS_ENABLE_CUDA=OFF -DPS_BUILD_TESTS=OFF -DPS_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz -j "${JOBS:-$(nproc)}" --target service_fuzzer checkpoint_fuzzer
cd build-fuzz/fuzz
for target in service_fuzzer checkpoint_fuzzer; do
  mkdir -p "corpus-$target"
  echo "fuzz: $target for ${SECONDS_EACH}s"
  rc=0
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
    LSAN_OPTIONS="suppressions=$(cd ../.. && pwd)/tests/lsan.supp" \
    "./$target" -max_total_time="$SECONDS_EACH" -max_len=4096 -rss_limit_mb=4096 \
    -print_final_stats=1 "corpus-$target" >"$target.log" 2>&1 || rc=$?
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$target.log" || true
  if [[ $rc -ne 0 ]]; then
    tail -60 "$target.log"
    echo "fuzz: $target FAILED (exit $rc); see build-fuzz/fuzz/$target.log" >&2
    exit 1
  fi
done
echo "fuzz: clean"
