#!/usr/bin/env python3
"""Runs a staleness sweep with ps_launch and writes plots and a markdown table.

    experiments/run.sh [CONFIG] [--bin_dir build/bin] [--out experiments/results/NAME]

A config (experiments/configs/*.json) names the consistency modes ("bsp", "ssp:S", "asp"), the
scenarios (no straggler, a persistent straggler, random jitter, ...), the update rules and the
seeds; every combination is one run of ps_launch. Each run's files go to runs/sweeps/NAME/LABEL/;
the sweep's results (table.md, summaries.jsonl, PNG plots) to the output folder.

A run may be a PyTorch script instead of ps_worker: "python": SCRIPT in "common" (or a
scenario) runs `ps_launch --python SCRIPT -- ARGS --seed=N`, ARGS being "python_args" (a list;
a scenario's come after the common ones) and N the run's seed, which the script takes. The script
reports its measure with ps_train.torch.report_result() after finish() (docs/python.md); a run
whose summary lacks it fails, naming it. The run's curve over time has the points the script
records with ps_train.torch.report_eval() during training (rank 0's), then the final one.

Runs are judged by the config's "metric": "accuracy" (the default), "auc" (click models) or
"loss" (the test or validation loss: a language model's nats per token; lower is better), and
"target" is the value whose time to reach the table reports ("target_accuracy" is the same for
the accuracy).

The runner checks every SSP run against the staleness bound (W-1)(2s+1) and exits 1, loudly,
when a run breaks it or fails.

A config is checked whole before anything runs or is written: its keys, its modes, and every
run's flags against ps_launch itself (`--dry_run`: names, types and the values the launcher and
the shards check); a bad one exits 2 with what is wrong.
SIGTERM or Ctrl-C stops the run in progress (ps_launch stops its processes), starts no other,
writes the results of the finished runs, names the runs not done and exits 1.
"""

import argparse
import itertools
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_TIMEOUT_S = 900


# Keys of a sweep config: required, and all that are allowed (one of target and target_accuracy
# is required too).
REQUIRED_KEYS = ("name", "modes", "scenarios")
ALLOWED_KEYS = REQUIRED_KEYS + ("description", "common", "update_rules", "seeds", "metric",
                                "target", "target_accuracy")


class Metric:
    """How a sweep judges its runs: the key of rank 0's evaluation lines, the key of summary.json
    with the final value, its name in the table and plots, and whether higher is better."""

    def __init__(self, name, eval_key, summary_key, title, higher_is_better):
        self.name = name
        self.eval_key = eval_key
        self.summary_key = summary_key
        self.title = title
        self.higher_is_better = higher_is_better

    def reached(self, value, target):
        return value >= target if self.higher_is_better else value <= target


METRICS = {
    "accuracy": Metric("accuracy", "test_accuracy", "test_accuracy", "test accuracy", True),
    "auc": Metric("auc", "test_auc", "test_auc", "test AUC", True),
    "loss": Metric("loss", "test_loss", "final_loss", "test loss", False),
}


def metric_of(config):
    return METRICS[config.get("metric", "accuracy")]


def target_of(config):
    return config["target"] if "target" in config else config["target_accuracy"]
# Flags the runner sets itself, per run: a config that set them would be overridden.
RUNNER_FLAGS = ("mode", "staleness", "update_rule", "seed", "metrics_dir", "quiet")


class ConfigError(Exception):
    """What is wrong with a sweep config (the runner exits 2 and runs nothing)."""


def parse_mode(mode):
    """'bsp' | 'asp' | 'ssp:S' -> (mode, staleness)."""
    if isinstance(mode, str) and re.fullmatch(r"ssp:[0-9]+", mode):
        return "ssp", int(mode.split(":", 1)[1])
    if mode in ("bsp", "asp"):
        return mode, 0
    raise ConfigError(f"unknown mode '{mode}' (bsp, asp or ssp:S with S >= 0)")


def check_config(config):
    """Raises ConfigError for a config the runner cannot carry out as written."""
    if not isinstance(config, dict):
        raise ConfigError("a sweep config is a JSON object")
    missing = [k for k in REQUIRED_KEYS if k not in config]
    if missing:
        raise ConfigError(f"missing {', '.join(missing)}")
    unknown = sorted(set(config) - set(ALLOWED_KEYS))
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)} (allowed: "
                          f"{', '.join(ALLOWED_KEYS)})")
    if not isinstance(config["name"], str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", config["name"]):
        raise ConfigError(f"name {config['name']!r}: letters, digits, '_', '.' and '-' only "
                          "(it names the output folders)")
    metric = config.get("metric", "accuracy")
    if metric not in METRICS:
        raise ConfigError(f"metric {metric!r} is not one of {', '.join(METRICS)}")
    if ("target" in config) == ("target_accuracy" in config):
        raise ConfigError("give the target value once: target (or target_accuracy, for the "
                          "accuracy)")
    if "target_accuracy" in config and metric != "accuracy":
        raise ConfigError(f"target_accuracy with metric {metric}: use target")
    if isinstance(target_of(config), bool) or not isinstance(target_of(config), (int, float)):
        raise ConfigError("the target is a number")
    for key in ("modes", "update_rules", "seeds"):
        if key in config and (not isinstance(config[key], list) or not config[key]):
            raise ConfigError(f"{key} is a non-empty list")
    for mode in config["modes"]:
        parse_mode(mode)
    if not isinstance(config["scenarios"], dict) or not config["scenarios"]:
        raise ConfigError("scenarios is a non-empty object of NAME: {flag: value}")
    for name, spec in list(config["scenarios"].items()) + [("common", config.get("common", {}))]:
        if not isinstance(spec, dict):
            raise ConfigError(f"scenario {name}: an object of flag: value")
        taken = sorted(set(spec) & set(RUNNER_FLAGS))
        if taken:
            raise ConfigError(f"{name}: {', '.join(taken)} are set by the runner for each run "
                              "(modes, update_rules, seeds)")
        for mode in spec.get("only_modes", []):
            if mode not in config["modes"]:
                raise ConfigError(f"scenario {name}: only_modes names {mode}, not among modes")
        args = spec.get("python_args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ConfigError(f"{name}: python_args is a list of strings")


def check_flags(runs, bin_dir):
    """Every run's flags as ps_launch checks them before it starts anything (--dry_run): names,
    value types, and the values the launcher and the shards check."""
    launch = os.path.join(bin_dir, "ps_launch")
    if not os.access(launch, os.X_OK):
        raise ConfigError(f"no ps_launch in {bin_dir} (build first: scripts/setup.sh)")
    checked = set()
    for run in runs:
        args = launch_flags(run)
        if tuple(args) in checked:
            continue
        checked.add(tuple(args))
        result = subprocess.run([launch, "--dry_run"] + args, capture_output=True,
                                text=True)
        if result.returncode != 0:
            why = (result.stderr or result.stdout).strip().removeprefix("ps_launch: ")
            raise ConfigError(f"run {run['label']}: ps_launch refuses its flags: {why}")


def check_metric(runs, metric):
    """Only a click model reports an AUC."""
    if metric.name != "auc":
        return
    for run in runs:
        if "python" not in run["flags"] and run["flags"].get("model", "mlp") != "dlrm":
            raise ConfigError(f"run {run['label']}: metric auc needs a click model (model dlrm)")


def launch_flags(run):
    """ps_launch's arguments for the run; a Python run's script arguments after `--`."""
    args = [f"--{k}={v}" for k, v in run["flags"].items()]
    return args + (["--"] + run["python_args"] if "python" in run["flags"] else [])


def expand(config):
    """Every run of the sweep as (label, scenario, mode, staleness, rule, seed, flags)."""
    runs = []
    for scenario, spec in config["scenarios"].items():
        spec = dict(spec)
        only = spec.pop("only_modes", None)
        for mode_name, rule, seed in itertools.product(
                config["modes"], config.get("update_rules", ["plain"]), config.get("seeds", [1])):
            if only is not None and mode_name not in only:
                continue
            mode, s = parse_mode(mode_name)
            # Under BSP every gradient is fresh: the stale-gradient rules are all the same.
            if mode == "bsp" and rule != "plain":
                continue
            flags = dict(config.get("common", {}))
            flags.update(spec)
            flags.update({"mode": mode, "staleness": s, "update_rule": rule})
            python_args = (config.get("common", {}).get("python_args", []) +
                           spec.get("python_args", []))
            flags.pop("python_args", None)
            env = {}
            if "python" in flags:  # the script takes the seed; ps_launch's is ps_worker's
                python_args = python_args + [f"--seed={seed}"]
                # ps_train draws a straggler scenario's jitter from it, as ps_worker from --seed.
                env["PS_DELAY_SEED"] = str(seed)
                # A path from the caller's folder, or else from the repository's.
                if not os.path.exists(flags["python"]):
                    flags["python"] = os.path.join(ROOT, flags["python"])
            else:
                flags["seed"] = seed
            label = f"{scenario}__{mode_name.replace(':', '')}__{rule}__seed{seed}"
            runs.append(dict(label=label, scenario=scenario, mode=mode, mode_name=mode_name,
                             staleness=s, rule=rule, seed=seed, flags=flags,
                             python_args=python_args, env=env))
    return runs


def read_jsonl(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    out.append(json.loads(line))
    return out


class Stop:
    """SIGTERM and SIGINT: the run in progress gets SIGTERM (ps_launch then stops its shards and
    workers and exits), and no other run starts."""

    def __init__(self):
        self.signal = None
        self.child = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, sig, _frame):
        self.signal = sig
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)


def run_one(run, bin_dir, run_dir, stop, metric):
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    cmd = [os.path.join(bin_dir, "ps_launch"), f"--metrics_dir={run_dir}", "--quiet"]
    cmd += launch_flags(run)
    start = time.time()
    with open(os.path.join(run_dir, "launch.log"), "w") as log:
        stop.child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                      env=dict(os.environ, **run["env"]))
        if stop.signal is not None:  # it came after the loop's check, before the child was known
            stop.child.send_signal(signal.SIGTERM)
        try:
            code = stop.child.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stop.child.terminate()  # ps_launch stops its processes on SIGTERM
            stop.child.wait()
            code = -1
        stop.child = None
    run["seconds"] = time.time() - start
    run["exit_code"] = code
    if code != 0:
        return run
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    if metric.summary_key not in summary:
        run["error"] = (f"summary.json has no {metric.summary_key}" +
                        (": the script reports it with ps_train.torch.report_result()"
                         if "python" in run["flags"] else ""))
        return run
    run["summary"] = summary
    # The metric over the run: rank 0's periodic and end-of-epoch evaluations, then the final one.
    curve = [(e["wall_s"], e["updates"], e[metric.eval_key])
             for e in read_jsonl(os.path.join(run_dir, "worker-0.jsonl"))
             if e.get("kind") in ("eval", "epoch") and metric.eval_key in e]
    curve.append((summary["wall_seconds"], max(summary["versions"]), summary[metric.summary_key]))
    run["curve"] = sorted(curve)
    return run


def time_to_target(run, target, metric):
    for wall, _, value in run.get("curve", []):
        if metric.reached(value, target):
            return wall
    return None


def check_bound(run):
    """SSP(s) with W workers: no gradient staler than (W-1)(2s+1) updates of a shard."""
    if run["mode"] != "ssp" or "summary" not in run:
        return None
    workers = run["summary"]["workers"]
    return (workers - 1) * (2 * run["staleness"] + 1)


def fmt(x, digits=3):
    return "-" if x is None else f"{x:.{digits}f}"


# Two-sided 95 % points of Student's t distribution for 1 to 30 degrees of freedom; beyond 30, the
# normal distribution's 1.960 (within 2 % of t's).
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
       2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
       2.052, 2.048, 2.045, 2.042)


def mean_and_ci(values):
    """(mean, sample standard deviation, half-width of the 95 % confidence interval of the mean by
    Student's t) of two or more values; (value, None, None) of one, None of none."""
    if not values:
        return None
    mean = sum(values) / len(values)
    if len(values) == 1:
        return mean, None, None
    dof = len(values) - 1
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / dof)
    t = T95[dof - 1] if dof <= len(T95) else 1.960
    return mean, sd, t * sd / math.sqrt(len(values))


def fmt_ci(stats, digits=4, sign=""):
    """'mean ± half-width' ('mean' of one value, '-' of none)."""
    if stats is None:
        return "-"
    mean, _, half = stats
    return f"{mean:{sign}.{digits}f}" + ("" if half is None else f" ± {half:.{digits}f}")


def seeds_table(runs, config):
    """The table across seeds: one row per scenario, mode and rule (in the sweep's order) with the
    final metric's mean and 95 % interval over the seeds whose run finished, and its difference to
    the scenario's first mode with the plain rule (BSP in the shipped configs), paired by seed: a
    seed fixes the initial weights, the sample order and the injected delays, so the same seed
    under two modes differs only by the mode (and the timing). An interval of the difference
    that excludes 0 is a difference the seeds resolve."""
    metric = metric_of(config)
    target = target_of(config)
    groups = {}
    for r in runs:
        groups.setdefault((r["scenario"], r["mode_name"], r["rule"]), []).append(r)
    reference = {}
    for (scenario, mode_name, rule), group in groups.items():
        if rule == "plain":
            reference.setdefault(scenario, (mode_name, group))
    lines = [
        "",
        "## Across seeds",
        "",
        f"Final {metric.title}: mean ± the half-width of its 95 % confidence interval (Student's "
        "t) over the seeds whose run finished, and the sample standard deviation. Difference: "
        "to the scenario's first mode (in the table), paired by seed; an interval that excludes "
        "0 is a difference the seeds resolve. Time to target: the median over the runs that "
        "reached it. Wall time: mean ± the half-width of its 95 % interval.",
        "",
        f"| scenario | mode | rule | runs | final {metric.title} | sd | difference | reached target"
        " | time to target (s) | wall (s) | wait share | max staleness |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (scenario, mode_name, rule), group in groups.items():
        done = [r for r in group if "summary" in r]
        finals = [r["summary"][metric.summary_key] for r in done]
        stats = mean_and_ci(finals)
        ref_mode, ref_group = reference.get(scenario, (None, []))
        if ref_group is group or ref_mode is None:
            difference = "-"
        else:
            ref_by_seed = {r["seed"]: r["summary"][metric.summary_key] for r in ref_group
                           if "summary" in r}
            paired = [r["summary"][metric.summary_key] - ref_by_seed[r["seed"]] for r in done
                      if r["seed"] in ref_by_seed]
            difference = (fmt_ci(mean_and_ci(paired), sign="+") + f" vs {ref_mode}"
                          if paired else "-")
        times = [t for t in (time_to_target(r, target, metric) for r in done) if t is not None]
        median_time = statistics.median(times) if times else None
        wall = mean_and_ci([r["summary"]["wall_seconds"] for r in done])
        wait = statistics.mean(r["summary"]["wait_share"] for r in done) if done else None
        max_staleness = max((r["summary"]["max_staleness"] for r in done), default="-")
        lines.append(
            f"| {scenario} | {mode_name} | {rule} | {len(done)} of {len(group)} |"
            f" {fmt_ci(stats)} | {fmt(stats[1] if stats else None, 4)} | {difference} |"
            f" {len(times)} of {len(done)} | {fmt(median_time, 1)} | {fmt_ci(wall, 1)} |"
            f" {fmt(wait)} | {max_staleness} |")
    return lines


def write_table(runs, config, path, not_done=()):
    target = target_of(config)
    metric = metric_of(config)
    lines = [
        f"# Sweep `{config['name']}`",
        "",
        config.get("description", ""),
        "",
        f"Target {metric.title}: {target}. Wait share: the part of the workers' step time their"
        " pulls were held by the shards. Bound: (W-1)(2s+1) for SSP(s).",
        "",
        f"| scenario | mode | rule | seed | time to target (s) | wall (s) | final {metric.title} |"
        " wait share | max staleness | mean staleness | bound | late | dropped |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        s = r.get("summary")
        if s is None:
            why = r.get("error", f"exit {r['exit_code']}")
            lines.append(f"| {r['scenario']} | {r['mode_name']} | {r['rule']} | {r['seed']} |"
                         f" FAILED ({why}) | | | | | | | | |")
            continue
        bound = check_bound(r)
        lines.append(
            f"| {r['scenario']} | {r['mode_name']} | {r['rule']} | {r['seed']} |"
            f" {fmt(time_to_target(r, target, metric), 1)} | {s['wall_seconds']:.1f} |"
            f" {s[metric.summary_key]:.4f} | {s['wait_share']:.3f} | {s['max_staleness']} |"
            f" {s['mean_staleness']:.2f} | {'-' if bound is None else bound} |"
            f" {s.get('late_pushes', 0)} | {s.get('dropped_gradients', 0)} |")
    if not_done:
        lines += ["", f"Not run (the sweep was stopped): {', '.join(not_done)}."]
    if len(config.get("seeds", [1])) > 1:
        lines += seeds_table(runs, config)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def legend(ax):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def panels(count, columns=4):
    """A figure of `count` panels, at most `columns` to a row; the axes in reading order (the
    grid's unused cells hidden)."""
    cols = min(count, columns)
    rows = (count + cols - 1) // cols
    fig, grid = plt.subplots(rows, cols, figsize=(5 * cols, 4 * rows), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[count:]:
        ax.set_visible(False)
    return fig, axes[:count]


def plot(runs, config, out_dir):
    scenarios = list(config["scenarios"].keys())
    ok = [r for r in runs if "summary" in r]
    # The metric against wall-clock time and against updates, one panel per scenario.
    metric = metric_of(config)
    for x_index, x_name, file_name in (
            (0, "wall-clock time (s)", f"{metric.name}_vs_time.png"),
            (1, "updates applied by a shard", f"{metric.name}_vs_updates.png")):
        fig, axes = panels(len(scenarios))
        for ax, scenario in zip(axes, scenarios):
            # One colour per mode and rule; its seeds share it, and the legend names it once.
            colours = {}
            for r in ok:
                if r["scenario"] != scenario:
                    continue
                xs = [p[x_index] for p in r["curve"]]
                ys = [p[2] for p in r["curve"]]
                label = r["mode_name"] + ("" if r["rule"] == "plain" else f" {r['rule']}")
                first = label not in colours
                colours.setdefault(label, f"C{len(colours) % 10}")
                ax.plot(xs, ys, marker=".", color=colours[label], alpha=0.8,
                        label=label if first else None)
            ax.axhline(target_of(config), color="grey", linestyle=":", linewidth=1)
            ax.set_title(scenario)
            ax.set_xlabel(x_name)
            ax.set_ylabel(metric.title)
            legend(ax)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, file_name), dpi=100)
        plt.close(fig)
    # Wait share against the SSP bound s, one line per scenario; BSP and ASP as reference marks.
    fig, ax = plt.subplots(figsize=(6, 4))
    for scenario in scenarios:
        ssp = sorted((r["staleness"], r["summary"]["wait_share"]) for r in ok
                     if r["scenario"] == scenario and r["mode"] == "ssp" and r["rule"] == "plain")
        if not ssp:
            continue
        line, = ax.plot([p[0] for p in ssp], [p[1] for p in ssp], marker="o", label=scenario)
        for mode, marker in (("bsp", "s"), ("asp", "^")):
            ref = [r["summary"]["wait_share"] for r in ok if r["scenario"] == scenario and
                   r["mode"] == mode and r["rule"] == "plain"]
            if ref:
                ax.scatter([-1 if mode == "bsp" else max(p[0] for p in ssp) + 1], [ref[0]],
                           marker=marker, color=line.get_color())
    if not any(r["mode"] == "ssp" for r in ok):
        ax.text(0.5, 0.5, "no SSP runs in this sweep", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel("SSP staleness bound s  (square: BSP at left, triangle: ASP at right)")
    ax.set_ylabel("wait share of step time")
    legend(ax)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "wait_share_vs_s.png"), dpi=100)
    plt.close(fig)
    # Staleness histograms, one panel per scenario, one series per mode (plain rule).
    fig, axes = panels(len(scenarios))
    for ax, scenario in zip(axes, scenarios):
        for r in ok:
            if r["scenario"] != scenario or r["rule"] != "plain" or r["seed"] != ok[0]["seed"]:
                continue
            counts = r["summary"]["staleness_histogram"]
            total = sum(counts) or 1
            ax.plot(range(len(counts)), [c / total for c in counts], marker=".",
                    label=r["mode_name"])
        ax.set_title(scenario)
        ax.set_xlabel("staleness (updates)")
        ax.set_ylabel("share of applied gradients")
        ax.set_yscale("log")
        legend(ax)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "staleness_histograms.png"), dpi=100)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?",
                        default=os.path.join(ROOT, "experiments", "configs", "quick.json"))
    parser.add_argument("--bin_dir", default=os.path.join(ROOT, "build", "bin"))
    parser.add_argument("--out", default=None, help="default: experiments/results/NAME")
    parser.add_argument("--runs_dir", default=None,
                        help="each run's files go to RUNS_DIR/LABEL (default: runs/sweeps/NAME)")
    parser.add_argument("--only", default=None, help="run only labels containing this text")
    args = parser.parse_args()

    try:
        with open(args.config) as f:
            config = json.load(f)
        check_config(config)
        runs = expand(config)
        if args.only:
            runs = [r for r in runs if args.only in r["label"]]
        if not runs:
            raise ConfigError("no run left" + (f" with --only {args.only}" if args.only else ""))
        check_metric(runs, metric_of(config))
        check_flags(runs, args.bin_dir)
    except (OSError, json.JSONDecodeError, ConfigError) as e:
        print(f"run_sweep: {args.config}: {e}", file=sys.stderr)
        return 2
    name = config["name"]
    out_dir = args.out or os.path.join(ROOT, "experiments", "results", name)
    runs_dir = args.runs_dir or os.path.join(ROOT, "runs", "sweeps", name)
    os.makedirs(out_dir, exist_ok=True)
    print(f"sweep {name}: {len(runs)} runs; results in {out_dir}", flush=True)

    stop = Stop()
    problems = []
    sweep_start = time.time()
    for i, run in enumerate(runs, 1):
        if stop.signal is not None:
            break
        run_one(run, args.bin_dir, os.path.join(runs_dir, run["label"]), stop, metric_of(config))
        if stop.signal is not None and run["exit_code"] != 0:
            run.pop("exit_code")  # stopped by the signal: not done, not failed
            break
        if run["exit_code"] != 0 or "error" in run:
            why = run.get("error", f"ps_launch exited {run['exit_code']}")
            problems.append(f"{run['label']}: {why}"
                            f" (log: {os.path.join(runs_dir, run['label'], 'launch.log')})")
            print(f"[{i}/{len(runs)}] {run['label']}: FAILED ({why})", flush=True)
            continue
        s = run["summary"]
        bound = check_bound(run)
        if bound is not None and s["max_staleness"] > bound:
            problems.append(f"{run['label']}: max staleness {s['max_staleness']} exceeds the SSP"
                            f" bound {bound}")
        metric = metric_of(config)
        print(f"[{i}/{len(runs)}] {run['label']}: {metric.title} {s[metric.summary_key]:.4f}"
              f"  wall {s['wall_seconds']:.1f}s  wait share {s['wait_share']:.3f}"
              f"  max staleness {s['max_staleness']}"
              + ("" if bound is None else f" (bound {bound})"), flush=True)

    done = [r for r in runs if "exit_code" in r]
    not_done = [r["label"] for r in runs if "exit_code" not in r]
    with open(os.path.join(out_dir, "summaries.jsonl"), "w") as f:
        for r in done:
            f.write(json.dumps({k: r.get(k) for k in
                                ("label", "scenario", "mode_name", "rule", "seed", "exit_code",
                                 "summary", "curve")}) + "\n")
    write_table(done, config, os.path.join(out_dir, "table.md"), not_done)
    plot(done, config, out_dir)
    print(f"sweep {name} done in {time.time() - sweep_start:.0f}s: {out_dir}/table.md and plots",
          flush=True)
    if not_done:
        problems.append(f"stopped by signal {stop.signal}: {len(not_done)} of {len(runs)} runs "
                        f"not done: {', '.join(not_done)}")
    if problems:
        print("\nSWEEP FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
