#!/usr/bin/env bash
# The main job: set-up if needed, then a local cluster (2 shards, 2 workers, BSP) training the MLP
# on Fashion-MNIST for 5 epochs. Extra arguments go to ps_launch and override the defaults, e.g.
#   scripts/run.sh --mode ssp --staleness 2 --workers 3
# With --model dlrm, the recommender: DLRM, one epoch, 128 samples per worker, by default on click
# logs that ps_datagen writes once into data/criteo (1 000 000 training and 100 000 test lines of
# a planted click model; data/criteo/truth.json holds the best possible AUC).
# With --model gpt, the language model: a 4-layer, 4-head, 128-wide transformer, windows of 64
# characters, 6 per worker and step, 2000 steps, AdamW with gradient clipping at 1.0, and the
# learning rate 0.001 for an update of 12 windows (--base_batch 12 --lr_scaling sqrt: SSP and ASP,
# whose updates are one worker's 6, take 1/sqrt(2) of it, the rule for Adam; docs/experiments.md
# and docs/transformers.md measure it); by default on the King James Bible (data/text/kjv.txt, which
# scripts/setup.sh writes), or `--data text:FILE`. A model's recipe holds whatever the data.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
model=mlp
has_data=false
previous=
for arg in "$@"; do
  case "$arg" in
    --model=*) model="${arg#--model=}" ;;
    --data|--data=*) has_data=true ;;
  esac
  [[ "$previous" == --model ]] && model="$arg"
  previous="$arg"
done
defaults=(--shards 2 --workers 2 --mode bsp --model mlp --epochs 5)
# A model's recipe applies whatever the data; only the default data set depends on --data.
if [[ "$model" == dlrm ]]; then
  if [[ "$has_data" == false ]]; then
    if [[ ! -f data/criteo/truth.json ]]; then
      echo "writing planted click logs to data/criteo (once)"
      build/bin/ps_datagen ctr --out data/criteo --train 1000000 --test 100000 --seed 1
    fi
    defaults+=(--data criteo:data/criteo)
  fi
  defaults+=(--epochs 1 --batch_size 128)
fi
if [[ "$model" == gpt ]]; then
  if [[ "$has_data" == false ]]; then
    defaults+=(--data text:data/text/kjv.txt)
  fi
  defaults+=(--layers 4 --heads 4 --dim 128 --context 64 --batch_size 6 --steps 2000
    --optimizer adamw --lr 0.001 --weight_decay 0.01 --clip_norm 1.0 --base_batch 12
    --lr_scaling sqrt)
fi
exec build/bin/ps_launch "${defaults[@]}" "$@"
