#!/usr/bin/env bash
# Builds the libFuzzer targets with clang, ASan and UBSan into build-fuzz/ and runs each from the
# committed corpus (tests/fuzz/corpus/<target>/: inputs that once found bugs) plus what it
# discovers. By default a fixed seed and FUZZ_RUNS inputs each, so a run is repeatable: CI fuzzes
# exactly what a developer's run did. FUZZ_SECONDS=N instead explores for N seconds with a random
# seed. Any crash, sanitizer report or failed check fails the script; the input that triggered it
# is left in build-fuzz/fuzz/ (crash-*): add it to the corpus with the fix.
#   scripts/fuzz.sh                     # both targets, 60 000 inputs each, seed 1
#   FUZZ_SECONDS=600 scripts/fuzz.sh    # ten minutes each, random seed
set -euo pipefail
cd "$(dirname "$0")/.."
export INSTALL_TEST_PACKAGES=1
if [[ -n "${FUZZ_SECONDS:-}" ]]; then
  BUDGET=(-max_total_time="$FUZZ_SECONDS")
else
  BUDGET=(-seed=1 -runs="${FUZZ_RUNS:-60000}")
fi
# Packages first (clang among them), through the normal set-up, without building.
SETUP_ONLY=1 scripts/setup.sh
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPS_FUZZ=ON \
  -DPS_ENABLE_CUDA=OFF -DPS_BUILD_TESTS=OFF -DPS_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz -j "${JOBS:-$(nproc)}" --target service_fuzzer checkpoint_fuzzer
cd build-fuzz/fuzz
for target in service_fuzzer checkpoint_fuzzer; do
  rm -rf "corpus-$target" && mkdir -p "corpus-$target"  # fresh: runs repeat exactly
  cp -n ../../tests/fuzz/corpus/"$target"/* "corpus-$target"/ 2>/dev/null || true
  echo "fuzz: $target (${BUDGET[*]})"
  rc=0
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
    LSAN_OPTIONS="suppressions=$(cd ../.. && pwd)/tests/lsan.supp" \
    "./$target" "${BUDGET[@]}" -max_len=4096 -rss_limit_mb=4096 \
    -print_final_stats=1 "corpus-$target" >"$target.log" 2>&1 || rc=$?
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$target.log" || true
  if [[ $rc -ne 0 ]]; then
    tail -60 "$target.log"
    echo "fuzz: $target FAILED (exit $rc); see build-fuzz/fuzz/$target.log" >&2
    exit 1
  fi
done
echo "fuzz: clean"
