#!/usr/bin/python3
"""The PyTorch reference of the project's `gpt` model (common/nn/gpt_model.cc), written over the
project's own parameter layout so that the same flat weights load into both.

  pytorch_gpt.py --train --data FILE [--layers 4 --heads 4 --dim 128 --context 64 --batch 12
                 --steps 2000 --lr 0.001 --weight_decay 0.01 --clip 1.0 --seed 1]
      Trains the same model the way the project does (the first 90 % of the file's characters,
      windows drawn at random positions, AdamW with a cosine decay to 0 over the steps, global
      gradient-norm clipping; one process, one thread) and prints one JSON line:
      {"bench":"peer","framework":"pytorch","model":"gpt","tokens":...,"train_seconds":...,
       "tokens_per_sec":...,"train_loss":...,"val_loss":...}; val_loss is the mean cross
      entropy (nats per character) over the last 10 % cut into windows of --context.

  pytorch_gpt.py --check DIR
      Reads DIR/meta.json ({"vocab","context","layers","heads","dim","batch"}), DIR/params.f32
      (the flat weights in the project's layout), DIR/tokens.i32 and DIR/labels.i32 (batch x
      context each); writes DIR/torch.f32: the logits (batch x context x vocab), the mean cross
      entropy over the tokens, and its gradient with respect to every weight (the layout's
      order), all float32, computed in float64. tests/common/nn/gpt_torch_parity_test.cc compares
      them with the project's.

The layout (model_registry.h): wte (vocab, dim), wpe (context, dim); per block h<l>: ln1.weight,
ln1.bias, attn.weight (dim, 3 dim: queries, keys, values), attn.bias, attn_proj.weight (dim,
dim), attn_proj.bias, ln2.weight, ln2.bias, fc.weight (dim, 4 dim), fc.bias, fc_proj.weight
(4 dim, dim), fc_proj.bias; ln_f.weight, ln_f.bias; lm_head.weight (dim, vocab). Weights are
(in, out): y = x W + b. Needs Debian's python3-torch.
"""
import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F


def layout(vocab, context, layers, dim):
    shapes = [("wte", (vocab, dim)), ("wpe", (context, dim))]
    c = dim
    for l in range(layers):
        n = "h%d." % l
        shapes += [(n + "ln1.weight", (c,)), (n + "ln1.bias", (c,)),
                   (n + "attn.weight", (c, 3 * c)), (n + "attn.bias", (3 * c,)),
                   (n + "attn_proj.weight", (c, c)), (n + "attn_proj.bias", (c,)),
                   (n + "ln2.weight", (c,)), (n + "ln2.bias", (c,)),
                   (n + "fc.weight", (c, 4 * c)), (n + "fc.bias", (4 * c,)),
                   (n + "fc_proj.weight", (4 * c, c)), (n + "fc_proj.bias", (c,))]
    shapes += [("ln_f.weight", (c,)), ("ln_f.bias", (c,)), ("lm_head.weight", (c, vocab))]
    return shapes


def unflatten(flat, shapes, dtype):
    tensors, at = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        tensors[name] = torch.tensor(flat[at:at + n].reshape(shape), dtype=dtype,
                                     requires_grad=True)
        at += n
    if at != len(flat):
        raise SystemExit("params.f32 holds %d floats, the layout %d" % (len(flat), at))
    return tensors


def forward(p, tokens, layers, heads):
    """Logits (batch, context, vocab) of the model over `tokens` (batch, context)."""
    b, t = tokens.shape
    x = p["wte"][tokens] + p["wpe"][:t]
    c = x.shape[-1]
    hd = c // heads
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for l in range(layers):
        n = "h%d." % l
        h = F.layer_norm(x, (c,), p[n + "ln1.weight"], p[n + "ln1.bias"], eps=1e-5)
        qkv = h @ p[n + "attn.weight"] + p[n + "attn.bias"]
        q, k, v = qkv.split(c, dim=-1)
        q, k, v = (z.view(b, t, heads, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + y @ p[n + "attn_proj.weight"] + p[n + "attn_proj.bias"]
        h = F.layer_norm(x, (c,), p[n + "ln2.weight"], p[n + "ln2.bias"], eps=1e-5)
        h = F.gelu(h @ p[n + "fc.weight"] + p[n + "fc.bias"], approximate="tanh")
        x = x + h @ p[n + "fc_proj.weight"] + p[n + "fc_proj.bias"]
    x = F.layer_norm(x, (c,), p["ln_f.weight"], p["ln_f.bias"], eps=1e-5)
    return x @ p["lm_head.weight"]


def check(folder):
    meta = json.load(open(os.path.join(folder, "meta.json")))
    shapes = layout(meta["vocab"], meta["context"], meta["layers"], meta["dim"])
    flat = np.fromfile(os.path.join(folder, "params.f32"), dtype=np.float32)
    p = unflatten(flat.astype(np.float64), shapes, torch.float64)
    shape = (meta["batch"], meta["context"])
    tokens = torch.tensor(np.fromfile(os.path.join(folder, "tokens.i32"), dtype=np.int32)
                          .reshape(shape), dtype=torch.long)
    labels = torch.tensor(np.fromfile(os.path.join(folder, "labels.i32"), dtype=np.int32)
                          .reshape(shape), dtype=torch.long)
    logits = forward(p, tokens, meta["layers"], meta["heads"])
    loss = F.cross_entropy(logits.reshape(-1, meta["vocab"]), labels.reshape(-1))
    loss.backward()
    out = [logits.detach().reshape(-1).numpy(), np.array([loss.item()])]
    out += [p[name].grad.reshape(-1).numpy() for name, _ in shapes]
    np.concatenate(out).astype(np.float32).tofile(os.path.join(folder, "torch.f32"))


def init_params(shapes, layers, seed):
    """GPT-2's initialisation, as common/nn/transformer_layers.h states it."""
    g = torch.Generator().manual_seed(seed)
    p = {}
    for name, shape in shapes:
        if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_f.weight":
            t = torch.ones(shape)
        elif name.endswith(".bias"):
            t = torch.zeros(shape)
        elif name.endswith("attn_proj.weight") or name.endswith("fc_proj.weight"):
            t = torch.randn(shape, generator=g) * (0.02 / math.sqrt(2 * layers))
        elif name == "lm_head.weight":
            bound = 1 / math.sqrt(shape[0])  # nn.Linear's, as the project's Linear
            t = (torch.rand(shape, generator=g) * 2 - 1) * bound
        else:
            t = torch.randn(shape, generator=g) * 0.02
        p[name] = t.requires_grad_(True)
    return p


def train(args):
    text = open(args.data, encoding="utf-8").read()
    vocab = sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    ids = torch.tensor([index[c] for c in text], dtype=torch.long)
    cut = len(ids) - len(ids) // 10
    train_ids, val_ids = ids[:cut], ids[cut:]
    shapes = layout(len(vocab), args.context, args.layers, args.dim)
    p = init_params(shapes, args.layers, args.seed)
    params = [p[name] for name, _ in shapes]
    if args.decay_matrices_only:
        # nanoGPT's grouping: decay the 2-D weights; spare LayerNorm gains, biases and (here)
        # the position embeddings.
        decayed = [p[n] for n, shape in shapes if len(shape) == 2 and n != "wpe"]
        spared = [p[n] for n, shape in shapes if len(shape) != 2 or n == "wpe"]
        groups = [{"params": decayed, "weight_decay": args.weight_decay},
                  {"params": spared, "weight_decay": 0.0}]
    else:
        groups = [{"params": params, "weight_decay": args.weight_decay}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps)))
    g = torch.Generator().manual_seed(args.seed)
    t = args.context
    losses = []
    start = time.perf_counter()
    for step in range(args.steps):
        starts = torch.randint(0, len(train_ids) - t, (args.batch,), generator=g)
        x = torch.stack([train_ids[s:s + t] for s in starts])
        y = torch.stack([train_ids[s + 1:s + t + 1] for s in starts])
        logits = forward(p, x, args.layers, args.heads)
        loss = F.cross_entropy(logits.reshape(-1, len(vocab)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, args.clip)
        opt.step()
        sched.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - start
    with torch.no_grad():
        windows = (len(val_ids) - 1) // t
        total = 0.0
        for first in range(0, windows, 64):
            n = min(64, windows - first)
            x = torch.stack([val_ids[(first + i) * t:(first + i + 1) * t] for i in range(n)])
            y = torch.stack([val_ids[(first + i) * t + 1:(first + i + 1) * t + 1]
                             for i in range(n)])
            logits = forward(p, x, args.layers, args.heads)
            total += F.cross_entropy(logits.reshape(-1, len(vocab)), y.reshape(-1),
                                     reduction="sum").item()
        val_loss = total / (windows * t)
    tail = losses[-max(1, len(losses) // 10):]
    tokens = args.steps * args.batch * t
    print(json.dumps({"bench": "peer", "framework": "pytorch", "model": "gpt", "tokens": tokens,
                      "train_seconds": seconds, "tokens_per_sec": tokens / seconds,
                      "train_loss": sum(tail) / len(tail), "val_loss": val_loss}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", metavar="DIR",
                        help="compute the reference's logits, loss and gradients for DIR")
    parser.add_argument("--train", action="store_true", help="train on --data and report")
    parser.add_argument("--data", default="data/text/kjv.txt")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--batch", type=int, default=12, help="the global batch")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--weight_decay", type=float, default=0.01)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--decay_matrices_only", action="store_true",
                        help="weight decay on the 2-D weights only (the project decays all)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.check:
        check(args.check)
    elif args.train:
        train(args)
    else:
        parser.error("one of --check DIR or --train")


if __name__ == "__main__":
    main()
