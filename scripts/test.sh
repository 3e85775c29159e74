#!/usr/bin/env bash
# Runs every test: set-up if needed (packages and build), then ctest on build/.
# With SANITIZE=1 it also builds build-asan/ with AddressSanitizer + UndefinedBehaviorSanitizer
# and runs every test there too, the multi-process end-to-end tests included.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
(cd build && ctest --output-on-failure -j "${CTEST_JOBS:-2}")

if [[ "${SANITIZE:-0}" == "1" ]]; then
  BUILD_DIR=build-asan CMAKE_ARGS="-DPS_SANITIZE=ON -DPS_BUILD_BENCH=OFF" BUILD_TYPE=Debug \
    scripts/setup.sh
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j "${CTEST_JOBS:-2}")
fi
