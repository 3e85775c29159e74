#!/usr/bin/env bash
# The main job: set-up if needed, then a local cluster (2 shards, 2 workers, BSP) training the MLP
# on Fashion-MNIST for 5 epochs. Extra arguments go to ps_launch and override the defaults, e.g.
#   scripts/run.sh --mode ssp --staleness 2 --workers 3
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
exec build/bin/ps_launch --shards 2 --workers 2 --mode bsp --model mlp --epochs 5 "$@"
