"""Tests of the Python package ps_train against real ps_server processes on loopback.

Run by ctest (python_package_test) with PYTHONPATH=build/python and PS_BIN_DIR=build/bin:
    PYTHONPATH=build/python:tests/python PS_BIN_DIR=build/bin python3 -m unittest ps_train_test
"""

import contextlib
import json
import os
import signal
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import numpy as np
import torch

import ps_train.torch as pst
from ps_train import PsError
from ps_train_testdata import (EMBEDDING_DIM, SparseNet, key_values, make_data, make_model,
                               make_sparse_data)

BIN_DIR = os.environ.get("PS_BIN_DIR", "build/bin")
HERE = os.path.dirname(os.path.abspath(__file__))

# gRPC status codes, as PsError.code carries them.
INVALID_ARGUMENT, FAILED_PRECONDITION, UNAVAILABLE, UNAUTHENTICATED = 3, 9, 14, 16


class Shards:
    """ps_server processes on loopback, stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, count, workers, flags=(), tmp=None):
        self.count, self.workers, self.flags = count, workers, list(flags)
        # A folder made here is removed on exit; a caller's folder is the caller's to remove.
        self.owns_tmp = tmp is None
        self.tmp = tmp or tempfile.mkdtemp(prefix="ps_train_test.")
        self.procs, self.addresses = [], []

    def __enter__(self):
        try:
            for s in range(self.count):
                self.procs.append(None)
                self.addresses.append(f"127.0.0.1:{self.start(s, port=0)}")
        except BaseException:
            self.__exit__(None, None, None)  # stops the shards already started
            raise
        return self

    def start(self, s, port, extra=()):
        """Starts shard s on `port` (0: a free one), with `extra` flags, and returns its port."""
        port_file = os.path.join(self.tmp, f"ps-{s}.port")
        if os.path.exists(port_file):
            os.remove(port_file)
        with open(os.path.join(self.tmp, f"ps-{s}.log"), "ab") as log:
            self.procs[s] = subprocess.Popen(
                [os.path.join(BIN_DIR, "ps_server"), f"--shard_id={s}",
                 f"--num_shards={self.count}", f"--num_workers={self.workers}", f"--port={port}",
                 f"--port_file={port_file}", "--shared_memory", "--log_level=warn"]
                + [f.replace("{shard}", str(s)) for f in self.flags] + list(extra),
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while not os.path.exists(port_file):
            if time.time() > deadline or self.procs[s].poll() is not None:
                raise RuntimeError(f"ps-{s} did not start: {self.log(s)}")
            time.sleep(0.02)
        with open(port_file, encoding="utf-8") as f:
            return int(f.read().strip())

    def restart(self, s, extra=()):
        """Starts shard s again on its port (after kill), with `extra` flags."""
        self.start(s, port=int(self.addresses[s].rsplit(":", 1)[1]), extra=extra)

    def log(self, s):
        with open(os.path.join(self.tmp, f"ps-{s}.log"), encoding="utf-8", errors="replace") as f:
            return f.read()

    @property
    def servers(self):
        return ",".join(self.addresses)

    def kill(self, s):
        self.procs[s].kill()
        self.procs[s].wait()

    def __exit__(self, *exc):
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.terminate()
        for p in self.procs:
            if p is None:
                continue
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.owns_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)


def run_workers(servers, workers, steps, batch, tmp, extra=(), sleep_of=None):
    """Runs sgd_worker.py for every rank at once; returns each rank's final parameters."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE] + sys.path))
    procs = []
    for r in range(workers):
        cmd = [sys.executable, os.path.join(HERE, "sgd_worker.py"), "--servers", servers,
               "--rank", str(r), "--num_workers", str(workers), "--steps", str(steps),
               "--batch", str(batch), "--out", os.path.join(tmp, f"w{r}.npy")] + list(extra)
        if sleep_of and r in sleep_of:
            cmd += ["--sleep_s", str(sleep_of[r])]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    for r, p in enumerate(procs):
        if p.returncode != 0:
            raise AssertionError(f"worker {r} exited {p.returncode}:\n{outputs[r]}")
    return [np.load(os.path.join(tmp, f"w{r}.npy")) for r in range(workers)], outputs


def reference_sgd(steps, batch, lr):
    """One process, plain torch SGD, batch `batch` per step over the same rows in order."""
    x, y = make_data()
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for t in range(steps):
        opt.zero_grad()
        rows = slice(t * batch, (t + 1) * batch)
        torch.nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


SGD = ["--optimizer=sgd", "--lr=0.1", "--lr_schedule=constant"]


def relative_error(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


class BspEqualsLargeBatch(unittest.TestCase):
    """BSP with W workers of batch b is single-process SGD with batch W*b (DESIGN.md)."""

    def check(self, shards, workers, batch, extra=(), accumulate=1, steps=12):
        with tempfile.TemporaryDirectory() as tmp, Shards(shards, workers, SGD, tmp) as cluster:
            finals, _ = run_workers(cluster.servers, workers, steps, batch, tmp,
                                    list(extra) + ["--accumulate", str(accumulate)])
        want = reference_sgd(steps, workers * batch * accumulate, lr=0.1)
        start = torch.cat([p.detach().reshape(-1) for p in make_model().parameters()]).numpy()
        self.assertGreater(relative_error(start, want), 1e-2, "the reference must move")
        for r, got in enumerate(finals):
            self.assertLess(relative_error(got, want), 1e-5, f"rank {r}")

    def test_two_workers_two_shards(self):
        self.check(shards=2, workers=2, batch=16)

    def test_accumulation_is_a_larger_batch(self):
        self.check(shards=1, workers=1, batch=8, accumulate=3)

    def test_overlapped_pushes_give_the_same_weights(self):
        # Parts of at least 1 KiB: the 2-layer MLP goes as three pushes per step.
        self.check(shards=2, workers=2, batch=16,
                   extra=["--overlap", "--min_part_bytes", "1024"])

    def test_overlap_with_accumulation(self):
        self.check(shards=1, workers=2, batch=8, accumulate=2,
                   extra=["--overlap", "--min_part_bytes", "1024"])


class Gradients(unittest.TestCase):
    def test_parameters_without_gradients_push_zeros_and_replaced_grads_are_copied(self):
        with Shards(1, 1, SGD) as cluster:
            pst.init(servers=cluster.servers, rank=0, num_workers=1, retry_s=1)
            torch.manual_seed(3)
            used, unused = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
            model = torch.nn.ModuleDict({"used": used, "unused": unused})
            opt = pst.ServerOptimizer(model)
            before = {k: v.detach().clone() for k, v in model.state_dict().items()}
            # PyTorch's own zero_grad(set_to_none=True) drops the views: the next backward
            # makes new gradient tensors, which step() copies into the flat buffer.
            model.zero_grad(set_to_none=True)
            used(torch.ones(1, 3)).sum().backward()
            grad = used.weight.grad.detach().clone()
            stats = opt.step()
            self.assertTrue(stats.pushed)
            after = model.state_dict()
            for k in ("unused.weight", "unused.bias"):
                self.assertTrue(torch.equal(after[k], before[k]), k)
            self.assertTrue(
                torch.allclose(after["used.weight"], before["used.weight"] - 0.1 * grad))
            # The parameters and gradients are views of the flat buffers again.
            self.assertEqual(used.weight.grad.data_ptr(),
                             opt._flat_grads[:used.weight.numel()].data_ptr())


class SparseTables(unittest.TestCase):
    """pst.Embedding: rows on the shards, pulled and pushed by the keys a batch names."""

    FLAGS = SGD + ["--sparse_optimizer=sgd", "--sparse_lr=0.2"]

    def initial_rows(self):
        """The rows the shards create for the keys (seeded by each key alone)."""
        with Shards(1, 1, self.FLAGS) as cluster:
            pst.init(servers=cluster.servers, rank=0, num_workers=1, retry_s=1)
            model = SparseNet(pst.Embedding("items", EMBEDDING_DIM, init_scale=0.1))
            pst.ServerOptimizer(model)
            rows = model.embedding.read(key_values())
            pst.finish(wait_s=0)
        return rows

    def test_bsp_equals_large_batch_with_rows(self):
        rows = self.initial_rows()
        self.assertEqual(tuple(rows.shape), (len(key_values()), EMBEDDING_DIM))
        self.assertTrue(bool(((rows.abs() > 0) & (rows.abs() <= 0.1)).all()))
        steps, batch, workers = 10, 16, 2
        with tempfile.TemporaryDirectory() as tmp, Shards(2, workers, self.FLAGS, tmp) as c:
            finals, _ = run_workers(c.servers, workers, steps, batch, tmp, ["--sparse"])
        # The reference: one process, torch.nn.Embedding from the same rows, plain SGD with the
        # shards' rates, the doubled batch.
        x, y = make_sparse_data()
        embedding = torch.nn.Embedding(len(key_values()), EMBEDDING_DIM)
        with torch.no_grad():
            embedding.weight.copy_(rows)
        model = SparseNet(embedding)
        opt = torch.optim.SGD([{"params": model.fc.parameters(), "lr": 0.1},
                               {"params": embedding.parameters(), "lr": 0.2}])
        for t in range(steps):
            opt.zero_grad()
            rows_of_step = slice(t * workers * batch, (t + 1) * workers * batch)
            torch.nn.functional.cross_entropy(model(x[rows_of_step]), y[rows_of_step]).backward()
            opt.step()
        want = torch.cat([p.detach().reshape(-1) for p in model.fc.parameters()] +
                         [embedding.weight.detach().reshape(-1)]).numpy()
        moved = np.abs(want[-rows.numel():] - rows.reshape(-1).numpy()).max()
        self.assertGreater(moved, 1e-3, "the rows must move")
        for r, got in enumerate(finals):
            self.assertEqual(got.shape, want.shape)
            self.assertLess(relative_error(got, want), 1e-5, f"rank {r}")

    def test_rows_only_under_a_model_with_tables(self):
        with Shards(1, 1, self.FLAGS) as cluster:
            pst.init(servers=cluster.servers, rank=0, num_workers=1, retry_s=1)
            model = SparseNet(pst.Embedding("items", EMBEDDING_DIM))
            with self.assertRaisesRegex(ValueError, "overlap"):
                pst.ServerOptimizer(model, overlap=True)
            with self.assertRaisesRegex(RuntimeError, "ServerOptimizer"):
                model(key_values()[:3].reshape(1, 3))
            with self.assertRaisesRegex(TypeError, "integers"):
                pst.ServerOptimizer(model)
                model.embedding(torch.ones(2, 3))
            # Another table layout is another model.
            pst.init(servers=cluster.servers, rank=0, num_workers=1, retry_s=1)
            with self.assertRaises(PsError) as caught:
                pst.ServerOptimizer(SparseNet(pst.Embedding("items", EMBEDDING_DIM + 1)))
            self.assertEqual(caught.exception.code, FAILED_PRECONDITION)


class Staleness(unittest.TestCase):
    def test_ssp_bound_holds_with_a_slow_worker(self):
        # SSP(2), 3 workers, rank 1 slow: a gradient is at most (W-1)(2s+1) = 10 updates stale.
        with tempfile.TemporaryDirectory() as tmp, Shards(
                1, 3, SGD + ["--mode=ssp", "--staleness=2"], tmp) as cluster:
            run_workers(cluster.servers, 3, 40, 8, tmp, sleep_of={1: 0.01})
            pst.init(servers=cluster.servers)
            report = pst.status()[0]
        self.assertEqual(report["mode"], "ssp")
        self.assertEqual(report["staleness_bound"], 2)
        worst = max(w["max_staleness"] for w in report["workers"])
        self.assertLessEqual(worst, 10)
        self.assertGreater(worst, 0, "a slow worker under SSP should see stale gradients")
        self.assertEqual(sum(w["applied"] for w in report["workers"]), 120)


def grad_at(flat_weights, rows, x, y):
    """The tests' model's flat gradient at `flat_weights` on data rows `rows`."""
    model = make_model()
    with torch.no_grad():
        offset = 0
        for p in model.parameters():
            p.copy_(flat_weights[offset:offset + p.numel()].view(p.shape))
            offset += p.numel()
    torch.nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def steps_through_a_restart(test, cluster, model, opt, steps, batch, kill_at=4):
    """Trains `steps` steps on the tests' data; before step kill_at, once shard 0's checkpoint of
    version kill_at is on disk (they are written in the background), kills and restarts it.
    Returns every step's StepStats."""
    x, y = make_data()
    seen = []
    for t in range(steps):
        if t == kill_at:
            deadline = time.time() + 30
            while pst.status()[0]["checkpoint_version"] < kill_at:
                test.assertLess(time.time(), deadline, f"no checkpoint of version {kill_at}")
                time.sleep(0.05)
            cluster.kill(0)
            cluster.restart(0)
        opt.zero_grad()
        rows = slice(t * batch, (t + 1) * batch)
        torch.nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
        seen.append(opt.step())
    return seen


class Pipeline(unittest.TestCase):
    """ServerOptimizer(pipeline=True): step() returns while the gradient travels."""

    def check_recurrence(self, accumulate=1, shared_memory=True, tolerance=1e-6):
        # One worker under ASP: step 0 pushes and pulls at once, step 1 computes on W1 (the
        # weights after gradient 0); from step 2 on, step c computes on W(c-1), the weights the
        # call of step c-2 brought, which lack gradient c-1. W(k+1) = W(k) - lr * gradient k,
        # gradient k over `batch` rows (the mean of `accumulate` micro-batches).
        steps, batch, lr = 10, 16, 0.1
        micro = batch // accumulate
        x, y = make_data()
        with Shards(1, 1, SGD + ["--mode=asp"]) as cluster:
            pst.init(servers=cluster.servers, rank=0, num_workers=1, retry_s=1,
                     shared_memory=shared_memory)
            model = make_model()
            opt = pst.ServerOptimizer(model, pipeline=True, accumulate=accumulate)
            self.assertEqual(opt.shared_memory_shards, 1 if shared_memory else 0)
            seen = []
            for t in range(steps):
                for m in range(accumulate):
                    opt.zero_grad()
                    rows = slice(t * batch + m * micro, t * batch + (m + 1) * micro)
                    torch.nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
                    stats = opt.step()
                seen.append((stats.step, stats.staleness, stats.applied))
            work = pst.finish()
        # Each step reports the call it waited for: its own push first, then a prefetch of
        # weights (step -1), then the previous step's push, one update stale from step 2 on.
        self.assertEqual(seen, [(0, 0, 1), (-1, 0, 0), (1, 0, 1)] +
                         [(t - 1, 1, 1) for t in range(3, steps)])
        self.assertEqual((work["gradients_applied"], work["gradients_expected"]), (steps, steps))
        weights = [torch.cat([p.detach().reshape(-1) for p in make_model().parameters()])]
        for c in range(steps):
            used = weights[c] if c < 2 else weights[c - 1]
            weights.append(weights[c] - lr * grad_at(used, slice(c * batch, (c + 1) * batch),
                                                     x, y))
        want = weights[steps].numpy()
        self.assertGreater(relative_error(weights[0].numpy(), want), 1e-2, "must move")
        got = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
        self.assertLess(relative_error(got, want), tolerance)

    def test_one_worker_computes_on_the_weights_one_step_back(self):
        self.check_recurrence()

    def test_payloads_in_the_messages(self):
        self.check_recurrence(shared_memory=False)

    def test_accumulation(self):
        # The mean of two micro-batches' gradients is the batch's up to rounding.
        self.check_recurrence(accumulate=2, tolerance=1e-5)

    def test_rows_travel_with_the_pipeline(self):
        # One worker under ASP with an Embedding table, even steps looking up keys of one half
        # of the table and odd steps of the other. A step's lookups run while the previous
        # step's push travels, so they may lack its rows; with the halves apart, they need only
        # the push of two steps back, which the step before waited for. So the run is exact: the
        # dense weights follow check_recurrence's, and each step's rows hold every update of the
        # steps before it.
        steps, batch, lr, sparse_lr = 10, 16, 0.1, 0.2
        keys = key_values()
        half = len(keys) // 2
        g = torch.Generator().manual_seed(23)
        picks = [torch.randint(0, half, (batch, 3), generator=g) + (half if t % 2 else 0)
                 for t in range(steps)]
        labels = [torch.randint(0, 3, (batch,), generator=g) for _ in range(steps)]
        flags = SGD + ["--mode=asp", "--sparse_optimizer=sgd", f"--sparse_lr={sparse_lr}"]
        with Shards(2, 1, flags) as cluster:
            pst.init(servers=cluster.servers, rank=0, num_workers=1, retry_s=1)
            model = SparseNet(pst.Embedding("items", EMBEDDING_DIM, init_scale=0.1))
            opt = pst.ServerOptimizer(model, pipeline=True)
            initial_rows = model.embedding.read(keys)
            seen = []
            for t in range(steps):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(keys[picks[t]]), labels[t]).backward()
                seen.append(opt.step().step)
            work = pst.finish()
            got_rows = model.embedding.read(keys)
        self.assertEqual(seen, [0, -1] + list(range(1, steps - 1)))
        # A gradient per step on each of the 2 shards.
        self.assertEqual((work["gradients_applied"], work["gradients_expected"]),
                         (2 * steps, 2 * steps))
        # The reference: torch.nn.Embedding from the same rows, the same recurrence.
        reference = SparseNet(torch.nn.Embedding(len(keys), EMBEDDING_DIM))
        with torch.no_grad():
            reference.embedding.weight.copy_(initial_rows)
        weights = [[p.detach().clone() for p in reference.fc.parameters()]]
        for c in range(steps):
            used = weights[c] if c < 2 else weights[c - 1]
            with torch.no_grad():
                for p, w in zip(reference.fc.parameters(), used):
                    p.copy_(w)
            reference.zero_grad()
            torch.nn.functional.cross_entropy(reference(picks[c]), labels[c]).backward()
            weights.append([w - lr * p.grad for w, p in zip(weights[c], reference.fc.parameters())])
            with torch.no_grad():
                reference.embedding.weight -= sparse_lr * reference.embedding.weight.grad
        want_rows = reference.embedding.weight.detach().numpy()
        self.assertGreater(relative_error(initial_rows.numpy(), want_rows), 1e-2, "rows must move")
        self.assertLess(relative_error(got_rows.numpy(), want_rows), 1e-5)
        want = torch.cat([w.reshape(-1) for w in weights[steps]]).numpy()
        got = torch.cat([p.detach().reshape(-1) for p in model.fc.parameters()]).numpy()
        self.assertLess(relative_error(got, want), 1e-5)

    def test_ssp_bound_holds_with_one_more_update(self):
        # SSP(1), 2 workers, rank 1 slow. A pipelined step computes on weights pulled for its
        # clock one call earlier, and its own previous push lands in between: at most
        # (W-1)(2s+1) + 1 = 4 updates stale.
        with tempfile.TemporaryDirectory() as tmp, Shards(
                1, 2, SGD + ["--mode=ssp", "--staleness=1"], tmp) as cluster:
            run_workers(cluster.servers, 2, 30, 8, tmp, extra=["--pipeline"],
                        sleep_of={1: 0.01})
            pst.init(servers=cluster.servers)
            report = pst.status()[0]
        worst = max(w["max_staleness"] for w in report["workers"])
        self.assertLessEqual(worst, 4)
        self.assertGreater(worst, 1, "pipelined steps under SSP see stale gradients")
        self.assertEqual(sum(w["applied"] for w in report["workers"]), 60)

    def test_refused_where_a_step_needs_the_last_round(self):
        for flags in (["--mode=bsp"], ["--mode=ssp", "--staleness=0"]):
            with Shards(1, 1, SGD + flags) as cluster:
                pst.init(servers=cluster.servers, rank=0, num_workers=1, retry_s=1)
                with self.assertRaises(PsError) as caught:
                    pst.ServerOptimizer(torch.nn.Linear(3, 2), pipeline=True)
                # Refused before it registered: the job does not count on it.
                self.assertEqual([(w["rank"], w["state"]) for w in pst.status()[0]["workers"]],
                                 [(0, "pending")])
            self.assertEqual(caught.exception.code, FAILED_PRECONDITION, flags)
            self.assertIn("pipeline needs SSP with a bound of at least 1, or ASP",
                          str(caught.exception))
        with self.assertRaisesRegex(ValueError, "not with overlap=True"):
            pst.ServerOptimizer(torch.nn.Linear(3, 2), pipeline=True, overlap=True)

    def test_a_restarted_shard_loses_no_step(self):
        # As Errors' test of the same name: the shard dies and comes back from its checkpoint while
        # a push travels; the worker registers again, pushes that step's gradient again and
        # goes on, and every step is applied once.
        steps, batch = 8, 16
        with tempfile.TemporaryDirectory() as tmp, Shards(
                1, 1, SGD + ["--mode=asp", f"--checkpoint_dir={tmp}/ckpt-{{shard}}",
                             "--checkpoint_every=1"], tmp) as cluster:
            pst.init(servers=cluster.servers, rank=0, num_workers=1, retry_s=60)
            model = make_model()
            opt = pst.ServerOptimizer(model, pipeline=True)
            seen = steps_through_a_restart(self, cluster, model, opt, steps, batch)
            work = pst.finish()
        self.assertEqual([s.rolled_back for s in seen], [0] * steps)
        self.assertEqual(seen[-1].rejoins, 1)
        self.assertEqual((work["gradients_applied"], work["gradients_expected"]), (steps, steps))


@contextlib.contextmanager
def one_worker_job(**env):
    """One SGD shard and rank 0 of one worker init()ed, with `env` set as ps_launch sets it
    for a script ("{tmp}" in a value: the job's folder, yielded) and removed after."""
    with tempfile.TemporaryDirectory() as tmp, Shards(1, 1, SGD, tmp) as cluster:
        env = {name: value.replace("{tmp}", tmp) for name, value in env.items()}
        os.environ.update(env)
        try:
            pst.init(servers=cluster.servers, rank=0, num_workers=1, retry_s=1)
            yield tmp
        finally:
            for name in env:
                del os.environ[name]


class JobReport(unittest.TestCase):
    def test_finish_writes_the_report_and_report_result_adds_the_scripts_measures(self):
        with one_worker_job(PS_JOB_REPORT="{tmp}/job_report.json") as tmp:
            model = torch.nn.Linear(3, 2)
            opt = pst.ServerOptimizer(model, batch_size=1)
            for _ in range(3):
                opt.zero_grad()
                model(torch.ones(1, 3)).sum().backward()
                opt.step()
            with self.assertRaisesRegex(RuntimeError, "call finish"):
                pst.report_result(test_accuracy=0.5)
            pst.finish(wait_s=10)
            for bad in (float("nan"), float("inf"), "0.5", True, None):
                with self.assertRaisesRegex(ValueError, "not a finite number"):
                    pst.report_result(test_accuracy=bad)
            pst.report_result(test_accuracy=0.75, test_loss=np.float32(1))
            with open(os.path.join(tmp, "job_report.json"), encoding="utf-8") as f:
                report = json.load(f)
        self.assertTrue(report["job_done"])
        self.assertEqual((report["gradients_applied"], report["gradients_expected"]), (3, 3))
        self.assertTrue(report["require_all_work"])  # BSP, the shard's default
        self.assertEqual(report["versions"], [3])
        self.assertEqual(report["max_staleness"], 0)
        self.assertEqual([(w["rank"], w["state"], w["steps_skipped"]) for w in report["work"]],
                         [(0, "finished", 0)])
        self.assertEqual((report["test_accuracy"], report["test_loss"]), (0.75, 1.0))


class StepLines(unittest.TestCase):
    """Under ps_launch (PS_METRICS_FILE) each push writes a step line, with the window's mean
    loss when step() was given losses, and report_eval() a point of the run's curve."""

    def test_losses_and_evaluations_reach_the_metrics_file(self):
        with one_worker_job(PS_METRICS_FILE="{tmp}/worker-0.jsonl") as tmp:
            model = torch.nn.Linear(3, 2)
            opt = pst.ServerOptimizer(model, accumulate=2, batch_size=4)

            def backward():
                model(torch.ones(4, 3)).sum().backward()

            def closure():
                backward()
                return torch.tensor(5.0)

            # Each window: the losses of its two calls (None: not given).
            for first, second in ((1.0, np.float32(3.0)), (None, float("nan")),
                                  (closure, float("inf"))):
                opt.zero_grad()
                if callable(first):
                    opt.step(closure=first)
                else:
                    backward()
                    opt.step(loss=first)
                backward()
                opt.step(loss=second)
                if opt.clock == 1:
                    point = pst.eval_point()  # weights taken after the first window
            for bad, error in ((torch.ones(2), ValueError), ("1.0", TypeError),
                               (True, TypeError)):
                with self.assertRaises(error):
                    opt.step(loss=bad)
            with self.assertRaisesRegex(ValueError, "at least one measure"):
                pst.report_eval()
            with self.assertRaisesRegex(ValueError, "not a finite number"):
                pst.report_eval(test_accuracy=float("nan"))
            with self.assertRaisesRegex(TypeError, "not an EvalPoint"):
                pst.report_eval(at=(1, 1, 0.5), test_accuracy=0.5)
            # Measured later on a thread beside training: the line has the point of the weights.
            reporter = threading.Thread(target=pst.report_eval,
                                        kwargs={"at": point, "test_accuracy": 0.25})
            reporter.start()
            reporter.join()
            pst.report_eval(test_accuracy=0.5, test_loss=2)
            pst.finish(wait_s=10)
            # After finish() the point still names the step this worker finished at.
            self.assertEqual((pst.eval_point().step, pst.eval_point().updates), (3, 3))
            with open(os.path.join(tmp, "worker-0.jsonl"), encoding="utf-8") as f:
                lines = [json.loads(line) for line in f]
        steps = [line for line in lines if line["kind"] == "step"]
        self.assertEqual([(s["step"], s["samples"], s.get("loss")) for s in steps],
                         [(0, 8, 2.0), (1, 8, None), (2, 8, 5.0)])
        evals = [line for line in lines if line["kind"] == "eval"]
        self.assertEqual(len(evals), 2)
        self.assertEqual(evals[0], {"kind": "eval", "rank": 0, "step": 1, "requested_step": 1,
                                    "updates": 1, "test_accuracy": 0.25, "wall_s": point.wall_s})
        self.assertEqual({k: v for k, v in evals[1].items() if k != "wall_s"},
                         {"kind": "eval", "rank": 0, "step": 3, "requested_step": 3,
                          "updates": 3, "test_accuracy": 0.5, "test_loss": 2.0})
        self.assertGreater(evals[1]["wall_s"], point.wall_s)


class InjectedDelays(unittest.TestCase):
    """ps_launch's --straggler, --jitter and --pause_worker reach a script as PS_SLOWDOWN,
    PS_JITTER and PS_PAUSE; step() sleeps the delay before the push, as ps_worker does."""

    def steps(self, env, count=4):
        with one_worker_job(PS_METRICS_FILE="{tmp}/worker-0.jsonl", **env) as tmp:
            model = torch.nn.Linear(3, 2)
            opt = pst.ServerOptimizer(model, batch_size=4)
            seen = []
            for _ in range(count):
                opt.zero_grad()
                model(torch.ones(4, 3)).sum().backward()
                seen.append(opt.step())
            pst.finish(wait_s=10)
            with open(os.path.join(tmp, "worker-0.jsonl"), encoding="utf-8") as f:
                lines = [json.loads(line) for line in f if '"step"' in line]
        self.assertEqual([line["injected_ms"] for line in lines], [s.injected_ms for s in seen])
        return [s.injected_ms for s in seen], [line["step_ms"] for line in lines]

    def test_a_pause_sleeps_once_at_its_step(self):
        # No slowdown and no jitter: nothing but the pause, whatever the steps took.
        injected, step_ms = self.steps({"PS_PAUSE": "2:0.3"})
        self.assertEqual(injected[:2] + injected[3:], [0.0, 0.0, 0.0])
        self.assertAlmostEqual(injected[2], 300.0, places=6)
        self.assertGreaterEqual(step_ms[2], 300.0)  # slept, not only counted

    def test_a_straggler_sleeps_at_every_step(self):
        injected, _ = self.steps({"PS_SLOWDOWN": "3"})
        self.assertTrue(all(ms > 0 for ms in injected), injected)

    def test_bad_settings_are_refused_naming_them_before_the_shards_hear_of_the_worker(self):
        pst.init(servers="127.0.0.1:1", rank=0, num_workers=1, register_timeout_s=1, retry_s=1)
        for env, message in (({"PS_JITTER": "often"}, "PS_JITTER 'often' must be PROBABILITY"),
                             ({"PS_PAUSE": "-1:2"}, "PS_PAUSE '-1:2' must be STEP:SECONDS"),
                             ({"PS_SLOWDOWN": "slow"}, "PS_SLOWDOWN 'slow' must be a number"),
                             ({"PS_SLOWDOWN": "0.5"}, "slowdown must be >= 1, got 0.5")):
            os.environ.update(env)
            try:
                with self.assertRaisesRegex(ValueError, message):
                    pst.ServerOptimizer(torch.nn.Linear(3, 2))  # no shard there: not reached
            finally:
                for name in env:
                    del os.environ[name]


class Errors(unittest.TestCase):
    """Every failure is a PsError with the gRPC code and the shard's message, never a hang."""

    def setUp(self):
        torch.manual_seed(0)

    def test_bad_arguments_are_python_errors(self):
        with self.assertRaisesRegex(ValueError, "no servers"):
            pst.init(servers="")
        with self.assertRaisesRegex(ValueError, "rank 2 is not in"):
            pst.init(servers="127.0.0.1:1", rank=2, num_workers=2)
        pst.init(servers="127.0.0.1:1", rank=0, num_workers=1)
        with self.assertRaisesRegex(TypeError, "float32"):
            pst.ServerOptimizer(torch.nn.Linear(3, 2).double())
        with self.assertRaisesRegex(ValueError, "accumulate"):
            pst.ServerOptimizer(torch.nn.Linear(3, 2), accumulate=0)

    def test_no_shard_there(self):
        pst.init(servers="127.0.0.1:1", rank=0, num_workers=1, register_timeout_s=1, retry_s=1)
        with self.assertRaises(PsError) as caught:
            pst.ServerOptimizer(torch.nn.Linear(3, 2))
        self.assertIn(caught.exception.code_name, ("UNAVAILABLE", "DEADLINE_EXCEEDED"))

    def test_a_shard_that_dies_mid_training(self):
        with Shards(1, 1, SGD) as cluster:
            pst.init(servers=cluster.servers, rank=0, num_workers=1, retry_s=1)
            model = torch.nn.Linear(3, 2)
            opt = pst.ServerOptimizer(model)
            model(torch.ones(1, 3)).sum().backward()
            opt.step()
            cluster.kill(0)
            model(torch.ones(1, 3)).sum().backward()
            with self.assertRaises(PsError) as caught:
                opt.step()
        self.assertEqual(caught.exception.code, UNAVAILABLE, str(caught.exception))

    def test_a_refused_token(self):
        with tempfile.TemporaryDirectory() as tmp:
            for name, token in (("good", "s3cret-token"), ("bad", "another-token")):
                with open(os.path.join(tmp, name), "w") as f:
                    f.write(token + "\n")
            with Shards(1, 1, SGD + [f"--token_file={tmp}/good", "--allow_plaintext_token"],
                        tmp) as cluster:
                pst.init(servers=cluster.servers, rank=0, num_workers=1,
                         token_file=f"{tmp}/bad", allow_plaintext_token=True, retry_s=1)
                with self.assertRaises(PsError) as caught:
                    pst.ServerOptimizer(torch.nn.Linear(3, 2))
                self.assertEqual(caught.exception.code, UNAUTHENTICATED, str(caught.exception))
                # The right token gets in.
                pst.init(servers=cluster.servers, rank=0, num_workers=1,
                         token_file=f"{tmp}/good", allow_plaintext_token=True, retry_s=1)
                pst.ServerOptimizer(torch.nn.Linear(3, 2))

    def test_a_restarted_shard_loses_no_step(self):
        # The shard checkpoints every update and is killed mid-run: the worker's next step finds
        # it gone (retried), then back as a new process (ABORTED): it registers again, resumes at
        # the same clock and pushes the same gradient again, so the result is the reference's.
        steps, batch = 8, 16
        with tempfile.TemporaryDirectory() as tmp, Shards(
                1, 1, SGD + [f"--checkpoint_dir={tmp}/ckpt-{{shard}}", "--checkpoint_every=1"],
                tmp) as cluster:
            pst.init(servers=cluster.servers, rank=0, num_workers=1, retry_s=60)
            model = make_model()
            opt = pst.ServerOptimizer(model)
            seen = steps_through_a_restart(self, cluster, model, opt, steps, batch)
            pst.finish(wait_s=0)
        self.assertEqual([s.step for s in seen], list(range(steps)))
        self.assertEqual([s.rolled_back for s in seen], [0] * steps)
        self.assertEqual(seen[-1].rejoins, 1)
        got = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
        self.assertLess(relative_error(got, reference_sgd(steps, batch, lr=0.1)), 1e-5)

    def test_a_shard_gone_back_to_an_older_checkpoint_makes_the_step_it_lost_computed_again(self):
        # Shard restarted at version 3 (ps_launch --rollback_shards does it) while step 6
        # travels: the step is not pushed (its gradient is step 6's), the worker is back at step
        # 3, and a loop driven by opt.clock redoes steps 3 to 5 on their own rows, so the
        # weights are the reference's.
        steps, batch = 8, 16
        x, y = make_data()
        with tempfile.TemporaryDirectory() as tmp, Shards(
                1, 1, SGD + [f"--checkpoint_dir={tmp}/ckpt-{{shard}}", "--checkpoint_every=1",
                             "--checkpoint_keep=10"], tmp) as cluster:
            pst.init(servers=cluster.servers, rank=0, num_workers=1, retry_s=60)
            model = make_model()
            opt = pst.ServerOptimizer(model)
            seen = []
            while opt.clock < steps:
                t = opt.clock
                if 1 <= t <= 6 and not any(s.rejoins for s in seen):
                    # Each version on disk before the next update: a busy writer skips one that a
                    # newer one supersedes in its queue, and version 3 must be there.
                    deadline = time.time() + 30
                    while pst.status()[0]["checkpoint_version"] < t:
                        self.assertLess(time.time(), deadline, f"no checkpoint of version {t}")
                        time.sleep(0.01)
                if t == 6 and not any(s.rejoins for s in seen):
                    cluster.kill(0)
                    cluster.restart(0, extra=["--restore_version=3"])
                opt.zero_grad()
                rows = slice(t * batch, (t + 1) * batch)
                torch.nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
                seen.append(opt.step())
            pst.finish(wait_s=0)
        self.assertEqual([(s.pushed, s.step) for s in seen],
                         [(True, t) for t in range(6)] + [(False, -1)] +
                         [(True, t) for t in range(3, steps)])
        self.assertEqual([s.rolled_back for s in seen], [0] * 6 + [3] * 6)
        self.assertEqual(seen[-1].rejoins, 1)
        got = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
        self.assertLess(relative_error(got, reference_sgd(steps, batch, lr=0.1)), 1e-5)

    def test_finish_names_the_workers_it_waited_for_in_vain(self):
        with Shards(1, 2, SGD) as cluster:
            pst.init(servers=cluster.servers, rank=0, num_workers=2, retry_s=1)
            opt = pst.ServerOptimizer(torch.nn.Linear(3, 2))
            with self.assertRaises(PsError) as caught:
                pst.finish(wait_s=0.5)  # rank 1 never comes
            del opt
        self.assertEqual(caught.exception.code_name, "DEADLINE_EXCEEDED")
        self.assertIn("1 (pending)", caught.exception.message)

    def test_another_model_is_refused(self):
        with Shards(1, 2, SGD) as cluster:
            pst.init(servers=cluster.servers, rank=0, num_workers=2, retry_s=1)
            pst.ServerOptimizer(torch.nn.Linear(3, 2))
            pst.init(servers=cluster.servers, rank=1, num_workers=2, retry_s=1)
            with self.assertRaises(PsError) as caught:
                pst.ServerOptimizer(torch.nn.Linear(3, 5))
        self.assertEqual(caught.exception.code, FAILED_PRECONDITION, str(caught.exception))
        self.assertIn("fingerprint", caught.exception.message)

    def test_a_job_of_another_size_is_refused(self):
        with Shards(1, 2, SGD) as cluster:
            pst.init(servers=cluster.servers, rank=0, num_workers=3, retry_s=1)
            with self.assertRaises(PsError) as caught:
                pst.ServerOptimizer(torch.nn.Linear(3, 2))
        self.assertEqual(caught.exception.code, FAILED_PRECONDITION, str(caught.exception))

    def test_nan_gradients_are_refused(self):
        with Shards(1, 1, SGD) as cluster:
            pst.init(servers=cluster.servers, rank=0, num_workers=1, retry_s=1)
            model = torch.nn.Linear(3, 2)
            opt = pst.ServerOptimizer(model)
            before = model.weight.detach().clone()
            (model(torch.ones(1, 3)).sum() * float("nan")).backward()
            with self.assertRaises(PsError) as caught:
                opt.step()
            self.assertEqual(caught.exception.code, INVALID_ARGUMENT, str(caught.exception))
            self.assertIn("NaN", caught.exception.message)
            self.assertTrue(torch.equal(model.weight.detach(), before))
            self.assertEqual(pst.status()[0]["rejected_nonfinite"], 1)


class Signals(unittest.TestCase):
    """A worker waiting in a BSP barrier ends on Ctrl-C or SIGTERM, at once and with no trace."""

    # All wait for rank 1, which never comes. Pipelined under SSP(1), the second step waits for
    # the prefetch of step 2's weights, which needs rank 1's step 0.
    STEP = "m(torch.ones(1, 3)).sum().backward()\nprint('waiting', flush=True)\nopt.step()\n"
    FINISH = "print('waiting', flush=True)\npst.finish(wait_s=100)\n"
    PIPELINED = ("m(torch.ones(1, 3)).sum().backward()\nopt.step()\n"
                 "m(torch.ones(1, 3)).sum().backward()\nprint('waiting', flush=True)\nopt.step()\n")

    def check(self, signo, want_code, want_text, wait=STEP, pipeline=False):
        script = (
            "import torch, ps_train.torch as pst\n"
            "pst.init(rank=0, num_workers=2)\n"
            "m = torch.nn.Linear(3, 2)\n"
            f"opt = pst.ServerOptimizer(m, pipeline={pipeline})\n" + wait)
        flags = SGD + (["--mode=ssp", "--staleness=1"] if pipeline else [])
        with Shards(1, 2, flags) as cluster:
            env = dict(os.environ, PS_SERVERS=cluster.servers)
            p = subprocess.Popen([sys.executable, "-c", script], env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self.assertEqual(p.stdout.readline().strip(), "waiting")
            time.sleep(0.5)
            sent = time.time()
            p.send_signal(signo)
            _, err = p.communicate(timeout=20)
            self.assertLess(time.time() - sent, 5, "the worker must stop promptly")
        self.assertEqual(p.returncode, want_code, err)
        self.assertIn(want_text, err)

    def test_ctrl_c_raises_keyboard_interrupt(self):
        # Python ends on an uncaught KeyboardInterrupt by dying of SIGINT itself.
        self.check(signal.SIGINT, -signal.SIGINT, "KeyboardInterrupt")

    def test_sigterm_exits_143(self):
        self.check(signal.SIGTERM, 143, "")

    def test_ctrl_c_ends_a_finish_that_waits_for_the_others(self):
        self.check(signal.SIGINT, -signal.SIGINT, "KeyboardInterrupt", wait=self.FINISH)

    def test_ctrl_c_ends_a_pipelined_step_that_waits(self):
        self.check(signal.SIGINT, -signal.SIGINT, "KeyboardInterrupt", wait=self.PIPELINED,
                   pipeline=True)


if __name__ == "__main__":
    unittest.main()
