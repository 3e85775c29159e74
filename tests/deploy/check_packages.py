#!/usr/bin/env python3
"""Checks that a Dockerfile's build stage installs exactly the Debian packages scripts/setup.sh
installs (its PACKAGES list), so the image is built the way the project is built everywhere else.

Usage: check_packages.py SETUP_SH DOCKERFILE [ALLOWED_EXTRA,...]
ALLOWED_EXTRA: packages the Dockerfile may add (the CUDA image's ca-certificates and wget, to
reach NVIDIA's repository). Prints the differences and exits 1 when the lists differ."""
import re
import sys


def setup_packages(path):
    text = open(path, encoding="utf-8").read()
    block = re.search(r"^PACKAGES=\((.*?)^\)", text, re.S | re.M)
    if not block:
        sys.exit(f"{path}: no PACKAGES=( ... ) list")
    words = []
    for line in block.group(1).splitlines():
        words += line.split("#")[0].split()
    return set(words)


def dockerfile_packages(path):
    text = open(path, encoding="utf-8").read().replace("\\\n", " ")
    for line in text.splitlines():
        # The first apt-get install of the build stage: its packages run up to the next "&&".
        m = re.search(r"apt-get install ([^&]*)", line)
        if m:
            return {w for w in m.group(1).split() if not w.startswith("-")}
    sys.exit(f"{path}: no apt-get install line")


def main():
    setup, dockerfile = sys.argv[1:3]
    allowed = set(sys.argv[3].split(",")) if len(sys.argv) > 3 else set()
    want, have = setup_packages(setup), dockerfile_packages(dockerfile) - allowed
    missing, extra = sorted(want - have), sorted(have - want)
    for p in missing:
        print(f"{dockerfile}: package {p} of {setup} is missing from the Dockerfile")
    for p in extra:
        print(f"{dockerfile}: package {p} is not in {setup}'s PACKAGES")
    if missing or extra:
        sys.exit(1)
    print(f"ok: {len(want)} packages agree")


main()
