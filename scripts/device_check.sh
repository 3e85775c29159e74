#!/usr/bin/env bash
# GPU check, in two halves (the GPU machine has CUDA 13 but none of this project's other
# libraries and no package registry):
#
#   scripts/device_check.sh pack   # here: CUDA build, then pack the parity test and the device
#                                  # benchmark with their shared libraries into build/device/
#   scripts/device_check.sh run    # on the GPU machine, from the same tree with build/device/:
#                                  # parity tests, then the per-device benchmark, which times the
#                                  # MLP, the CNN and a step of the 6-layer, 6-head, 384-wide
#                                  # language model at context 256 (about two minutes)
#
# `pack` needs the team's packing tool beside the repository (../shared/tools/device-pack.sh);
# it is a developer script, not part of the build or the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  pack)
    CMAKE_ARGS="-DPS_ENABLE_CUDA=ON" scripts/setup.sh
    rm -rf build/device
    ../shared/tools/device-pack.sh build/device build/tests/cuda_device_test build/bin/ps_bench_device
    ;;
  run)
    export LD_LIBRARY_PATH="$PWD/build/device/lib:${LD_LIBRARY_PATH:-}"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    echo "== parity tests"
    build/device/bin/cuda_device_test
    echo "== benchmark"
    build/device/bin/ps_bench_device --seconds 2
    ;;
  *)
    echo "usage: scripts/device_check.sh pack|run" >&2
    exit 2
    ;;
esac
