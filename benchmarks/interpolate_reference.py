#!/usr/bin/env python3
"""PyTorch's interpolate, for tests/test_interpolate.cpp (Note [Interpolation] in ops/interpolate.cpp).

For each case (a mode, align_corners, a size or a scale factor, recompute_scale_factor) draws
an input in float64, resamples it with torch.nn.functional.interpolate, and backpropagates a
drawn output gradient. Writes every input, output, output gradient and input gradient to one
safetensors file (by hand: no safetensors package needed), with each case's arguments in the
metadata ("caseNN": "mode=bilinear;align=1;size=7,9;scale=;recompute=0"). Where CUDA is
present the same cases run there too and must match the CPU's (the script exits 1 otherwise).

Usage: python3 benchmarks/interpolate_reference.py tests/data/interpolate_reference.safetensors
Committed output: made with Debian's PyTorch 1.13 on the CPU (/usr/bin/python3); the GPU
machine's PyTorch 2.11 remakes it with its CUDA cross-check.
"""
import json
import struct
import sys

import torch
import torch.nn.functional as F

# (input shape, mode, align_corners, size, scale_factor, recompute_scale_factor)
CASES = [
    ([2, 3, 5], "nearest", None, [8], None, None),
    ([2, 3, 5], "nearest", None, None, [2.0], None),
    ([2, 3, 5], "nearest", None, None, [0.5], None),
    ([2, 3, 7], "nearest", None, [3], None, None),
    ([1, 2, 4, 5], "nearest", None, [7, 3], None, None),
    ([1, 2, 4, 5], "nearest", None, None, [1.5, 2.0], None),
    ([1, 2, 4, 5], "nearest-exact", None, [7, 3], None, None),
    ([1, 2, 4, 5], "nearest-exact", None, None, [1.7, 1.7], None),
    ([1, 1, 3, 4, 2], "nearest", None, None, [2.0, 2.0, 2.0], None),
    ([2, 2, 5], "linear", False, [9], None, None),
    ([2, 2, 5], "linear", True, [9], None, None),
    ([2, 2, 5], "linear", False, None, [0.6], None),
    ([2, 2, 5], "linear", False, None, [2.5], True),
    ([2, 2, 5], "linear", True, [1], None, None),
    ([2, 2, 4, 5], "bilinear", False, [7, 9], None, None),
    ([2, 2, 4, 5], "bilinear", True, [7, 9], None, None),
    ([2, 2, 4, 5], "bilinear", False, None, [1.5, 0.7], None),
    ([2, 2, 4, 5], "bilinear", False, [3, 2], None, None),
    ([2, 2, 4, 5], "bilinear", False, [4, 5], None, None),
    ([1, 2, 4, 5], "bicubic", False, [7, 9], None, None),
    ([1, 2, 4, 5], "bicubic", True, [7, 9], None, None),
    ([1, 2, 4, 5], "bicubic", False, None, [2.0, 2.0], None),
    ([1, 2, 6, 5], "bicubic", False, [3, 4], None, None),
    ([1, 2, 3, 4, 3], "trilinear", False, [5, 6, 4], None, None),
    ([1, 2, 3, 4, 3], "trilinear", True, [5, 6, 4], None, None),
    ([1, 2, 6, 8], "area", None, [3, 4], None, None),
    ([1, 2, 6, 8], "area", None, [4, 5], None, None),
]


def write_safetensors(path, tensors, metadata):
    names = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    dtypes = {torch.float64: "F64"}
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for n in names:
        t = tensors[n].contiguous()
        data = t.numpy().tobytes()
        header[n] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def listed(v):
    return ",".join(repr(s) for s in v) if v else ""


def run(x, g, mode, align, size, scale, recompute, device):
    x = x.detach().clone().to(device).requires_grad_()
    kw = {"mode": mode}
    if align is not None:
        kw["align_corners"] = align
    if recompute is not None:
        kw["recompute_scale_factor"] = recompute
    y = F.interpolate(x, size=size, scale_factor=scale, **kw)
    y.backward(g.to(device))
    return y.detach().cpu(), x.grad.cpu()


def main():
    torch.manual_seed(0)
    tensors, metadata, ok = {}, {}, True
    for i, (shape, mode, align, size, scale, recompute) in enumerate(CASES):
        name = f"case{i:02d}"
        x = torch.randn(shape, dtype=torch.float64)
        kw = {"mode": mode}
        if align is not None:
            kw["align_corners"] = align
        if recompute is not None:
            kw["recompute_scale_factor"] = recompute
        out_shape = F.interpolate(x, size=size, scale_factor=scale, **kw).shape
        g = torch.randn(out_shape, dtype=torch.float64)
        y, gx = run(x, g, mode, align, size, scale, recompute, "cpu")
        if torch.cuda.is_available():
            yc, gc = run(x, g, mode, align, size, scale, recompute, "cuda")
            if not (torch.allclose(yc, y, rtol=1e-12, atol=1e-12) and torch.allclose(gc, gx, rtol=1e-12, atol=1e-12)):
                print(f"{name} ({mode}): CUDA differs from the CPU", file=sys.stderr)
                ok = False
        tensors.update({f"{name}.x": x, f"{name}.y": y, f"{name}.g": g, f"{name}.gx": gx})
        metadata[name] = (f"mode={mode};align={'' if align is None else int(align)};size={listed(size)};"
                          f"scale={listed(scale)};recompute={'' if recompute is None else int(recompute)}")
    metadata["torch"] = torch.__version__
    write_safetensors(sys.argv[1], tensors, metadata)
    print(f"wrote {len(CASES)} cases to {sys.argv[1]} (PyTorch {torch.__version__})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
