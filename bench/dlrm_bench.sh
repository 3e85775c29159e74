#!/usr/bin/env bash
# DLRM training throughput and test AUC against the PyTorch reference (bench/peers/pytorch_dlrm.py:
# the same model, one process, one thread), interleaved round by round on the same data, with the
# launcher's defaults and a global batch of 256: 1 worker + 1 shard (batch 256) and 2 workers +
# 2 shards (batch 128 each), BSP, one epoch. One JSON line per measurement; the project's lines
# carry ratio_vs_pytorch against the peer of the same round.
#   bench/dlrm_bench.sh [--data DIR] [--rounds 2]      (default data: data/criteo, written by
#                                                      ps_datagen when missing)
set -euo pipefail
cd "$(dirname "$0")/.."
data=data/criteo
rounds=2
# The peer and every ps_launch run in the background (bench/processes.sh): SIGTERM or Ctrl-C
# stops the one running at once (ps_launch then stops its shards and workers) and exits 130.
source bench/processes.sh
parse_values "bench/dlrm_bench.sh [--data DIR] [--rounds N]" data rounds -- "$@"
need_count rounds "$rounds" 1
make_work dlrm_bench
if [[ ! -f "$data/truth.json" && ! -f "$data/train.tsv" ]]; then
  run_waited build/bin/ps_datagen ctr --out "$data" --train 1000000 --test 100000 --seed 1 >&2
fi
for round in $(seq 1 "$rounds"); do
  run_peer "$round" /usr/bin/python3 bench/peers/pytorch_dlrm.py --data "$data" --batch 256
  for config in "1 256" "2 128"; do
    set -- $config
    dir="$WORK/r$round-$1"
    run_waited build/bin/ps_launch --shards "$1" --workers "$1" --mode bsp --model dlrm \
      --data "criteo:$data" --epochs 1 --batch_size "$2" --metrics_dir "$dir" --quiet >/dev/null
    compare_to_peer dlrm samples_per_sec test_auc "$round" "$1" "$2" "$dir/summary.json" \
      "$WORK/peer"
  done
done
