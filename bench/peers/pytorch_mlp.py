#!/usr/bin/python3
"""The peer reference of ps_bench_train: the same MLP trained with PyTorch on this machine.

Same data (Fashion-MNIST from Debian's dataset-fashion-mnist, normalised as common/data/dataset.cc
does), same model (784 -> 256 -> ReLU -> 128 -> ReLU -> 10, cross-entropy), same per-worker batch,
same optimizer (plain SGD, the shard's default learning rate 0.01) and the same threads per
process. Modes:
  single: one process.
  ddp:    DistributedDataParallel with the gloo backend, --procs processes on loopback; each takes
          its share of the global batch, as ps_worker ranks do.
Prints one JSON line: {"bench":"peer","framework":"pytorch","mode":...,"procs":...,
"samples_per_sec":...}. Needs Debian's python3-torch (scripts/setup.sh installs it with
INSTALL_BENCH_PACKAGES=1).
"""
import argparse
import gzip
import json
import os
import socket
import struct
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

PIXEL_MEAN = 0.2860  # common/data/dataset.cc: kPixelMean, kPixelStddev
PIXEL_STDDEV = 0.3530


def load_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_train(data_dir, limit):
    x = load_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"))[:limit]
    y = load_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"))[:limit]
    x = (x.reshape(len(x), -1).astype(np.float32) / 255.0 - PIXEL_MEAN) / PIXEL_STDDEV
    return torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))


def make_model(hidden):
    layers, width = [], 784
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    layers.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*layers)


def train(rank, args, result_path):
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    procs = args.procs if args.mode == "ddp" else 1
    if args.mode == "ddp":
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % args.port,
                                rank=rank, world_size=procs)
    x, y = load_train(args.data_dir, (args.steps + args.warmup) * args.batch_size * procs)
    model = make_model(args.hidden)
    if args.mode == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    global_batch = args.batch_size * procs

    def step(s):
        begin = s * global_batch + rank * args.batch_size
        xb, yb = x[begin:begin + args.batch_size], y[begin:begin + args.batch_size]
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()

    for s in range(args.warmup):
        step(s)
    if args.mode == "ddp":
        dist.barrier()
    start = time.perf_counter()
    for s in range(args.warmup, args.warmup + args.steps):
        step(s)
    if args.mode == "ddp":
        dist.barrier()
    elapsed = time.perf_counter() - start
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump({"bench": "peer", "framework": "pytorch", "torch": torch.__version__,
                       "mode": args.mode, "procs": procs, "threads": args.threads,
                       "batch_size": args.batch_size, "steps": args.steps,
                       "samples_per_sec": args.steps * global_batch / elapsed}, f)
    if args.mode == "ddp":
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["single", "ddp"], default="single")
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--hidden", default="256,128")
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args()
    args.hidden = [int(h) for h in args.hidden.split(",")]
    if args.steps < 1 or args.batch_size < 1 or args.threads < 1 or args.procs < 1:
        sys.exit("--steps, --batch_size, --threads and --procs must be >= 1")
    fd, result_path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    if args.mode == "ddp":
        args.port = free_port()
        mp.spawn(train, args=(args, result_path), nprocs=args.procs, join=True)
    else:
        train(0, args, result_path)
    with open(result_path) as f:
        print(f.read())
    os.remove(result_path)


if __name__ == "__main__":
    main()
