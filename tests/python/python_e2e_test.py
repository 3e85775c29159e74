"""End to end: ps_launch --python runs examples/fashion_mnist_mlp.py as every worker, on
Debian's Fashion-MNIST, under SSP(2) and ASP with 3 workers for 5 epochs (the acceptance runs of
docs/python.md), and pipelined under SSP(2), each run's summary.json holding the job's report;
ranks of uneven steps under BSP and SSP(0); a script that never calls finish(); and refuses bad
command lines with exit code 2.

    PYTHONPATH=build/python PS_BIN_DIR=build/bin PS_SOURCE_DIR=. python3 -m unittest python_e2e_test
"""

import json
import os
import signal
import struct
import subprocess
import tempfile
import time
import unittest

BIN_DIR = os.environ.get("PS_BIN_DIR", "build/bin")
SOURCE_DIR = os.environ.get("PS_SOURCE_DIR", ".")
EXAMPLE = os.path.join(SOURCE_DIR, "examples", "fashion_mnist_mlp.py")


def launch(args, timeout=600):
    return subprocess.run([os.path.join(BIN_DIR, "ps_launch")] + args, capture_output=True,
                          text=True, timeout=timeout)


def write_script(folder, text):
    """A worker script of the test's own, as folder/worker.py; returns its path."""
    path = os.path.join(folder, "worker.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


class PythonWorkers(unittest.TestCase):
    def train(self, mode_flags, example_args=()):
        with tempfile.TemporaryDirectory() as tmp:
            result = os.path.join(tmp, "result.json")
            run = launch(["--shards=2", "--workers=3", "--optimizer=adam", "--lr=0.001",
                          f"--metrics_dir={tmp}/run", "--quiet"] + mode_flags +
                         ["--python", EXAMPLE, "--", "--epochs", "5", "--result", result] +
                         list(example_args))
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            self.assertIn("done: 3 Python workers", run.stdout)
            with open(result, encoding="utf-8") as f:
                out = json.load(f)
            with open(f"{tmp}/run/summary.json", encoding="utf-8") as f:
                summary = json.load(f)
        self.assertEqual(summary["workers"], 3)
        self.assertEqual(summary["worker_restarts"], 0)
        # Every gradient of every worker reached both shards: 3 x 625 steps per epoch x 5.
        steps = 3 * (60000 // (3 * 32)) * 5
        self.assertEqual(out["work"]["gradients_expected"], 2 * steps)
        self.assertEqual(out["work"]["gradients_applied"], 2 * steps)
        # The summary holds the job's report (rank 0's finish()) and the script's measures.
        self.assertEqual(summary["gradients_expected"], 2 * steps)
        self.assertEqual(summary["gradients_applied"], 2 * steps)
        self.assertEqual(summary["test_accuracy"], out["test_accuracy"])
        # And what the workers' step lines say: every sample once, and the time pulls waited.
        self.assertEqual(summary["samples"], steps * 32)
        self.assertEqual(len(summary["worker_wait_share"]), 3)
        self.assertTrue(0 <= summary["wait_share"] < 1, summary)
        # The example gives step() its losses: cross-entropy of 10 classes, below ln 10 once
        # trained.
        self.assertTrue(0 < summary["train_loss"] < 0.6, summary)
        self.assertEqual(summary["max_staleness"], max(
            w["max_staleness"] for shard in out["status"] for w in shard["workers"]))
        # What the shards were given, and the script's arguments; its batch is not known here.
        mode = next(f.split("=", 1)[1] for f in mode_flags if f.startswith("--mode="))
        self.assertEqual((summary["mode"], summary["optimizer"], summary["lr"]),
                         (mode, "adam", 0.001))
        # Not scaled (no --base_batch); the shards' rate is a float32.
        self.assertEqual(summary["lr_effective"], struct.unpack("f", struct.pack("f", 0.001))[0])
        self.assertEqual(summary["python_args"],
                         ["--epochs", "5", "--result", result] + list(example_args))
        self.assertNotIn("update_batch", summary)
        self.summary = summary
        return out

    def test_ssp_converges_within_its_bound_with_a_straggler(self):
        # Rank 2 twice as slow (ps_train sleeps before its pushes, PS_SLOWDOWN=2).
        out = self.train(["--mode=ssp", "--staleness=2", "--straggler=2:2"])
        self.assertGreaterEqual(out["test_accuracy"], 0.86)
        self.assertEqual(self.summary["stragglers"], "2:2")
        self.assertGreater(self.summary["max_staleness"], 0)
        # (W-1)(2s+1) updates of one shard at most (DESIGN.md), on both shards.
        for shard in out["status"]:
            self.assertEqual(shard["mode"], "ssp")
            for w in shard["workers"]:
                self.assertLessEqual(w["max_staleness"], 10, shard)

    def test_pipelined_ssp_converges_within_its_bound_plus_one(self):
        # A pipelined step computes on weights one call older, and its own previous push lands
        # in between: (W-1)(2s+1) + 1 updates at most.
        out = self.train(["--mode=ssp", "--staleness=2"], ["--pipeline"])
        self.assertGreaterEqual(out["test_accuracy"], 0.86)
        for shard in out["status"]:
            for w in shard["workers"]:
                self.assertLessEqual(w["max_staleness"], 11, shard)

    def test_asp_converges(self):
        out = self.train(["--mode=asp"])
        self.assertGreaterEqual(out["test_accuracy"], 0.86)
        self.assertEqual(out["status"][0]["mode"], "asp")

    def test_one_blas_thread_per_worker_unless_chosen(self):
        # A worker that reports OpenBLAS's thread count, then takes one step of a tiny model.
        script = (
            "import os, sys, torch, ps_train.torch as pst\n"
            "pst.init()\n"
            "m = torch.nn.Linear(3, 2)\n"
            "opt = pst.ServerOptimizer(m, batch_size=1, steps=1)\n"
            "m(torch.ones(1, 3)).sum().backward()\n"
            "opt.step()\n"
            "pst.finish()\n"
            "open(sys.argv[1], 'w').write(os.environ['OPENBLAS_NUM_THREADS'])\n")
        with tempfile.TemporaryDirectory() as tmp:
            path = write_script(tmp, script)
            for inherited, want in ((None, "1"), ("3", "3")):
                env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
                if inherited:
                    env["OPENBLAS_NUM_THREADS"] = inherited
                run = subprocess.run(
                    [os.path.join(BIN_DIR, "ps_launch"), "--workers=1", f"--metrics_dir={tmp}/run",
                     "--quiet", "--python", path, "--", f"{tmp}/threads"],
                    capture_output=True, text=True, timeout=120, env=env)
                self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
                with open(f"{tmp}/threads", encoding="utf-8") as f:
                    self.assertEqual(f.read(), want)

    def test_ranks_with_fewer_steps_leave_and_no_one_waits_for_them(self):
        # Ranks of uneven steps, as a loader that keeps the last partial batch gives them. The
        # lease (300 s) outlasts the pull timeout (20 s): a finished rank that stayed in the job
        # would hold the others' BSP round or SSP 0 bound until rank 0 gave up.
        script = (
            "import json, sys, torch, ps_train.torch as pst\n"
            "rank = pst.init(pull_timeout_s=20.0)['rank']\n"
            "steps = int(sys.argv[1].split(',')[rank])\n"
            "m = torch.nn.Linear(3, 2)\n"
            "opt = pst.ServerOptimizer(m, batch_size=1, steps=steps)\n"
            "for _ in range(steps):\n"
            "    opt.zero_grad()\n"
            "    m(torch.ones(1, 3)).sum().backward()\n"
            "    opt.step()\n"
            "work = pst.finish()\n"
            "if rank == 0:\n"
            "    json.dump(work, open(sys.argv[2], 'w'))\n")
        with tempfile.TemporaryDirectory() as tmp:
            path = write_script(tmp, script)
            for mode in (["--mode=bsp"], ["--mode=ssp", "--staleness=0"]):
                for steps in ("3,8", "8,3"):
                    with self.subTest(mode=mode, steps=steps):
                        name = f"{mode[0][7:]}-{steps.replace(',', '-')}"
                        result = f"{tmp}/{name}.json"
                        run = launch(["--workers=2", "--shards=2", "--lease_ms=300000",
                                      "--lr_schedule=constant", f"--metrics_dir={tmp}/{name}",
                                      "--quiet"] + mode + ["--python", path, "--", steps, result],
                                     timeout=120)
                        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
                        with open(result, encoding="utf-8") as f:
                            work = json.load(f)
                        self.assertTrue(work["job_done"], work)
                        # Every push of both ranks reached both shards; nothing was skipped.
                        self.assertEqual(work["gradients_expected"], 2 * 11, work)
                        self.assertEqual(work["gradients_applied"], 2 * 11)
                        self.assertEqual([(w["rank"], w["state"], w["steps_skipped"])
                                          for w in work["workers"]],
                                         [(0, "finished", 0), (1, "finished", 0)])
                        with open(f"{tmp}/{name}/summary.json", encoding="utf-8") as f:
                            summary = json.load(f)
                        self.assertEqual(summary["gradients_applied"], 2 * 11)
                        self.assertNotIn("job_report", summary)

    def test_a_shard_killed_under_rollback_leaves_the_undisturbed_result(self):
        # The example picks each step's samples by the shards' clock, so when ps_launch puts both
        # shards back to a checkpoint the workers redo the lost steps on the same samples.
        job = ["--shards=2", "--workers=2", "--mode=bsp", "--quiet"]
        script = ["--python", EXAMPLE, "--", "--epochs", "2", "--train_limit", "6000",
                  "--test_limit", "1000"]
        with tempfile.TemporaryDirectory() as tmp:
            calm = launch(job + [f"--metrics_dir={tmp}/calm"] + script, timeout=300)
            self.assertEqual(calm.returncode, 0, calm.stdout + calm.stderr)
            run = f"{tmp}/rollback"
            with subprocess.Popen(
                    [os.path.join(BIN_DIR, "ps_launch")] + job +
                    [f"--metrics_dir={run}", f"--checkpoint_root={tmp}/checkpoints",
                     "--checkpoint_every=10", "--restart_shards", "--rollback_shards",
                     "--restart_delay_s=1"] + script,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
                # 93 steps an epoch, 186 in all: shard 1 dies at step 60 or after, with a
                # checkpoint of it on disk.
                deadline = time.time() + 120
                while time.time() < deadline:
                    steps = 0
                    if os.path.exists(f"{run}/worker-0.jsonl"):
                        with open(f"{run}/worker-0.jsonl", encoding="utf-8") as f:
                            steps = sum(json.loads(line)["kind"] == "step" for line in f
                                        if line.endswith("\n"))
                    if steps >= 60 and any(name.startswith("ckpt-") for name in os.listdir(
                            f"{tmp}/checkpoints/ps-1")):
                        break
                    time.sleep(0.02)
                with open(f"{run}/ps-1.pid", encoding="utf-8") as f:
                    os.kill(int(f.read()), signal.SIGKILL)
                out, _ = proc.communicate(timeout=300)
            self.assertEqual(proc.returncode, 0, out)
            self.assertIn("every shard goes back to its checkpoint of version", out)
            summaries = []
            for name in ("calm", "rollback"):
                with open(f"{tmp}/{name}/summary.json", encoding="utf-8") as f:
                    summaries.append(json.load(f))
        undisturbed, rolled_back = summaries
        self.assertEqual((rolled_back["shard_restarts"], rolled_back["shard_rollbacks"]), (1, 1))
        self.assertEqual(rolled_back["gradients_applied"], undisturbed["gradients_applied"])
        self.assertEqual(rolled_back["gradients_applied"], rolled_back["gradients_expected"])
        self.assertEqual((rolled_back["test_accuracy"], rolled_back["test_loss"]),
                         (undisturbed["test_accuracy"], undisturbed["test_loss"]))

    def test_a_script_without_finish_leaves_no_report_and_the_summary_says_so(self):
        script = (
            "import torch, ps_train.torch as pst\n"
            "pst.init()\n"
            "m = torch.nn.Linear(3, 2)\n"
            "opt = pst.ServerOptimizer(m, batch_size=1, steps=1)\n"
            "m(torch.ones(1, 3)).sum().backward()\n"
            "opt.step()\n")
        with tempfile.TemporaryDirectory() as tmp:
            run = launch(["--workers=1", f"--metrics_dir={tmp}/run", "--quiet", "--python",
                          write_script(tmp, script)], timeout=120)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            self.assertIn("did not call ps_train.torch.finish()", run.stderr)
            with open(f"{tmp}/run/summary.json", encoding="utf-8") as f:
                summary = json.load(f)
        self.assertIn("did not call ps_train.torch.finish()", summary["job_report"])
        self.assertNotIn("gradients_applied", summary)

    def test_the_scripts_batch_gives_the_samples_behind_one_update(self):
        # 3 workers pushing 32 samples each: a BSP round averages 96, an SSP or ASP update 32.
        for mode, effective in (("bsp", 96), ("asp", 32)):
            with tempfile.TemporaryDirectory() as tmp:
                run = launch(["--dry_run", "--workers=3", f"--mode={mode}", "--base_batch=32",
                              "--python_batch=32", f"--metrics_dir={tmp}/run", "--python",
                              EXAMPLE])
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            self.assertIn(f" --effective_batch={effective} ", run.stdout, mode)

    def test_stragglers_jitter_and_pauses_reach_the_scripts_ranks(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = launch(["--dry_run", "--workers=3", "--straggler=1:3", "--jitter=0.1:4",
                          "--pause_worker=2:5:0.5", f"--metrics_dir={tmp}/run", "--python",
                          EXAMPLE])
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        ranks = [line for line in run.stdout.splitlines() if " PS_RANK=" in line]
        self.assertEqual(len(ranks), 3, run.stdout)
        for rank, (slowdown, pause) in enumerate((("1", ""), ("3", ""), ("1", "5:0.5"))):
            self.assertIn(f" PS_SLOWDOWN={slowdown} PS_PAUSE={pause} PS_JITTER=0.1:4 ",
                          ranks[rank], rank)

    def test_bad_command_lines_exit_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            missing = launch([f"--metrics_dir={tmp}", "--python", f"{tmp}/none.py"])
            self.assertEqual(missing.returncode, 2, missing.stderr)
            self.assertIn("no such readable file", missing.stderr)
            stray = launch([f"--metrics_dir={tmp}", "--", "stray"])
            self.assertEqual(stray.returncode, 2, stray.stderr)
            self.assertIn("only --python takes arguments", stray.stderr)
            slow = launch([f"--metrics_dir={tmp}", "--straggler=3:2", "--python", EXAMPLE])
            self.assertEqual(slow.returncode, 2, slow.stderr)
            self.assertIn("--straggler '3:2' must be RANK:FACTOR with 0 <= RANK < 2", slow.stderr)
            # What ps_worker would check as it starts, the launcher checks for a script's ranks.
            for flag, message in (("--jitter=often", "--jitter 'often' must be PROBABILITY:FACTOR"),
                                  ("--jitter=0.5:0.5", "jitter factor must be >= 1, got 0.5"),
                                  ("--pause_worker=1:x:2",
                                   "--pause_worker of rank 1 'x:2' must be STEP:SECONDS")):
                bad = launch([f"--metrics_dir={tmp}", flag, "--python", EXAMPLE])
                self.assertEqual(bad.returncode, 2, bad.stderr)
                self.assertIn(message, bad.stderr)
            # ps_worker's flags would be dropped: refused, each named, instead of ignored.
            dropped = launch([f"--metrics_dir={tmp}", "--device=cuda", "--epochs=3", "--overlap",
                              "--python", EXAMPLE])
            self.assertEqual(dropped.returncode, 2, dropped.stderr)
            self.assertIn("--device, --epochs, --overlap set ps_worker's training", dropped.stderr)
            scaled = launch([f"--metrics_dir={tmp}", "--base_batch=32", "--python", EXAMPLE])
            self.assertEqual(scaled.returncode, 2, scaled.stderr)
            self.assertIn("--base_batch with --python needs --python_batch", scaled.stderr)
            stray_batch = launch([f"--metrics_dir={tmp}", "--python_batch=32"])
            self.assertEqual(stray_batch.returncode, 2, stray_batch.stderr)
            self.assertIn("--python_batch is a --python script's", stray_batch.stderr)
            self.assertFalse(os.listdir(tmp), "a refused command line made the run folder")


if __name__ == "__main__":
    unittest.main()
