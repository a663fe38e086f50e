#!/usr/bin/env python3
"""Summarizes `ncu --csv --metrics gpu__time_duration.sum` output: the total device time and the
kernels grouped by name, largest first; with --launches, first one line per launch in order."""
import csv
import sys
from collections import defaultdict


def main():
    rows = []
    with open(sys.argv[1]) as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = r.get("Metric Unit", "ns")
        v = float(r["Metric Value"].replace(",", ""))
        us = v / 1000 if unit in ("ns", "nsecond") else (v * 1000 if unit in ("ms", "msecond") else v)
        rows.append((r["Kernel Name"][:90], us))
    total = sum(us for _, us in rows)
    if "--launches" in sys.argv[2:]:
        for i, (name, us) in enumerate(rows):
            print(f"{i:4d} {us:8.2f} {name}")
    print(f"{len(rows)} kernels, {total:.1f} us of device time")
    groups = defaultdict(lambda: [0, 0.0])
    for name, us in rows:
        groups[name][0] += 1
        groups[name][1] += us
    print("| kernel | launches | us | share |\n|---|---|---|---|")
    for name, (n, us) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {n} | {us:.1f} | {100 * us / max(total, 1e-9):.1f}% |")


if __name__ == "__main__":
    main()
