#!/usr/bin/env python3
"""PyTorch's twin of profile_conv (benchmarks/profile_conv.cpp): one forward + backward with
cudnn.benchmark between cudaProfilerStart and cudaProfilerStop, after warm-ups, e.g.
  ncu --profile-from-start off --metrics gpu__time_duration.sum --csv \
      python3 benchmarks/profile_torch_conv.py f32 nchw 64 128 28 64 conv_transpose2d
"""
import sys

import torch
import torch.nn.functional as F


def main():
    prec, layout, n, c, h, k = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
    transposed = len(sys.argv) == 8 and sys.argv[7] == "conv_transpose2d"
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}.get(prec, torch.float32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = prec == "tf32"
    torch.backends.cudnn.benchmark = True
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    ho = 2 * h if transposed else h
    x = torch.randn(n, c, h, h, device="cuda").to(dt).to(memory_format=fmt).requires_grad_()
    if transposed:
        w = (torch.randn(c, k, 4, 4, device="cuda") / (16 * k) ** 0.5).to(dt)
    else:
        w = (torch.randn(k, c, 3, 3, device="cuda") / (9 * c) ** 0.5).to(dt)
    w = w.to(memory_format=fmt).requires_grad_()
    g = torch.ones(n, k, ho, ho, device="cuda", dtype=dt).to(memory_format=fmt)

    def step():
        if transposed:
            F.conv_transpose2d(x, w, stride=2, padding=1).backward(g)
        else:
            F.conv2d(x, w, padding=1).backward(g)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    step()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
