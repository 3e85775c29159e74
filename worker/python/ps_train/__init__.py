"""ps_train: train with the parameter-server shards from Python.

`import ps_train.torch as pst` gives a PyTorch training loop the shards (see docs/python.md):
pst.init(...), pst.ServerOptimizer(model), opt.step(), pst.finish(), pst.status().
"""

from ps_train.errors import PsError

__all__ = ["PsError"]
