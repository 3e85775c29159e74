#!/usr/bin/env bash
# Runs every benchmark and keeps their JSON lines: transport, apply, train (with the PyTorch
# peers, overlap and priority scheduling), a shaped link (as root), the Python package's step,
# DLRM, device, scale and sparse.
# Each prints ratios against references measured in the same run.
#   scripts/bench.sh [OUT_DIR]     (default: bench-results/<date>)
# Leave the machine otherwise idle: the figures are only as steady as the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
INSTALL_BENCH_PACKAGES=1 scripts/setup.sh >/dev/null
out="${1:-bench-results/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
# A benchmark that fails is named at the end and makes the script exit 1; the others still run.
failed=()
run() {
  local name="$1"
  shift
  echo "== $name: $*"
  if ! "$@" | tee "$out/$name.jsonl"; then
    echo "== $name failed" >&2
    failed+=("$name")
  fi
}
run transport build/bin/ps_bench_transport --seconds 1 --rounds 3 --small
# The pulls, pushes and PushPulls that a lone shard under BSP splits over two connections.
run transport_bsp build/bin/ps_bench_transport --seconds 1 --rounds 3 --configs 1x1 \
  --transports grpc --mode bsp --ops push,pull,push_pull
# Google Benchmark: the table on the console (and apply.jsonl), the counters as JSON in apply.json.
run apply build/bin/ps_bench_apply --benchmark_min_time=1 --benchmark_out="$out/apply.json" \
  --benchmark_out_format=json
run train build/bin/ps_bench_train --vs_pytorch --encodings f32,bf16,topk
# The same MLP runs with payloads in the gRPC messages (workers on other hosts than their shards).
run train_grpc build/bin/ps_bench_train --vs_pytorch --models mlp --configs 1x1,2x2 \
  --encodings f32 --shared_memory=false
# Each step's push and the next step's pull as two calls, then as one PushPull, back to back.
run train_push_pull build/bin/ps_bench_train --models mlp --configs 1x1,2x2 --encodings f32 \
  --compare_push_pull
run train_overlap build/bin/ps_bench_train --vs_pytorch --mode asp --overlap --encodings f32
# A separate prefetch and push per step, then the pipeline: one PushPull per step in flight while
# the next step computes.
run train_async build/bin/ps_bench_train --vs_pytorch --mode asp --overlap --async_push \
  --encodings f32 --compare_push_pull
run train_priority build/bin/ps_bench_train --configs 1x1,2x2 --encodings f32 \
  --schedules whole,priority
if [[ $(id -u) -eq 0 ]]; then  # network namespaces need root
  run link bench/link_bench.sh --rate_mbit 1000
  # Unshaped: the message path and training across a veth pair, against a TCP stream over it.
  run link_unshaped bench/link_bench.sh --rate_mbit 0 --schedules whole --transport \
    --transport_args "--configs 1x1 --mib 1,16,64 --small --rounds 3"
fi
# A PyTorch loop's step through ps_train.ServerOptimizer against the same loop's local SGD.
run python_step env PYTHONPATH=build/python PS_BIN_DIR=build/bin /usr/bin/python3 \
  bench/python_step_bench.py --seconds 1.5 --rounds 3
# The same, pipelined under ASP (the round trip behind the next step's compute), one BLAS thread.
run python_step_pipelined env PYTHONPATH=build/python PS_BIN_DIR=build/bin /usr/bin/python3 \
  bench/python_step_bench.py --seconds 1.5 --rounds 3 --mode asp --pipeline --blas_threads 1
# DLRM against the PyTorch reference, interleaved, on ps_datagen's click logs.
run dlrm bench/dlrm_bench.sh
# Forward+backward per device, and the trainer's step with copies overlapped and serial.
run device build/bin/ps_bench_device
run scale build/bin/ps_bench_scale --workers 16,64 --params 262144,1048576 --seconds 5
# Sparse rows per second per shard against a gather/scatter loop, D = 16, 64, 256.
run sparse build/bin/ps_bench_sparse --rows 1000000 --seconds 1
# The scale run: 40 M rows of 16 with Adagrad state on 2 shards (about 7 GiB resident), and the
# worker's memory beside it (set PS_BENCH_SPARSE_SCALE=0 to skip on a small machine).
if [[ "${PS_BENCH_SPARSE_SCALE:-1}" == 1 ]]; then
  run sparse_scale build/bin/ps_bench_sparse --rows 40000000 --dims 16 --seconds 2 \
    --fill_batch 200000
fi
echo "results in $out"
if ((${#failed[@]})); then
  echo "failed: ${failed[*]} (their output so far is in $out)" >&2
  exit 1
fi
