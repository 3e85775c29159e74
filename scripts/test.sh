#!/usr/bin/env bash
# Runs every test: set-up if needed (packages and build), then ctest.
# - build/: the default build, with the CUDA device when nvcc is found (its GPU tests skip
#   without a GPU);
# - build-cpu/: when build/ has CUDA, the CPU-only build (-DPS_ENABLE_CUDA=OFF) too, so both
#   configurations stay green (its unit and in-process tests; the end-to-end ones, which run the
#   same CPU code paths, run in build/ and build-asan/). Not with SANITIZE=1: build-asan/ is a
#   CPU-only build already, and runs more of the tests (one build of the tree fewer in CI);
# - build-asan/: with SANITIZE=1, AddressSanitizer + UndefinedBehaviorSanitizer (CPU only);
# - the load test (label "load": 32 worker processes for a minute), the network-namespace
#   test (label "netns": 4 hosts, 5 epochs), the container cluster (label "docker": builds
#   the image, runs docker-compose with its faults, about 14 minutes) and the source checks
#   (label "style": clang-format, sizes, flags; tests/style/check_tree.py) run in build/ only.
# The fuzzers run separately: scripts/fuzz.sh (CI runs both).
#
#   scripts/test.sh           everything above
#   scripts/test.sh --quick   build/'s unit and in-process tests only (no processes, containers,
#                             namespaces, source checks or other builds): about a minute after a
#                             build
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
JOBS="${CTEST_JOBS:-2}"
QUICK=0
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    -h | --help)
      sed -n '2,19p' "$0"
      exit 0
      ;;
    *)
      echo "scripts/test.sh: unknown argument '$arg' (--quick or nothing)" >&2
      exit 2
      ;;
  esac
done

if ((QUICK)); then
  scripts/setup.sh
  (cd build && ctest --output-on-failure -j "$JOBS" -LE "e2e|deploy|load|netns|docker|python|style")
  exit 0
fi

# timed NAME COMMAND...: runs the command and says how long it took (where CI's time goes).
timed() {
  local name="$1" start=$SECONDS
  shift
  "$@"
  echo "test.sh: $name took $((SECONDS - start)) s"
}

export INSTALL_TEST_PACKAGES=1
timed "set-up and build/" scripts/setup.sh
timed "build/'s tests" bash -c \
  'cd build && ctest --output-on-failure -j "$1"' _ "$JOBS"

if [[ "${SANITIZE:-0}" != "1" ]] && grep -q '^PS_CUDA_BUILT:INTERNAL=TRUE' build/CMakeCache.txt; then
  BUILD_DIR=build-cpu CMAKE_ARGS="-DPS_ENABLE_CUDA=OFF -DPS_BUILD_BENCH=OFF" \
    timed "build-cpu/" scripts/setup.sh
  timed "build-cpu/'s tests" bash -c \
    'cd build-cpu && ctest --output-on-failure -j "$1" -LE "e2e|deploy|style"' _ "$JOBS"
fi

if [[ "${SANITIZE:-0}" == "1" ]]; then
  BUILD_DIR=build-asan CMAKE_ARGS="-DPS_SANITIZE=ON -DPS_ENABLE_CUDA=OFF -DPS_BUILD_BENCH=OFF" \
    BUILD_TYPE=Debug timed "build-asan/" scripts/setup.sh
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    LSAN_OPTIONS="suppressions=$ROOT/tests/lsan.supp" \
    timed "build-asan/'s tests" bash -c \
    'cd build-asan && ctest --output-on-failure -j "$1" -LE "load|netns|docker|style"' _ "$JOBS"
fi
