"""experiments/run_sweep.py, the staleness sweep the README promises in one command, for real.

- a small sweep (3 modes x 2 scenarios of 2 workers and 1 shard) writes its table, summaries and
  plots, with every SSP run within its staleness bound;
- a sweep judged by the loss (lower is better) reports and plots the loss;
- a sweep over several seeds adds a table of means, 95 % intervals and differences paired by
  seed, which the test recomputes from the runs' own summaries;
- bad configs exit 2 before anything runs or is written, saying what is wrong;
- a sweep of a PyTorch script (examples/fashion_mnist_mlp.py) as every worker gives each run its
  seed as the script's argument and reads the measure the script reported; a script that reports
  none fails its run, saying how to report it;
- SIGTERM stops the sweep: the run in progress ends with its processes, the finished runs are
  written, the runs not done are named, and it exits 1.

Needs the built binaries (PS_BIN_DIR) and Debian's python3-matplotlib
(scripts/setup.sh with INSTALL_TEST_PACKAGES=1 installs it). Run by ctest as sweep_e2e_test.
"""
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("PS_BIN_DIR", os.path.join(ROOT, "build", "bin"))
SWEEP = os.path.join(ROOT, "experiments", "run_sweep.py")
sys.path.insert(0, os.path.dirname(SWEEP))
import run_sweep  # noqa: E402  (found through the path above)

SMALL = {
    "name": "small",
    "description": "2 workers, 1 shard, 1 280 images for one epoch.",
    "target_accuracy": 0.5,
    "common": {"shards": 1, "workers": 2, "model": "mlp", "epochs": 1, "batch_size": 32,
               "train_limit": 1280, "test_limit": 500, "eval_every": 5},
    "modes": ["bsp", "ssp:1", "asp"],
    "scenarios": {"none": {}, "straggler": {"straggler": "1:3"}},
    "update_rules": ["plain"],
    "seeds": [1],
}
PYTHON = {
    "name": "python",
    "description": "The PyTorch example as 2 workers, 1 shard, 1 920 images for one epoch.",
    "target_accuracy": 0.5,
    "common": {"shards": 1, "workers": 2, "python": "examples/fashion_mnist_mlp.py",
               "python_batch": 32,
               "python_args": ["--epochs", "1", "--train_limit", "1920", "--test_limit", "500",
                               "--eval_each_epoch"]},
    "modes": ["bsp", "asp"],
    "scenarios": {"none": {}},
    "seeds": [1, 2],
}
PYTHON_EXAMPLE = os.path.join(ROOT, "examples", "fashion_mnist_mlp.py")
PACKAGE_BUILT = os.path.exists(
    os.path.join(os.path.dirname(BIN), "python", "ps_train", "__init__.py"))
LABELS = [f"{scenario}__{mode}__plain__seed1" for scenario in ("none", "straggler")
          for mode in ("bsp", "ssp1", "asp")]


def processes_naming(text):
    """Pids of the processes whose command line contains `text`."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


class SeedStatisticsTest(unittest.TestCase):
    def test_mean_and_interval_follow_students_t(self):
        mean, sd, half = run_sweep.mean_and_ci([1.0, 2.0, 3.0, 4.0])
        self.assertEqual(mean, 2.5)
        self.assertAlmostEqual(sd, math.sqrt(5 / 3), places=12)
        self.assertAlmostEqual(half, 3.182 * math.sqrt(5 / 3) / 2, places=12)  # t(3) = 3.182
        _, _, half = run_sweep.mean_and_ci([0.0, 1.0])
        self.assertAlmostEqual(half, 12.706 * math.sqrt(0.5) / math.sqrt(2), places=12)
        _, sd, half = run_sweep.mean_and_ci([float(i % 2) for i in range(40)])  # 39: the normal's
        self.assertAlmostEqual(half, 1.960 * sd / math.sqrt(40), places=12)
        self.assertEqual(run_sweep.mean_and_ci([0.25]), (0.25, None, None))
        self.assertIsNone(run_sweep.mean_and_ci([]))
        self.assertEqual(run_sweep.fmt_ci((0.02, 0.01, 0.125), sign="+"), "+0.0200 ± 0.1250")
        self.assertEqual(run_sweep.fmt_ci((0.85, None, None)), "0.8500")
        self.assertEqual(run_sweep.fmt_ci(None), "-")


class SweepTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sweep_e2e_")
        self.out = os.path.join(self.dir, "results")
        self.runs = os.path.join(self.dir, "runs")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def command(self, config):
        path = os.path.join(self.dir, "config.json")
        with open(path, "w") as f:
            json.dump(config, f)
        return [sys.executable, SWEEP, path, "--bin_dir", BIN, "--out", self.out,
                "--runs_dir", self.runs]

    def sweep(self, config):
        return subprocess.run(self.command(config), capture_output=True, text=True, timeout=500)

    def test_a_small_sweep_writes_its_table_summaries_and_plots(self):
        result = self.sweep(SMALL)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        with open(os.path.join(self.out, "summaries.jsonl")) as f:
            runs = [json.loads(line) for line in f]
        self.assertEqual([r["label"] for r in runs], LABELS)
        for r in runs:
            s = r["summary"]
            self.assertEqual(r["exit_code"], 0, r["label"])
            # 1 280 images, 2 workers of batch 32: 20 steps each, all applied on the one shard.
            self.assertEqual(s["gradients_expected"], 40, r["label"])
            self.assertEqual(s["gradients_applied"], 40, r["label"])
            if r["mode_name"] == "bsp":
                self.assertEqual(s["max_staleness"], 0, r["label"])
            if r["mode_name"] == "ssp:1":  # (W-1)(2s+1) = 3
                self.assertLessEqual(s["max_staleness"], 3, r["label"])
        with open(os.path.join(self.out, "table.md")) as f:
            table = f.read()
        rows = [line for line in table.splitlines() if line.startswith("| none |") or
                line.startswith("| straggler |")]
        self.assertEqual(len(rows), 6, table)
        self.assertEqual(sum(" | ssp:1 | plain | 1 |" in row for row in rows), 2, table)
        self.assertNotIn("FAILED", table)
        for png in ("accuracy_vs_time.png", "accuracy_vs_updates.png", "wait_share_vs_s.png",
                    "staleness_histograms.png"):
            with open(os.path.join(self.out, png), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", png)

    def test_a_sweep_judged_by_the_loss_reports_the_loss(self):
        config = json.loads(json.dumps(SMALL))
        del config["target_accuracy"]
        config.update(metric="loss", target=10.0, modes=["asp"], scenarios={"none": {}})
        result = self.sweep(config)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        with open(os.path.join(self.out, "summaries.jsonl")) as f:
            [run] = [json.loads(line) for line in f]
        loss = run["summary"]["final_loss"]
        with open(os.path.join(self.runs, run["label"], "worker-0.jsonl")) as f:
            evals = [json.loads(line) for line in f if '"kind":"eval"' in line]
        self.assertGreater(len(evals), 0)
        with open(os.path.join(self.out, "table.md")) as f:
            table = f.read()
        self.assertIn("Target test loss: 10.0.", table)
        self.assertIn("| time to target (s) | wall (s) | final test loss |", table)
        [row] = [line for line in table.splitlines() if line.startswith("| none |")]
        cells = [c.strip() for c in row.strip("|").split("|")]
        # Every loss is below 10: the target is reached at the first evaluation.
        self.assertEqual(cells[4], f"{evals[0]['wall_s']:.1f}", table)
        self.assertEqual(cells[6], f"{loss:.4f}", table)
        self.assertIn(f"test loss {loss:.4f}", result.stdout)
        for png in ("loss_vs_time.png", "loss_vs_updates.png"):
            with open(os.path.join(self.out, png), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", png)
        self.assertFalse(os.path.exists(os.path.join(self.out, "accuracy_vs_time.png")))

    def test_a_sweep_over_seeds_reports_means_intervals_and_paired_differences(self):
        config = json.loads(json.dumps(SMALL))
        config.update(modes=["bsp", "asp"], scenarios={"none": {}}, seeds=[1, 2, 3])
        result = self.sweep(config)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        with open(os.path.join(self.out, "summaries.jsonl")) as f:
            runs = [json.loads(line) for line in f]
        final = {(r["mode_name"], r["seed"]): r["summary"]["test_accuracy"] for r in runs}
        self.assertEqual(len(final), 6)
        with open(os.path.join(self.out, "table.md")) as f:
            table = f.read()
        seeds_part = table.split("## Across seeds", 1)[1]
        rows = {line.split("|")[2].strip(): [c.strip() for c in line.strip("|").split("|")]
                for line in seeds_part.splitlines() if line.startswith("| none |")}
        self.assertEqual(sorted(rows), ["asp", "bsp"], table)

        wall = {(r["mode_name"], r["seed"]): r["summary"]["wall_seconds"] for r in runs}

        def interval(values, sign="", digits=4):
            mean = sum(values) / 3
            sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 2)
            half = 4.303 * sd / math.sqrt(3)  # t(2)
            return f"{mean:{sign}.{digits}f} ± {half:.{digits}f}", f"{sd:.{digits}f}"

        for mode in ("bsp", "asp"):
            cells = rows[mode]
            self.assertEqual(cells[3], "3 of 3", table)
            self.assertEqual((cells[4], cells[5]),
                             interval([final[(mode, seed)] for seed in (1, 2, 3)]), table)
            self.assertEqual(cells[9],
                             interval([wall[(mode, seed)] for seed in (1, 2, 3)], digits=1)[0],
                             table)
        self.assertEqual(rows["bsp"][6], "-", table)
        paired = [final[("asp", seed)] - final[("bsp", seed)] for seed in (1, 2, 3)]
        self.assertEqual(rows["asp"][6], interval(paired, sign="+")[0] + " vs bsp", table)

    def test_a_python_run_gets_its_seed_as_the_scripts_argument_and_its_delays_seed(self):
        runs = run_sweep.expand(PYTHON)
        self.assertEqual([run_sweep.launch_flags(r)[-9:] for r in runs][:2], [
            ["--", "--epochs", "1", "--train_limit", "1920", "--test_limit", "500",
             "--eval_each_epoch", f"--seed={seed}"] for seed in (1, 2)])
        for r in runs:
            self.assertNotIn("seed", r["flags"])  # ps_launch's --seed is ps_worker's
            # The jitter's draws follow the run's seed, as ps_worker's do.
            self.assertEqual(r["env"], {"PS_DELAY_SEED": str(r["seed"])})
            self.assertEqual(r["flags"]["python"],
                             os.path.join(ROOT, "examples", "fashion_mnist_mlp.py"))

    @unittest.skipUnless(PACKAGE_BUILT, "the Python package is not built (a sanitizer build)")
    def test_a_sweep_of_a_pytorch_script_reads_what_the_script_reports(self):
        result = self.sweep(PYTHON)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        with open(os.path.join(self.out, "summaries.jsonl")) as f:
            runs = [json.loads(line) for line in f]
        self.assertEqual([(r["mode_name"], r["seed"]) for r in runs],
                         [("bsp", 1), ("bsp", 2), ("asp", 1), ("asp", 2)])
        for r in runs:
            s = r["summary"]
            # 1 920 images, 2 workers of batch 32: 30 steps each, all applied on the one shard.
            self.assertEqual((s["gradients_applied"], s["gradients_expected"]), (60, 60))
            self.assertEqual(s["samples"], 1920, r["label"])
            self.assertTrue(0 <= s["wait_share"] < 1, r["label"])
            self.assertGreater(s["test_accuracy"], 0.5, r["label"])
            self.assertEqual(s["python"], PYTHON_EXAMPLE)
            # The run's configuration: a BSP update averages both workers' pushes of 32.
            self.assertEqual(s["mode"], r["mode_name"])
            self.assertEqual(s["update_batch"], 64 if r["mode_name"] == "bsp" else 32)
            # The script's losses (opt.step(loss=...)) and its evaluation after the epoch
            # (pst.report_eval), then the final point.
            self.assertGreater(s["train_loss"], 0, r["label"])
            self.assertEqual(len(r["curve"]), 2, r["label"])
            self.assertLess(r["curve"][0][0], r["curve"][1][0], r["label"])
        self.assertEqual(runs[0]["summary"]["max_staleness"], 0)
        # Under BSP rank 0's weights after its last step are the final ones: the epoch's point
        # is the final measure, at the last of the 30 rounds.
        for bsp in runs[:2]:
            self.assertEqual(bsp["curve"][0][1:], [30, bsp["summary"]["test_accuracy"]])
        with open(os.path.join(self.out, "table.md")) as f:
            table = f.read()
        self.assertNotIn("FAILED", table)
        # The wait share, from the workers' step lines (ps_train writes them under ps_launch).
        [row] = [line for line in table.splitlines() if line.startswith("| none | bsp | plain | 1 |")]
        self.assertEqual(row.split("|")[8].strip(), f"{runs[0]['summary']['wait_share']:.3f}", table)

    @unittest.skipUnless(PACKAGE_BUILT, "the Python package is not built (a sanitizer build)")
    def test_a_script_that_reports_no_measure_fails_its_run_saying_how_to_report_it(self):
        script = os.path.join(self.dir, "silent.py")
        with open(script, "w") as f:
            f.write("import argparse, torch, ps_train.torch as pst\n"
                    "parser = argparse.ArgumentParser()\n"
                    "parser.add_argument('--seed')\n"
                    "parser.parse_args()\n"
                    "pst.init()\n"
                    "m = torch.nn.Linear(3, 2)\n"
                    "opt = pst.ServerOptimizer(m, batch_size=1, steps=1)\n"
                    "m(torch.ones(1, 3)).sum().backward()\n"
                    "opt.step()\n"
                    "pst.finish()\n")
        config = dict(PYTHON, modes=["asp"], seeds=[1],
                      common={"shards": 1, "workers": 1, "python": script})
        result = self.sweep(config)
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertIn("summary.json has no test_accuracy: the script reports it with "
                      "ps_train.torch.report_result()", result.stdout + result.stderr)
        with open(os.path.join(self.out, "table.md")) as f:
            self.assertIn("FAILED (summary.json has no test_accuracy", f.read())

    def test_bad_configs_exit_2_before_anything_runs(self):
        def changed(**edits):
            config = json.loads(json.dumps(SMALL))
            for key, value in edits.items():
                if value is None:
                    del config[key]
                else:
                    config[key] = value
            return config

        cases = [
            (changed(common={**SMALL["common"], "eval_evry": 5}),
             "ps_launch refuses its flags: ERROR: Unknown command line flag 'eval_evry'"),
            (changed(common={**SMALL["common"], "epochs": "two"}),
             "ERROR: Illegal value 'two' specified for flag 'epochs'"),
            # Values only the launcher and the shards judge: ps_launch --dry_run checks them.
            (changed(update_rules=["plain", "dc-asgd"]),
             "ps_launch refuses its flags: unknown update rule 'dc-asgd'"),
            (changed(scenarios={"none": {}, "straggler": {"straggler": "2:3"}}),
             "--straggler '2:3' must be RANK:FACTOR with 0 <= RANK < 2"),
            (changed(common={**SMALL["common"], "backup_workers": 2}),
             "backup_workers must be in [0, num_workers), got 2"),
            (changed(modes=["bsp", "ssp:x"]), "unknown mode 'ssp:x'"),
            (changed(target_accuracy=None), "give the target value once: target"),
            (changed(target=0.5), "give the target value once: target"),
            (changed(target_accuracy="high"), "the target is a number"),
            (changed(metric="perplexity"), "metric 'perplexity' is not one of accuracy, auc, loss"),
            (changed(metric="loss"), "target_accuracy with metric loss: use target"),
            (changed(metric="auc", target_accuracy=None, target=0.7),
             "run none__bsp__plain__seed1: metric auc needs a click model (model dlrm)"),
            (changed(seed=[1]), "unknown key(s) seed"),
            (changed(scenarios={"none": {"mode": "asp"}}), "none: mode are set by the runner"),
            (changed(name="../elsewhere"), "name '../elsewhere'"),
            (changed(scenarios={"none": {"only_modes": ["ssp:4"]}}),
             "only_modes names ssp:4, not among modes"),
            (changed(scenarios={"none": {"python_args": "--epochs 1"}}),
             "none: python_args is a list of strings"),
        ]
        for config, message in cases:
            with self.subTest(message=message):
                result = self.sweep(config)
                self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
                self.assertIn(message, result.stderr)
                self.assertFalse(os.path.exists(self.out))
                self.assertFalse(os.path.exists(self.runs))

    def test_sigterm_stops_the_sweep_and_names_the_runs_not_done(self):
        config = json.loads(json.dumps(SMALL))
        config["common"].update(train_limit=60000, epochs=5)  # long enough to be stopped
        config["modes"] = ["bsp", "asp"]
        config["scenarios"] = {"none": {}}
        sweep = subprocess.Popen(self.command(config), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        first = os.path.join(self.runs, "none__bsp__plain__seed1", "worker-0.jsonl")
        deadline = time.time() + 120
        while not (os.path.exists(first) and os.path.getsize(first) > 0):
            self.assertLess(time.time(), deadline, "the first run did not start training")
            self.assertIsNone(sweep.poll(), "the sweep ended before it was stopped")
            time.sleep(0.1)
        self.assertNotEqual(processes_naming(self.runs), [])
        sweep.send_signal(signal.SIGTERM)
        stdout, stderr = sweep.communicate(timeout=120)
        self.assertEqual(sweep.returncode, 1, stdout + stderr)
        self.assertIn("stopped by signal 15: 2 of 2 runs not done: none__bsp__plain__seed1, "
                      "none__asp__plain__seed1", stderr)
        with open(os.path.join(self.out, "table.md")) as f:
            self.assertIn("Not run (the sweep was stopped): none__bsp__plain__seed1, "
                          "none__asp__plain__seed1.", f.read())
        self.assertFalse(os.path.exists(os.path.join(self.runs, "none__asp__plain__seed1")))
        # ps_launch stopped its shards and workers before the sweep exited.
        self.assertEqual(processes_naming(self.runs), [])


if __name__ == "__main__":
    unittest.main()
