#!/usr/bin/env python3
"""PyTorch's float8 casts, for tests/test_float8.cpp (Note [Float8 tensors] in core/dtype.h).

Draws the cast inputs (every float8 value of both formats, the midpoints between neighbours,
values past the largest finite ones, infinities, NaN, random values over both ranges), casts
them from float32, float16, bfloat16 and float64 to torch.float8_e4m3fn and torch.float8_e5m2,
and decodes all 256 patterns of each format to float32. Writes inputs and results to one
safetensors file (by hand: no safetensors package needed). Where CUDA is present the same
casts run there too and must equal the CPU's bit for bit (the script exits 1 otherwise).

Usage: python3 benchmarks/float8_reference.py tests/data/float8_reference.safetensors
Committed output: made on the H200 with PyTorch 2.11.
"""
import json
import struct
import sys

import torch

FORMATS = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
SOURCES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64}


def write_safetensors(path, tensors, metadata):
    names = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    dtypes = {torch.float32: "F32", torch.uint8: "U8"}
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


def inputs():
    xs = []
    patterns = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    for f8 in FORMATS.values():
        v = patterns.view(f8).float()
        xs.append(v)
        finite = v[torch.isfinite(v)].double().sort().values
        mid = ((finite[1:] + finite[:-1]) / 2).float()
        xs += [mid, -mid]
    xs.append(torch.tensor([464.0, 470.0, 480.0, 500.0, 57344.0, 61440.0, 65000.0, 1e30, float("inf"),
                            -float("inf"), float("nan"), 1e-30, 1.4e-45, -1.4e-45]))
    g = torch.Generator().manual_seed(5)
    mant = 1 + torch.rand(8000, generator=g, dtype=torch.float64)
    exp = torch.randint(-20, 18, (8000,), generator=g)
    sign = torch.where(torch.rand(8000, generator=g) < 0.5, -1.0, 1.0).double()
    xs.append((mant * torch.pow(2.0, exp.double()) * sign).float())
    return torch.cat(xs)


def casts(x, device):
    out = {}
    x = x.to(device)
    for fname, f8 in FORMATS.items():
        for sname, st in SOURCES.items():
            out[f"{fname}/from_{sname}"] = x.to(st).to(f8).view(torch.uint8).cpu()
        patterns = torch.arange(256, dtype=torch.int32, device=device).to(torch.uint8)
        out[f"{fname}/decoded"] = patterns.view(f8).float().cpu()
    return out


def main():
    x = inputs()
    tensors = {"input": x}
    cpu = casts(x, "cpu")
    tensors.update(cpu)
    bad = 0
    if torch.cuda.is_available():
        gpu = casts(x, "cuda")
        for k, v in cpu.items():
            if v.dtype == torch.uint8:  # a NaN's sign is not specified: any NaN pattern matches any other
                nan = (lambda p: (p & 0x7F) == 0x7F) if k.startswith("e4m3fn") else \
                      (lambda p: ((p & 0x7C) == 0x7C) & ((p & 0x03) != 0))
                same = bool(((v == gpu[k]) | (nan(v) & nan(gpu[k]))).all())
            else:  # NaNs may carry other payloads
                same = torch.equal(v.isnan(), gpu[k].isnan()) and torch.equal(v.nan_to_num(0.0), gpu[k].nan_to_num(0.0))
            if not same:
                bad += 1
                print(f"{k}: CUDA and CPU differ")
    write_safetensors(sys.argv[1], tensors, {"torch": torch.__version__,
                                             "cuda_checked": str(torch.cuda.is_available())})
    print(f"{x.numel()} inputs, {len(cpu)} results, torch {torch.__version__}, "
          f"CUDA {'agrees' if bad == 0 else 'DIFFERS'}" if torch.cuda.is_available() else "no CUDA")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
