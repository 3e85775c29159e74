"""One worker of the tests' jobs: trains a small MLP on the tests' synthetic data through
ps_train.torch and saves its final parameters (flattened, in order) as a .npy file.

    sgd_worker.py --servers H:P,H:P --rank R --num_workers W --steps T --batch B --out F.npy
        [--accumulate K] [--overlap] [--pipeline] [--sleep_s S]

Worker r's micro-batch of step t is rows [(t*W*K + k*W + r) * B, ... + B) of the data (micro-batch
k of K): together the W workers' K micro-batches of step t are rows [t*W*K*B, (t+1)*W*K*B), the
batch the single-process reference of the tests takes at its step t.
"""

import argparse
import time

import numpy as np
import torch

import ps_train.torch as pst
from ps_train_testdata import (EMBEDDING_DIM, SparseNet, key_values, make_data, make_model,
                               make_sparse_data)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--servers", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--num_workers", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--overlap", action="store_true")
    p.add_argument("--pipeline", action="store_true")
    p.add_argument("--min_part_bytes", type=int, default=256 << 10)
    p.add_argument("--sleep_s", type=float, default=0.0, help="per step: a slow worker")
    p.add_argument("--sparse", action="store_true",
                   help="train SparseNet, its table on the shards; --out also gets the rows")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    torch.set_num_threads(1)
    pst.init(servers=args.servers, rank=args.rank, num_workers=args.num_workers)
    if args.sparse:
        x, y = make_sparse_data()
        x = key_values()[x]  # the keys themselves
        model = SparseNet(pst.Embedding("items", EMBEDDING_DIM, init_scale=0.1))
    else:
        x, y = make_data()
        model = make_model()
    opt = pst.ServerOptimizer(model, accumulate=args.accumulate, overlap=args.overlap,
                              batch_size=args.batch, min_part_bytes=args.min_part_bytes,
                              pipeline=args.pipeline)
    w, k, b = args.num_workers, args.accumulate, args.batch
    max_staleness = 0
    for t in range(args.steps):
        for m in range(k):
            first = (t * w * k + m * w + args.rank) * b
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[first:first + b]),
                                              y[first:first + b]).backward()
            stats = opt.step()
            max_staleness = max(max_staleness, stats.staleness)
            if args.sleep_s > 0:
                time.sleep(args.sleep_s)
    pst.finish()
    flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
    if args.sparse:
        flat = torch.cat([flat, model.embedding.read(key_values()).reshape(-1)])
    np.save(args.out, flat.numpy())
    print(f"rank {args.rank} max_staleness {max_staleness}", flush=True)


if __name__ == "__main__":
    main()
