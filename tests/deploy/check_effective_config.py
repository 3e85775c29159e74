#!/usr/bin/env python3
"""Checks that the container clusters train with the hyper-parameters of scripts/run.sh.

The effective value of a training flag is, for scripts/run.sh, the value run.sh gives ps_launch
or else ps_launch's default (ps_launch passes it on to the shards and workers); for a cluster,
the PS_<FLAG> variable its shard or worker containers get, or else the binary's default. The
flags' defaults are read from the binaries' --help. The cluster's shape (shards, workers) and
where things live are the cluster's own and not compared.

Usage: check_effective_config.py BIN_DIR RUN_SH [--compose FILE] [--k8s RENDERED_YAML]
Prints every difference and exits 1 when there is one."""
import argparse
import re
import shlex
import subprocess
import sys

import yaml

# The flags that decide what is trained and how: the same in every way of running the job.
TRAINING_FLAGS = [
    "mode", "staleness", "model", "hidden", "epochs", "batch_size", "accumulate", "seed",
    "train_limit", "test_limit", "optimizer", "lr", "momentum", "beta1", "beta2", "epsilon",
    "weight_decay", "warmup_updates", "lr_schedule", "decay_updates", "lr_step_updates",
    "lr_step_gamma", "base_batch", "lr_scaling", "update_rule", "dc_lambda", "drop_above", "backup_workers",
    "lease_ms", "push_encoding", "pull_encoding", "topk_ratio", "overlap", "async_push",
    "push_pull", "priority",
]


def defaults(binary):
    """{flag: default} from an absl --help (values unquoted)."""
    text = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    # Each flag's entry starts on a line of its own, indented by 4; its help may name others.
    entries = re.split(r"^    --(?=\w+ \()", text, flags=re.M)[1:]
    found = {}
    for entry in entries:
        name = entry.split(" ", 1)[0]
        m = re.search(r"\); default: (.*?);", " ".join(entry.split()))
        if m:
            found[name] = m.group(1).strip('"')
    if len(found) < 10:
        sys.exit(f"could not read the flags of {binary}")
    return found


def run_sh_args(path):
    """The --flag value pairs scripts/run.sh passes to ps_launch for the main job: its first
    `defaults=(...)` line."""
    for line in open(path, encoding="utf-8"):
        if line.lstrip().startswith("defaults=("):
            words = shlex.split(line.split("(", 1)[1].rsplit(")", 1)[0])
            args = {}
            i = 0
            while i < len(words):
                word = words[i].lstrip("-")
                if "=" in word:
                    key, value = word.split("=", 1)
                    i += 1
                else:
                    key, value = word, words[i + 1]
                    i += 2
                args[key] = value
            return args
    sys.exit(f"{path}: no `defaults=(...)` line")


def same(a, b):
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return False


def env_flags(env):
    """{flag: value} of the PS_<FLAG> variables in a container's environment."""
    out = {}
    items = env.items() if isinstance(env, dict) else (
        (e.split("=", 1)[0], e.split("=", 1)[1]) for e in env)
    for key, value in items:
        if key.startswith("PS_"):
            out[key[3:].lower()] = str(value)
    return out


def compose_roles(path):
    """(role, {flag: value}) per compose service: ps_server unless its entrypoint is ps_worker;
    the one-shot --evaluate job is not a trainer."""
    spec = yaml.safe_load(open(path, encoding="utf-8"))
    for name, service in spec.get("services", {}).items():
        entry = " ".join(service.get("entrypoint", []) or [])
        command = " ".join(service.get("command", []) or [])
        if "--evaluate" in command:
            continue
        role = "ps_worker" if "ps_worker" in entry else "ps_server"
        yield f"compose {name}", role, env_flags(service.get("environment", {}) or {})


def k8s_roles(path):
    """(role, {flag: value}) per pod template: its env and the ConfigMaps it takes whole."""
    docs = [d for d in yaml.safe_load_all(open(path, encoding="utf-8")) if d]
    config_maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs
                   if d.get("kind") == "ConfigMap"}
    for d in docs:
        if d.get("kind") not in ("StatefulSet", "Job", "Deployment"):
            continue
        for c in d["spec"]["template"]["spec"]["containers"]:
            flags = {}
            for source in c.get("envFrom", []) or []:
                ref = source.get("configMapRef")
                if ref:
                    flags.update(env_flags(config_maps.get(ref["name"], {})))
            flags.update(env_flags({e["name"]: e.get("value", "") for e in c.get("env", []) or []
                                    if "value" in e}))
            command = " ".join(c.get("command", []) or []) + " " + " ".join(c.get("args", []) or [])
            if "--evaluate" in command:
                continue
            role = "ps_worker" if "ps_worker" in command or d["kind"] == "Job" else "ps_server"
            yield f"k8s {d['kind']} {d['metadata']['name']}", role, flags


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bin_dir")
    p.add_argument("run_sh")
    p.add_argument("--compose", action="append", default=[])
    p.add_argument("--k8s", action="append", default=[])
    a = p.parse_args()
    binaries = {b: defaults(f"{a.bin_dir}/{b}") for b in ("ps_server", "ps_worker", "ps_launch")}
    given = run_sh_args(a.run_sh)
    reference = {}
    for flag in TRAINING_FLAGS:
        if flag in given:
            reference[flag] = given[flag]
        elif flag in binaries["ps_launch"]:
            reference[flag] = binaries["ps_launch"][flag]
        else:  # not ps_launch's: the binary's own default applies to both
            reference[flag] = binaries["ps_server"].get(flag, binaries["ps_worker"].get(flag))
    clusters = []
    for path in a.compose:
        clusters += list(compose_roles(path))
    for path in a.k8s:
        clusters += list(k8s_roles(path))
    problems = []
    checked = 0
    for where, role, env in clusters:
        for flag in TRAINING_FLAGS:
            if flag not in binaries[role]:
                continue
            value = env.get(flag, binaries[role][flag])
            checked += 1
            if not same(value, reference[flag]):
                problems.append(f"{where} ({role}): --{flag} is {value!r}, scripts/run.sh trains "
                                f"with {reference[flag]!r}")
    for line in problems:
        print(line)
    if not clusters or checked == 0:
        sys.exit("no trainer found in the given files")
    if problems:
        sys.exit(1)
    print(f"{checked} training flags of {len(clusters)} containers agree with scripts/run.sh")


if __name__ == "__main__":
    main()
