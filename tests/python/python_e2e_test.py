"""End to end: ps_launch --python runs examples/fashion_mnist_mlp.py as every worker, on
Debian's Fashion-MNIST, under SSP(2) and ASP with 3 workers for 5 epochs (the acceptance runs of
docs/python.md), and refuses bad command lines with exit code 2.

    PYTHONPATH=build/python PS_BIN_DIR=build/bin PS_SOURCE_DIR=. python3 -m unittest python_e2e_test
"""

import json
import os
import subprocess
import tempfile
import unittest

BIN_DIR = os.environ.get("PS_BIN_DIR", "build/bin")
SOURCE_DIR = os.environ.get("PS_SOURCE_DIR", ".")
EXAMPLE = os.path.join(SOURCE_DIR, "examples", "fashion_mnist_mlp.py")


def launch(args, timeout=600):
    return subprocess.run([os.path.join(BIN_DIR, "ps_launch")] + args, capture_output=True,
                          text=True, timeout=timeout)


class PythonWorkers(unittest.TestCase):
    def train(self, mode_flags):
        with tempfile.TemporaryDirectory() as tmp:
            result = os.path.join(tmp, "result.json")
            run = launch(["--shards=2", "--workers=3", "--optimizer=adam", "--lr=0.001",
                          f"--metrics_dir={tmp}/run", "--quiet"] + mode_flags +
                         ["--python", EXAMPLE, "--", "--epochs", "5", "--result", result])
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
        return out

    def test_ssp_converges_within_its_bound(self):
        out = self.train(["--mode=ssp", "--staleness=2"])
        self.assertGreaterEqual(out["test_accuracy"], 0.86)
        # (W-1)(2s+1) updates of one shard at most (DESIGN.md), on both shards.
        for shard in out["status"]:
            self.assertEqual(shard["mode"], "ssp")
            for w in shard["workers"]:
                self.assertLessEqual(w["max_staleness"], 10, shard)

    def test_asp_converges(self):
        out = self.train(["--mode=asp"])
        self.assertGreaterEqual(out["test_accuracy"], 0.86)
        self.assertEqual(out["status"][0]["mode"], "asp")

    def test_bad_command_lines_exit_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            missing = launch([f"--metrics_dir={tmp}", "--python", f"{tmp}/none.py"])
            self.assertEqual(missing.returncode, 2, missing.stderr)
            self.assertIn("no such readable file", missing.stderr)
            stray = launch([f"--metrics_dir={tmp}", "--", "stray"])
            self.assertEqual(stray.returncode, 2, stray.stderr)
            self.assertIn("only --python takes arguments", stray.stderr)
            slow = launch([f"--metrics_dir={tmp}", "--straggler=0:2", "--python", EXAMPLE])
            self.assertEqual(slow.returncode, 2, slow.stderr)


if __name__ == "__main__":
    unittest.main()
