"""A PyTorch training loop on the parameter-server shards.

    import ps_train.torch as pst
    pst.init(servers="h:p,h:p", rank=0, num_workers=2)  # or PS_SERVERS, PS_RANK, PS_NUM_WORKERS
    model = MyNet()
    opt = pst.ServerOptimizer(model)   # the first worker's parameters initialise the shards
    for x, y in batches:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()                     # pushes the gradient, pulls the fresh weights
    pst.finish()

The optimizer, the learning rate and the consistency mode (BSP, SSP, ASP) are the shards'
(ps_server's flags), as for the C++ workers. The model's parameters become views into one flat
float32 buffer (the shared-memory region's, when a shard runs on this host), and so do their
gradients: a pull lands in the parameters and a push leaves from the gradients with no copy.
Parameters are flattened in model.parameters() order; their names and shapes make the layout
fingerprint the shards check, so a worker with another model is refused.

Every error of the shards or the transport is a ps_train.PsError with the gRPC code and the
shard's message (docs/python.md).
"""

import json
import math
import numbers
import os
import signal
import threading
import time
import weakref
from dataclasses import dataclass

import numpy as np
import torch

from ps_train import _core
from ps_train.errors import PsError

__all__ = ["init", "ServerOptimizer", "Embedding", "StepStats", "EvalPoint", "finish",
           "eval_point", "report_eval", "report_result", "status", "PsError"]

_DEADLINE_EXCEEDED, _DATA_LOSS = 4, 15  # grpc.StatusCode's values

_config = None  # the WorkerConfig of init()
_started = time.perf_counter()  # init()'s time: report_eval's wall_s counts from it
# The live ServerOptimizers made since init(), for finish(); one that is dropped unregisters
# nothing, its heartbeats stop, and its lease runs out on the shards. Those of an earlier init()
# belong to that job (other shards, perhaps gone): finish() leaves them alone.
_optimizers = weakref.WeakSet()
# eval_point() may run on a thread beside training: this lock keeps _optimizers from changing
# while it reads them (a WeakSet raises when another thread adds to it during an iteration), and
# _finished_step holds the largest clock of the optimizers finish() has taken out.
_optimizers_lock = threading.Lock()
_finished_step = 0


def _env_int(names, default, negative_is_unset=False):
    """The first of `names` set in the environment, as an int. With negative_is_unset a negative
    value passes on to the next name (PS_RANK=-1: the rank comes from JOB_COMPLETION_INDEX, as
    for ps_worker)."""
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            try:
                number = int(value)
            except ValueError:
                raise ValueError(
                    f"environment variable {name}='{value}' is not an integer") from None
            if negative_is_unset and number < 0:
                continue
            return number
    return default


def _env_bool(name, default):
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    if value.lower() in ("1", "true", "yes"):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise ValueError(f"environment variable {name}='{value}' is not a boolean")


def _exit_on_sigterm(signo, _frame):
    # SystemExit unwinds the training loop (its finally blocks run); a call waiting on the shards
    # is cancelled first (ps_train._core checks for signals while it waits).
    raise SystemExit(128 + signo)


def init(servers=None, rank=None, num_workers=None, *, token_file=None, tls_ca=None,
         tls_cert=None, tls_key=None, tls_server_name=None, allow_plaintext_token=None,
         shared_memory=None, local_calls=None, register_timeout_s=120.0, call_timeout_s=30.0,
         pull_timeout_s=600.0, retry_s=None, max_rejoins=10):
    """Says where the shards are and which worker this process is.

    Each argument left out comes from the environment, as the C++ workers read it:
    servers from PS_SERVERS ("host:port,host:port", shard 0 first); rank from PS_RANK or
    JOB_COMPLETION_INDEX (a Kubernetes indexed Job); num_workers from PS_NUM_WORKERS (0: take
    the shards' word); the TLS files and the token from PS_TLS_CA, PS_TLS_CERT, PS_TLS_KEY,
    PS_TLS_SERVER_NAME, PS_TOKEN_FILE and PS_ALLOW_PLAINTEXT_TOKEN; shared memory with shards on
    this host from PS_SHARED_MEMORY (default on), and with it the calls to those shards over
    their local sockets instead of gRPC from PS_LOCAL_CALLS (default on). retry_s (PS_RETRY_S,
    default 60) is how long an unreachable shard is retried before the call fails with
    UNAVAILABLE (0: forever).

    Also turns SIGTERM into SystemExit when the process has no handler of its own, so an
    orchestrator's stop ends the loop cleanly.
    """
    global _config
    servers = servers if servers is not None else os.environ.get("PS_SERVERS", "")
    if isinstance(servers, str):
        servers = [s.strip() for s in servers.split(",") if s.strip()]
    if not servers:
        raise ValueError('ps_train: no servers: pass servers="host:port,..." or set PS_SERVERS')
    num_workers = num_workers if num_workers is not None else _env_int(["PS_NUM_WORKERS"], 0)
    if rank is None:
        rank = _env_int(["PS_RANK", "JOB_COMPLETION_INDEX"], -1, negative_is_unset=True)
        if rank < 0:
            if num_workers > 1:
                raise ValueError("ps_train: no rank: pass rank=... or set PS_RANK "
                                 "(or JOB_COMPLETION_INDEX)")
            rank = 0
    if rank < 0 or (num_workers > 0 and rank >= num_workers):
        raise ValueError(f"ps_train: rank {rank} is not in [0, num_workers {num_workers})")
    c = _core.WorkerConfig()
    c.servers = servers
    c.rank = rank
    c.num_workers = num_workers
    c.token_file = token_file if token_file is not None else os.environ.get("PS_TOKEN_FILE", "")
    c.tls_ca = tls_ca if tls_ca is not None else os.environ.get("PS_TLS_CA", "")
    c.tls_cert = tls_cert if tls_cert is not None else os.environ.get("PS_TLS_CERT", "")
    c.tls_key = tls_key if tls_key is not None else os.environ.get("PS_TLS_KEY", "")
    c.tls_server_name = (tls_server_name if tls_server_name is not None
                         else os.environ.get("PS_TLS_SERVER_NAME", ""))
    c.allow_plaintext_token = (allow_plaintext_token if allow_plaintext_token is not None
                               else _env_bool("PS_ALLOW_PLAINTEXT_TOKEN", False))
    c.shared_memory = (shared_memory if shared_memory is not None
                       else _env_bool("PS_SHARED_MEMORY", True))
    c.local_calls = (local_calls if local_calls is not None
                     else _env_bool("PS_LOCAL_CALLS", True))
    c.register_timeout_s = register_timeout_s
    c.call_timeout_s = call_timeout_s
    c.pull_timeout_s = pull_timeout_s
    c.retry_s = retry_s if retry_s is not None else float(_env_int(["PS_RETRY_S"], 60))
    c.max_rejoins = max_rejoins
    _config = c
    global _started, _optimizers, _finished_step
    _started = time.perf_counter()
    with _optimizers_lock:
        _optimizers = weakref.WeakSet()
        _finished_step = 0
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL):
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    return {"servers": list(c.servers), "rank": c.rank, "num_workers": c.num_workers}


def _delays_from_env(rank):
    """The injected slowness ps_launch's --straggler, --jitter and --pause_worker give this rank
    (PS_SLOWDOWN, PS_JITTER, PS_PAUSE, PS_DELAY_SEED), as ps_worker's; None when there is none."""
    slowdown = os.environ.get("PS_SLOWDOWN", "")
    jitter, pause = os.environ.get("PS_JITTER", ""), os.environ.get("PS_PAUSE", "")
    if slowdown in ("", "1") and not jitter and not pause:
        return None
    try:
        factor = float(slowdown) if slowdown else 1.0
    except ValueError:
        raise ValueError(f"PS_SLOWDOWN '{slowdown}' must be a number >= 1") from None
    return _core.Delays(factor, jitter, pause, _env_int(["PS_DELAY_SEED"], 1), rank)


def _require_config():
    if _config is None:
        init()  # everything from the environment
    return _config


@dataclass
class StepStats:
    """What one opt.step() did. pushed is False for the micro-batches of an accumulation window
    before its last (nothing travelled), and for a step the shards no longer expected once it
    reached them (they went back to an older checkpoint: rolled_back counts the steps lost, and
    opt.clock names the step to compute next); the rest is then zero."""
    pushed: bool
    step: int = 0  # the clock of the pushed gradient
    staleness: int = 0  # the largest over the shards that applied it now (SSP, ASP)
    applied: int = 0  # shards that applied it now
    buffered: int = 0  # shards that hold it for the BSP round
    duplicates: int = 0
    dropped: int = 0  # shards whose drop rule refused it as too stale
    late: int = 0  # BSP rounds applied without it (backup workers)
    push_bytes: int = 0
    pull_bytes: int = 0
    server_wait_ms: float = 0.0  # the longest a shard held the pull for consistency
    round_trip_ms: float = 0.0  # the push and the pull, as this worker waited for them
    compute_ms: float = 0.0  # since the previous step() returned: the caller's own work
    rejoins: int = 0  # re-registrations so far (a shard restarted)
    rolled_back: int = 0  # steps the shards lost on a restart (restored an older checkpoint)
    injected_ms: float = 0.0  # slept before the push: a straggler experiment's (PS_SLOWDOWN, ...)


class ServerOptimizer:
    """The shards as the model's optimizer.

    model: a torch.nn.Module (its named_parameters() give the names) or an iterable of tensors.
    accumulate=K: step() pushes every K-th call, the mean of the K micro-batches' gradients
      (zero_grad() clears them only at the start of a window), so the shards see a batch K times
      larger.
    overlap=True: each part of the gradient (parameters merged, last layer first, to at least
      min_part_bytes) leaves as soon as backward has produced it, while backward goes on; step()
      waits for the rest and pulls. Needs one backward per micro-batch.
    pipeline=True (shards under SSP with a bound of at least 1, or ASP): step() returns while
      the gradient travels, and the next forward and backward run during the round trip. They
      compute on the weights the previous call brought, which lack the previous step's gradient
      (one more step of staleness, counted by the shards' bound); the parameters and gradients
      alternate between two buffer sets. Under BSP (or SSP bound 0) PsError
      FAILED_PRECONDITION. StepStats are then those of the call the step waited for: the
      previous step's push (step -1 after the first step: that call only fetched weights).
      An Embedding's row gradients travel with the push; the next step's lookups run while they
      do, so they may lack them too.
    batch_size: samples per micro-batch, for the shards' statistics and work account.
    steps: the pushes this worker will make, when known: the shards' cosine schedule ends with
      them, and the work account counts against them from the start (else it is declared at
      finish()).
    """

    def __init__(self, model, accumulate=1, overlap=False, batch_size=0, steps=0,
                 min_part_bytes=256 << 10, pipeline=False):
        config = _require_config()
        if accumulate < 1:
            raise ValueError(f"accumulate must be >= 1, not {accumulate}")
        self._delays = _delays_from_env(config.rank)  # before the shards hear of this worker
        if isinstance(model, torch.nn.Module):
            named = list(model.named_parameters())
            self._embeddings = [m for m in model.modules() if isinstance(m, Embedding)]
        else:
            named = [(f"param.{i}", p) for i, p in enumerate(model)]
            self._embeddings = []
        if self._embeddings and overlap:
            raise ValueError("overlap=True pushes the dense gradient in parts, which carry no "
                             "sparse rows: a model with Embedding tables needs overlap=False")
        if pipeline and overlap:
            raise ValueError("pipeline=True pushes whole steps: not with overlap=True")
        if not named:
            raise ValueError("the model has no parameters")
        for name, p in named:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise TypeError(f"parameter {name} is {p.dtype} on {p.device}: the shards hold "
                                "float32 parameters of a CPU model")
        self.accumulate = accumulate
        self.overlap = overlap
        self.pipeline = pipeline
        self.batch_size = batch_size
        self._params = [p for _, p in named]
        self._worker = _core.Worker(
            config, [(name, list(p.shape) or [1]) for name, p in named],
            [(e.table, e.dim, e.init_scale) for e in self._embeddings],
            buffer_sets=2 if pipeline else 1)
        for index, e in enumerate(self._embeddings):
            e._opt, e._index = self, index
        # Per table: the (keys, gradients) its lookups produced since the last push.
        self._row_grads = [[] for _ in self._embeddings]
        self.cluster = self._worker.register()
        if steps > 0:
            self._worker.declare_work(steps, batch_size * accumulate)
        self._ranges = []
        offset = 0
        for p in self._params:
            self._ranges.append((offset, offset + p.numel()))
            offset += p.numel()
        # Per buffer set: the flat weights and gradient, and each parameter's view of them.
        self._sets = []
        for index in range(2 if pipeline else 1):
            weights = torch.from_numpy(self._worker.weights_array(index))
            grads = torch.from_numpy(self._worker.gradient_array(index))
            grads.zero_()
            self._sets.append((weights, grads,
                               [weights[b:e].view(p.shape)
                                for p, (b, e) in zip(self._params, self._ranges)],
                               [grads[b:e].view(p.shape)
                                for p, (b, e) in zip(self._params, self._ranges)]))
        self._use_sets()
        with torch.no_grad():
            for p, (b, e) in zip(self._params, self._ranges):
                self._flat_weights[b:e].copy_(p.reshape(-1))
        self._worker.init_and_pull()
        self._bind()
        self.param_groups = [{"params": self._params}]
        self._micro = 0  # micro-batches of the current accumulation window pushed into the grads
        self._loss_sum, self._losses = 0.0, 0  # the finite losses step() was given since the push
        self._own_transfer_s = 0.0  # the last round trip less the time the shards held the pull
        self._last_return = time.perf_counter()
        self._last_push_return = self._last_return
        # Under ps_launch (PS_METRICS_FILE): one "step" line per push, as ps_worker writes them,
        # from which the run's summary takes its samples per second and wait share. Appended:
        # a restarted worker goes on with its own file.
        path = os.environ.get("PS_METRICS_FILE", "")
        self._metrics = open(path, "a", buffering=1, encoding="utf-8") if path else None
        self._parts = []
        if overlap:
            self._install_hooks(min_part_bytes)
        with _optimizers_lock:
            _optimizers.add(self)

    # -- the parameters as views of the flat buffers ------------------------------------------

    def _use_sets(self):
        """Points the flat buffers and views at the sets the worker's next step uses."""
        self._flat_weights, _, self._weight_views, _ = self._sets[self._worker.weights_set]
        _, self._flat_grads, _, self._grad_views = self._sets[self._worker.gradient_set]

    def _bind(self):
        """Makes every parameter and its gradient a view of the flat buffers again (they may
        have been replaced: zero_grad(set_to_none=True), a user's assignment)."""
        for p, w, g in zip(self._params, self._weight_views, self._grad_views):
            if p.data_ptr() != w.data_ptr():
                p.data = w
            if p.grad is None or p.grad.data_ptr() != g.data_ptr():
                p.grad = g

    def _gather(self, indices=None):
        """Brings gradients that live elsewhere into the flat buffer; a parameter without a
        gradient contributes zeros."""
        for i in (range(len(self._params)) if indices is None else indices):
            g, home = self._params[i].grad, self._grad_views[i]
            if g is None:
                home.zero_()
            elif g.data_ptr() != home.data_ptr():
                home.copy_(g)

    # -- sparse rows: Embedding lookups and their gradients ------------------------------------

    def _pull_rows(self, table, unique_keys, dim, for_step):
        keys = unique_keys.numpy().view(np.uint64)
        out = np.empty(len(keys) * dim, dtype=np.float32)
        self._worker.pull_rows(table, keys, out, for_step)
        return torch.from_numpy(out).view(len(keys), dim)

    def _add_row_grads(self, table, unique_keys, grad):
        self._row_grads[table].append((unique_keys, grad.detach().clone()))

    def _take_row_grads(self):
        """Each table's gradients since the last push, summed per key (keys ascending), as the
        mean over the accumulation window's micro-batches."""
        rows = []
        for table, pending in enumerate(self._row_grads):
            if not pending:
                continue
            keys = torch.cat([k for k, _ in pending])
            grads = torch.cat([g for _, g in pending])
            unique, inverse = torch.unique(keys, return_inverse=True)
            summed = torch.zeros(len(unique), grads.shape[1]).index_add_(0, inverse, grads)
            if self.accumulate > 1:
                summed.mul_(1.0 / self.accumulate)
            rows.append((table, unique.numpy().view(np.uint64).copy(),
                         summed.reshape(-1).numpy()))
            pending.clear()
        return rows

    # -- overlap: parts leave as backward produces them ---------------------------------------

    def _install_hooks(self, min_part_bytes):
        # Parts in backward order (last parameters first), each a contiguous range of whole
        # parameters of at least min_part_bytes (the last part may be smaller).
        min_elements = max(1, min_part_bytes // 4)
        part, parts = [], []
        for i in reversed(range(len(self._params))):
            part.append(i)
            if sum(self._params[j].numel() for j in part) >= min_elements:
                parts.append(part)
                part = []
        if part:
            parts.append(part)
        self._parts = [{"params": sorted(p), "ready": 0, "sent": False} for p in parts]
        self._part_of = {}
        for k, part in enumerate(self._parts):
            for i in part["params"]:
                self._part_of[i] = k
        # The hook sits on each parameter's gradient accumulator, so it runs once the gradient
        # is in p.grad (tensor hooks run before); the accumulators are kept alive here.
        self._accumulators = []
        self._hook_error = None
        for i, p in enumerate(self._params):
            if not p.requires_grad:
                continue
            accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
            accumulator.register_hook(self._make_hook(i))
            self._accumulators.append(accumulator)

    def _make_hook(self, i):
        def hook(*_):
            if self._micro != self.accumulate - 1:
                return  # not the window's last micro-batch: the gradient stays to accumulate
            part = self._parts[self._part_of[i]]
            if part["sent"]:
                self._hook_error = ("a gradient arrived after its part was pushed: overlap=True "
                                    "needs one backward per micro-batch")
                return
            part["ready"] += 1
            if part["ready"] == len(part["params"]):
                self._send_part(part)
        return hook

    def _send_part(self, part):
        self._gather(part["params"])
        b = self._ranges[part["params"][0]][0]
        e = self._ranges[part["params"][-1]][1]
        if self.accumulate > 1:
            self._flat_grads[b:e].mul_(1.0 / self.accumulate)
        part["sent"] = True
        self._worker.start_part(b, e, self.batch_size * self.accumulate)

    # -- the optimizer's interface ------------------------------------------------------------

    def zero_grad(self, set_to_none=False):
        """Clears the gradients at the start of an accumulation window (else keeps them to add
        to). They stay views of the flat buffer whatever set_to_none says."""
        del set_to_none  # the flat buffer is the gradient's home
        if self._micro == 0:
            self._flat_grads.zero_()
            for pending in self._row_grads:
                pending.clear()
            self._bind()

    def step(self, closure=None, loss=None):
        """Pushes the gradient (every accumulate-th call) and pulls the fresh weights into the
        parameters, waiting as the consistency mode says. Returns a StepStats.

        loss: the micro-batch's mean loss (a number or a one-element tensor; a closure's return
        when none is given). Under ps_launch the step's line then carries the mean over its
        window (the non-finite ones left out), and the run's summary a train_loss."""
        if closure is not None:
            with torch.enable_grad():
                returned = closure()
            if loss is None:
                loss = returned
        if loss is not None:
            if isinstance(loss, torch.Tensor):
                if loss.numel() != 1:
                    raise ValueError(f"step(loss=...) takes the mean loss, one number, not a "
                                     f"tensor of shape {tuple(loss.shape)}")
                loss = loss.item()
            if isinstance(loss, bool) or not isinstance(loss, numbers.Real):
                raise TypeError(f"step(loss=...) takes a number or a one-element tensor, not "
                                f"{type(loss).__name__}")
            loss = float(loss)
            if math.isfinite(loss):
                self._loss_sum += loss
                self._losses += 1
        start = time.perf_counter()
        compute_ms = 1000.0 * (start - self._last_return)
        self._micro += 1
        if self._micro < self.accumulate:
            self._last_return = time.perf_counter()
            return StepStats(pushed=False, compute_ms=compute_ms)
        self._micro = 0
        samples = self.batch_size * self.accumulate
        injected_s = 0.0
        if self._delays is not None:
            # As ps_worker: relative to the step's own work, its window's compute and its last
            # transfer, not the time it waited for the others.
            work_s = start - self._last_push_return + self._own_transfer_s
            injected_s = self._delays.delay_for(self._worker.clock, work_s)
            time.sleep(injected_s)
        if self.overlap:
            if self._hook_error is not None:
                error, self._hook_error = self._hook_error, None
                raise RuntimeError(error)
            for part in self._parts:
                if not part["sent"]:
                    self._send_part(part)
            result = self._worker.finish_parts(samples)
            for part in self._parts:
                part["ready"], part["sent"] = 0, False
        else:
            self._gather()
            if self.accumulate > 1:
                self._flat_grads.mul_(1.0 / self.accumulate)
            if self.pipeline:
                result = self._worker.pipelined_step(samples, self._take_row_grads())
                self._use_sets()
            else:
                result = self._worker.step(samples, self._take_row_grads())
        self._bind()
        self._last_return = time.perf_counter()
        # Not pushed when the shards moved this rank to another step while it travelled (they
        # went back to an older checkpoint): the caller computes the step of `clock` next.
        pushed = result.pop("pushed", True)
        stats = StepStats(pushed=pushed, compute_ms=compute_ms, injected_ms=1000.0 * injected_s,
                          **result)
        self._own_transfer_s = max(0.0, stats.round_trip_ms - stats.server_wait_ms) / 1000.0
        if self._metrics is not None and pushed:
            # The whole step, its micro-batches' compute included, since the last push returned.
            line = {"kind": "step", "step": stats.step, "samples": samples,
                    "step_ms": 1000.0 * (self._last_return - self._last_push_return),
                    "injected_ms": stats.injected_ms, "server_wait_ms": stats.server_wait_ms,
                    "staleness": stats.staleness}
            if self._losses > 0:
                line["loss"] = self._loss_sum / self._losses
            self._metrics.write(json.dumps(line) + "\n")
        self._loss_sum, self._losses = 0.0, 0
        self._last_push_return = self._last_return
        return stats

    def state_dict(self):
        return {"step": self._worker.clock}

    @property
    def clock(self):
        """The next step this worker pushes (the shards' clock for it)."""
        return self._worker.clock

    @property
    def shared_memory_shards(self):
        """Shards whose payloads move through shared memory with this worker."""
        return self._worker.shared_memory_shards

    def _finish(self, wait_s, report_path, require_all_work):
        work = self._worker.finish(self.batch_size * self.accumulate, wait_s, report_path,
                                   require_all_work)
        self._use_sets()  # a pipelined push landed and its weights became the current ones
        self._bind()
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        return work


class Embedding(torch.nn.Module):
    """An embedding table that lives on the shards, used like torch.nn.Embedding on 64-bit keys.

    emb = pst.Embedding(table="items", dim=16); vectors = emb(keys) for an integer tensor of
    keys of any shape gives keys.shape + (dim,). The table's rows are held by the shards (each
    key's row by the shard its hash names), created when first asked for (uniform in
    [-init_scale, init_scale), seeded by the key alone) and updated there with the shards'
    sparse optimizer (`--sparse_optimizer`, `--sparse_lr`). Forward pulls the batch's distinct
    rows; backward keeps their summed gradients, which the next opt.step() pushes with the dense
    gradient. The ServerOptimizer of a model that holds Embedding modules declares their tables
    (in model.modules() order) and serves their lookups; an Embedding used before one is made is
    an error.
    """

    def __init__(self, table, dim, init_scale=0.01):
        super().__init__()
        if not table or dim < 1 or not init_scale > 0:
            raise ValueError("an Embedding needs a table name, dim >= 1 and init_scale > 0")
        self.table, self.dim, self.init_scale = table, dim, init_scale
        self._opt = None  # the ServerOptimizer that serves it
        self._index = -1  # its table's place in the model's description

    def forward(self, keys):
        if self._opt is None:
            raise RuntimeError(f"Embedding '{self.table}': make the model's ServerOptimizer "
                               "before using it")
        if keys.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"Embedding '{self.table}': keys must be integers, not {keys.dtype}")
        unique, inverse = torch.unique(keys.reshape(-1).to(torch.int64), return_inverse=True)
        rows = self._opt._pull_rows(self._index, unique, self.dim, for_step=True)
        if torch.is_grad_enabled():
            rows.requires_grad_(True)
            rows.register_hook(lambda grad, unique=unique: self._opt._add_row_grads(
                self._index, unique, grad))
        return rows[inverse].reshape(*keys.shape, self.dim)

    def read(self, keys):
        """The rows of `keys` as the shards hold them now (an observer's read; no gradient)."""
        unique, inverse = torch.unique(keys.reshape(-1).to(torch.int64), return_inverse=True)
        rows = self._opt._pull_rows(self._index, unique, self.dim, for_step=False)
        return rows[inverse].reshape(*keys.shape, self.dim)


def status():
    """The shards' reports, one dict per shard, as `ps_ctl status --json` prints them."""
    return [json.loads(line) for line in _core.shard_status(_require_config())]


def _check_measures(caller, measures):
    for name, value in measures.items():
        if (isinstance(value, bool) or not isinstance(value, numbers.Real)
                or not math.isfinite(value)):
            raise ValueError(f"ps_train.{caller}: {name}={value!r} is not a finite number")


@dataclass(frozen=True)
class EvalPoint:
    """Where a run stood: this worker's step (its optimizers' largest clock, kept after finish()),
    the shards' largest version (updates applied) and the seconds since init()."""
    step: int
    updates: int
    wall_s: float


def eval_point():
    """The run's point now (one status() call), for a report_eval(at=...) of weights taken now
    and measured later, e.g. on a thread beside training."""
    _require_config()
    wall_s = time.perf_counter() - _started
    updates = max(shard["version"] for shard in status())
    with _optimizers_lock:
        step = max([_finished_step] + [opt.clock for opt in _optimizers])
    return EvalPoint(step=step, updates=updates, wall_s=wall_s)


def report_eval(at=None, **measures):
    """Records an evaluation made during training (numbers: test_accuracy=0.85, test_loss=...)
    as a point of the run's curve: under ps_launch, a line of this worker's PS_METRICS_FILE with
    the step, the shards' updates and the time since init() of `at` (an eval_point(); default:
    now), as ps_worker's --eval_every writes. A staleness sweep draws rank 0's points and takes
    its time to a target accuracy from them. An evaluation on a thread beside training reports
    from that thread with the point its weights were taken at. Outside ps_launch it does
    nothing. ValueError for no measure or one that is not a finite number, TypeError for an `at`
    that is not an EvalPoint."""
    config = _require_config()
    if not measures:
        raise ValueError("ps_train.report_eval: give at least one measure (test_accuracy=...)")
    _check_measures("report_eval", measures)
    if at is not None and not isinstance(at, EvalPoint):
        raise TypeError(f"ps_train.report_eval: at={at!r} is not an EvalPoint (eval_point())")
    path = os.environ.get("PS_METRICS_FILE", "")
    if not path:
        return
    point = at if at is not None else eval_point()
    # requested_step as ps_worker's lines have it: the weights were taken when they were asked for.
    line = {"kind": "eval", "rank": config.rank, "step": point.step, "requested_step": point.step,
            "updates": point.updates}
    line.update({name: float(value) for name, value in measures.items()})
    line["wall_s"] = point.wall_s
    # One write of a whole line in append mode, as the optimizers' step lines: the lines of
    # threads that report at once do not interleave.
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def report_result(**measures):
    """Adds the script's own measures of its model (numbers: test_accuracy=0.88, test_loss=...)
    to the job's report that rank 0's finish() wrote, so that ps_launch's summary.json holds them
    as it holds ps_worker's evaluation. Call it on rank 0 after finish(); elsewhere, or outside
    ps_launch (no PS_JOB_REPORT), it does nothing. A measure that is not a finite number is
    refused with ValueError."""
    config = _require_config()
    _check_measures("report_result", measures)
    path = os.environ.get("PS_JOB_REPORT", "")
    if config.rank != 0 or not path:
        return
    if not os.path.exists(path):
        raise RuntimeError("ps_train.report_result: call finish() first (it writes the report)")
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    report.update({name: float(value) for name, value in measures.items()})
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(report, f)
        f.write("\n")
    os.replace(path + ".tmp", path)


def finish(wait_s=None, require_all_work=None):
    """Ends this worker: declares the steps it pushed as its work, stops its heartbeats and
    leaves the job, so a worker with more steps to go no longer waits for this one's clock (a BSP
    round, an SSP bound): ranks may take different numbers of steps.

    Rank 0 then waits (up to wait_s, default the pull timeout; PsError DEADLINE_EXCEEDED naming
    the workers still expected after that) until no worker can add to the job, pulls the final
    weights into its parameters and returns the job's work account: gradients expected and
    applied, and per worker the steps and samples skipped. When work was skipped and all of it
    was required (require_all_work; default PS_REQUIRE_ALL_WORK, else true under BSP), it raises
    PsError DATA_LOSS saying what was skipped, so the job exits non-zero. Other ranks return their
    own part of the account without waiting.

    Under ps_launch, rank 0 also writes the job's report (the shards' staleness statistics and
    counters, and the work account) to PS_JOB_REPORT, which becomes part of summary.json, as a
    ps_worker job's evaluation does; report_result() adds the script's own measures to it.
    """
    global _finished_step
    config = _require_config()
    with _optimizers_lock:
        live = list(_optimizers)
    if not live:
        raise RuntimeError("ps_train.finish: no ServerOptimizer was made since init()")
    if wait_s is None:
        wait_s = config.pull_timeout_s if config.rank == 0 else 0.0
    if require_all_work is None:
        require_all_work = _env_bool("PS_REQUIRE_ALL_WORK", live[0].cluster["mode"] == "bsp")
    report = os.environ.get("PS_JOB_REPORT", "") if config.rank == 0 else ""
    work = None
    for opt in live:
        with _optimizers_lock:
            _optimizers.discard(opt)
            _finished_step = max(_finished_step, opt.clock)
        work = opt._finish(wait_s, report, require_all_work)
    if config.rank == 0 and wait_s > 0 and not work["job_done"]:
        waiting = ", ".join(f"{w['rank']} ({w['state']})" for w in work["workers"]
                            if w["state"] in ("live", "pending"))
        raise PsError(_DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED",
                      f"the job did not finish within {wait_s:g}s; workers still expected: "
                      f"{waiting or 'none declared work yet'}")
    skipped = [w for w in work["workers"] if w["steps_skipped"] > 0]
    if config.rank == 0 and require_all_work and skipped:
        said = "; ".join(f"worker {w['rank']} ({w['state']}): {w['steps_skipped']} steps, "
                         f"{w['samples_skipped']} samples" for w in skipped)
        raise PsError(_DATA_LOSS, "DATA_LOSS",
                      f"{work['gradients_applied']} of {work['gradients_expected']} gradients "
                      f"applied and all work was required; skipped: {said}")
    return work
