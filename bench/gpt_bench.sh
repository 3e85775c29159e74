#!/usr/bin/env bash
# Language-model training throughput against the PyTorch reference (bench/peers/pytorch_gpt.py:
# the same model, one process, one thread), interleaved round by round on the same text, global
# batch 12 windows of 64 characters: 1 worker + 1 shard (batch 12) and 2 workers + 2 shards
# (batch 6 each), BSP, AdamW with clipping at 1.0. One JSON line per measurement; the project's
# lines carry ratio_vs_pytorch against the peer of the same round. Tokens/s count every position
# of every window (a prediction each).
#   bench/gpt_bench.sh [--data FILE] [--steps 300] [--rounds 2]   (default data/text/kjv.txt,
#                                                                scripts/setup.sh writes it)
set -euo pipefail
cd "$(dirname "$0")/.."
data=data/text/kjv.txt
steps=300
rounds=2
# The peer and every ps_launch run in the background (bench/processes.sh): SIGTERM or Ctrl-C
# stops the one running at once (ps_launch then stops its shards and workers) and exits 130.
source bench/processes.sh
parse_values "bench/gpt_bench.sh [--data FILE] [--steps N] [--rounds N]" data steps rounds -- "$@"
need_count steps "$steps" 1
need_count rounds "$rounds" 1
if [[ ! -f "$data" ]]; then
  echo "--data: no file $data (scripts/setup.sh writes the default)" >&2
  exit 2
fi
shape=(--layers 4 --heads 4 --dim 128 --context 64)
make_work gpt_bench
for round in $(seq 1 "$rounds"); do
  run_peer "$round" /usr/bin/python3 bench/peers/pytorch_gpt.py --train --data "$data" \
    "${shape[@]}" --batch 12 --steps "$steps"
  for config in "1 12" "2 6"; do
    set -- $config
    dir="$WORK/r$round-$1"
    run_waited build/bin/ps_launch --shards "$1" --workers "$1" --mode bsp --model gpt \
      --data "text:$data" "${shape[@]}" --batch_size "$2" --steps "$steps" --optimizer adamw \
      --lr 0.001 --weight_decay 0.01 --clip_norm 1.0 --metrics_dir "$dir" --quiet >/dev/null
    compare_to_peer gpt tokens_per_sec val_loss "$round" "$1" "$2" "$dir/summary.json" "$WORK/peer"
  done
done
