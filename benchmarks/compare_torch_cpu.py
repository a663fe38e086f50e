#!/usr/bin/env python3
"""ampgrad's CPU training steps side by side with PyTorch's on the same CPU, same thread count.

Usage: python3 benchmarks/compare_torch_cpu.py [--ampgrad build/bin/ampgrad] [--threads 1,2] [--rounds 3]
Runs with Debian's PyTorch (`apt-get install python3-torch`; run this with /usr/bin/python3).
For each thread count, `ampgrad bench step --device cpu --threads N --json F` and PyTorch's twin
of each step (the same MLP and CNN, SGD with momentum 0.9, gradients set to none as ampgrad's
bench step does, float32 and bfloat16 autocast, random batches of the same shapes) are taken in turns, A B A B, `--rounds` times; the table shows the median of the
rounds and PyTorch's time over ampgrad's (above 1: ampgrad is faster).
"""
import argparse
import json
import statistics
import subprocess
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

STEP_CALLS = 10  # back-to-back steps per sample, as ampgrad's kStepCalls (cli/bench_step.cpp)
CASES = [("MLP 784-512-512-10", "mlp", 64), ("Fashion-MNIST CNN", "cnn", 128)]


def make(model):
    if model == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


def torch_step_ms(model, batch, amp, reps):
    """Median over reps samples of the mean time of STEP_CALLS back-to-back steps."""
    torch.manual_seed(0)
    net = make(model)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)  # as ampgrad's bench step (cli/bench_step.cpp)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(STEP_CALLS):
            step()
        times.append((time.perf_counter() - t) / STEP_CALLS * 1e3)
    return statistics.median(times)


def ampgrad_step_ms(binary, threads, reps):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([binary, "bench", "step", "--device", "cpu", "--models", "mlp,cnn", "--threads", str(threads),
                        "--reps", str(reps), "--json", f.name], check=True, capture_output=True)
        rows = json.load(open(f.name))
    return {(r["model"], r["precision"]): r["ms"] for r in rows if r.get("suite") == "step"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ampgrad", default="build/bin/ampgrad")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    print(f"PyTorch {torch.__version__} (oneDNN {torch.backends.mkldnn.is_available()}), CPU step, ms "
          f"(median of {a.rounds} rounds taken in turns)\n")
    print("| model | batch | threads | precision | ampgrad ms | PyTorch ms | PyTorch / ampgrad | ampgrad images/s |")
    print("|---|---|---|---|---|---|---|---|")
    for threads in [int(t) for t in a.threads.split(",")]:
        torch.set_num_threads(threads)
        ours, theirs = {}, {}
        for _ in range(a.rounds):
            for k, v in ampgrad_step_ms(a.ampgrad, threads, a.reps).items():
                ours.setdefault(k, []).append(v)
            for name, model, batch in CASES:
                for prec, amp in (("fp32", False), ("AMP bf16", True)):
                    theirs.setdefault((name, prec), []).append(torch_step_ms(model, batch, amp, a.reps))
        for name, model, batch in CASES:
            for prec in ("fp32", "AMP bf16"):
                o, t = statistics.median(ours[(name, prec)]), statistics.median(theirs[(name, prec)])
                print(f"| {name} | {batch} | {threads} | {prec} | {o:.2f} | {t:.2f} | {t / o:.2f} | {batch / o * 1e3:.0f} |")


if __name__ == "__main__":
    main()
