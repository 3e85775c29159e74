#!/usr/bin/env bash
# The README's container cluster, for real: builds the image and runs
#   docker-compose -f deploy/compose/docker-compose.yml up --build --abort-on-container-exit summary
# then the faults an operator meets, asserting what the job reports each time:
#   1. undisturbed: test accuracy >= 0.87 and all 18 720 gradients applied (2 shards x 4 workers
#      x 2340 steps: 5 epochs of batch 32);
#   2. a worker's process killed with SIGKILL from the host: Docker restarts the container, the
#      worker resumes, nothing is lost;
#   3. a shard killed (`docker kill`) and started again by hand 45 s, 45 s and 90 s later: the
#      workers wait for it, nothing is lost;
#   4. a worker container removed by an operator (`docker kill`): the summary still runs, names
#      the exact samples skipped, and the command exits 3 (BSP requires all work);
#   5. `up` again over the checkpoints of the finished job: refused with a message, exit 1;
# and between 1 and 5, a short language-model job in the image on its own corpus, and Python
# workers (the image's `python` target) through deploy/compose/docker-compose.python.yml.
#
# It brings what it needs and leaves nothing running: Debian's docker.io and docker-compose
# (scripts/setup.sh with INSTALL_TEST_PACKAGES=1 installs them), and a dockerd of its own (own
# socket, data root, exec root and pid file under $PS_COMPOSE_WORK, stopped by its pid at the
# end). Offline fallback: when the base images debian:12 and debian:12-slim are not in that
# dockerd, they are made with `debootstrap --variant=minbase bookworm` from the machine's apt
# mirror and `docker import` (a machine that reaches a container registry would pull them; this
# project's machines reach only Debian's). The data root persists in $PS_COMPOSE_WORK, so a
# second run reuses the base images and the build cache. Needs root. Run by ctest
# ("compose_e2e_test", label "docker"); about 14 minutes on a 2-core machine: 7 for debootstrap and
# the image build where nothing is cached, 4 for the outages of scenario 3.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
WORK="${PS_COMPOSE_WORK:-$ROOT/build/compose-e2e}"
PROJECT="pse2e"
COMPOSE_FILE="$ROOT/deploy/compose/docker-compose.yml"

if [[ $(id -u) -ne 0 ]]; then
  echo "compose_e2e_test: needs root (its own dockerd); skipped" >&2
  exit 77
fi
for tool in dockerd docker-compose debootstrap python3; do
  command -v "$tool" >/dev/null || {
    echo "compose_e2e_test: $tool is missing (INSTALL_TEST_PACKAGES=1 scripts/setup.sh installs it)" >&2
    exit 1
  }
done
# The client of the same release as the daemon (Debian's), whatever else is on the PATH.
DOCKER=/usr/bin/docker
[[ -x "$DOCKER" ]] || DOCKER="$(command -v docker)"

mkdir -p "$WORK"
export DOCKER_HOST="unix://$WORK/docker.sock"
DOCKERD_PID=""
failures=0
pass() { echo "PASS  $1"; }
fail() { echo "FAIL  $1"; failures=$((failures + 1)); }
compose() { docker-compose -p "$PROJECT" -f "$COMPOSE_FILE" "$@"; }

# The bridge dockerd makes, removed at the end unless it was there before.
BRIDGE_EXISTED=0
ip link show docker0 >/dev/null 2>&1 && BRIDGE_EXISTED=1
cleanup() {
  set +e
  if [[ -n "$DOCKERD_PID" ]]; then
    compose down -v --remove-orphans >/dev/null 2>&1
    kill "$DOCKERD_PID" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$DOCKERD_PID" 2>/dev/null
    if ((BRIDGE_EXISTED == 0)); then ip link delete docker0 2>/dev/null; fi
  fi
}
trap cleanup EXIT

# --- A dockerd of our own.
if [[ -f "$WORK/docker.pid" ]] && kill -0 "$(cat "$WORK/docker.pid")" 2>/dev/null; then
  echo "compose_e2e_test: a dockerd of an earlier run is still up (pid $(cat "$WORK/docker.pid")); stop it first" >&2
  exit 1
fi
dockerd --data-root "$WORK/data" --exec-root "$WORK/exec" --pidfile "$WORK/docker.pid" \
  --host "$DOCKER_HOST" >"$WORK/dockerd.log" 2>&1 &
DOCKERD_PID=$!
for _ in $(seq 1 150); do
  "$DOCKER" version >/dev/null 2>&1 && break
  kill -0 "$DOCKERD_PID" 2>/dev/null || { echo "dockerd died:"; tail -20 "$WORK/dockerd.log"; exit 1; }
  sleep 0.2
done
"$DOCKER" version >/dev/null || { echo "dockerd did not answer:"; tail -20 "$WORK/dockerd.log"; exit 1; }

# --- Base images (offline fallback).
if ! "$DOCKER" image inspect debian:12 >/dev/null 2>&1 ||
  ! "$DOCKER" image inspect debian:12-slim >/dev/null 2>&1; then
  mirror="$(sed -n 's/^URIs: *\([^ ]*debian\/\?\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)"
  [[ -n "$mirror" ]] || mirror="$(awk '$1 == "deb" && $2 ~ /debian\/?$/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null)"
  mirror="${mirror:-http://deb.debian.org/debian}"
  echo "compose_e2e_test: making debian:12 from debootstrap --variant=minbase bookworm $mirror"
  rm -rf "$WORK/rootfs"
  debootstrap --variant=minbase bookworm "$WORK/rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1 ||
    { tail -20 "$WORK/debootstrap.log"; exit 1; }
  tar -C "$WORK/rootfs" -c . | "$DOCKER" import - debian:12 >/dev/null
  "$DOCKER" tag debian:12 debian:12-slim
  rm -rf "$WORK/rootfs"
fi

# --- Helpers over one compose run.
volume_dir() { "$DOCKER" volume inspect -f '{{.Mountpoint}}' "${PROJECT}_$1"; }
summary_json() {
  # --pull never: the image is ours; no registry is asked for anything.
  "$DOCKER" run --rm --pull never --entrypoint cat -v "${PROJECT}_runs:/runs" ps-train:cpu \
    /runs/summary.json
}
# step_of RANK: the last step the worker of that rank logged (0 before any; a worker that
# registered again after a shard restart logs the steps it redoes once more).
step_of() {
  local f step
  f="$(volume_dir runs 2>/dev/null)/worker-$1.jsonl"
  step="$(grep -o '"kind":"step","rank":[0-9]*,"step":[0-9]*' "$f" 2>/dev/null | tail -1 | sed 's/.*://')"
  echo "${step:-0}"
}
# wait_steps RANK N: until the worker has logged step N (at most 300 s).
wait_steps() {
  for _ in $(seq 1 1500); do
    (($(step_of "$1") >= $2)) && return 0
    sleep 0.2
  done
  echo "worker $1 did not reach step $2" >&2
  return 1
}
UP_PID=""
# The README's command in the background; its output in $WORK/<name>.log.
start_up() {
  LAST="$1"
  compose up --build --abort-on-container-exit summary >"$WORK/$1.log" 2>&1 &
  UP_PID=$!
}
# Sets rc to the background command's exit code.
wait_up() {
  rc=0
  wait "$UP_PID" || rc=$?
}
# Every container's log of the last run goes to $WORK/<name>.containers.log, then all goes.
LAST=""
fresh() {
  [[ -n "$LAST" ]] && compose logs --no-color --timestamps >"$WORK/$LAST.containers.log" 2>&1
  compose down -v --remove-orphans >/dev/null 2>&1 || true
}
# check_all_work NAME: the summary has accuracy >= 0.87 and all 18 720 gradients applied.
check_all_work() {
  local name="$1" json
  json="$(summary_json || true)"
  if python3 - "$json" <<'PY'; then pass "$name"; else fail "$name"; fi
import json, sys
s = json.loads(sys.argv[1])
print(f"      test_accuracy {s['test_accuracy']:.4f}, gradients {s['gradients_applied']} of "
      f"{s['gradients_expected']}, samples skipped {s['samples_skipped']}")
ok = (s["test_accuracy"] >= 0.87 and s["gradients_expected"] == 18720
      and s["gradients_applied"] == 18720 and s["samples_skipped"] == 0)
sys.exit(0 if ok else 1)
PY
}

# --- 1. Undisturbed: the README's command, with the image build.
fresh
start=$(date +%s)
start_up plain
wait_up
echo "      build and training: $(($(date +%s) - start)) s"
if [[ "$rc" == 0 ]]; then pass "compose up exits 0"; else fail "compose up exits 0 (got $rc)"; tail -30 "$WORK/plain.log"; fi
check_all_work "undisturbed: accuracy >= 0.87, every gradient applied"
# The clusters train as scripts/run.sh does: the shards report the cosine schedule's end, the
# run's last update (2340 BSP steps).
decay="$( (summary_json || echo '{}') | python3 -c 'import json,sys; print(json.load(sys.stdin).get("decay_updates"))')"
if [[ "$decay" == 2340 ]]; then pass "cosine schedule ends at update 2340"; else fail "decay_updates $decay, not 2340"; fi

# --- 1b. The image carries the language model's corpus: a short gpt job inside it, on the
# default `--data text` (data/text/kjv.txt relative to the image's working folder).
rc=0
"$DOCKER" run --rm --pull never --entrypoint /usr/local/bin/ps_launch ps-train:cpu \
  --model gpt --data text --layers 1 --heads 2 --dim 32 --context 32 --batch_size 4 --steps 20 \
  --shards 1 --workers 1 --mode bsp --metrics_dir /tmp/gpt >"$WORK/gpt.log" 2>&1 || rc=$?
if [[ "$rc" == 0 ]] && grep -q "work: 20 of 20 gradients applied" "$WORK/gpt.log"; then
  pass "the image trains the language model on its own corpus"
else
  fail "the image trains the language model on its own corpus (exit $rc)"; tail -20 "$WORK/gpt.log"
fi

# --- 1c. Python workers (docs/python.md): deploy/compose/docker-compose.python.yml builds the
# image's `python` target and trains the PyTorch example through 2 shards with 2 workers, one
# epoch of 12 000 images; rank 0 prints the test accuracy and the work account.
rc=0
PS_EPOCHS=1 PS_TRAIN_LIMIT=12000 docker-compose -p "${PROJECT}py" \
  -f "$ROOT/deploy/compose/docker-compose.python.yml" up --build --abort-on-container-exit \
  --exit-code-from worker-0 worker-0 >"$WORK/python.log" 2>&1 || rc=$?
docker-compose -p "${PROJECT}py" -f "$ROOT/deploy/compose/docker-compose.python.yml" \
  down -v --remove-orphans >/dev/null 2>&1 || true
line="$(grep -o 'test_accuracy [0-9.]*  max_staleness [0-9]*  gradients [0-9]*/[0-9]*' \
  "$WORK/python.log" | tail -1 || true)"
echo "      $line"
# 12 000 images, 2 workers of batch 32: 187 steps each, on both shards.
if [[ "$rc" == 0 ]] && python3 - "$line" <<'PY'; then
import sys
parts = sys.argv[1].split()
accuracy, gradients = float(parts[1]), parts[5]
sys.exit(0 if accuracy >= 0.75 and gradients == "748/748" else 1)
PY
  pass "Python workers train in compose (docker-compose.python.yml)"
else
  fail "Python workers train in compose (exit $rc)"; tail -30 "$WORK/python.log"
fi

# --- 5. up again over the finished job's checkpoints: refused, not reprinted as new.
LAST=again
rc=0
compose up --abort-on-container-exit summary >"$WORK/again.log" 2>&1 || rc=$?
if [[ "$rc" == 1 ]] && grep -q "hold a job that had already finished" "$WORK/again.log"; then
  pass "a second up over a finished job is refused"
else
  fail "a second up over a finished job is refused (exit $rc)"; tail -20 "$WORK/again.log"
fi

# --- 2. A worker's process killed with SIGKILL from the host.
fresh
start_up worker_sigkill
wait_steps 2 400
pid="$("$DOCKER" inspect -f '{{.State.Pid}}' "${PROJECT}_worker-2_1")"
kill -9 "$pid"
wait_up
restarts="$("$DOCKER" inspect -f '{{.RestartCount}}' "${PROJECT}_worker-2_1")"
if [[ "$rc" == 0 && "$restarts" -ge 1 ]]; then
  pass "SIGKILLed worker restarted by Docker ($restarts restart), compose exits 0"
else
  fail "SIGKILLed worker: exit $rc, restarts $restarts"; tail -30 "$WORK/worker_sigkill.log"
fi
check_all_work "SIGKILLed worker: accuracy >= 0.87, every gradient applied"

# --- 3. A shard killed and started again by hand, three times: 45 s, 45 s, 90 s.
fresh
start_up shard_outages
for outage in 45:300 45:900 90:1500; do
  seconds="${outage%%:*}"
  wait_steps 0 "${outage##*:}"
  "$DOCKER" kill "${PROJECT}_ps-1_1" >/dev/null
  sleep 3
  if [[ "$("$DOCKER" inspect -f '{{.State.Running}}' "${PROJECT}_ps-1_1")" != false ]]; then
    fail "ps-1 should stay down after docker kill (a manual stop) until docker start"
  fi
  sleep $((seconds - 3))
  "$DOCKER" start "${PROJECT}_ps-1_1" >/dev/null
  echo "      ps-1 was down ${seconds} s from worker 0's step ${outage##*:}"
done
wait_up
if [[ "$rc" == 0 ]]; then pass "shard outages: compose exits 0"; else fail "shard outages: exit $rc"; tail -30 "$WORK/shard_outages.log"; fi
check_all_work "shard outages of 45, 45 and 90 s: accuracy >= 0.87, every gradient applied"

# --- 4. An operator removes a worker container: a summary with the exact skipped samples.
fresh
start_up worker_removed
wait_steps 3 600
"$DOCKER" kill "${PROJECT}_worker-3_1" >/dev/null
wait_up
json="$(summary_json || true)"
if [[ "$rc" == 3 ]] && python3 - "$json" <<'PY'; then
import json, sys
s = json.loads(sys.argv[1])
w = s["work"][3]
print(f"      worker 3 {w['state']}: {w['steps_skipped']} steps, {w['samples_skipped']} samples "
      f"skipped; {s['gradients_applied']} of {s['gradients_expected']} gradients applied")
ok = (w["state"] == "gone" and w["steps_skipped"] > 0
      and w["samples_skipped"] == 32 * w["steps_skipped"]
      and s["samples_skipped"] == w["samples_skipped"]
      and all(s["work"][r]["samples_skipped"] == 0 for r in range(3))
      and s["gradients_expected"] == 18720)
sys.exit(0 if ok else 1)
PY
  pass "removed worker: summary names the skipped samples, compose exits 3"
else
  fail "removed worker: exit $rc (want 3), summary: $json"; tail -30 "$WORK/worker_removed.log"
fi
grep -q "work: worker 3 (gone) skipped" "$WORK/worker_removed.log" ||
  fail "the summary's output does not name worker 3's skipped work"

fresh
if ((failures > 0)); then echo "compose_e2e_test: $failures failed"; exit 1; fi
echo "compose_e2e_test: every scenario passed"
