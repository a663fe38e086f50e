#!/usr/bin/env python3
"""Checks the #include lines of the library against its layers (docs/architecture.md).

    python3 scripts/check_layers.py [REPO_ROOT]          check; exit 1 on any violation
    python3 scripts/check_layers.py --matrix [REPO_ROOT]  print how many includes go from each
                                                           folder to each other, and which run up

A file may include the headers of its own layer and of the layers below it, never above; no
file below nn/ outside cuda/ includes a header of cuda/ (kernels dispatch through
core/dispatch.h, everything else goes through core/device_hooks.h); and no file of the reference
path (autograd/, ops/, amp/, optim/) names the speed-ups (speedups/): neither includes one of
their headers nor uses a name of their namespace in its code. The speed-ups register themselves
behind the reference path's seams (Note [Speed-ups] in speedups/speedups.h).
"""
import collections
import os
import re
import sys

# Folder (or file stem for amp's two halves) -> layer, as the table in docs/architecture.md.
LAYERS = {"core": 1, "cpu": 2, "cuda": 2, "ops": 3, "autograd": 3, "amp": 3, "speedups": 4, "optim": 5,
          "amp/high": 6, "nn": 7, "data": 7, "distributed": 8, "cli": 9}
AMP_HIGH = ("amp/grad_scaler", "amp/grad_health")
# The reference path: reads as the algorithms, and never names the speed-ups.
REFERENCE = ("autograd", "ops", "amp", "amp/high", "optim")
# Outside the library's layers: anything may use anything (tests, benchmarks, examples, scripts).
FREE = ("tests/", "benchmarks/", "examples/", "scripts/", "include/")
INCLUDE = re.compile(r'^\s*#\s*include\s+[<"](?:ampgrad/)?([a-z_]+)/([^>"]+)[>"]', re.M)
COMMENT = re.compile(r'//[^\n]*|/\*.*?\*/', re.S)
SPEEDUPS_NAME = re.compile(r'\bspeedups\s*::')


def layer_of(path):
    stem = os.path.splitext(path)[0]
    if stem.startswith(AMP_HIGH):
        return "amp/high"
    return path.split("/")[0]


def library_files(root):
    for folder in LAYERS:
        if "/" in folder:
            continue
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp", ".cu", ".cuh", ".def")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                if not rel.startswith(FREE):
                    yield rel


def check(root):
    bad, seen = [], 0
    for rel in library_files(root):
        mine = layer_of(rel)
        text = open(os.path.join(root, rel), encoding="utf-8").read()
        for m in INCLUDE.finditer(text):
            top, rest = m.group(1), m.group(2)
            if top not in LAYERS:
                continue
            seen += 1
            theirs = layer_of(f"{top}/{rest}")
            line = text[:m.start()].count("\n") + 1
            if LAYERS[theirs] > LAYERS[mine]:
                bad.append(f"{rel}:{line}: {mine} (layer {LAYERS[mine]}) includes {top}/{rest} "
                           f"({theirs}, layer {LAYERS[theirs]}), a layer above it")
            elif top == "cuda" and mine != "cuda" and LAYERS[mine] <= LAYERS["amp/high"]:
                bad.append(f"{rel}:{line}: includes {top}/{rest}; below nn/ only cuda/ itself names cuda/ "
                           "(kernels dispatch through core/dispatch.h, the rest through core/device_hooks.h)")
            elif top == "speedups" and mine in REFERENCE:
                bad.append(f"{rel}:{line}: the reference path includes {top}/{rest}; the speed-ups answer its "
                           "seams from their own room (Note [Speed-ups] in speedups/speedups.h)")
        if mine in REFERENCE:
            code = COMMENT.sub(lambda c: "\n" * c.group(0).count("\n"), text)
            for m in SPEEDUPS_NAME.finditer(code):
                line = code[:m.start()].count("\n") + 1
                bad.append(f"{rel}:{line}: the reference path names the speed-ups' namespace (Note [Speed-ups] "
                           "in speedups/speedups.h)")
    for b in bad:
        print(b)
    print(f"check_layers: {seen} includes of the library's folders read, {len(bad)} against the layers of "
          "docs/architecture.md")
    return 1 if bad else 0


def matrix(root):
    counts = collections.Counter()
    for rel in library_files(root):
        mine = layer_of(rel)
        text = open(os.path.join(root, rel), encoding="utf-8").read()
        for m in INCLUDE.finditer(text):
            top = m.group(1)
            if top in LAYERS:
                theirs = layer_of(f"{top}/{m.group(2)}")
                if theirs != mine:
                    counts[(mine, theirs)] += 1
    order = sorted({f for pair in counts for f in pair}, key=lambda f: (LAYERS[f], f))
    print("includes from (row) to (column); * marks a pair of one layer that include each other, ^ one up")
    print(f"{'':12}" + "".join(f"{f:>10}" for f in order))
    for a in order:
        cells = []
        for b in order:
            n = counts.get((a, b), 0)
            mark = "^" if n and LAYERS[b] > LAYERS[a] else "*" if n and counts.get((b, a)) else ""
            cells.append(f"{(str(n) + mark) if n else '.':>10}")
        print(f"{a:12}" + "".join(cells))
    return 0


def main():
    args = [a for a in sys.argv[1:] if a != "--matrix"]
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return matrix(root) if "--matrix" in sys.argv[1:] else check(root)


if __name__ == "__main__":
    sys.exit(main())
