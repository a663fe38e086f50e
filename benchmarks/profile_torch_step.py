#!/usr/bin/env python3
"""PyTorch's twin of profile_step.cpp: one training step between cudaProfilerStart/Stop for ncu.
  ncu --profile-from-start off --metrics gpu__time_duration.sum --csv python3 profile_torch_step.py wide 4096 fp32"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    model, batch, prec = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    widths = [4096] * 5 if model == "wide" else [784, 512, 512, 10]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(nn.ReLU())
    net = nn.Sequential(*layers).cuda()
    amp_on = prec == "amp"
    x = torch.randn(batch, widths[0], device="cuda")
    y = torch.randint(0, widths[-1], (batch,), device="cuda")
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda", enabled=amp_on)

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp_on):
            loss = F.cross_entropy(net(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    step()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
