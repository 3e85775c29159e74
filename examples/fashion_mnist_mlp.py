#!/usr/bin/env python3
"""Trains a PyTorch MLP on Fashion-MNIST through the parameter-server shards.

Each worker runs this script (ps_launch --python does it for every rank):

    ps_launch --workers 3 --mode ssp --staleness 2 --optimizer adam --lr 0.001 \\
        --python examples/fashion_mnist_mlp.py -- --epochs 5

The shards hold the weights and apply the updates with their optimizer; this script only
computes gradients, and a worker started again (Docker, Kubernetes) resumes at the step the
shards hold for its rank. Worker r trains on every W-th sample of each epoch's shuffled order,
starting at r, so the W workers together see each sample once per epoch. Rank 0 measures the final
weights on the test set and prints `test_accuracy A` (and writes --result as JSON); with
--eval_each_epoch it also measures its weights after each epoch, the run's curve.
"""

import argparse
import concurrent.futures
import functools
import gzip
import json
import os
import time

import numpy as np
import torch

import ps_train.torch as pst


def read_idx(path):
    """An IDX file (gzipped or not) as a numpy array of its shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if data[0] != 0 or data[1] != 0 or data[2] != 8:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(folder, split, limit):
    prefix = "train" if split == "train" else "t10k"
    names = [f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"]
    paths = []
    for name in names:
        for candidate in (os.path.join(folder, name + ".gz"), os.path.join(folder, name)):
            if os.path.exists(candidate):
                paths.append(candidate)
                break
        else:
            raise SystemExit(f"fashion_mnist_mlp: {name}[.gz] not in {folder} "
                             "(Debian's dataset-fashion-mnist installs it)")
    images = torch.from_numpy(read_idx(paths[0]).reshape(-1, 784).astype(np.float32) / 255.0)
    labels = torch.from_numpy(read_idx(paths[1]).astype(np.int64))
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    return images, labels


def mlp(hidden):
    layers, width = [], 784
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    layers.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*layers)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    # The defaults come from PS_EPOCHS, PS_BATCH_SIZE and PS_SEED when set (a cluster's ConfigMap).
    parser.add_argument("--epochs", type=int, default=int(os.environ.get("PS_EPOCHS", 5)))
    parser.add_argument("--batch_size", type=int,
                        default=int(os.environ.get("PS_BATCH_SIZE", 32)))
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--hidden", default="256,128")
    parser.add_argument("--overlap", action="store_true")
    parser.add_argument("--pipeline", action="store_true",
                        help="SSP (bound >= 1) or ASP: compute the next step while this one "
                        "travels")
    parser.add_argument("--train_limit", type=int, default=0)
    parser.add_argument("--test_limit", type=int, default=0)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("PS_SEED", 1)))
    parser.add_argument("--result", default="", help="rank 0 writes its result here as JSON")
    parser.add_argument("--eval_each_epoch", action="store_true",
                        help="rank 0 measures its weights on the test set after each epoch, "
                             "on a thread beside training (the run's curve in ps_launch's "
                             "metrics)")
    args = parser.parse_args()

    torch.set_num_threads(1)  # one core per worker process
    info = pst.init()  # PS_SERVERS, PS_RANK, PS_NUM_WORKERS from ps_launch
    rank, workers = info["rank"], max(1, info["num_workers"])
    train_x, train_y = load(args.data, "train", args.train_limit)
    test_x, test_y = load(args.data, "test", args.test_limit) if rank == 0 else (None, None)
    torch.manual_seed(args.seed)  # every rank starts alike; the first to reach the shards wins
    hidden = [int(h) for h in args.hidden.split(",") if h]
    model = mlp(hidden)
    per_step = args.batch_size * args.accumulate
    steps_per_epoch = len(train_x) // (workers * per_step)
    opt = pst.ServerOptimizer(model, accumulate=args.accumulate, overlap=args.overlap,
                              pipeline=args.pipeline, batch_size=args.batch_size,
                              steps=steps_per_epoch * args.epochs)
    loss_fn = torch.nn.CrossEntropyLoss()

    def evaluate(net):
        with torch.no_grad():
            logits = net(test_x)
            return ((logits.argmax(1) == test_y).float().mean().item(),
                    loss_fn(logits, test_y).item())

    # Rank 0's evaluations during training run on a thread of their own, on a copy of the weights
    # it pulled last, stamped with the run's point when they were taken. On the training thread
    # they would pause rank 0 while the others push: under SSP and ASP its next gradient would be
    # stale by all their updates meanwhile, and a sweep would measure its own evaluations as
    # staleness (ps_worker evaluates beside training too).
    evaluator = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    evaluations = []
    eval_model = mlp(hidden) if rank == 0 else None

    def evaluate_and_report(weights, point):
        eval_model.load_state_dict(weights)
        accuracy, test_loss = evaluate(eval_model)
        pst.report_eval(at=point, test_accuracy=accuracy, test_loss=test_loss)

    @functools.lru_cache(maxsize=2)
    def samples_of_epoch(epoch):
        """This rank's samples of an epoch, in order: a function of the seed and the epoch."""
        order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(
            args.seed * 1000 + epoch))
        return order[rank::workers]

    def samples_of(step):
        """This rank's samples of a step, the same whenever the step runs."""
        epoch, index = divmod(step, steps_per_epoch)
        return samples_of_epoch(epoch)[index * per_step:(index + 1) * per_step]

    start = time.time()
    max_staleness = 0
    loss_sum, batches = 0.0, 0
    total = steps_per_epoch * args.epochs
    # Driven by the shards' clock for this rank, not a count of its own: a restarted worker
    # resumes where the shards hold it, and when shards go back to an older checkpoint
    # (ps_launch --rollback_shards) the steps they lost are redone on the same samples.
    while opt.clock < total:
        step = opt.clock
        samples = samples_of(step)
        for i in range(0, per_step, args.batch_size):
            batch = samples[i:i + args.batch_size]
            opt.zero_grad()
            loss = loss_fn(model(train_x[batch]), train_y[batch])
            loss.backward()
            stats = opt.step(loss=loss)  # into the step lines: the summary's train_loss
            max_staleness = max(max_staleness, stats.staleness)
            loss_sum += loss.item()
            batches += 1
        if (step + 1) % steps_per_epoch != 0 or opt.clock != step + 1:
            continue
        epoch = (step + 1) // steps_per_epoch
        print(f"rank {rank} epoch {epoch} train_loss "
              f"{loss_sum / max(1, batches):.4f} "
              f"elapsed {time.time() - start:.1f}s", flush=True)
        loss_sum, batches = 0.0, 0
        if rank == 0 and args.eval_each_epoch:
            weights = {name: value.detach().clone() for name, value in model.state_dict().items()}
            evaluations.append(evaluator.submit(evaluate_and_report, weights, pst.eval_point()))
    work = pst.finish()  # rank 0: waits for the others; its parameters hold the final weights
    evaluator.shutdown()
    for evaluation in evaluations:
        evaluation.result()  # an evaluation's error ends the script here
    if rank != 0:
        return
    accuracy, test_loss = evaluate(model)
    pst.report_result(test_accuracy=accuracy, test_loss=test_loss)  # into ps_launch's summary
    print(f"test_accuracy {accuracy:.4f}  max_staleness {max_staleness}  "
          f"gradients {work['gradients_applied']}/{work['gradients_expected']}", flush=True)
    if args.result:
        with open(args.result, "w", encoding="utf-8") as f:
            json.dump({"test_accuracy": accuracy, "max_staleness": max_staleness,
                       "work": work, "status": pst.status()}, f)


if __name__ == "__main__":
    main()
