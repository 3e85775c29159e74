#!/usr/bin/env bash
# Installs the Debian packages the project needs (only those missing), then configures and builds
# into build/ (binaries in build/bin/). Idempotent: a second run installs nothing and rebuilds
# only what changed.
#
#   scripts/setup.sh                 # optimised build in build/ (with the CUDA device when nvcc
#                                    # is found: -DPS_ENABLE_CUDA=AUTO)
#   BUILD_DIR=build-cpu CMAKE_ARGS="-DPS_ENABLE_CUDA=OFF" scripts/setup.sh
#   BUILD_DIR=build-asan CMAKE_ARGS="-DPS_SANITIZE=ON" scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# What the build needs. deploy/docker/Dockerfile installs exactly these (tests/deploy checks it).
PACKAGES=(
  build-essential cmake pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev libopenblas-dev libgtest-dev libbenchmark-dev zlib1g-dev
  libcpp-httplib-dev nlohmann-json3-dev python3-dev pybind11-dev
  dataset-fashion-mnist bible-kjv
)
# What the Python package (build/python/ps_train, docs/python.md) needs to run: Debian's PyTorch
# and numpy (pybind11 and Python's headers, to build it, are in PACKAGES). Skipped with
# INSTALL_PYTHON_PACKAGES=0, as the images' build stage does (their `python` target installs them
# in its runtime stage).
PYTHON_PACKAGES=(
  python3-numpy python3-torch
)
# What only the tests need (INSTALL_TEST_PACKAGES=1, as scripts/test.sh and scripts/fuzz.sh set):
# certificates, the fuzzers' compiler, the format check (tests/style/check_tree.py), /metrics
# scraping, network namespaces, the container cluster (a Docker engine of the test's own, compose,
# base images made with debootstrap when no registry is reachable), PyTorch for the language
# model's parity test, and matplotlib for the staleness sweep's plots (experiments/run.sh installs
# it for itself too).
TEST_PACKAGES=(
  openssl clang clang-format curl iproute2 nftables
  docker.io docker-compose debootstrap python3-yaml
  python3-torch python3-numpy python3-matplotlib
)
# What only the peer comparison needs (INSTALL_BENCH_PACKAGES=1, as scripts/bench.sh sets):
# PyTorch for bench/peers/pytorch_mlp.py (ps_bench_train --vs_pytorch).
BENCH_PACKAGES=(
  python3-torch python3-numpy
)
WANTED=("${PACKAGES[@]}")
if [[ "${INSTALL_PYTHON_PACKAGES:-1}" == "1" ]]; then WANTED+=("${PYTHON_PACKAGES[@]}"); fi
if [[ "${INSTALL_TEST_PACKAGES:-0}" == "1" ]]; then WANTED+=("${TEST_PACKAGES[@]}"); fi
if [[ "${INSTALL_BENCH_PACKAGES:-0}" == "1" ]]; then WANTED+=("${BENCH_PACKAGES[@]}"); fi

missing=()
for p in "${WANTED[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The CUDA toolkit installs nvcc outside the default PATH; CMake's AUTO finds it there.
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

# SETUP_ONLY=1: packages only (scripts/fuzz.sh builds with another compiler).
if [[ "${SETUP_ONLY:-0}" == "1" ]]; then exit 0; fi

# The language model's default corpus (--data text, data/text/kjv.txt): the King James Bible from
# Debian's bible-kjv, one verse per line, without the book, chapter and verse references.
if [[ ! -s data/text/kjv.txt ]]; then
  mkdir -p data/text
  bible -l100000 "Gen1:1-Rev22:21" | sed -n 's/^  [0-9]\+ //p' >data/text/kjv.txt.tmp
  mv data/text/kjv.txt.tmp data/text/kjv.txt
fi

BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-$(nproc)}"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
echo "setup: built into $BUILD_DIR/bin"
