#!/usr/bin/env python3
"""Draws docs/img/speedup.png: the fp16 (and bf16, tf32) speedup over float32 for matmul
across sizes and for the conv shapes, from `ampgrad bench ... --json` files. Needs gnuplot.

Usage: python3 benchmarks/plot_speedup.py MATMUL.json CONV.json OUT.png
"""
import json
import os
import subprocess
import sys
import tempfile


def main():
    mm, conv, out = sys.argv[1], sys.argv[2], sys.argv[3]
    rows = [r for r in json.load(open(mm)) if r["suite"] == "matmul"]
    crow = [r for r in json.load(open(conv)) if r["suite"] == "conv"]
    tmp = tempfile.mkdtemp()
    f32 = {r["n"]: r["ms"] for r in rows if r["precision"] == "f32"}
    with open(os.path.join(tmp, "mm.dat"), "w") as f:
        for n in sorted(f32):
            sp = {p: f32[n] / next(r["ms"] for r in rows if r["precision"] == p and r["n"] == n)
                  for p in ("tf32", "f16", "bf16")}
            f.write(f"{n} {sp['tf32']:.3f} {sp['f16']:.3f} {sp['bf16']:.3f}\n")
    with open(os.path.join(tmp, "conv.dat"), "w") as f:
        for i, shape in enumerate(sorted({(r["c"], r["h"]) for r in crow}, reverse=True)):
            base = next(r for r in crow if r["precision"] == "f32" and r["layout"] == "NCHW" and (r["c"], r["h"]) == shape)
            vals = []
            for p, lay in (("tf32", "NCHW"), ("f16", "NCHW"), ("f16", "NHWC"), ("bf16", "NHWC")):
                r = next(r for r in crow if r["precision"] == p and r["layout"] == lay and (r["c"], r["h"]) == shape)
                vals.append(base["fwd_bwd_ms"] / r["fwd_bwd_ms"])
            f.write(f'"C{shape[0]} H{shape[1]}" ' + " ".join(f"{v:.3f}" for v in vals) + "\n")
    script = f"""
set terminal pngcairo size 1200,480 font 'sans,10'
set output '{out}'
set multiplot layout 1,2 title 'ampgrad on the H200: speedup over float32 (higher is better)'
set title 'matmul, square n x n'
set logscale x 2
set xlabel 'n'
set ylabel 'speedup vs float32'
set grid
set key top left
plot '{tmp}/mm.dat' u 1:2 w lp lw 2 t 'tf32', '' u 1:3 w lp lw 2 t 'fp16', '' u 1:4 w lp lw 2 t 'bf16'
unset logscale x
set title 'conv2d 3x3 N64, forward + backward'
set xlabel ''
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8
set boxwidth 0.9
plot '{tmp}/conv.dat' u 2:xtic(1) t 'tf32 NCHW', '' u 3 t 'fp16 NCHW', '' u 4 t 'fp16 NHWC', '' u 5 t 'bf16 NHWC'
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script.encode(), check=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
