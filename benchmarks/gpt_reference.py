#!/usr/bin/env python3
"""The small GPT's loss and every parameter's gradient in PyTorch, for tests/test_gpt.cpp.

Builds cli/gpt.h's model in PyTorch (the same module tree and parameter names), draws its
weights, a batch and its targets from fixed seeds, runs forward + backward in float64, and
writes weights, inputs, loss and gradients to one safetensors file (written by hand: no
safetensors package needed). The C++ test loads the weights into ampgrad's Gpt and compares.

Where CUDA is present (the H200, PyTorch 2.11) it also runs the same weights and batch there
in float32 (TF32 off) and under torch.autocast("cuda", torch.float16) with float32 weights (the
loss times 1024 before backward, the gradients divided by 1024 after, as a GradScaler would),
and writes those losses and gradients too ("fp32/..." and "fp16/..."): what ampgrad's float32
and fp16-autocast steps are compared with (tests/test_gpt.cpp).

Usage: python3 benchmarks/gpt_reference.py tests/data/gpt_reference.safetensors
Committed output: made on the H200 with PyTorch 2.11 (the float64 part on its CPU).
"""
import json
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

# GPT "tiny": vocab 64, context 32, width 64, 2 layers of 4 heads; a batch of 4 windows.
VOCAB, CONTEXT, WIDTH, LAYERS, HEADS, BATCH = 64, 32, 64, 2, 4, 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(WIDTH)
        self.attn = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        self.ln2 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(approximate="tanh"), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x, causal):
        h = self.ln1(x)
        a = x + self.attn(h, h, h, need_weights=False, attn_mask=causal)[0]
        return a + self.mlp(self.ln2(a))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, idx):
        t = idx.shape[1]
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=idx.device), 1)  # True: may not attend
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for b in self.blocks:
            x = b(x, causal)
        return self.head(self.ln(x))


def write_safetensors(path, tensors, metadata):
    names = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    dtypes = {torch.float64: "F64", torch.float32: "F32", torch.int64: "I64"}
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


def main():
    torch.manual_seed(0)
    model = Gpt().double()
    # LayerNorm's default weight 1 and bias 0 would leave their gradients' use of the weights
    # untested: perturb every parameter.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, VOCAB, (BATCH, CONTEXT), generator=g)
    target = torch.randint(0, VOCAB, (BATCH * CONTEXT,), generator=g)
    loss = F.cross_entropy(model(idx).reshape(-1, VOCAB), target)
    loss.backward()
    tensors = {"input": idx, "target": target, "loss": loss.detach().reshape(1)}
    for name, p in model.named_parameters():
        tensors["param/" + name] = p.detach()
        tensors["grad/" + name] = p.grad.detach()
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        for name, amp in (("fp32", False), ("fp16", True)):
            m = Gpt()
            m.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
            m = m.cuda()
            with torch.autocast("cuda", torch.float16, enabled=amp):
                l = F.cross_entropy(m(idx.cuda()).reshape(-1, VOCAB), target.cuda())
            scale = 1024.0 if amp else 1.0
            (l * scale).backward()
            tensors[name + "/loss"] = l.detach().double().cpu().reshape(1)
            for n, p in m.named_parameters():
                tensors[name + "/grad/" + n] = (p.grad / scale).detach().cpu()
            print(f"{name} on {torch.cuda.get_device_name()}: loss {l.item():.8f}")
    meta = {"torch": torch.__version__, "config": json.dumps([VOCAB, CONTEXT, WIDTH, LAYERS, HEADS]),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else ""}
    write_safetensors(sys.argv[1], tensors, meta)
    print(f"{sys.argv[1]}: loss {loss.item():.12f}, {len(list(model.parameters()))} parameters, torch {torch.__version__}")


if __name__ == "__main__":
    main()
