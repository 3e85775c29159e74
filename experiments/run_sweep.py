#!/usr/bin/env python3
"""Runs a staleness sweep with ps_launch and writes plots and a markdown table.

    experiments/run.sh [CONFIG] [--bin_dir build/bin] [--out experiments/results/NAME]

A config (experiments/configs/*.json) names the consistency modes ("bsp", "ssp:S", "asp"), the
scenarios (no straggler, a persistent straggler, random jitter, ...), the update rules and the
seeds; every combination is one run of ps_launch. Each run's files go to runs/sweeps/NAME/LABEL/;
the sweep's results (table.md, summaries.jsonl, PNG plots) to the output folder.

The runner checks every SSP run against the staleness bound (W-1)(2s+1) and exits 1, loudly,
when a run breaks it or fails.
"""

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_TIMEOUT_S = 900


def parse_mode(mode):
    """'bsp' | 'asp' | 'ssp:S' -> (mode, staleness)."""
    if mode.startswith("ssp:"):
        return "ssp", int(mode.split(":", 1)[1])
    if mode in ("bsp", "asp"):
        return mode, 0
    raise ValueError(f"unknown mode '{mode}' in the config (bsp, asp or ssp:S)")


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
            flags.update({"mode": mode, "staleness": s, "update_rule": rule, "seed": seed})
            label = f"{scenario}__{mode_name.replace(':', '')}__{rule}__seed{seed}"
            runs.append(dict(label=label, scenario=scenario, mode=mode, mode_name=mode_name,
                             staleness=s, rule=rule, seed=seed, flags=flags))
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


def run_one(run, bin_dir, run_dir):
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    cmd = [os.path.join(bin_dir, "ps_launch"), f"--metrics_dir={run_dir}", "--quiet"]
    cmd += [f"--{k}={v}" for k, v in run["flags"].items()]
    start = time.time()
    with open(os.path.join(run_dir, "launch.log"), "w") as log:
        try:
            code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=RUN_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            code = -1
    run["seconds"] = time.time() - start
    run["exit_code"] = code
    if code != 0:
        return run
    with open(os.path.join(run_dir, "summary.json")) as f:
        run["summary"] = json.load(f)
    # Accuracy over the run: rank 0's periodic and end-of-epoch evaluations, then the final one.
    curve = [(e["wall_s"], e["updates"], e["test_accuracy"])
             for e in read_jsonl(os.path.join(run_dir, "worker-0.jsonl"))
             if e.get("kind") in ("eval", "epoch")]
    summary = run["summary"]
    curve.append((summary["wall_seconds"], max(summary["versions"]), summary["test_accuracy"]))
    run["curve"] = sorted(curve)
    return run


def time_to_target(run, target):
    for wall, _, acc in run.get("curve", []):
        if acc >= target:
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


def write_table(runs, config, path):
    target = config["target_accuracy"]
    lines = [
        f"# Sweep `{config['name']}`",
        "",
        config.get("description", ""),
        "",
        f"Target accuracy: {target}. Wait share: the part of the workers' step time their pulls"
        " were held by the shards. Bound: (W-1)(2s+1) for SSP(s).",
        "",
        "| scenario | mode | rule | seed | time to target (s) | wall (s) | final accuracy |"
        " wait share | max staleness | mean staleness | bound | late | dropped |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        s = r.get("summary")
        if s is None:
            lines.append(f"| {r['scenario']} | {r['mode_name']} | {r['rule']} | {r['seed']} |"
                         f" FAILED (exit {r['exit_code']}) | | | | | | | | |")
            continue
        bound = check_bound(r)
        lines.append(
            f"| {r['scenario']} | {r['mode_name']} | {r['rule']} | {r['seed']} |"
            f" {fmt(time_to_target(r, target), 1)} | {s['wall_seconds']:.1f} |"
            f" {s['test_accuracy']:.4f} | {s['wait_share']:.3f} | {s['max_staleness']} |"
            f" {s['mean_staleness']:.2f} | {'-' if bound is None else bound} |"
            f" {s.get('late_pushes', 0)} | {s.get('dropped_gradients', 0)} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def legend(ax):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def plot(runs, config, out_dir):
    scenarios = list(config["scenarios"].keys())
    ok = [r for r in runs if "summary" in r]
    # Accuracy against wall-clock time and against updates, one panel per scenario.
    for x_index, x_name, file_name in ((0, "wall-clock time (s)", "accuracy_vs_time.png"),
                                       (1, "updates applied by a shard", "accuracy_vs_updates.png")):
        fig, axes = plt.subplots(1, len(scenarios), figsize=(5 * len(scenarios), 4), squeeze=False)
        for ax, scenario in zip(axes[0], scenarios):
            for r in ok:
                if r["scenario"] != scenario:
                    continue
                xs = [p[x_index] for p in r["curve"]]
                ys = [p[2] for p in r["curve"]]
                label = r["mode_name"] + ("" if r["rule"] == "plain" else f" {r['rule']}")
                if len(config.get("seeds", [1])) > 1:
                    label += f" s{r['seed']}"
                ax.plot(xs, ys, marker=".", label=label)
            ax.axhline(config["target_accuracy"], color="grey", linestyle=":", linewidth=1)
            ax.set_title(scenario)
            ax.set_xlabel(x_name)
            ax.set_ylabel("test accuracy")
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
    ax.set_xlabel("SSP staleness bound s  (square: BSP at left, triangle: ASP at right)")
    ax.set_ylabel("wait share of step time")
    legend(ax)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "wait_share_vs_s.png"), dpi=100)
    plt.close(fig)
    # Staleness histograms, one panel per scenario, one series per mode (plain rule).
    fig, axes = plt.subplots(1, len(scenarios), figsize=(5 * len(scenarios), 4), squeeze=False)
    for ax, scenario in zip(axes[0], scenarios):
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
    parser.add_argument("--only", default=None, help="run only labels containing this text")
    args = parser.parse_args()

    with open(args.config) as f:
        config = json.load(f)
    name = config["name"]
    out_dir = args.out or os.path.join(ROOT, "experiments", "results", name)
    runs_dir = os.path.join(ROOT, "runs", "sweeps", name)
    os.makedirs(out_dir, exist_ok=True)
    runs = expand(config)
    if args.only:
        runs = [r for r in runs if args.only in r["label"]]
    print(f"sweep {name}: {len(runs)} runs; results in {out_dir}", flush=True)

    problems = []
    sweep_start = time.time()
    for i, run in enumerate(runs, 1):
        run_one(run, args.bin_dir, os.path.join(runs_dir, run["label"]))
        if run["exit_code"] != 0:
            problems.append(f"{run['label']}: ps_launch exited {run['exit_code']}"
                            f" (log: {os.path.join(runs_dir, run['label'], 'launch.log')})")
            print(f"[{i}/{len(runs)}] {run['label']}: FAILED", flush=True)
            continue
        s = run["summary"]
        bound = check_bound(run)
        if bound is not None and s["max_staleness"] > bound:
            problems.append(f"{run['label']}: max staleness {s['max_staleness']} exceeds the SSP"
                            f" bound {bound}")
        print(f"[{i}/{len(runs)}] {run['label']}: accuracy {s['test_accuracy']:.4f}"
              f"  wall {s['wall_seconds']:.1f}s  wait share {s['wait_share']:.3f}"
              f"  max staleness {s['max_staleness']}"
              + ("" if bound is None else f" (bound {bound})"), flush=True)

    with open(os.path.join(out_dir, "summaries.jsonl"), "w") as f:
        for r in runs:
            f.write(json.dumps({k: r.get(k) for k in
                                ("label", "scenario", "mode_name", "rule", "seed", "exit_code",
                                 "summary")}) + "\n")
    write_table(runs, config, os.path.join(out_dir, "table.md"))
    plot(runs, config, out_dir)
    print(f"sweep {name} done in {time.time() - sweep_start:.0f}s: {out_dir}/table.md and plots",
          flush=True)
    if problems:
        print("\nSWEEP FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
