#!/usr/bin/env python3
"""The tree keeps the shape its readers rely on.

Checks, over the C++ and CUDA files git tracks below ROOT (where git cannot list them, every such
file outside hidden folders and build trees):
  - each is as clang-format (the repository's .clang-format: Google style, 100 columns) writes it;
  - in the code of the binaries (server/, worker/, deploy/, common/):
    - no file is longer than --max_file_lines lines;
    - no function is longer than --max_function_lines lines, from its opening brace to its
      closing one, and no main() longer than --max_main_lines;
    - no command-line flag (ABSL_FLAG) is defined twice: a flag two binaries take is defined once,
      in the flag library both link, so its name, default and help cannot drift apart.
Prints one line per problem and exits 1 when there is any, 0 otherwise; exit 2 on bad usage or
when clang-format is missing (scripts/setup.sh installs it with INSTALL_TEST_PACKAGES=1).

  check_tree.py [--max_file_lines N] [--max_function_lines N] [--max_main_lines N] ROOT
  check_tree.py --expect FILE [limits] ROOT
      the problems must be exactly FILE's lines (the check's own test: tests/style/fixtures/)

Functions are found by their braces, not by a compiler: comments, string and character literals
and preprocessor lines are set aside first, and a brace pair that opens and closes within a line
without ending it (a braced initializer in a constructor's list) stays part of its statement.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

SOURCE_SUFFIXES = (".cc", ".h", ".cu", ".cuh")
# The folders of the binaries' code, where the size limits and the one-definition rule hold.
BINARY_FOLDERS = ("server/", "worker/", "deploy/", "common/")
# Trees kept to show the check failing; the real tree's check passes over them.
FIXTURES = "tests/style/fixtures/"
FLAG = re.compile(r"^ABSL_FLAG\(\s*[^,]+,\s*(\w+)\s*,", re.M)
AGGREGATE = re.compile(r"^(template\s*<.*>\s*)?(class|struct|union|enum)\b")
CONTROL = re.compile(r"^(if|for|while|switch|do|else|try|catch)\b")


def tracked_sources(root):
    """The C++/CUDA files below root, relative, sorted: git's list where root is a checkout git
    will read, else every one outside hidden folders and build trees (a CMakeCache.txt)."""
    listed = None
    if os.path.isdir(os.path.join(root, ".git")):
        result = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True)
        if result.returncode == 0:
            listed = result.stdout.split("\n")
    if listed is None:
        listed = []
        for folder, subfolders, names in os.walk(root):
            if "CMakeCache.txt" in names:
                subfolders[:] = []
                continue
            subfolders[:] = [d for d in subfolders if not d.startswith(".")]
            listed += [os.path.relpath(os.path.join(folder, f), root) for f in names]
    return sorted(p for p in listed if p.endswith(SOURCE_SUFFIXES))


def code_only(text):
    """text with comments, literals' contents and preprocessor lines blanked; lines kept."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and text[i:].lstrip(" \t").startswith("#"):
            # A preprocessor line, with its backslash continuations.
            end = i
            while True:
                end = text.find("\n", end)
                if end < 0:
                    end = n
                    break
                if text[end - 1] != "\\":
                    break
                end += 1
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:end]))
            i = end
            continue
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:end]))
            i = end
            continue
        raw = re.match(r'R"([^(\s]*)\(', text[i:i + 20])
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            close = ")" + raw.group(1) + '"'
            end = text.find(close, i + raw.end())
            end = n if end < 0 else end + len(close)
            out.append('""' + "".join(ch if ch == "\n" else " " for ch in text[i + 2:end]))
            i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n and text[j] == c else ""))
            i = j + 1 if j < n and text[j] == c else j
            at_line_start = False
            continue
        out.append(c)
        at_line_start = c == "\n" or (at_line_start and c in " \t")
        i += 1
    return "".join(out)


def functions(text):
    """(head, first line, last line) of every function body in text, lines 1-based."""
    code = code_only(text)
    # Match braces first, so that a pair within one line can stay part of its statement.
    match, stack = {}, []
    for i, c in enumerate(code):
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            match[stack.pop()] = i
    found = []
    frames = []  # (kind, first line, statement); kind: namespace, class, function or block
    head = []
    line = 1
    i = 0
    while i < len(code):
        c = code[i]
        if c == "\n":
            line += 1
            head.append(" ")
        elif c == "{" and i in match and "\n" not in code[i:match[i]]:
            # A pair within one line is part of its statement (a member's braced initializer)
            # unless it ends the line, as a one-line function or initializer does.
            end_of_line = code.find("\n", match[i])
            rest = code[match[i] + 1:len(code) if end_of_line < 0 else end_of_line]
            head = [] if not rest.strip() else head + [code[i:match[i] + 1]]
            i = match[i]
        elif c == "{":
            statement = " ".join("".join(head).split())
            outside_functions = all(k in ("namespace", "class") for k, _, _ in frames)
            if statement.startswith(("namespace", "extern")) or (not statement and not frames):
                kind = "namespace"
            elif AGGREGATE.match(statement):
                kind = "class"
            elif (outside_functions and "(" in statement and not CONTROL.match(statement)
                  and not statement.endswith("=")):
                kind = "function"
            else:
                kind = "block"
            frames.append((kind, line, statement))
            head = []
        elif c == "}":
            if frames:
                kind, first, statement = frames.pop()
                if kind == "function":
                    found.append((statement, first, line))
            head = []
        elif c == ";":
            head = []
        else:
            head.append(c)
        i += 1
    return found


def size_problems(path, text, limits):
    problems = []
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if lines > limits.max_file_lines:
        problems.append(f"{path}: {lines} lines, over {limits.max_file_lines}")
    for statement, first, last in functions(text):
        length = last - first + 1
        is_main = re.search(r"\bint main\s*\(", statement) is not None
        limit = limits.max_main_lines if is_main else limits.max_function_lines
        if length > limit:
            name = re.sub(r"\s*\(.*", "", statement).split(" ")[-1]
            problems.append(f"{path}:{first}: {name} is {length} lines, over {limit}")
    return problems


def format_problems(root, paths):
    """One line per file clang-format would change."""
    problems = []
    for start in range(0, len(paths), 50):
        batch = paths[start:start + 50]
        result = subprocess.run(["clang-format", "--dry-run", "-Werror"] + batch, cwd=root,
                                capture_output=True, text=True)
        changed = sorted(set(re.findall(r"^(\S+?):\d+:\d+: error:", result.stderr, re.M)))
        problems += [f"{p}: not as clang-format writes it (clang-format -i {p})" for p in changed]
    return problems


def check(root, limits):
    sources = [p for p in tracked_sources(root) if not p.startswith(FIXTURES)]
    problems = format_problems(root, sources)
    defined = {}
    for path in sources:
        if not path.startswith(BINARY_FOLDERS):
            continue
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        problems += size_problems(path, text, limits)
        for m in FLAG.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            defined.setdefault(m.group(1), []).append(f"{path}:{line}")
    for flag, places in sorted(defined.items()):
        if len(places) > 1:
            problems.append(f"--{flag} defined {len(places)} times: {', '.join(places)}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root")
    parser.add_argument("--max_file_lines", type=int, default=650)
    parser.add_argument("--max_function_lines", type=int, default=120)
    parser.add_argument("--max_main_lines", type=int, default=100)
    parser.add_argument("--expect", help="a file of exactly the problems the tree must give")
    args = parser.parse_args()
    if shutil.which("clang-format") is None:
        print("check_tree: clang-format not found; scripts/setup.sh installs it "
              "(INSTALL_TEST_PACKAGES=1)", file=sys.stderr)
        return 2
    problems = check(args.root, args)
    if args.expect:
        with open(args.expect, encoding="utf-8") as f:
            expected = [line for line in f.read().split("\n") if line]
        if problems != expected:
            print("check_tree: expected\n  " + "\n  ".join(expected) + "\nfound\n  " +
                  "\n  ".join(problems))
            return 1
        print(f"check_tree: the fixture gives exactly its {len(expected)} problems")
        return 0
    for p in problems:
        print(p)
    print(f"check_tree: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
