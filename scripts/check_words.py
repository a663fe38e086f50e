#!/usr/bin/env python3
"""Checks that the project speaks to its users: no text says when or in which sitting it was
written, and every repository path the docs and the Notes cite exists.

    python3 scripts/check_words.py [REPO_ROOT]

Reads every file git tracks (and every new file not yet added) except tests/data. Fails on
the words that date a text (HISTORY below: a work sitting's name, an issue's number; history
belongs to git log), and on a path in backticks, or one
after "in" in a Note reference, that names a file or folder of the repository's own folders
but does not exist. Exits 1 listing each, otherwise 0.
"""
import os
import re
import subprocess
import sys

HISTORY = re.compile(r"\bsessions?\b|issue #[0-9]", re.I)
TOP = ("core", "cpu", "cuda", "ops", "autograd", "amp", "speedups", "optim", "nn", "data", "distributed", "cli",
       "benchmarks", "tests", "examples", "scripts", "docs", "include/ampgrad", "cmake")
# `folder/file.ext`, `folder/`, or "in folder/file.ext" (a Note's home).
PATH = re.compile(r"(?:`|\bin )((?:%s)/[A-Za-z0-9_./{},*-]*)" % "|".join(TOP))
TEXT = (".h", ".cpp", ".cu", ".cuh", ".def", ".md", ".py", ".sh", ".txt", ".cmake", ".in")


def files(root):
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=root,
                         capture_output=True, text=True, check=True).stdout.split("\n")
    return [f for f in out if f and f.endswith(TEXT) and not f.startswith("tests/data/")]


def expand(path):
    # "cpu/onednn.{h,cpp}" names two files.
    m = re.match(r"(.*)\{([^}]*)\}(.*)", path)
    if not m:
        return [path]
    return [m.group(1) + alt + m.group(3) for alt in m.group(2).split(",")]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bad = []
    for rel in files(root):
        try:
            text = open(os.path.join(root, rel), encoding="utf-8").read()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        for n, line in enumerate(text.split("\n"), 1):
            if HISTORY.search(line):
                bad.append(f"{rel}:{n}: history in the text (say what the code does and why): {line.strip()[:100]}")
            for m in PATH.finditer(line):
                path = m.group(1).rstrip(".,:;)")
                if "*" in path or "<" in path or path.endswith("/..."):
                    continue
                for p in expand(path):
                    if not os.path.exists(os.path.join(root, p)):
                        bad.append(f"{rel}:{n}: cites {p}, which does not exist")
    for b in bad:
        print(b)
    print(f"check_words: {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
