"""The tests' model and data, alike in every process: a 2-layer MLP on 24 features and 4
classes, and 4096 synthetic samples from a fixed seed."""

import torch


def make_model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def make_data(n=4096):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(n, 24, generator=g)
    y = torch.randint(0, 4, (n,), generator=g)
    return x, y
