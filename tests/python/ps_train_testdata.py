"""The tests' models and data, alike in every process: a 2-layer MLP on 24 features and 4
classes, and 4096 synthetic samples from a fixed seed; and a model whose embedding table lives
on the shards, with 4096 samples of 3 keys each out of 40 distinct 64-bit keys."""

import torch


def make_model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def make_data(n=4096):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(n, 24, generator=g)
    y = torch.randint(0, 4, (n,), generator=g)
    return x, y


KEYS = 40  # distinct keys of the sparse data
EMBEDDING_DIM = 4


def key_values():
    """The 40 distinct 64-bit keys (big, so that they exercise the full key width)."""
    g = torch.Generator().manual_seed(13)
    return torch.unique(torch.randint(1, 2**62, (KEYS,), generator=g, dtype=torch.int64))


def make_sparse_data(n=4096):
    """(key indices (n, 3) into key_values(), labels (n,))."""
    g = torch.Generator().manual_seed(17)
    return (torch.randint(0, len(key_values()), (n, 3), generator=g),
            torch.randint(0, 3, (n,), generator=g))


class SparseNet(torch.nn.Module):
    """The sum of a sample's 3 embedding rows, then a linear layer to 3 classes. `embedding` maps
    a (batch, 3) tensor of keys (or of key indices, for a torch.nn.Embedding) to rows."""

    def __init__(self, embedding):
        super().__init__()
        self.embedding = embedding
        torch.manual_seed(19)
        self.fc = torch.nn.Linear(EMBEDDING_DIM, 3)

    def forward(self, keys):
        return self.fc(self.embedding(keys).sum(1))
