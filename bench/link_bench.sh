#!/usr/bin/env bash
# ps_bench_link: training and the message path where communication crosses a link, not loopback.
# On loopback the transfer itself is CPU time (copies and syscalls on the same two cores that
# compute), so overlapping it with compute gains nothing there; on a real network the bytes
# travel while the CPU is free, and there are no loopback shortcuts. This bench builds that
# network: one shard and one worker, each in its own Linux network namespace, joined by a veth
# pair, shaped by a token bucket (tbf) to --rate_mbit in each direction (0: unshaped, as fast as
# the kernel moves it). For each model it trains the same steps with the step's tensors sent
# whole (after backward; pulled before forward), with priority scheduling (ps_worker --priority),
# and as the ASP pipeline (--overlap --async_push: one PushPull per step in flight while the next
# step computes; the shard in ASP whatever --mode says), and prints one JSON line per run; the
# priority and pipeline lines carry ratio_vs_whole, measured in the same run. Payloads always
# travel in the gRPC messages (--shared_memory=false). With --transport, it also runs
# ps_bench_transport across the same pair (its shards in the server's namespace, its workers in
# the worker's; --transport_args are passed on) before training. Needs root (exit 77
# otherwise); leaves no process or namespace.
#
# Each model trains on its own data: mlp and cnn on Fashion-MNIST (--data_dir), gpt on a text
# (--text, by default the King James Bible that scripts/setup.sh writes) and dlrm on click logs
# (--criteo_dir, by default data/criteo as `scripts/run.sh --model dlrm` writes it). dlrm's rows
# cannot travel with priority scheduling: drop priority from --schedules for it.
#
#   bench/link_bench.sh [--rate_mbit 1000] [--models mlp,cnn] [--schedules whole,priority,pipeline]
#                       [--mode bsp] [--steps 150] [--cnn_steps 60] [--batch_size 32]
#                       [--transport] [--transport_args "--configs 1x1 --small"]
#                       [--worker_args "--push_pull=false"] [--bin_dir build/bin] [--data_dir DIR]
#                       [--text FILE] [--criteo_dir DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="$ROOT/build/bin"
DATA=/usr/share/datasets/fashion-mnist
TEXT="$ROOT/data/text/kjv.txt"
CRITEO="$ROOT/data/criteo"
RATE=1000
MODELS=mlp,cnn
MODE=bsp
STEPS=150
CNN_STEPS=60
BATCH=32
SCHEDULES=whole,priority,pipeline
TRANSPORT=false
TRANSPORT_ARGS="--configs 1x1 --mib 1,16,64 --small --rounds 3"
WORKER_ARGS=""
# Its functions (parse_values, need_count, and the process list below): WORK is set further down.
source "$ROOT/bench/processes.sh"
usage="bench/link_bench.sh [--rate_mbit N] [--models LIST] [--schedules LIST] [--mode MODE]"
usage+=" [--steps N] [--cnn_steps N] [--batch_size N] [--transport] [--transport_args ARGS]"
usage+=" [--worker_args ARGS] [--bin_dir DIR] [--data_dir DIR] [--text FILE] [--criteo_dir DIR]"
parse_values "$usage" rate_mbit=RATE models=MODELS mode=MODE steps=STEPS cnn_steps=CNN_STEPS \
  batch_size=BATCH schedules=SCHEDULES transport=TRANSPORT! transport_args=TRANSPORT_ARGS \
  worker_args=WORKER_ARGS bin_dir=BIN data_dir=DATA text=TEXT criteo_dir=CRITEO -- "$@"
need_count rate_mbit "$RATE" 0 "0: unshaped"
# The first 5 steps of a run warm up and are not timed: at least one more must be.
need_count steps "$STEPS" 6 "5 untimed warm-up steps"
need_count cnn_steps "$CNN_STEPS" 6 "5 untimed warm-up steps"
need_count batch_size "$BATCH" 1
case "$MODE" in
  bsp | ssp | asp) ;;
  *) echo "--mode: '$MODE' is not bsp, ssp or asp" >&2; exit 2 ;;
esac
IFS=, read -r -a models <<<"$MODELS"
for model in "${models[@]}"; do
  case "$model" in
    mlp | cnn | gpt | dlrm) ;;
    *) echo "--models: '$model' is not mlp, cnn, gpt or dlrm" >&2; exit 2 ;;
  esac
done
IFS=, read -r -a schedules <<<"$SCHEDULES"
for schedule in "${schedules[@]}"; do
  case "$schedule" in
    whole | priority | pipeline) ;;
    *) echo "--schedules: '$schedule' is not whole, priority or pipeline" >&2; exit 2 ;;
  esac
done
# Each model's data, checked before any namespace is made.
data_of() {
  case "$1" in
    mlp | cnn) echo "fashion-mnist:$DATA" ;;
    gpt) echo "text:$TEXT" ;;
    dlrm) echo "criteo:$CRITEO" ;;
  esac
}
for model in "${models[@]}"; do
  case "$model" in
    gpt) [[ -f "$TEXT" ]] || { echo "--text: no file $TEXT (scripts/setup.sh writes the default)" >&2; exit 2; } ;;
    dlrm)
      [[ -f "$CRITEO/train.tsv" || -f "$CRITEO/train.tsv.gz" ]] || {
        echo "--criteo_dir: no train.tsv in $CRITEO (ps_datagen ctr --out $CRITEO writes one)" >&2
        exit 2
      }
      for schedule in "${schedules[@]}"; do
        [[ "$schedule" == priority ]] && {
          echo "--models dlrm: priority scheduling cannot carry its rows; pass --schedules without priority" >&2
          exit 2
        }
      done
      ;;
  esac
done
[[ -x "$BIN/ps_server" && -x "$BIN/ps_worker" ]] || { echo "no ps_server/ps_worker in $BIN: build first" >&2; exit 1; }

TAG="lb$$"
NS_SERVER="${TAG}srv"
NS_WORKER="${TAG}wrk"
NET=10.213.9
WORK="$(mktemp -d -t link_bench.XXXXXX)"
# Every process running is listed in $WORK/pids (bench/processes.sh): run_one runs in a
# background subshell, whose variables the cleanup below would never see. A namespace's deletion
# does not stop the processes in it.
touch "$WORK/pids"
cleanup() {
  set +e
  stop_listed
  ip netns del "$NS_SERVER" 2>/dev/null
  ip netns del "$NS_WORKER" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ $(id -u) -ne 0 ]] || ! ip netns add "$NS_SERVER" 2>/dev/null; then
  echo "SKIP: network namespaces cannot be made here (needs root and iproute2)"
  exit 77
fi
ip netns add "$NS_WORKER"
ip link add "${TAG}a" netns "$NS_SERVER" type veth peer name "${TAG}b" netns "$NS_WORKER"
for pair in "$NS_SERVER ${TAG}a 1" "$NS_WORKER ${TAG}b 2"; do
  read -r ns dev host <<<"$pair"
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$NET.$host/24" dev "$dev"
  ip -n "$ns" link set "$dev" up
  # Egress shaping on both ends: RATE Mbit/s each way, a burst of 64 KiB, at most 100 ms queued.
  if [[ "$RATE" -gt 0 ]]; then
    ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "${RATE}mbit" burst 64kb latency 100ms
  fi
done

if [[ "$TRANSPORT" == true ]]; then
  [[ -x "$BIN/ps_bench_transport" ]] || { echo "no ps_bench_transport in $BIN: build first" >&2; exit 1; }
  # shellcheck disable=SC2086  # the arguments are meant to split
  run_waited ip netns exec "$NS_WORKER" "$BIN/ps_bench_transport" --server_netns "$NS_SERVER" \
    --host "$NET.1" --transports grpc $TRANSPORT_ARGS
fi

# Stops a process this script started, reaps it and takes it off the list (its pid may be reused).
stop() {
  kill -TERM "$1" 2>/dev/null
  wait "$1" 2>/dev/null || true
  sed -i "/^$1\$/d" "$WORK/pids"
}

# Trains `steps` steps of `model` with `schedule`; prints the JSON line.
run_one() {
  local model="$1" steps="$2" schedule="$3"
  local dir="$WORK/$model-$schedule"
  mkdir -p "$dir"
  local mode="$MODE" priority=false pipeline=false
  [[ "$schedule" == priority ]] && priority=true
  [[ "$schedule" == pipeline ]] && { pipeline=true; mode=asp; }
  ip netns exec "$NS_SERVER" "$BIN/ps_server" --shard_id 0 --num_shards 1 --num_workers 1 \
    --host 0.0.0.0 --port 0 --port_file "$dir/port" --mode "$mode" --optimizer sgd --lr 0.01 \
    >"$dir/server.log" 2>&1 &
  local server=$!
  echo "$server" >>"$WORK/pids"
  for _ in $(seq 100); do [[ -s "$dir/port" ]] && break; sleep 0.1; done
  [[ -s "$dir/port" ]] || { cat "$dir/server.log" >&2; stop "$server"; return 1; }
  # One kernel under both namespaces: without --shared_memory=false the payloads would skip the link.
  # shellcheck disable=SC2086  # --worker_args is meant to split
  if ! run_waited ip netns exec "$NS_WORKER" "$BIN/ps_worker" --rank 0 --num_workers 1 \
    --servers "$NET.1:$(cat "$dir/port")" --model "$model" --batch_size "$BATCH" --epochs 1 \
    --train_limit $((steps * BATCH)) --test_limit 100 --data "$(data_of "$model")" \
    --metrics_file "$dir/worker.jsonl" --priority="$priority" \
    --overlap="$pipeline" --async_push="$pipeline" \
    --shared_memory=false $WORKER_ARGS >"$dir/worker.log" 2>&1; then
    cat "$dir/worker.log" >&2
    stop "$server"
    return 1
  fi
  stop "$server"
  python3 - "$dir/worker.jsonl" "$model" "$schedule" "$RATE" "$mode" "$BATCH" <<'EOF'
import json, sys
path, model, schedule, rate, mode, batch = sys.argv[1:]
steps = [json.loads(l) for l in open(path) if '"kind":"step"' in l]
steps = steps[5:]  # the first steps warm up connections and caches
total = sum(s["step_ms"] for s in steps)
out = {
    "bench": "link", "model": model, "schedule": schedule, "rate_mbit": int(rate), "mode": mode,
    "workers": 1, "shards": 1, "batch_size": int(batch), "steps": len(steps),
    "step_ms": total / len(steps),
    "samples_per_sec": 1000.0 * sum(s["samples"] for s in steps) / total,
    "comm_wait_share": sum(s["pull_ms"] + s["push_ms"] for s in steps) / total,
    "pull_share": sum(s["pull_ms"] for s in steps) / total,
    "push_share": sum(s["push_ms"] for s in steps) / total,
    "compute_share": sum(s["compute_ms"] for s in steps) / total,
    "push_bytes_per_step": steps[-1]["push_bytes"],
}
print(json.dumps(out))
EOF
}

for model in "${models[@]}"; do
  steps="$STEPS"
  [[ "$model" == cnn ]] && steps="$CNN_STEPS"
  whole=""
  for schedule in "${schedules[@]}"; do
    run_waited run_one "$model" "$steps" "$schedule" >"$WORK/line"
    line="$(cat "$WORK/line")"
    if [[ "$schedule" == whole ]]; then
      whole="$line"
      echo "$line"
      continue
    fi
    [[ -z "$whole" ]] && { echo "$line"; continue; }
    python3 -c '
import json, sys
whole, other = json.loads(sys.argv[1]), json.loads(sys.argv[2])
other["ratio_vs_whole"] = other["samples_per_sec"] / whole["samples_per_sec"]
print(json.dumps(other))' "$whole" "$line"
  done
done
