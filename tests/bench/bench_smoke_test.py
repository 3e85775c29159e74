"""The benchmarks run, print every figure they promise beside its same-run reference, and refuse
bad flags with exit 2 before measuring anything. bench/link_bench.sh too, across two network
namespaces (as root; its argument checks run everywhere). The scripts and benchmarks that start
processes stop them all at once on SIGTERM and leave nothing behind.

Each harness runs at the smallest size that still takes every path (a fraction of a second per
figure): these tests check that the figures exist, are finite and positive, that each ratio is
the quotient of the figures printed beside it, and that the lines are exactly the ones asked for;
they do not judge the speeds (docs/performance.md holds the measured ones).

Needs the built binaries (PS_BIN_DIR), Fashion-MNIST and the text corpus that scripts/setup.sh
provides. Run by ctest as bench_smoke_test.
"""
import glob
import json
import math
import os
import signal
import subprocess
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("PS_BIN_DIR", os.path.join(ROOT, "build", "bin"))


def run(binary, *args, timeout=300):
    """(exit code, JSON lines, stderr) of one benchmark run from the repository root."""
    done = subprocess.run([os.path.join(BIN, binary), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, lines, done.stderr


def run_script(*args, script="link_bench.sh", env=None):
    """(exit code, JSON lines, stderr) of a script of bench/ (bench/link_bench.sh by default)."""
    done = subprocess.run(["bash", os.path.join(ROOT, "bench", script), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=env)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, lines, done.stderr


def bench_processes(folder="/link_bench."):
    """Command lines of the running processes that name a bench script's folder (link_bench's by
    default: its ps_server and ps_worker), zombies aside."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if folder in cmdline:
            found.append(cmdline)
    return found


def namespaces():
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return sorted(done.stdout.split("\n"))


class BenchSmokeTest(unittest.TestCase):
    def assert_positive(self, line, *keys):
        for key in keys:
            self.assertIn(key, line, line)
            value = line[key]
            self.assertTrue(isinstance(value, (int, float)) and math.isfinite(value) and value > 0,
                            f"{key}={value!r} in {line}")

    def assert_ratio(self, line, ratio, numerator, denominator):
        self.assert_positive(line, ratio, numerator, denominator)
        self.assertAlmostEqual(line[ratio], line[numerator] / line[denominator], delta=1e-6 *
                               line[ratio], msg=f"{ratio} in {line}")

    def assert_refused(self, binary, args, message):
        code, lines, err = run(binary, *args, timeout=60)
        self.assertEqual(code, 2, f"{binary} {args}: {err}")
        self.assertIn(message, err)
        self.assertEqual(lines, [], "nothing is measured before the refusal")

    def test_transport_prints_every_cell_with_its_references(self):
        transports = ["grpc", "shm", "shm_direct"]
        code, lines, err = run("ps_bench_transport", "--configs", "1x1", "--mib", "1",
                               "--seconds", "0.05", "--rounds", "1", "--transports",
                               ",".join(transports), "--ops", "push,pull,push_pull", "--small")
        self.assertEqual(code, 0, err)
        cells = sorted((line["op"], line.get("transport", "")) for line in lines)
        expected = [("page_fault", "")] + [(op, t) for op in (
            "burst_1000", "pull", "pull_64k", "push", "push_64k", "push_pull") for t in transports]
        self.assertEqual(cells, sorted(expected))
        for line in lines:
            op = line["op"]
            if op == "page_fault":
                self.assert_positive(line, "us")
            elif op in ("push", "pull"):
                self.assertEqual(line["mib"], 1)
                self.assertGreaterEqual(line["faults_per_call"], 0)
                self.assertGreaterEqual(line["grpc_faults_per_call"], 0)
                self.assert_ratio(line, "ratio_vs_tcp", "gbps", "tcp_gbps")
                self.assert_ratio(line, "ratio_vs_grpc", "gbps", "grpc_gbps")
                self.assert_ratio(line, "ratio_vs_memcpy", "gbps", "memcpy_gbps")
            elif op == "push_pull":
                self.assertNotIn("tcp_gbps", line, "a one-way reference for a two-way call")
                self.assert_ratio(line, "ratio_vs_grpc", "gbps", "grpc_gbps")
            elif op == "burst_1000":
                self.assert_ratio(line, "ratio_vs_grpc", "grpc_ms", "ms")
                self.assertAlmostEqual(line["calls_per_sec"], 1000 / (line["ms"] / 1e3),
                                       delta=1e-6 * line["calls_per_sec"])
            else:
                self.assert_ratio(line, "ratio_vs_grpc", "grpc_us", "us")

    def test_transport_refuses_bad_flags(self):
        self.assert_refused("ps_bench_transport", ["--mib", "1,0"], "--mib: '0' is not in [1, 128]")
        self.assert_refused("ps_bench_transport", ["--ops", "push,jump"],
                            "--ops: 'jump' is not push, pull or push_pull")
        self.assert_refused("ps_bench_transport", ["--configs", "1x1,2x1", "--mode", "bsp"],
                            "--mode bsp: one worker only")
        self.assert_refused("ps_bench_transport", ["--transports", "grpc,rdma"],
                            "--transports: 'rdma' is not grpc, shm or shm_direct")

    def test_train_prints_each_model_against_local_training(self):
        code, lines, err = run("ps_bench_train", "--models", "mlp,cnn,gpt", "--configs", "1x1",
                               "--encodings", "f32", "--steps", "6", "--cnn_steps", "3",
                               "--gpt_steps", "2", "--batch_size", "8")
        self.assertEqual(code, 0, err)
        self.assertEqual([(line["bench"], line["model"]) for line in lines],
                         [("train", "mlp"), ("train", "cnn"), ("train", "gpt")])
        for line, steps in zip(lines, (6, 3, 2)):
            self.assertEqual((line["workers"], line["shards"], line["steps"],
                              line["batch_size"]), (1, 1, steps, 8))
            self.assert_ratio(line, "ratio_vs_local", "samples_per_sec", "local_samples_per_sec")
            self.assert_positive(line, "step_ms", "push_bytes_per_step", "pull_bytes_per_step")
            for share in ("comm_wait_share", "pull_share", "compute_share", "push_share"):
                self.assertTrue(0 <= line[share] <= 1, f"{share} in {line}")
        self.assertEqual(lines[0]["push_bytes_per_step"], 4 * lines[0]["params"])

    def test_train_refuses_bad_list_items_before_measuring(self):
        self.assert_refused("ps_bench_train", ["--models", "mlp,resnet"],
                            "--models: 'resnet' is not mlp, cnn or gpt")
        self.assert_refused("ps_bench_train", ["--configs", "1x1,2y2"],
                            "--configs: '2y2' is not WORKERSxSHARDS")
        self.assert_refused("ps_bench_train", ["--encodings", "f32,f77"],
                            "--encodings: unknown encoding 'f77'")
        self.assert_refused("ps_bench_train", ["--schedules", "whole,fast"],
                            "--schedules: 'fast' is neither whole nor priority")
        self.assert_refused("ps_bench_train", ["--mode", "bsq"], "--mode: unknown mode 'bsq'")
        self.assert_refused("ps_bench_train", ["--chunk_mib", "2"],
                            "--chunk_mib is a worker's or shard's flag this bench does not apply")

    def test_scale_runs_its_clients_without_errors(self):
        code, lines, err = run("ps_bench_scale", "--workers", "2,3", "--params", "4096",
                               "--seconds", "0.2", "--shards", "2")
        self.assertEqual(code, 0, err)
        self.assertEqual([(line["workers"], line["shards"], line["params"]) for line in lines],
                         [(2, 2, 4096), (3, 2, 4096)])
        for line in lines:
            self.assertEqual(line["errors"], 0)
            self.assert_positive(line, "pushes_per_sec", "pull_p50_ms", "pull_p99_ms",
                                 "server_rss_mib")
            self.assertLessEqual(line["pull_p50_ms"], line["pull_p99_ms"])

    def test_scale_refuses_bad_flags(self):
        self.assert_refused("ps_bench_scale", ["--mode", "xyz"],
                            "--mode: 'xyz' is not bsp, ssp or asp")
        self.assert_refused("ps_bench_scale", ["--workers", "2,0"],
                            "--workers: '0' is not a count >= 1")
        self.assert_refused("ps_bench_scale", ["--params", "4096,abc"], "--params: 'abc'")
        self.assert_refused("ps_bench_scale", ["--mode", "bsp"], "--steps must be > 0")

    def test_scale_stops_its_shard_processes_on_sigterm(self):
        bench = subprocess.Popen(
            [os.path.join(BIN, "ps_bench_scale"), "--workers", "2", "--params", "4096",
             "--seconds", "60", "--shards", "2"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        shards = f"/ps_bench_shards.{bench.pid}/"  # in each ps_server's --port_file
        folder = os.path.join(tempfile.gettempdir(), shards.strip("/"))
        deadline = time.monotonic() + 60
        while len(bench_processes(shards)) < 2:
            self.assertIsNone(bench.poll(), "ps_bench_scale ended before its shards started")
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.1)
        self.assertTrue(os.path.isdir(folder))
        bench.send_signal(signal.SIGTERM)
        out, err = bench.communicate(timeout=30)
        self.assertEqual(bench.returncode, 128 + signal.SIGTERM, err)
        self.assertIn("stopped by SIGTERM: the shard processes are stopped", err)
        self.assertEqual(out, "", "nothing is measured")
        self.assertEqual(bench_processes(shards), [])
        self.assertFalse(os.path.exists(folder))

    def test_sparse_prints_rows_against_gather_and_scatter(self):
        code, lines, err = run("ps_bench_sparse", "--batches", "100", "--dims", "16",
                               "--rows", "10000", "--seconds", "0.2", "--shards", "1",
                               "--keys", "zipf,uniform")
        self.assertEqual(code, 0, err)
        self.assertEqual([(line["bench"], line.get("keys")) for line in lines],
                         [("sparse_fill", None), ("sparse", "zipf"), ("sparse", "uniform")])
        self.assertEqual(lines[0]["rows"], 10000)
        self.assert_positive(lines[0], "fill_rows_per_sec", "table_bytes")
        for line in lines[1:]:
            self.assertEqual((line["dim"], line["batch"], line["rows"]), (16, 100, 10000))
            self.assertTrue(0 < line["unique_rows"] <= 100, line)
            self.assert_ratio(line, "ratio_vs_gather", "pull_rows_per_sec_per_shard",
                              "gather_rows_per_sec")
            self.assert_ratio(line, "ratio_vs_scatter", "push_rows_per_sec_per_shard",
                              "scatter_rows_per_sec")
        self.assert_refused("ps_bench_sparse", ["--keys", "gauss"],
                            "--keys: 'gauss' is not zipf or uniform")

    def test_device_measures_the_cpu_and_refuses_a_misspelt_device(self):
        code, lines, err = run("ps_bench_device", "--devices", "cpu", "--seconds", "0.02")
        self.assertEqual(code, 0, err)
        benches = {line["bench"] for line in lines}
        self.assertTrue({"train_step", "sgemm_conv2", "dot_interaction"} <= benches, benches)
        for line in lines:
            self.assertEqual(line["device"], "cpu")
            if line["bench"] == "dot_interaction":
                self.assertGreater(line["forward_us"], 0)
                self.assertGreater(line["backward_us"], 0)
            if line["bench"] == "train_step":
                self.assert_ratio(line, "speedup_overlapped", "step_ms_serial",
                                  "step_ms_overlapped")
        self.assert_refused("ps_bench_device", ["--devices", "cpu,tpu"],
                            "--devices: 'tpu' is not cpu, cuda or cuda:N")

    def test_link_bench_trains_and_transfers_across_a_veth_pair(self):
        code, _, err = run_script("--bogus")
        self.assertEqual(code, 2, err)
        self.assertTrue(err.startswith("bench/link_bench.sh: unknown argument '--bogus'\nusage: "
                                       "bench/link_bench.sh [--rate_mbit N]"), err)
        code, _, err = run_script("--transport", "--steps")  # a switch, then a value missing
        self.assertEqual(code, 2, err)
        self.assertTrue(err.startswith("bench/link_bench.sh: --steps needs a value\n"), err)
        for args, message in ((["--steps", "5"], "--steps must be a whole number >= 6 (5 untimed warm-up steps)"),
                              (["--models", "mlp,resnet"], "--models: 'resnet' is not"),
                              (["--schedules", "fast"], "--schedules: 'fast' is not"),
                              (["--mode", "bsq"], "--mode: 'bsq' is not bsp, ssp or asp")):
            code, lines, err = run_script(*args)
            self.assertEqual((code, lines), (2, []), err)
            self.assertIn(message, err)
        if os.geteuid() != 0:
            self.skipTest("network namespaces need root")
        namespaces_before = namespaces()
        code, lines, err = run_script(
            "--rate_mbit", "0", "--models", "mlp", "--steps", "12",
            "--schedules", "whole,priority,pipeline", "--bin_dir", BIN, "--transport",
            "--transport_args", "--configs 1x1 --mib 1 --seconds 0.05 --rounds 1")
        if code == 77:
            self.skipTest(err or "no network namespaces here")
        self.assertEqual(code, 0, err)
        self.assertEqual(namespaces(), namespaces_before, "link_bench leaves no namespace")
        transport = [line for line in lines if line["bench"] == "transport"]
        self.assertEqual(sorted(line["op"] for line in transport), ["page_fault", "pull", "push"])
        for line in transport:
            if line["op"] != "page_fault":
                self.assertEqual(line["path"], "netns")
                self.assert_ratio(line, "ratio_vs_tcp", "gbps", "tcp_gbps")
        self.assertEqual(bench_processes(), [])
        link = [line for line in lines if line["bench"] == "link"]
        self.assertEqual([(line["schedule"], line["mode"], line["steps"]) for line in link],
                         [("whole", "bsp", 7), ("priority", "bsp", 7), ("pipeline", "asp", 7)])
        for line in link:
            self.assert_positive(line, "samples_per_sec", "step_ms", "push_bytes_per_step")
        for line in link[1:]:
            self.assertAlmostEqual(line["ratio_vs_whole"],
                                   line["samples_per_sec"] / link[0]["samples_per_sec"])

    def test_link_bench_trains_dlrm_on_click_logs_with_the_pipeline(self):
        with tempfile.TemporaryDirectory() as data:
            code, _, err = run_script("--models", "dlrm", "--criteo_dir", data)
            self.assertEqual(code, 2, err)
            self.assertIn(f"--criteo_dir: no train.tsv in {data}", err)
            done = subprocess.run([os.path.join(BIN, "ps_datagen"), "ctr", "--out", data,
                                   "--train", "4000", "--test", "200", "--seed", "2"],
                                  capture_output=True, text=True, timeout=60)
            self.assertEqual(done.returncode, 0, done.stderr)
            code, lines, err = run_script("--models", "dlrm", "--criteo_dir", data,
                                          "--schedules", "whole,priority")
            self.assertEqual((code, lines), (2, []), err)
            self.assertIn("--models dlrm: priority scheduling cannot carry its rows", err)
            if os.geteuid() != 0:
                self.skipTest("network namespaces need root")
            namespaces_before = namespaces()
            code, lines, err = run_script("--rate_mbit", "0", "--models", "dlrm", "--criteo_dir",
                                          data, "--steps", "12", "--batch_size", "64",
                                          "--schedules", "whole,pipeline", "--bin_dir", BIN)
            if code == 77:
                self.skipTest(err or "no network namespaces here")
            self.assertEqual(code, 0, err)
            self.assertEqual(namespaces(), namespaces_before)
            self.assertEqual(bench_processes(), [])
            self.assertEqual([(line["model"], line["schedule"], line["mode"], line["steps"])
                              for line in lines],
                             [("dlrm", "whole", "bsp", 7), ("dlrm", "pipeline", "asp", 7)])
            for line in lines:
                self.assert_positive(line, "samples_per_sec", "step_ms", "push_bytes_per_step")
            self.assertAlmostEqual(lines[1]["ratio_vs_whole"],
                                   lines[1]["samples_per_sec"] / lines[0]["samples_per_sec"])

    def test_link_bench_leaves_nothing_behind_on_a_failure_or_sigterm(self):
        if os.geteuid() != 0:
            self.skipTest("network namespaces need root")
        namespaces_before = namespaces()
        code, lines, err = run_script("--rate_mbit", "0", "--models", "mlp", "--steps", "6",
                                      "--schedules", "whole", "--bin_dir", BIN,
                                      "--worker_args", "--no_such_flag")
        if code == 77:
            self.skipTest(err or "no network namespaces here")
        self.assertEqual((code, lines), (1, []), err)
        self.assertIn("Unknown command line flag 'no_such_flag'", err)
        self.assertEqual(bench_processes(), [])
        self.assertEqual(namespaces(), namespaces_before)
        # Shaped to 1 Gbit/s, 2 000 steps take half a minute: SIGTERM arrives mid-run.
        script = subprocess.Popen(
            ["bash", os.path.join(ROOT, "bench", "link_bench.sh"), "--rate_mbit", "1000",
             "--models", "mlp", "--steps", "2000", "--schedules", "whole", "--bin_dir", BIN],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not any("ps_worker" in line for line in bench_processes()):
            self.assertIsNone(script.poll(), "link_bench ended before its worker started")
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.1)
        script.send_signal(signal.SIGTERM)
        out, _ = script.communicate(timeout=30)
        self.assertEqual((script.returncode, out), (130, ""))
        self.assertEqual(bench_processes(), [])
        self.assertEqual(namespaces(), namespaces_before)

    def assert_against_peer(self, lines, bench, rate):
        """The peer's line, then one line per configuration (1 x 1, 2 x 2) rated against it."""
        self.assertEqual([(line["bench"], line.get("workers")) for line in lines],
                         [("peer", None), (bench, 1), (bench, 2)])
        self.assertEqual(lines[0]["framework"], "pytorch")
        for line in lines[1:]:
            self.assertEqual(line["shards"], line["workers"])
            self.assertAlmostEqual(line["ratio_vs_pytorch"], line[rate] / lines[0][rate])
            self.assert_positive(line, rate, "ratio_vs_pytorch")

    def test_gpt_bench_rates_training_against_pytorch(self):
        with tempfile.TemporaryDirectory() as work:
            corpus = os.path.join(work, "text.txt")
            with open(os.path.join(ROOT, "data", "text", "kjv.txt"), "rb") as full:
                with open(corpus, "wb") as part:
                    part.write(full.read(200_000))
            code, lines, err = run_script("--data", corpus, "--steps", "8", "--rounds", "1",
                                          script="gpt_bench.sh")
        self.assertEqual(code, 0, err)
        self.assert_against_peer(lines, "gpt", "tokens_per_sec")
        for line in lines[1:]:
            self.assert_positive(line, "val_loss")
        for args, message in ((["--steps", "0"], "--steps must be a whole number >= 1"),
                              (["--data", "/nonexistent"], "--data: no file /nonexistent")):
            code, lines, err = run_script(*args, script="gpt_bench.sh")
            self.assertEqual((code, lines), (2, []), err)
            self.assertIn(message, err)

    def test_gpt_bench_stops_its_run_at_once_on_sigterm(self):
        folders = os.path.join(tempfile.gettempdir(), "gpt_bench.*")  # the script's mktemp -t
        folders_before = set(glob.glob(folders))
        with tempfile.TemporaryDirectory() as work:
            corpus = os.path.join(work, "text.txt")
            with open(os.path.join(ROOT, "data", "text", "kjv.txt"), "rb") as full:
                with open(corpus, "wb") as part:
                    part.write(full.read(200_000))
            script = subprocess.Popen(
                ["bash", os.path.join(ROOT, "bench", "gpt_bench.sh"), "--data", corpus,
                 "--steps", "400", "--rounds", "1"],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            # After the peer's run, ps_launch trains: SIGTERM arrives while its workers do.
            deadline = time.monotonic() + 120
            while not any("ps_worker" in line for line in bench_processes("/gpt_bench.")):
                self.assertIsNone(script.poll(), "gpt_bench ended before its workers started")
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.1)
            script.send_signal(signal.SIGTERM)
            out, err = script.communicate(timeout=30)
        self.assertEqual(script.returncode, 130, err)
        self.assertEqual([json.loads(line)["bench"] for line in out.splitlines()], ["peer"])
        self.assertEqual(bench_processes("/gpt_bench."), [])
        self.assertEqual(set(glob.glob(folders)), folders_before)

    def test_dlrm_bench_rates_training_against_pytorch(self):
        with tempfile.TemporaryDirectory() as data:
            made = subprocess.run([os.path.join(BIN, "ps_datagen"), "ctr", "--out", data,
                                   "--train", "4000", "--test", "1000", "--seed", "1"],
                                  capture_output=True, text=True, timeout=120)
            self.assertEqual(made.returncode, 0, made.stderr)
            code, lines, err = run_script("--data", data, "--rounds", "1", script="dlrm_bench.sh")
        self.assertEqual(code, 0, err)
        self.assert_against_peer(lines, "dlrm", "samples_per_sec")
        for line in lines:
            self.assertTrue(0 < line["test_auc"] < 1, line)
        code, lines, err = run_script("--rounds", "x", script="dlrm_bench.sh")
        self.assertEqual((code, lines), (2, []), err)
        self.assertIn("--rounds must be a whole number >= 1", err)
        for args, said in ((["--round", "1"], "unknown argument '--round'"),
                           (["--data"], "--data needs a value")):
            code, lines, err = run_script(*args, script="dlrm_bench.sh")
            self.assertEqual((code, lines), (2, []), err)
            self.assertEqual(err, f"bench/dlrm_bench.sh: {said}\n"
                             "usage: bench/dlrm_bench.sh [--data DIR] [--rounds N]\n")

    def test_python_step_bench_rates_server_steps_against_local_ones(self):
        package = os.path.join(os.path.dirname(BIN), "python")
        if not os.path.isdir(package):
            self.skipTest("the Python package is not built (worker/python)")
        env = dict(os.environ, PYTHONPATH=package, PS_BIN_DIR=BIN)
        done = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench",
                                                                "python_step_bench.py"),
                               "--seconds", "0.2", "--rounds", "1", "--batch", "32"],
                              cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        self.assertEqual([(line["bench"], line["batch"], line["mode"]) for line in lines],
                         [("python_step", 32, "bsp")])
        self.assert_positive(lines[0], "local_steps_per_s", "shard_steps_per_s", "ratio_vs_local")

    def test_apply_rates_every_rule_against_the_triad(self):
        done = subprocess.run(
            [os.path.join(BIN, "ps_bench_apply"), "--benchmark_filter=/1048576/",
             "--benchmark_min_time=0.01", "--benchmark_format=json"],
            cwd=ROOT, capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        results = {b["name"].split("/1048576/")[0]: b for b in json.loads(done.stdout)["benchmarks"]}
        rules = ["sgd", "momentum", "adam", "adamw", "adagrad"]
        topk = ["topk_nth_element", "topk_compress"]
        self.assertEqual(sorted(results), sorted(
            ["stream_triad"] + [f"{rule}/threads:{t}" for rule in rules for t in (0, 1)] + topk))
        self.assertEqual(results["stream_triad"]["ratio_vs_stream"], 1.0)
        for name, result in results.items():
            if name not in topk:
                self.assert_positive(result, "params_per_sec", "gbps", "ratio_vs_stream")
        # Top-k's selection against nth_element over the indices, measured in the same run.
        self.assertEqual(results["topk_nth_element"]["ratio_vs_nth_element"], 1.0)
        self.assert_positive(results["topk_compress"], "params_per_sec", "ratio_vs_nth_element")


if __name__ == "__main__":
    unittest.main()
