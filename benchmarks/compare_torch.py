#!/usr/bin/env python3
"""Runs `ampgrad bench`'s cases in PyTorch on the same GPU and prints one side-by-side table.

Usage: python3 benchmarks/compare_torch.py AMPGRAD_BENCH.json [--suites matmul,conv,step,optim,attention] [--reps 30]
The JSON comes from `ampgrad bench all --json FILE` run on the same machine and card just before.
"""
import argparse
import json
import math
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F


def captured(fn, warmup=3):
    """fn as a CUDA graph, after warm-ups on a side stream (as PyTorch's whole-network capture asks)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def median_ms(fn, warmup=5, reps=30, calls=1):
    """Median over reps samples of the mean time of `calls` back-to-back calls (as cli/bench_timer.h)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / calls)
    return statistics.median(times)


OP_CALLS = 10  # calls per sample for single-op cases, as ampgrad's kOpCalls
STEP_CALLS = 10  # back-to-back steps per sample, as ampgrad's kStepCalls (cli/bench_step.cpp)

DTYPES = {"f32": torch.float32, "tf32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def set_tf32(on):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def torch_matmul(row, reps):
    n, p = row["n"], row["precision"]
    if p == "fp8":  # torch._scaled_mm: e4m3 operands with per-tensor scales, bf16 out, as ampgrad's row
        a32, b32 = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
        sa, sb = a32.abs().max() / 448, b32.abs().max() / 448
        a = (a32 / sa).to(torch.float8_e4m3fn)
        b = (b32.t().contiguous() / sb).to(torch.float8_e4m3fn).t()
        ms = median_ms(lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16), 3, reps, OP_CALLS)
        return {"ms": ms, "tflops": 2 * n ** 3 / (ms * 1e-3) / 1e12}
    set_tf32(p == "tf32")
    a = torch.randn(n, n, device="cuda").to(DTYPES[p])
    b = torch.randn(n, n, device="cuda").to(DTYPES[p])
    ms = median_ms(lambda: torch.mm(a, b), 3, reps, OP_CALLS)
    return {"ms": ms, "tflops": 2 * n ** 3 / (ms * 1e-3) / 1e12}


def torch_conv_family(row, reps):
    """conv1d, conv3d, conv_transpose2d rows (cli/bench.cpp's bench_conv_family)."""
    p, op = row["precision"], row["op"]
    set_tf32(p == "tf32")
    torch.backends.cudnn.benchmark = True
    fan_in = math.prod(row["w"][1:])
    x = torch.randn(*row["x"], device="cuda").to(DTYPES[p]).requires_grad_()
    w = (torch.randn(*row["w"], device="cuda") / fan_in ** 0.5).to(DTYPES[p]).requires_grad_()
    s, pd, opd = row["stride"], row["padding"], row["output_padding"]
    if op == "conv1d":
        f = lambda: F.conv1d(x, w, stride=s, padding=pd)
    elif op == "conv3d":
        f = lambda: F.conv3d(x, w, stride=s, padding=pd)
    else:
        f = lambda: F.conv_transpose2d(x, w, stride=s, padding=pd, output_padding=opd)
    with torch.no_grad():
        fwd = median_ms(f, 3, reps, OP_CALLS)
        out = f()
    g = torch.ones_like(out)

    def both():
        f().backward(g)

    both_ms = median_ms(both, 3, reps, OP_CALLS)
    return {"fwd_ms": fwd, "fwd_bwd_ms": both_ms}


def torch_conv(row, reps):
    if "op" in row:
        return torch_conv_family(row, reps)
    p = row["precision"]
    set_tf32(p == "tf32")
    torch.backends.cudnn.benchmark = True
    fmt = torch.channels_last if row["layout"] == "NHWC" else torch.contiguous_format
    n, c, h, k = row["n"], row["c"], row["h"], row["k"]
    x = torch.randn(n, c, h, h, device="cuda").to(DTYPES[p]).to(memory_format=fmt).requires_grad_()
    w = (torch.randn(k, c, 3, 3, device="cuda") / (9 * c) ** 0.5).to(DTYPES[p]).to(memory_format=fmt).requires_grad_()
    with torch.no_grad():
        fwd = median_ms(lambda: F.conv2d(x, w, padding=1), 3, reps, OP_CALLS)
    g = torch.ones(n, k, h, h, device="cuda", dtype=DTYPES[p]).to(memory_format=fmt)

    def both():
        F.conv2d(x, w, padding=1).backward(g)

    both_ms = median_ms(both, 3, reps, OP_CALLS)
    flop = 2 * n * k * h * h * c * 9
    return {"fwd_ms": fwd, "fwd_tflops": flop / (fwd * 1e-3) / 1e12, "fwd_bwd_ms": both_ms,
            "fwd_bwd_tflops": 3 * flop / (both_ms * 1e-3) / 1e12}


def make_model(name):
    if name.startswith("MLP"):
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10)), (1, 28, 28), 10
    if name.startswith("Fashion"):
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25),
                             nn.Linear(128, 10)), (1, 28, 28), 10
    layers = []
    for i in range(4):
        layers.append(nn.Linear(4096, 4096))
        if i < 3:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers), (4096,), 4096


class CharLstm(nn.Module):
    """cli/models.h's CharLstm: embedding 96 -> 64, two LSTM layers of 256 (nn.LSTM, or two
    LSTMCell in a Python loop over the steps), a linear head; input [seq, batch] indices."""

    def __init__(self, cells, vocab=96, embed=64, hidden=256):
        super().__init__()
        self.cells, self.hidden = cells, hidden
        self.embedding = nn.Embedding(vocab, embed)
        if cells:
            self.cell0, self.cell1 = nn.LSTMCell(embed, hidden), nn.LSTMCell(hidden, hidden)
        else:
            self.lstm = nn.LSTM(embed, hidden, num_layers=2)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, idx):
        x = self.embedding(idx)
        if self.cells:
            state0 = state1 = None
            ys = []
            for xt in x.unbind(0):
                state0 = self.cell0(xt, state0)
                state1 = self.cell1(state0[0], state1)
                ys.append(state1[0])
            out = torch.stack(ys)
        else:
            out = self.lstm(x)[0]
        return self.head(out.reshape(-1, self.hidden))


class Gpt(nn.Module):
    """cli/gpt.h's GPT: token and position embeddings (nn.Embedding), pre-norm blocks with
    causal F.scaled_dot_product_attention and a GELU-tanh MLP, a final LayerNorm and head."""

    def __init__(self, vocab, context, width, layers, heads):
        super().__init__()
        self.heads = heads
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            b = nn.Module()
            b.ln1, b.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            b.qkv, b.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            b.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"), nn.Linear(4 * width, width))
            self.blocks.append(b)
        self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, vocab)

    def forward(self, idx):
        B, T = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for b in self.blocks:
            q, k, v = b.qkv(b.ln1(x)).view(B, T, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + b.proj(a.transpose(1, 2).reshape(B, T, -1))
            x = x + b.mlp(b.ln2(x))
        return self.head(self.ln(x))


def torch_step(row, reps):
    set_tf32(False)
    batch = row["batch"]
    amp_on = row["precision"] != "fp32"
    graphed = row["mode"] == "CUDA graph"
    amp_dtype = torch.float16
    head = lambda out: out  # noqa: E731 (the GPT's logits are [B, T, vocab])
    if row["model"].startswith("GPT"):
        cfg = (256, 128, 256, 4, 8) if "small" in row["model"] else (64, 32, 64, 2, 4)
        model = Gpt(*cfg).cuda()
        x = torch.randint(0, cfg[0], (batch, cfg[1]), device="cuda")
        y = torch.randint(0, cfg[0], (batch * cfg[1],), device="cuda")
        # Fused AdamW; capturable so that a CUDA graph can hold it. The graphed AMP step is bf16
        # (no scaler), as the reference numbers.
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, fused=True,
                                capturable=graphed)
        if graphed:
            amp_dtype = torch.bfloat16
        head = lambda out: out.reshape(-1, cfg[0])
    elif row["model"].startswith("char LSTM"):
        model = CharLstm(cells="LSTMCell" in row["model"]).cuda()
        x = torch.randint(0, 96, (64, batch), device="cuda")
        y = torch.randint(0, 96, (64 * batch,), device="cuda")
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        model, shape, classes = make_model(row["model"])
        model = model.cuda()
        x = torch.randn(batch, *shape, device="cuda")
        y = torch.randint(0, classes, (batch,), device="cuda")
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    # PyTorch's GradScaler reads found_inf on the host, so it cannot be captured: the graphed
    # AMP step runs without a scaler (as the reference numbers do).
    scaler = torch.amp.GradScaler("cuda", enabled=amp_on and not graphed)

    def step():
        # As ampgrad bench step: the default (set_to_none), eager and graphed; graphed, the
        # gradients come out of the graph's pool, as in PyTorch's whole-network capture example.
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp_dtype, enabled=amp_on):
            loss = F.cross_entropy(head(model(x)), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    if not graphed:
        out = {"ms": median_ms(step, 5, reps, STEP_CALLS), "ms_single": median_ms(step, 5, reps, 1)}
        # Peak memory of one step after warm-ups, as ampgrad bench step measures it.
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        out["peak_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
        return out
    g = captured(step)
    return {"ms": median_ms(g.replay, 5, reps, STEP_CALLS), "ms_single": median_ms(g.replay, 5, reps, 1)}


def torch_optim(row, reps):
    master = row["parameters"] != "float32"
    tensors, numel = row["tensors"], row["numel"]
    # PyTorch has no fused master-weight Adam: compare with fp32 parameters either way.
    params = [torch.randn(numel, device="cuda", requires_grad=True) for _ in range(tensors)]
    for p in params:
        p.grad = torch.randn(numel, device="cuda") * 1024
    opt = torch.optim.Adam(params, lr=1e-4, fused=True)
    scaler = torch.amp.GradScaler("cuda", init_scale=1024)
    scaler.scale(torch.zeros((), device="cuda"))

    def step():
        scaler.step(opt)
        scaler.update()

    return {"ms": median_ms(step, 3, reps), "note": "fp32 params (no master-weight path)" if master else ""}


def torch_attention(row, reps):
    """scaled_dot_product_attention forward + backward with PyTorch's flash backend (cli/bench_attention.cpp)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    b, t, h, e = row["b"], row["t"], row["h"], row["e"]
    dt = DTYPES[row["dtype"].replace("float16", "f16").replace("bfloat16", "bf16")]
    make = lambda: torch.randn(b, t, h, e, device="cuda").to(dt).transpose(1, 2).detach().requires_grad_()
    q, k, v = make(), make(), make()
    g = torch.randn(b, h, t, e, device="cuda").to(dt)

    mask = None
    if row.get("mask", "none") == "padding":  # each sequence's last quarter of keys masked
        mask = (torch.arange(t, device="cuda") < (3 * t) // 4).reshape(1, 1, 1, t).expand(b, 1, 1, t).contiguous()

    def both():
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=row["causal"]).backward(g)

    if row.get("graph"):  # the short rows: forward + backward as one CUDA graph, as ampgrad's
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            graph = captured(both)
        ms = median_ms(graph.replay, 3, reps, 20)
    elif mask is None:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            ms = median_ms(both, 3, reps)
    else:  # flash takes no mask: PyTorch's own choice (memory-efficient attention)
        ms = median_ms(both, 3, reps)
    return {"ms": ms, "tflops": row["tflops"] * row["ms"] / ms}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ampgrad_json")
    ap.add_argument("--suites", default="matmul,conv,step,optim")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    rows = json.load(open(args.ampgrad_json))
    suites = args.suites.split(",")
    props = torch.cuda.get_device_properties(0)
    print(f"# ampgrad vs PyTorch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN "
          f"{torch.backends.cudnn.version()}) on {props.name}\n")
    torch.manual_seed(0)
    if "matmul" in suites:
        print("## matmul TFLOP/s\n\n| precision | n | ampgrad | PyTorch | ampgrad / PyTorch |\n|---|---|---|---|---|")
        for r in rows:
            if r["suite"] != "matmul":
                continue
            t = torch_matmul(r, args.reps)
            print(f"| {r['precision']} | {r['n']} | {r['tflops']:.1f} | {t['tflops']:.1f} | {r['tflops'] / t['tflops']:.2f} |")
    if "conv" in suites:
        print("\n## conv2d 3x3 TFLOP/s (PyTorch with cudnn.benchmark)\n\n| precision | layout | N C H K | fwd ampgrad | fwd PyTorch | ratio | fwd+bwd ampgrad | fwd+bwd PyTorch | ratio |\n|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            if r["suite"] != "conv" or "op" in r:
                continue
            t = torch_conv(r, args.reps)
            print(f"| {r['precision']} | {r['layout']} | {r['n']} {r['c']} {r['h']} {r['k']} | {r['fwd_tflops']:.1f} | "
                  f"{t['fwd_tflops']:.1f} | {r['fwd_tflops'] / t['fwd_tflops']:.2f} | {r['fwd_bwd_tflops']:.1f} | "
                  f"{t['fwd_bwd_tflops']:.1f} | {r['fwd_bwd_tflops'] / t['fwd_bwd_tflops']:.2f} |")
    if "conv" in suites and any(r["suite"] == "conv" and "op" in r for r in rows):
        print("\n## conv1d, conv3d, conv_transpose2d ms (PyTorch with cudnn.benchmark; ratio = PyTorch / ampgrad, > 1: ampgrad faster)\n\n"
              "| op | precision | x | weight | fwd ampgrad | fwd PyTorch | ratio | fwd+bwd ampgrad | fwd+bwd PyTorch | ratio |\n"
              "|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            if r["suite"] != "conv" or "op" not in r:
                continue
            t = torch_conv_family(r, args.reps)
            print(f"| {r['op']} | {r['precision']} | {r['x']} | {r['w']} | {r['fwd_ms']:.3f} | {t['fwd_ms']:.3f} | "
                  f"{t['fwd_ms'] / r['fwd_ms']:.2f} | {r['fwd_bwd_ms']:.3f} | {t['fwd_bwd_ms']:.3f} | "
                  f"{t['fwd_bwd_ms'] / r['fwd_bwd_ms']:.2f} |")
    if "step" in suites:
        print("\n## Training step, ms (lower is better): mean of 10 back-to-back steps; one step: a single synchronized step\n\n"
              "| model | batch | precision | mode | ampgrad | PyTorch | PyTorch / ampgrad | ampgrad, one step | PyTorch, one step | ratio |\n"
              "|---|---|---|---|---|---|---|---|---|---|")
        peaks = []
        for r in rows:
            if r["suite"] != "step" or r.get("ab") or "apart" in r["precision"]:  # A/B rows: ampgrad only
                continue
            t = torch_step(r, args.reps)
            note = " (PyTorch: no scaler)" if r["mode"] == "CUDA graph" and r["precision"] != "fp32" else ""
            single = r.get("ms_single", float("nan"))
            print(f"| {r['model']} | {r['batch']} | {r['precision']} | {r['mode']}{note} | {r['ms']:.3f} | {t['ms']:.3f} | "
                  f"{t['ms'] / r['ms']:.2f} | {single:.3f} | {t['ms_single']:.3f} | {t['ms_single'] / single:.2f} |")
            if "peak_mb" in r and "peak_mb" in t:
                peaks.append(f"| {r['model']} | {r['batch']} | {r['precision']} | {r['peak_mb']:.1f} | {t['peak_mb']:.1f} | "
                             f"{t['peak_mb'] / r['peak_mb']:.2f} |")
        if peaks:
            print("\n## Peak memory of one eager step, MiB (everything allocated: parameters, gradients, optimizer "
                  "state, activations)\n\n| model | batch | precision | ampgrad | PyTorch | PyTorch / ampgrad |\n"
                  "|---|---|---|---|---|---|")
            print("\n".join(peaks))
    if "attention" in suites:
        print("\n## scaled_dot_product_attention forward + backward, ms (PyTorch: its flash backend, its own choice with a mask; ratio = PyTorch / ampgrad, > 1: ampgrad faster)\n\n"
              "| dtype | T | E | B x H | causal | mask | ampgrad | PyTorch | ratio | ampgrad TFLOP/s | PyTorch TFLOP/s | ampgrad path |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            if r["suite"] != "attention":
                continue
            try:
                t = torch_attention(r, args.reps)
            except RuntimeError as e:  # a case PyTorch's flash backend refuses: say so, go on
                print(f"| {r['dtype']} | {r['t']} | {r['e']} | {r['b']} x {r['h']} | {'yes' if r['causal'] else 'no'} | "
                      f"{r.get('mask', 'none')} | {r['ms']:.4f} | PyTorch refused: {str(e).splitlines()[0][:80]} | | | | {r['path']} |")
                continue
            print(f"| {r['dtype']} | {r['t']} | {r['e']} | {r['b']} x {r['h']}{' (graph)' if r.get('graph') else ''} | {'yes' if r['causal'] else 'no'} | {r.get('mask', 'none')} | {r['ms']:.4f} | {t['ms']:.4f} | "
                  f"{t['ms'] / r['ms']:.2f} | {r['tflops']:.0f} | {t['tflops']:.0f} | {r['path']} |")
    if "optim" in suites:
        print("\n## Optimizer step (unscale + inf check + Adam), ms\n\n| parameters | ampgrad | PyTorch Adam(fused) + GradScaler | PyTorch / ampgrad | ampgrad GB/s | copy GB/s |\n|---|---|---|---|---|---|")
        for r in rows:
            if r["suite"] != "optim":
                continue
            t = torch_optim(r, args.reps)
            print(f"| {r['parameters']} | {r['ms']:.3f} | {t['ms']:.3f}{(' ' + t['note']) if t['note'] else ''} | "
                  f"{t['ms'] / r['ms']:.2f} | {r['gb_per_s']:.0f} | {r['copy_gb_per_s']:.0f} |")


if __name__ == "__main__":
    main()
