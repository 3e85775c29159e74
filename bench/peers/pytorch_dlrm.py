#!/usr/bin/python3
"""The peer reference of the recommender: a PyTorch DLRM of the same shape as the project's
`dlrm` model, trained one epoch in one process and one thread on the same Criteo-format files.

Model (common/nn/dlrm_model.cc): dense counts -> log1p(max(c, 0)) -> bottom MLP 13 -> 64 -> D
(ReLU after each) ; 26 categorical fields, each an embedding row of width D (one table per field,
nn.Embedding(sparse=True), a row per distinct value seen in training plus one for values unseen
or empty); the dot products of the 27 vectors' pairs joined to the dense vector -> top MLP -> 64
-> 1 -> logistic loss. Optimizers as the shards' defaults: Adam (lr 0.001, cosine decay to 0 at
the last step) for the dense part, Adagrad (lr 0.01) for the rows, global batch --batch.

Prints one JSON line: {"bench":"peer","framework":"pytorch","model":"dlrm","samples":...,
"train_seconds":...,"samples_per_sec":...,"test_auc":...,"test_logloss":...}. Needs Debian's
python3-torch (scripts/setup.sh installs it with INSTALL_BENCH_PACKAGES=1).
"""
import argparse
import gzip
import json
import math
import os
import time

import numpy as np
import torch

DENSE = 13
FIELDS = 26


def open_split(folder, split):
    plain = os.path.join(folder, split + ".tsv")
    if os.path.exists(plain):
        return open(plain, "rt")
    return gzip.open(plain + ".gz", "rt")


def read_split(folder, split, vocab, limit):
    """Labels, log1p counts and per-field value indices (0: unseen or empty). Builds `vocab`
    (one dict per field) from the training split."""
    labels, dense, cats = [], [], []
    building = split == "train"
    with open_split(folder, split) as f:
        for n, line in enumerate(f):
            if limit and n >= limit:
                break
            parts = line.rstrip("\n").split("\t")
            labels.append(int(parts[0]))
            dense.append([math.log1p(max(int(x), 0)) if x else 0.0 for x in parts[1:1 + DENSE]])
            row = []
            for i, value in enumerate(parts[1 + DENSE:]):
                if not value:
                    row.append(0)
                    continue
                table = vocab[i]
                index = table.get(value)
                if index is None:
                    if building:
                        index = len(table) + 1
                        table[value] = index
                    else:
                        index = 0
                row.append(index)
            cats.append(row)
    return (torch.tensor(labels, dtype=torch.float32), torch.tensor(dense, dtype=torch.float32),
            torch.tensor(cats, dtype=torch.int64))


class Dlrm(torch.nn.Module):
    def __init__(self, vocab_sizes, dim):
        super().__init__()
        self.bottom = torch.nn.Sequential(torch.nn.Linear(DENSE, 64), torch.nn.ReLU(),
                                          torch.nn.Linear(64, dim), torch.nn.ReLU())
        self.tables = torch.nn.ModuleList(
            [torch.nn.Embedding(n + 1, dim, sparse=True) for n in vocab_sizes])
        for t in self.tables:
            torch.nn.init.uniform_(t.weight, -0.05, 0.05)
        vectors = FIELDS + 1
        self.pairs = torch.tril_indices(vectors, vectors, offset=-1)
        self.top = torch.nn.Sequential(torch.nn.Linear(dim + vectors * (vectors - 1) // 2, 64),
                                       torch.nn.ReLU(), torch.nn.Linear(64, 1))

    def forward(self, dense, cats):
        z = self.bottom(dense)
        vectors = torch.stack([z] + [t(cats[:, i]) for i, t in enumerate(self.tables)], dim=1)
        dots = torch.bmm(vectors, vectors.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([z, dots], dim=1)).squeeze(1)


def auc(scores, labels):
    order = np.argsort(scores, kind="mergesort")
    s, y = scores[order], labels[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):  # average ranks of ties
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        ranks[i:j] = 0.5 * (i + 1 + j)
        i = j
    positives = y.sum()
    negatives = len(y) - positives
    return (ranks[y == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True, help="folder of train.tsv[.gz] and test.tsv[.gz]")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--train_limit", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    vocab = [dict() for _ in range(FIELDS)]
    y, x, c = read_split(args.data, "train", vocab, args.train_limit)
    ty, tx, tc = read_split(args.data, "test", vocab, 0)
    model = Dlrm([len(v) for v in vocab], args.dim)
    dense_params = list(model.bottom.parameters()) + list(model.top.parameters())
    dense_opt = torch.optim.Adam(dense_params, lr=0.001)
    sparse_opt = torch.optim.Adagrad(list(model.tables.parameters()), lr=0.01)
    steps = len(y) // args.batch
    schedule = torch.optim.lr_scheduler.LambdaLR(
        dense_opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    loss_fn = torch.nn.BCEWithLogitsLoss()
    order = torch.randperm(len(y))
    start = time.perf_counter()
    for step in range(steps):
        batch = order[step * args.batch:(step + 1) * args.batch]
        dense_opt.zero_grad()
        sparse_opt.zero_grad()
        loss = loss_fn(model(x[batch], c[batch]), y[batch])
        loss.backward()
        dense_opt.step()
        sparse_opt.step()
        schedule.step()
    seconds = time.perf_counter() - start
    with torch.no_grad():
        p = torch.sigmoid(model(tx, tc)).numpy().astype(np.float64)
    labels = ty.numpy()
    eps = 1e-7
    q = np.clip(p, eps, 1 - eps)
    logloss = float(-np.mean(labels * np.log(q) + (1 - labels) * np.log(1 - q)))
    print(json.dumps({"bench": "peer", "framework": "pytorch", "model": "dlrm",
                      "samples": steps * args.batch, "train_seconds": seconds,
                      "samples_per_sec": steps * args.batch / seconds,
                      "test_auc": float(auc(p, labels)), "test_logloss": logloss}))


if __name__ == "__main__":
    main()
