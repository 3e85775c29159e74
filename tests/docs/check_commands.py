#!/usr/bin/env python3
"""The commands the user reads are commands the binaries take.

Checks, in README.md, docs/*.md, the scripts' and examples' comments and each binary's own
--help usage lines (and that --help lists the binary's flags):
  - every flag given to ps_launch, ps_server, ps_worker, ps_ctl, ps_replay, ps_datagen or a
    benchmark (ps_bench_*), and to scripts/run.sh, which hands its arguments to ps_launch, is a
    flag that binary accepts (its --helpfull), so renamed or removed flags cannot linger in the
    documentation;
  - every path of the repository named there (examples/..., scripts/..., docs/..., ...) exists.
Prints one line per problem and exits 1 when there is any, 0 otherwise; exit 2 on bad usage,
1 when a binary's flags cannot be read.

  check_commands.py BIN_DIR ROOT [FILE...]   FILE...: check these instead of the documentation
  check_commands.py --fixtures BIN_DIR ROOT FILE...
      each FILE must give exactly the problems its lines `expect: PROBLEM` name (the check's
      own test: tests/docs/fixtures/)
"""
import glob
import os
import re
import subprocess
import sys

BINARIES = ("ps_launch", "ps_server", "ps_worker", "ps_ctl", "ps_replay", "ps_datagen")
# The benchmarks (built with PS_BUILD_BENCH, the default); in a build without them their commands
# go unchecked, and the check says so.
BENCHMARKS = ("ps_bench_transport", "ps_bench_train", "ps_bench_apply", "ps_bench_device",
              "ps_bench_scale", "ps_bench_sparse")
# Abseil's own flags, which --helpfull does not list among the program's.
ABSEIL_FLAGS = {"help", "helpfull", "helpshort", "helppackage", "version", "only_check_args",
                "flagfile", "fromenv", "tryfromenv", "undefok"}
# Besides README.md: the pages and the files whose comments show commands to run.
DOCUMENTED = ("docs/*.md", "scripts/*.sh", "examples/*.py", "bench/*.sh", "experiments/*.sh",
              "experiments/*.py", "deploy/docker/Dockerfile*")
# Folders that the documented commands create (the Kubernetes secrets of make_test_certs.sh).
CREATED = ("deploy/k8s/base/secrets",)
# A command's name, then its arguments up to what ends the command in a shell line or in prose.
COMMAND = re.compile(r"(?<![\w/.-])(?:build/bin/|\./)?(%s|scripts/run\.sh)\b([^`|;&)>\n]*)" %
                     "|".join(BINARIES + BENCHMARKS))
FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9_]*)")
# Folders of the repository whose files the documentation names.
PATH = re.compile(r"(?<![\w/.-])((?:examples|scripts|bench|deploy|experiments|tests|docs|common|"
                  r"server|worker|proto|cmake|\.ci)/[A-Za-z0-9_./-]*[A-Za-z0-9_])")


def flags_of(bin_dir, binary):
    """{flag: whether it is a boolean (its default is true or false)} from --helpfull, or for a
    Google Benchmark binary (ps_bench_apply) from its usage, `[--name=<value>]`."""
    path = os.path.join(bin_dir, binary)
    out = subprocess.run([path, "--helpfull"], capture_output=True, text=True, timeout=60).stdout
    if not out:  # Google Benchmark's own parser: no --helpfull, its usage on --help
        out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60).stdout
        flags = {name: value.startswith("{true|false}")
                 for name, value in re.findall(r"\[--([a-z_]+)=([^\]]*)\]", out)}
        if "benchmark_filter" not in flags:
            sys.exit(f"check_commands: could not read the flags of {binary} (--help)")
        return flags
    flags = {name: default in ("true", "false") for name, default in
             re.findall(r"^ {4}--([a-z0-9_]+) \(.*?\);\s+default: (.*?);$", out, re.M | re.S)}
    # Abseil indents a flag by 4 spaces and the wrapped lines of its help by 6.
    listed = set(re.findall(r"^ {4}--([a-z0-9_]+) \(", out, re.M))
    if len(listed) < 5 or listed != set(flags):
        sys.exit(f"check_commands: could not read the flags of {binary} (--helpfull): "
                 f"{sorted(listed ^ set(flags))[:5]}")
    return {**flags, **{name: True for name in ABSEIL_FLAGS}}


def help_of(bin_dir, binary):
    return subprocess.run([os.path.join(bin_dir, binary), "--help"], capture_output=True,
                          text=True, timeout=60).stdout


def logical_lines(text):
    """Lines with shell continuations (a trailing backslash) joined to the next."""
    return re.sub(r"\\\n\s*", " ", text).split("\n")


def check_text(where, text, flags, root):
    problems = []
    for number, line in enumerate(logical_lines(text), 1):
        if line.startswith("expect: "):  # a fixture's expectation, not a command
            continue
        for match in COMMAND.finditer(line):
            binary = "ps_launch" if match.group(1) == "scripts/run.sh" else match.group(1)
            if binary not in flags:  # a benchmark this build does not have
                continue
            # After ` -- ` the arguments belong to the Python script that --python runs.
            arguments = match.group(2).split(" -- ", 1)[0]
            for flag in FLAG.findall(arguments):
                known = flags[binary]  # --noNAME negates a boolean NAME
                if flag in known or known.get(flag[2:] if flag.startswith("no") else "", False):
                    continue
                problems.append(f"{where}:{number}: {binary} has no flag --{flag}: "
                                f"{match.group(0).strip()[:100]}")
        for path in PATH.findall(line):
            # Patterns and placeholders (runs/sweeps/NAME/) name no one file.
            if "*" in path or re.search(r"(^|/)[A-Z][A-Z_]+(/|$)", path) or path in CREATED:
                continue
            if not os.path.exists(os.path.join(root, path)):
                problems.append(f"{where}:{number}: no such file or folder: {path}")
    return problems


def check_fixtures(bin_dir, root, files, flags):
    """Each fixture must give exactly the problems its `expect:` lines name, in order."""
    failures = 0
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        where = os.path.relpath(path, root)
        found = [p.split(": ", 1)[1] for p in check_text(where, text, flags, root)]
        # What names a benchmark this build lacks is not checked here, so not expected either.
        expected = [e for e in re.findall(r"^expect: (.*)$", text, re.M)
                    if e.split(" ", 1)[0] in flags or not e.startswith("ps_bench_")]
        if found != expected:
            failures += 1
            print(f"{where}: expected {expected}, found {found}")
    print(f"check_commands: {len(files) - failures} of {len(files)} fixtures fail as expected")
    return 1 if failures else 0


def main():
    args = sys.argv[1:]
    fixtures = args[:1] == ["--fixtures"]
    if fixtures:
        args = args[1:]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    bin_dir, root = args[0], args[1]
    flags = {b: flags_of(bin_dir, b) for b in BINARIES}
    missing = [b for b in BENCHMARKS if not os.path.exists(os.path.join(bin_dir, b))]
    flags.update({b: flags_of(bin_dir, b) for b in BENCHMARKS if b not in missing})
    if missing:
        print(f"check_commands: not built, their commands unchecked: {', '.join(missing)}")
    if fixtures:
        return check_fixtures(bin_dir, root, args[2:], flags)
    problems = []
    for binary in flags:
        text = help_of(bin_dir, binary)
        # An Abseil binary's --help lists its flags after its usage lines (the benchmark of Google
        # Benchmark prints only its usage).
        if "Flags from" not in text and not text.startswith("benchmark ["):
            problems.append(f"{binary} --help: lists none of its flags")
        problems += check_text(f"{binary} --help", text.split("Flags from", 1)[0], flags, root)
    files = args[2:] or [os.path.join(root, "README.md")] + sorted(
        f for pattern in DOCUMENTED for f in glob.glob(os.path.join(root, pattern)))
    for path in files:
        with open(path, encoding="utf-8") as f:
            problems += check_text(os.path.relpath(path, root), f.read(), flags, root)
    for p in problems:
        print(p)
    print(f"check_commands: {len(problems)} problems in {len(files)} files and "
          f"{len(flags)} binaries' usage")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
