#!/usr/bin/env python3
"""The PyTorch twin of `ampgrad train --model cnn`: same network, data, batch, optimizer and
epochs, to compare test accuracy and images/s on the same GPU.

Usage: python3 benchmarks/train_torch.py DATA_DIR [--amp fp16|off] [--epochs 5] [--batch-size 128] [--lr 1e-3]
"""
import argparse
import gzip
import math
import os
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 0x803:
        rows, cols = struct.unpack(">II", data[8:16])
        return torch.frombuffer(bytearray(data[16:]), dtype=torch.uint8).view(n, 1, rows, cols)
    return torch.frombuffer(bytearray(data[8:]), dtype=torch.uint8).view(n).long()


def load(dir_, train):
    prefix = "train" if train else "t10k"
    def find(stem):
        for ext in ("", ".gz"):
            p = os.path.join(dir_, stem + ext)
            if os.path.exists(p):
                return p
        raise FileNotFoundError(stem)
    x = read_idx(find(f"{prefix}-images-idx3-ubyte")).float().div(255).sub(0.2860).div(0.3530)
    y = read_idx(find(f"{prefix}-labels-idx1-ubyte"))
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--amp", default="fp16", choices=["fp16", "off"])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--schedule", default="cosine", choices=["cosine", "constant"])
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.backends.cudnn.benchmark = False
    xtr, ytr = load(a.data, True)
    xte, yte = load(a.data, False)
    xtr, ytr, xte, yte = xtr.cuda(), ytr.cuda(), xte.cuda(), yte.cuda()
    model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25),
                          nn.Linear(128, 10)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    amp_on = a.amp == "fp16"
    scaler = torch.amp.GradScaler("cuda", enabled=amp_on)
    n = xtr.shape[0]
    total_time, total_images = 0.0, 0
    for epoch in range(a.epochs):
        perm = torch.randperm(n, device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.train()
        steps = n // a.batch_size
        for s_ in range(steps):
            i = s_ * a.batch_size
            if a.schedule == "cosine":  # the same per-step cosine decay as ampgrad train
                t = (epoch * steps + s_) / (a.epochs * steps)
                for g in opt.param_groups:
                    g["lr"] = a.lr * 0.5 * (1 + math.cos(math.pi * t))
            idx = perm[i:i + a.batch_size]
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16, enabled=amp_on):
                loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        images = (n // a.batch_size) * a.batch_size
        total_time += dt
        total_images += images
        model.eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp_on):
            correct = sum((model(xte[j:j + 1000]).argmax(1) == yte[j:j + 1000]).sum().item() for j in range(0, 10000, 1000))
        print(f"torch epoch {epoch + 1}/{a.epochs}: test accuracy {correct / 100:.2f}%, {dt:.1f} s, {images / dt:.0f} images/s")
    print(f"| torch {torch.__version__} | cnn | amp {a.amp} | {correct / 100:.2f}% | {total_time:.1f} s | {total_images / total_time:.0f} images/s |")


if __name__ == "__main__":
    main()
