#!/usr/bin/env python3
"""Checks the #include lines of the library against its layers (docs/architecture.md).

    python3 scripts/check_layers.py [REPO_ROOT]

A file may include the headers of its own layer and of the layers below it, never above; and
no file below nn/ outside cuda/ includes a header of cuda/ (kernels dispatch through
core/dispatch.h, everything else goes through core/device_hooks.h). Exits 1, listing every
violation, otherwise 0.
"""
import os
import re
import sys

# Folder (or file stem for amp's two halves) -> layer, as the table in docs/architecture.md.
LAYERS = {"core": 1, "cpu": 2, "cuda": 2, "ops": 3, "autograd": 3, "amp": 3, "optim": 4, "amp/high": 5,
          "nn": 6, "data": 6, "distributed": 7, "cli": 8}
AMP_HIGH = ("amp/grad_scaler", "amp/grad_health")
# Outside the library's layers: anything may use anything (tests, benchmarks, examples, scripts).
FREE = ("tests/", "benchmarks/", "examples/", "scripts/", "include/")
INCLUDE = re.compile(r'^\s*#\s*include\s+[<"](?:ampgrad/)?([a-z_]+)/([^>"]+)[>"]', re.M)


def layer_of(path):
    stem = os.path.splitext(path)[0]
    if stem.startswith(AMP_HIGH):
        return "amp/high"
    return path.split("/")[0]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bad, seen = [], 0
    for folder in LAYERS:
        if "/" in folder:
            continue
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in files:
                if not name.endswith((".h", ".cpp", ".cu", ".cuh", ".def")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                if rel.startswith(FREE):
                    continue
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
                    elif top == "cuda" and mine != "cuda" and LAYERS[mine] <= 5:
                        bad.append(f"{rel}:{line}: includes {top}/{rest}; below nn/ only cuda/ itself names cuda/ "
                                   "(kernels dispatch through core/dispatch.h, the rest through core/device_hooks.h)")
    for b in bad:
        print(b)
    print(f"check_layers: {seen} includes of the library's folders read, {len(bad)} against the layers of "
          "docs/architecture.md")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
