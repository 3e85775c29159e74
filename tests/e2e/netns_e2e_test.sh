#!/usr/bin/env bash
# Across hosts: 2 shards and 2 workers, each in its own Linux network namespace (a host with its
# own address on a private /24, joined by veth pairs to a bridge that lives in a fifth namespace;
# nothing is added to the machine's own network). Hosts find each other by name through
# /etc/netns/<ns>/hosts, which `ip netns exec` mounts as /etc/hosts. The job trains the
# foundation issue's benchmark (BSP, MLP, 5 epochs, >= 0.87 test accuracy); meanwhile one
# worker's link is cut (its bridge port down) for 4 s and healed, and the job still finishes.
# Skips (exit 77) where namespaces cannot be made, e.g. when not root. Leaves no process,
# namespace or /etc/netns entry behind, whatever happens.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${PS_BIN_DIR:-$ROOT/build/bin}"
DATA="${PS_DATA_DIR:-/usr/share/datasets/fashion-mnist}"
EPOCHS="${PS_NETNS_EPOCHS:-5}"
BAR="${PS_NETNS_ACCURACY_BAR:-0.87}"
TAG="p$$"                      # unique per run: several runs may share a machine
SW="${TAG}sw"
HOSTS=(ps-0 ps-1 worker-0 worker-1)
NET=10.213.7                   # private, and only inside the namespaces made here
WORK="$(mktemp -d)"
PIDS=()

ns_of() { echo "${TAG}${1//-/}"; }   # ps-0 -> p1234ps0

cleanup() {
  set +e
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  sleep 1
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  for h in "${HOSTS[@]}"; do
    ip netns del "$(ns_of "$h")" 2>/dev/null
    rm -rf "/etc/netns/$(ns_of "$h")"
  done
  ip netns del "$SW" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

if [[ $(id -u) -ne 0 ]] || ! ip netns add "$SW" 2>/dev/null; then
  echo "SKIP: network namespaces cannot be made here (needs root and iproute2)"
  exit 77
fi
[[ -f "$DATA/train-images-idx3-ubyte.gz" ]] || { echo "Fashion-MNIST missing in $DATA" >&2; exit 1; }

# The switch: a bridge in its own namespace.
ip -n "$SW" link add br0 type bridge
ip -n "$SW" link set br0 up
hosts_file="$WORK/hosts"
{ echo "127.0.0.1 localhost"; i=1; for h in "${HOSTS[@]}"; do echo "$NET.$i $h"; i=$((i + 1)); done; } > "$hosts_file"
i=1
for h in "${HOSTS[@]}"; do
  ns="$(ns_of "$h")"
  ip netns add "$ns"
  mkdir -p "/etc/netns/$ns"
  cp "$hosts_file" "/etc/netns/$ns/hosts"
  ip link add "${TAG}h$i" netns "$ns" type veth peer name "${TAG}s$i" netns "$SW"
  ip -n "$ns" link set "${TAG}h$i" name eth0
  ip -n "$ns" addr add "$NET.$i/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip -n "$SW" link set "${TAG}s$i" master br0
  ip -n "$SW" link set "${TAG}s$i" up
  i=$((i + 1))
done
# Names resolve through the hosts file of each namespace.
ip netns exec "$(ns_of worker-0)" getent hosts ps-1 | grep -q "$NET.2" || { echo "no name resolution" >&2; exit 1; }

# The lease outlasts the cut with room to spare. The connections stay up through the cut (the
# keepalive is 20 s), but TCP's retransmission timer doubles while the link is down, so traffic
# resumes up to about 3 s after the heal; with the default 10 s lease a worker whose last beat
# came just before the cut could then expire (its skipped steps are reported and the job fails
# --require_all_work), which is what a longer outage should do, not this one.
common=(--num_workers=2 --mode=bsp --lease_ms=20000)
for s in 0 1; do
  ip netns exec "$(ns_of "ps-$s")" "$BIN/ps_server" --shard_id=$s --num_shards=2 --host=0.0.0.0 \
    --port=5000 "${common[@]}" --optimizer=adam --lr=0.001 --lr_schedule=cosine \
    --decay_updates=$((60000 / 64 * EPOCHS)) > "$WORK/ps-$s.log" 2>&1 &
  PIDS+=($!)
done
# These namespaces stand for hosts, but share one kernel and PID namespace, where workers would
# move payloads through shared memory: --shared_memory=false keeps them on the network.
for r in 0 1; do
  ip netns exec "$(ns_of "worker-$r")" "$BIN/ps_worker" --rank=$r --servers=ps-0:5000,ps-1:5000 \
    --num_workers=2 --epochs="$EPOCHS" --data="fashion-mnist:$DATA" --metrics_file="$WORK/worker-$r.jsonl" \
    --shared_memory=false > "$WORK/worker-$r.log" 2>&1 &
  PIDS+=($!)
done
worker_pids=("${PIDS[2]}" "${PIDS[3]}")

# Once training is under way, cut worker-1's link for 4 s, then heal it.
for _ in $(seq 600); do
  [[ -f "$WORK/worker-1.jsonl" ]] && (($(grep -c '"kind":"step"' "$WORK/worker-1.jsonl") >= 200)) && break
  sleep 0.1
done
(($(grep -c '"kind":"step"' "$WORK/worker-1.jsonl") >= 200)) || { cat "$WORK"/*.log; echo "training did not start" >&2; exit 1; }
before=$(grep -c '"kind":"step"' "$WORK/worker-0.jsonl")
ip -n "$SW" link set "${TAG}s4" down
echo "link of worker-1 down at step $before of worker-0"
sleep 4
during=$(grep -c '"kind":"step"' "$WORK/worker-0.jsonl")
ip -n "$SW" link set "${TAG}s4" up
echo "link healed; worker-0 advanced $((during - before)) steps meanwhile (BSP waits for worker-1)"

for pid in "${worker_pids[@]}"; do
  if ! wait "$pid"; then cat "$WORK"/worker-*.log; echo "a worker failed" >&2; exit 1; fi
done
ip netns exec "$(ns_of worker-0)" "$BIN/ps_worker" --evaluate --servers=ps-0:5000,ps-1:5000 \
  --data="fashion-mnist:$DATA" --summary_out="$WORK/eval.json" > "$WORK/eval.log" 2>&1 || { cat "$WORK/eval.log"; exit 1; }
cat "$WORK/eval.log"
accuracy=$(sed -n 's/.*"test_accuracy":\([0-9.]*\).*/\1/p' "$WORK/eval.json")
for pid in "${PIDS[0]}" "${PIDS[1]}"; do kill -TERM "$pid"; wait "$pid" || { echo "a shard did not stop cleanly" >&2; exit 1; }; done
PIDS=()
python3 -c "import sys; a=float('$accuracy'); sys.exit(0 if a >= $BAR else 1)" || {
  echo "test accuracy $accuracy is below $BAR" >&2; exit 1; }
echo "netns: test accuracy $accuracy >= $BAR across 4 namespaces with a 4 s link cut"
