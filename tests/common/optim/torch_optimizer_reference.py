"""PyTorch's optimizers and StepLR over the updates that optimizer_torch_parity_test applies.

Usage: torch_optimizer_reference.py DIR, where DIR holds configs.json (a list of {"kind", "lr",
"momentum", "beta1", "beta2", "epsilon", "weight_decay", "step_updates", "step_gamma"}),
weights.f32 (n float32) and gradients.f32 (updates x n float32, one update after another). For
each config in turn, from the same weights, writes the weights after every update, in float32,
to DIR/torch.f32 (one process for all: importing torch takes seconds)."""
import json
import sys

import torch


def optimizer_of(kind, params, c):
    lr, wd = c["lr"], c["weight_decay"]
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=wd)
    if kind == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=c["momentum"], weight_decay=wd)
    if kind in ("adam", "adamw"):
        make = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
        return make(params, lr=lr, betas=(c["beta1"], c["beta2"]), eps=c["epsilon"],
                    weight_decay=wd)
    if kind == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, eps=c["epsilon"], weight_decay=wd)
    sys.exit(f"unknown optimizer {kind!r}")


def floats(path):
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.float32)


def run(c, weights, gradients):
    """The weights after each update under config c, stacked."""
    w = torch.nn.Parameter(weights.clone())
    opt = optimizer_of(c["kind"], [w], c)
    schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=c["step_updates"],
                                               gamma=c["step_gamma"])
    after = []
    for g in gradients:
        w.grad = g.clone()
        opt.step()
        schedule.step()
        after.append(w.detach().clone())
    return torch.stack(after)


def main():
    folder = sys.argv[1]
    with open(f"{folder}/configs.json", encoding="utf-8") as f:
        configs = json.load(f)
    weights = floats(f"{folder}/weights.f32")
    gradients = floats(f"{folder}/gradients.f32").reshape(-1, weights.numel())
    with open(f"{folder}/torch.f32", "wb") as f:
        for c in configs:
            f.write(run(c, weights, gradients).numpy().tobytes())


if __name__ == "__main__":
    main()
