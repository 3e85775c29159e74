#!/usr/bin/env python3
"""The cost of ps_train.torch.ServerOptimizer against a local torch.optim.SGD, in the same run.

One worker and one shard (started here, plain SGD, shared memory): the same PyTorch MLP
(784-256-128-10 by default) takes timed steps with a local SGD and then through the shard, in
interleaved rounds. Prints one JSON line per configuration with both rates and their ratio
(`ratio_vs_local`: the shard's step time over the local one; 1.5 is the acceptance bound of
docs/python.md), and per-step timings from StepStats.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_step_bench.py [--batch 32,128]
        [--mode asp --pipeline] [--blas_threads 1]

--pipeline (with --mode ssp or asp) measures ServerOptimizer(pipeline=True): the round trip
overlaps the next step's compute. --blas_threads N runs both loops with N OpenBLAS threads
(torch.set_num_threads does not bound Debian's OpenBLAS, whose idle threads spin on the cores
the shard needs).
"""

import argparse
import json
import os
import subprocess
import tempfile
import time

import sys

import torch

import ps_train.torch as pst

# The example's MLP: the model a user starts from.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from fashion_mnist_mlp import mlp  # noqa: E402  pylint: disable=wrong-import-position


def timed_steps(model, opt, x, y, seconds):
    """Steps for `seconds` (after 20 warm-up steps); returns (steps/s, the StepStats seen)."""
    loss_fn = torch.nn.CrossEntropyLoss()
    seen = []

    def one():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        stats = opt.step()
        if stats is not None:
            seen.append(stats)

    for _ in range(20):
        one()
    seen.clear()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        one()
        steps += 1
    return steps / (time.perf_counter() - start), seen


def start_shard(bin_dir, tmp, shared_memory, mode):
    port_file = os.path.join(tmp, "port")
    proc = subprocess.Popen(
        [os.path.join(bin_dir, "ps_server"), "--num_workers=1", "--port=0",
         f"--port_file={port_file}", "--optimizer=sgd", "--lr=0.01", "--lr_schedule=constant",
         f"--mode={mode}", f"--staleness={1 if mode == 'ssp' else 0}",
         f"--shared_memory={'true' if shared_memory else 'false'}", "--log_level=warn"])
    deadline = time.time() + 30
    while not os.path.exists(port_file):
        if time.time() > deadline or proc.poll() is not None:
            raise SystemExit("python_step_bench: ps_server did not start")
        time.sleep(0.02)
    with open(port_file, encoding="utf-8") as f:
        return proc, f"127.0.0.1:{f.read().strip()}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin_dir", default=os.environ.get("PS_BIN_DIR", "build/bin"))
    parser.add_argument("--batch", default="32,128")
    parser.add_argument("--hidden", default="256,128")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shared_memory", default="true", choices=["true", "false"])
    parser.add_argument("--local_calls", default="true", choices=["true", "false"],
                        help="with shared memory: calls over the shard's local socket, not gRPC")
    parser.add_argument("--mode", default="bsp", choices=["bsp", "ssp", "asp"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (both loops)")
    parser.add_argument("--pipeline", action="store_true",
                        help="ServerOptimizer(pipeline=True); needs --mode ssp or asp")
    parser.add_argument("--blas_threads", type=int, default=0,
                        help="OpenBLAS threads of both loops (0: OpenBLAS's own choice)")
    args = parser.parse_args()
    if args.pipeline and args.mode == "bsp":
        parser.error("--pipeline needs --mode ssp or asp")
    if args.blas_threads > 0 and os.environ.get("OPENBLAS_NUM_THREADS") != str(args.blas_threads):
        # OpenBLAS reads its thread count once, as torch loads it: start again with it set.
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(args.blas_threads))
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    torch.set_num_threads(args.threads)
    hidden = [int(h) for h in args.hidden.split(",") if h]
    with tempfile.TemporaryDirectory() as tmp:
        shard, servers = start_shard(args.bin_dir, tmp, args.shared_memory == "true",
                                     args.mode)
        try:
            pst.init(servers=servers, rank=0, num_workers=1,
                     local_calls=args.local_calls == "true")
            for batch in [int(b) for b in args.batch.split(",")]:
                torch.manual_seed(0)
                x, y = torch.randn(batch, 784), torch.randint(0, 10, (batch,))
                local_model, shard_model = mlp(hidden), mlp(hidden)
                local = torch.optim.SGD(local_model.parameters(), lr=0.01)
                remote = pst.ServerOptimizer(shard_model, batch_size=batch,
                                             pipeline=args.pipeline)
                local_rates, shard_rates, stats = [], [], []
                for _ in range(args.rounds):
                    local_rates.append(timed_steps(local_model, local, x, y, args.seconds)[0])
                    rate, seen = timed_steps(shard_model, remote, x, y, args.seconds)
                    shard_rates.append(rate)
                    stats += seen
                local_best, shard_best = max(local_rates), max(shard_rates)
                print(json.dumps({
                    "bench": "python_step", "mode": args.mode, "pipeline": args.pipeline,
                    "batch": batch, "hidden": args.hidden,
                    "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
                    "params": sum(p.numel() for p in shard_model.parameters()),
                    "shared_memory_shards": remote.shared_memory_shards,
                    "local_calls": args.local_calls == "true",
                    "local_steps_per_s": round(local_best, 1),
                    "shard_steps_per_s": round(shard_best, 1),
                    "ratio_vs_local": round(local_best / shard_best, 3),
                    "round_trip_ms_mean": round(
                        sum(s.round_trip_ms for s in stats) / max(1, len(stats)), 4),
                    "compute_ms_mean": round(
                        sum(s.compute_ms for s in stats) / max(1, len(stats)), 4),
                    "rounds": args.rounds}), flush=True)
            pst.finish(wait_s=0)
        finally:
            shard.terminate()
            shard.wait(timeout=10)


if __name__ == "__main__":
    main()
