#!/usr/bin/env python3
"""Writes docs/benchmarks.md from one folder of benchmark results: one run's numbers per capability.

Usage: python3 scripts/bench_report.py --in DIR [--out docs/benchmarks.md]

DIR holds the outputs of one run on one card; any of them may be missing, and a missing one
leaves its section as a line naming the command that fills it:

  gpu.json         ampgrad bench all --device cuda --json gpu.json
  cpu.json         ampgrad bench all --device cpu --json cpu.json
  fp8.json         ampgrad bench matmul --device cuda --json fp8.json (its "fp8" rows; without this
                   file the FP8 section takes gpu.json's)
  compare_step.md  python3 benchmarks/compare_torch.py gpu.json --suites step > compare_step.md
                   (or torch_step.md; included as it is, under the training steps)
  gpt2.txt         lines of benchmarks/gpt2_step ("gpt2_step bf16 B=16 T=1024: ms/step ...") and of
                   the llm.c and PyTorch anchors ("llmc VARIANT B=.. r=.. ms=.. tok/s=.. mfu=..
                   dev_mem_mb=..", "torch MODE B=.. ms=.. tok/s=.. mfu=.. peak_mb=.."); a line
                   "$ COMMAND" names the command of the lines below it
  speedups.txt     free text, included as it is in the Speed-ups section (gpu_run.sh speedups)
  card.txt         one line: the card and its driver
  torch_cpu.md     /usr/bin/python3 benchmarks/compare_torch_cpu.py --threads 1,2 --rounds 3 (Debian's
                   PyTorch on the same CPU; included as it is, under the CPU section)
  cpu_card.txt     one line: the CPU the CPU rows ran on
  note.txt         free text for the page's first section (what this run covers)

Python 3's standard library only. The JSON rows are those `ampgrad bench` writes (cli/bench.cpp,
cli/bench_step.cpp, cli/bench_attention.cpp); a field a row lacks prints as "-".
"""
import argparse
import json
import math
import os
import re
import sys

GPU_ALL = "ampgrad bench all --device cuda --json gpu.json"
CPU_ALL = "ampgrad bench all --device cpu --json cpu.json"
FP8_CMD = "ampgrad bench matmul --device cuda --json fp8.json"
COMPARE_CMD = "python3 benchmarks/compare_torch.py gpu.json --suites step > compare_step.md"
GPT2_CMD = "gpt2_step --amp bf16 --batch 16 --context 1024"
SPEEDUPS_CMD = "AMPGRAD_SPEEDUPS=0 ampgrad bench step --device cuda --json plain.json"

# GPT-2 124M's training FLOPs per token (forward and backward, attention included) and the
# H100 SXM's dense bfloat16 peak: our rows' MFU. llm.c and PyTorch print their own.
GPT2_FLOP_PER_TOKEN = 803478528
H100_BF16_PEAK = 989e12


# ---- numbers -------------------------------------------------------------------------------

def num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def t3(x):
    """A time to 3 significant digits, never in exponent form (0.0123, 1.23, 12.3, 123, 1230)."""
    if not num(x):
        return "-"
    if x == 0:
        return "0"
    digits = 2 - int(math.floor(math.log10(abs(x))))
    if digits <= 0:
        return f"{round(x, digits):.0f}"
    return f"{x:.{digits}f}"


def f1(x):
    return f"{x:.1f}" if num(x) else "-"


def f2(x):
    return f"{x:.2f}" if num(x) else "-"


def whole(x):
    return f"{x:.0f}" if num(x) else "-"


def sci(x):
    return f"{x:.2e}" if num(x) else "-"


def pct(x):
    return f"{x:.0f}%" if num(x) else "-"


def ratio(a, b):
    return a / b if num(a) and num(b) and b != 0 else None


# ---- markdown ------------------------------------------------------------------------------

def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def command(cmd):
    return f"```sh\n{cmd}\n```"


def missing(what, cmd, how=""):
    return f"No {what} in this run: `{cmd}`{how} fills this section."


def load_json(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        rows = json.load(f)
    if not isinstance(rows, list):
        sys.exit(f"bench_report: {path} is not a JSON array of rows")
    return [r for r in rows if isinstance(r, dict)]


def read_text(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read().strip("\n")
    return text if text.strip() else None


def suite(rows, name):
    return [r for r in rows or [] if r.get("suite") == name]


def bench_command(rows, base=GPU_ALL):
    """The bench all command, with the switches its rows show were on (--quick's sweep, the
    step suite's A/B rows, FP8 steps)."""
    steps = [r.get("precision", "") for r in suite(rows, "step")]
    flags = []
    if {r.get("n") for r in suite(rows, "matmul")} == {32, 64}:
        flags.append("--quick")
    if any("fp8" in p for p in steps):
        flags.append("--fp8")
    if any("scaler apart" in p for p in steps):
        flags.append("--fold-ab")
    if any("kernels launched directly" in p for p in steps):
        flags.append("--kernel-graphs-ab")
    if any("graphs not batched" in p for p in steps):
        flags.append("--launch-batches-ab")
    return base.replace(" --json", "".join(" " + f for f in flags) + " --json")


# ---- the suites ----------------------------------------------------------------------------
# Each renderer takes a suite's rows, the command that wrote them and the FLOP-rate unit
# (TFLOP/s on a GPU; GFLOP/s on the CPU, where the rows' "tflops" fields are scaled by 1000).

def rate(x, unit):
    if not num(x):
        return "-"
    return f1(x * 1e3) if unit == "GFLOP/s" else f1(x)


def render_matmul(rows, cmd, unit):
    rows = [r for r in rows if r.get("precision") != "fp8"]
    body = [[r.get("precision", "-"), r.get("n", "-"), t3(r.get("ms")), rate(r.get("tflops"), unit),
             pct(r.get("pct_of_peak")), sci(r.get("rel_error"))] for r in rows]
    out = [command(cmd),
           table(["precision", "n", "ms", unit, "% of peak", "rel. error vs float64"], body),
           "C = A @ B, square n x n, A and B ~ N(0, 1) drawn in float32; ms: the median sample, each the "
           "mean of 10 back-to-back calls."]
    if unit == "GFLOP/s":
        peaks = {}
        for r in rows:
            if num(r.get("peak_gflops")):
                peaks.setdefault(r.get("precision"), r["peak_gflops"])
        if peaks:
            out[-1] += (" % of peak: against this CPU's measured FMA peak (Note [CPU peak] in cpu/peak.h): "
                        + ", ".join(f"{p} {whole(v)} GFLOP/s" for p, v in peaks.items()) + ".")
    else:
        out[-1] += " % of peak: against the best rate the precision reached in this sweep."
    return "\n\n".join(out)


def render_conv(rows, cmd, unit, peaks=None):
    out = []
    conv2d = [r for r in rows if "op" not in r]
    family = [r for r in rows if "op" in r]
    if conv2d:
        header = ["precision", "layout", "N C H K", "fwd ms", f"fwd {unit}", "fwd+bwd ms", f"fwd+bwd {unit}"]
        if peaks:
            header.append("fwd+bwd % of peak")
        header.append("rel. error vs float64")
        body = []
        for r in conv2d:
            shape = " ".join(str(r.get(k, "-")) for k in ("n", "c", "h", "k"))
            row = [r.get("precision", "-"), r.get("layout", "-"), shape, t3(r.get("fwd_ms")),
                   rate(r.get("fwd_tflops"), unit), t3(r.get("fwd_bwd_ms")), rate(r.get("fwd_bwd_tflops"), unit)]
            if peaks:
                peak = peaks.get(r.get("precision"))
                got = r.get("fwd_bwd_tflops")
                row.append(pct(100 * got * 1e3 / peak) if num(got) and num(peak) and peak else "-")
            row.append(sci(r.get("rel_error")))
            body.append(row)
        out += [command(cmd), "conv2d 3x3, stride 1, padding 1 (x [N, C, H, H], weight [K, C, 3, 3]):",
                table(header, body)]
    if family:
        body = [[r.get("op", "-"), r.get("precision", "-"), r.get("x", "-"), r.get("w", "-"),
                 f"{r.get('stride', '-')}, {r.get('padding', '-')}", t3(r.get("fwd_ms")), rate(r.get("fwd_tflops"), unit),
                 t3(r.get("fwd_bwd_ms")), rate(r.get("fwd_bwd_tflops"), unit), sci(r.get("rel_error"))] for r in family]
        out += [command(cmd), "conv1d, conv3d and conv_transpose2d, NCHW:",
                table(["op", "precision", "x", "weight", "stride, padding", "fwd ms", f"fwd {unit}", "fwd+bwd ms",
                       f"fwd+bwd {unit}", "rel. error vs float64"], body)]
    how = ("cuDNN in benchmark mode" if unit == "TFLOP/s" else "oneDNN (float16 widened to float32)")
    out.append(f"{how}; ms: the median sample, each the mean of 10 back-to-back calls; fwd+bwd counts 3 times the "
               "forward's FLOPs.")
    return "\n\n".join(out)


def render_attention(rows, cmd, unit):
    def body(rs):
        return [[r.get("dtype", "-"), r.get("t", "-"), r.get("e", "-"), "yes" if r.get("causal") else "no",
                 r.get("mask", "none"), f"{r.get('b', '-')} x {r.get('h', '-')}", t3(r.get("ms")),
                 rate(r.get("tflops"), unit), sci(r.get("rel_error")), r.get("path", "-")] for r in rs]
    header = ["dtype", "T", "E", "causal", "mask", "B x H", "ms", unit, "out rel. error vs float64", "path"]
    short = [r for r in rows if r.get("graph")]
    long_ = [r for r in rows if not r.get("graph")]
    out = []
    if short:
        out += [command(cmd),
                "The GPTs' own attention (forward + backward captured as one CUDA graph, the replays timed), "
                "with the one-tile kernel and with cuDNN's:",
                table(header, body(short))]
    if long_:
        out += [command(cmd),
                "scaled_dot_product_attention forward + backward, q, k, v [B, H, T, E] requiring grad:",
                table(header, body(long_))]
    out.append("FLOPs as FlashAttention's benchmarks count them (4 B H T^2 E forward, 2.5 times that backward, "
               "halved when causal); path: what the trace says ran (Note [Attention paths] in ops/attention.cpp). "
               "The padding rows mask each sequence's last quarter and count the unmasked FLOPs.")
    return "\n\n".join(out)


def render_steps(rows, cmd):
    body = [[r.get("model", "-"), r.get("batch", "-"), r.get("precision", "-"), r.get("mode", "-"), t3(r.get("ms")),
             t3(r.get("host_ms")), whole(r.get("images_per_s")), t3(r.get("ms_single")), whole(r.get("peak_mb"))]
            for r in rows]
    out = [command(cmd),
           table(["model", "batch", "precision", "mode", "ms/step", "host ms/step", "samples/s", "ms, one step",
                  "peak MiB"], body),
           "ms/step: the median sample, each the mean of 10 back-to-back steps, as a training loop runs them; "
           "host ms/step: the host's time to queue a step (near ms/step: host-bound); one step: a single step "
           "between two synchronizations; peak MiB: everything allocated during one eager step. fp32 and AMP "
           "are sampled in turns (Note [Interleaved samples] in cli/bench_timer.h)."]
    misses = [r for r in rows if num(r.get("graph_misses_per_step")) and r["graph_misses_per_step"] > 0.5]
    if misses:
        out[-1] += (" Eager steps with calls outside call graphs, per step (keys that did not repeat, Note [Call "
                    "graphs] in cuda/call_graph.h): " +
                    "; ".join(f"{r.get('model')}, {r.get('precision')}: {f1(r['graph_misses_per_step'])}"
                              for r in misses) + ".")
    return "\n\n".join(out)


def render_optim(rows, cmd):
    body = [[r.get("parameters", "-"), f"{r.get('tensors', '-')} x {r.get('numel', '-')}", t3(r.get("ms")),
             t3(r.get("gb_per_s")), t3(r.get("copy_gb_per_s")),
             pct(100 * ratio(r.get("gb_per_s"), r.get("copy_gb_per_s"))) if ratio(r.get("gb_per_s"), r.get("copy_gb_per_s")) is not None else "-"]
            for r in rows]
    return "\n\n".join([
        command(cmd),
        table(["parameters", "tensors x elements", "ms", "GB/s", "copy GB/s", "vs copy"], body),
        "One GradScaler step: unscale, inf/NaN check and Adam; GB/s: the bytes the step must move over its "
        "median time, against a float32 copy of all parameters on the same device."])


# ---- sections ------------------------------------------------------------------------------

def section_from_rows(rows, name, what, cmd, render):
    got = suite(rows, name)
    if rows is None or not got:
        return missing(what, GPU_ALL)
    return render(got, cmd)


def training_steps(gpu, d, cmd):
    parts = []
    steps = [r for r in suite(gpu, "step")]
    parts.append(render_steps(steps, cmd) if steps else missing("training-step rows", GPU_ALL))
    name = next((n for n in ("compare_step.md", "torch_step.md") if os.path.exists(os.path.join(d, n))), None)
    text = read_text(os.path.join(d, name)) if name else None
    if text:
        parts.append("Beside PyTorch, on the same card:\n\n" + command(COMPARE_CMD.replace("compare_step.md", name)) +
                     "\n\n" + include_markdown(text))
    else:
        parts.append(f"No PyTorch comparison in this run: `{COMPARE_CMD}` fills it.")
    return "\n\n".join(parts)


def include_markdown(text):
    """compare_torch.py's output as it is, its headings moved below this page's and a blank line
    before each table (its lines may have been kept with grep "^|", the tables run together)."""
    out = []
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("#"):
            line = "##" + line  # "# title" -> "### title", "## table" -> "#### table"
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        starts_table = line.startswith("|") and re.match(r"^\|(\s*:?-+:?\s*\|)+\s*$", nxt)
        if starts_table and out and out[-1] != "":
            out.append("")
        out.append(line)
    return "\n".join(out)


GPT2_OURS = re.compile(r"^gpt2_step\s+(\S+)\s+B=(\d+)\s+T=(\d+):\s+ms/step\s+([\d.]+)\s+\(min\s+([\d.]+),\s+max\s+([\d.]+)\)"
                       r"\s+tokens/s\s+([\d.]+)\s+peak_mb\s+([\d.]+)(?:\s+loss\s+([\d.naif+-]+))?")


def keyvals(line):
    return dict(m.groups() for m in re.finditer(r"(\S+?)=(\S+)", line))


def number(s):
    if s is None:
        return None
    try:
        return float(s.rstrip("%"))
    except ValueError:
        return None


def mfu_percent(s):
    v = number(s)
    if v is None:
        return None
    return v * 100 if not s.endswith("%") and v < 1.0 else v  # a fraction, or already a percentage


def gpt2_section(d):
    text = read_text(os.path.join(d, "gpt2.txt"))
    gone = missing("GPT-2 rows", GPT2_CMD, " (benchmarks/gpt2_step.cpp), its lines with llm.c's and PyTorch's "
                   "in gpt2.txt,")
    if text is None:
        return gone
    body, cmds, cmd, anchors_bare = [], [], None, False
    for line in text.split("\n"):
        line = line.strip()
        if line.startswith("$ "):
            cmd = line[2:].strip()
            continue
        m = GPT2_OURS.match(line)
        if m:
            amp, b, t, ms, lo, hi, tok, peak, loss = m.groups()
            tok = float(tok)
            if not cmd:
                own = f"gpt2_step --amp {amp} --batch {b} --context {t}"
                if own not in cmds:
                    cmds.append(own)
            body.append(["ampgrad", amp, b, t, f"{t3(float(ms))} ({t3(float(lo))}-{t3(float(hi))})", whole(tok),
                         f1(100 * tok * GPT2_FLOP_PER_TOKEN / H100_BF16_PEAK), whole(float(peak)),
                         f"loss {loss}" if loss else ""])
        elif line.startswith("llmc ") or line.startswith("torch "):
            kv = keyvals(line)
            who, variant = line.split()[:2]
            mem = number(kv.get("dev_mem_mb") or kv.get("peak_mb"))
            note = f"recompute {kv['r']}" if "r" in kv else ""
            anchors_bare = anchors_bare or not cmd
            body.append(["llm.c" if who == "llmc" else "PyTorch", variant, kv.get("B", "-"), kv.get("T", "-"),
                         t3(number(kv.get("ms"))), whole(number(kv.get("tok/s"))), f1(mfu_percent(kv.get("mfu"))),
                         whole(mem), note])
        else:
            continue
        if cmd and cmd not in cmds:
            cmds.append(cmd)
    if not body:
        return gone
    if anchors_bare:
        cmds.append("# llm.c's and PyTorch's rows: gpt2.txt does not name their commands")
    return "\n\n".join([
        command("\n".join(cmds)),
        table(["program", "precision / mode", "B", "T", "ms/step (min-max)", "tokens/s", "MFU %", "memory MiB", "note"], body),
        "GPT-2 124M (nanoGPT's model: vocabulary 50304, 12 layers, 12 heads, width 768, tied embedding and "
        "head) trained with AdamW and gradient clipping. ampgrad's MFU: tokens/s x 803,478,528 FLOPs per token "
        "over 989 TFLOP/s (the H100 SXM's dense bfloat16 peak); llm.c's and PyTorch's as each printed it. "
        "ampgrad's and PyTorch's memory is the allocator's peak; llm.c's the device memory in use."])


def fp8_section(gpu, fp8_rows, d):
    src = fp8_rows if fp8_rows is not None else gpu
    cmd = FP8_CMD if fp8_rows is not None else bench_command(gpu)
    mm = suite(src, "matmul")
    f8 = [r for r in mm if r.get("precision") == "fp8"]
    parts = []
    if f8:
        bf16 = {r.get("n"): r for r in mm if r.get("precision") == "bf16"}
        body = []
        for r in f8:
            b = bf16.get(r.get("n"), {})
            body.append([r.get("n", "-"), t3(r.get("ms")), f1(r.get("tflops")), pct(r.get("pct_of_peak")),
                         f1(b.get("tflops")), f2(ratio(r.get("tflops"), b.get("tflops"))), sci(r.get("rel_error"))])
        parts += [command(cmd),
                  table(["n", "ms", "TFLOP/s", "% of peak", "bf16 TFLOP/s", "fp8 / bf16", "rel. error vs float64"], body),
                  "scaled_mm (ops/float8_ops.h): e4m3 operands quantized with per-tensor scales (amax / 448), one "
                  "bfloat16 output; the error includes the quantization's, as a user sees it. % of peak: against "
                  "fp8's best rate in this sweep."]
    else:
        parts.append(missing("FP8 rows", FP8_CMD) + " The matmul suite times FP8 on cards of compute capability "
                     "8.9 and later (L4, H100, H200, ...).")
    steps = [r for r in suite(gpu, "step") if "fp8" in r.get("precision", "")]
    if steps:
        amp16 = {(r.get("model"), r.get("batch"), r.get("mode")): r for r in suite(gpu, "step")
                 if r.get("precision") == "AMP fp16"}
        body = []
        for r in steps:
            o = amp16.get((r.get("model"), r.get("batch"), r.get("mode")), {})
            body.append([r.get("model", "-"), r.get("batch", "-"), r.get("mode", "-"), t3(o.get("ms")), t3(r.get("ms")),
                         f2(ratio(o.get("ms"), r.get("ms")))])
        parts += [command(bench_command(gpu)),
                  "Training steps with FP8 GEMMs (FP8 autocast, delayed scaling; the other ops in bf16):",
                  table(["model", "batch", "mode", "AMP fp16 ms/step", "AMP fp8 ms/step", "fp16 / fp8"], body)]
    return "\n\n".join(parts)


def speedups_section(d):
    text = read_text(os.path.join(d, "speedups.txt"))
    if text is None:
        return (f"No speed-up notes in this run: speedups.txt fills this section, e.g. `{SPEEDUPS_CMD}` beside "
                "the training steps above (Note [Speed-ups] in speedups/speedups.h: AMPGRAD_SPEEDUPS=0 runs the "
                "plain path).")
    return text


TORCH_CPU_CMD = "/usr/bin/python3 benchmarks/compare_torch_cpu.py --threads 1,2 --rounds 3"


def cpu_section(cpu, d):
    if not cpu:
        return missing("CPU rows", CPU_ALL)
    cmd = bench_command(cpu, CPU_ALL)
    peaks = {}
    for r in suite(cpu, "matmul"):
        if num(r.get("peak_gflops")):
            peaks.setdefault(r.get("precision"), r["peak_gflops"])
    parts = ["ampgrad's own CPU kernels and oneDNN, wall-clock timing, at the CPU suites' smaller sizes."]
    for title, name, render in (("Matmul", "matmul", lambda rs: render_matmul(rs, cmd, "GFLOP/s")),
                                ("Convolution", "conv", lambda rs: render_conv(rs, cmd, "GFLOP/s", peaks)),
                                ("Attention", "attention", lambda rs: render_attention(rs, cmd, "GFLOP/s")),
                                ("Training steps", "step", lambda rs: render_steps(rs, cmd)),
                                ("Optimizer step", "optim", lambda rs: render_optim(rs, cmd))):
        rows = suite(cpu, name)
        parts.append(f"### {title}\n\n" + (render(rows) if rows else missing(f"CPU {name} rows", CPU_ALL)))
    # Debian's PyTorch on the same CPU, at the same thread counts, in turns (torch_cpu.md).
    torch_cpu = read_text(os.path.join(d, "torch_cpu.md"))
    if torch_cpu:
        parts.append(f"### Training steps beside PyTorch\n\n```sh\n{TORCH_CPU_CMD}\n```\n\n{torch_cpu.strip()}")
    else:
        parts.append(f"### Training steps beside PyTorch\n\nNo PyTorch rows in this run: `{TORCH_CPU_CMD}` "
                     "(Debian's python3-torch) fills this table, as torch_cpu.md.")
    cpu_name = read_text(os.path.join(d, "cpu_card.txt"))
    if cpu_name:
        parts.insert(0, f"Measured on {cpu_name.strip()}.")
    return "\n\n".join(parts)


def reproduce(card, note):
    lines = []
    if card:
        lines.append(f"Measured on one {card}.")
    if note:
        lines.append(note.strip())
    lines.append(
        "Every table below comes from one run and is preceded by the command that produced it; "
        "`python3 scripts/bench_report.py --in DIR` writes this page from that run's result files "
        "(its docstring names each file). docs/developing.md says how to build, pack and run the "
        "commands on the GPU machine. Times are medians of CUDA-event-timed samples after warm-ups "
        "(wall-clock on the CPU), on fresh random inputs; compare numbers within one table.")
    return " ".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--in", dest="indir", required=True, help="the folder of result files")
    ap.add_argument("--out", default="docs/benchmarks.md", help="the page to write (default: docs/benchmarks.md)")
    args = ap.parse_args()
    d = args.indir
    if not os.path.isdir(d):
        sys.exit(f"bench_report: {d} is not a folder")
    gpu = load_json(os.path.join(d, "gpu.json"))
    cpu = load_json(os.path.join(d, "cpu.json"))
    fp8 = load_json(os.path.join(d, "fp8.json"))
    card = read_text(os.path.join(d, "card.txt"))
    card = card.split("\n")[0].strip() if card else None
    cmd = bench_command(gpu)

    sections = [
        ("How to reproduce", reproduce(card, read_text(os.path.join(d, "note.txt")))),
        ("Matmul", section_from_rows(gpu, "matmul", "matmul rows", cmd, lambda rs, c: render_matmul(rs, c, "TFLOP/s"))),
        ("Convolution", section_from_rows(gpu, "conv", "convolution rows", cmd, lambda rs, c: render_conv(rs, c, "TFLOP/s"))),
        ("Attention", section_from_rows(gpu, "attention", "attention rows", cmd,
                                        lambda rs, c: render_attention(rs, c, "TFLOP/s"))),
        ("Training steps", training_steps(gpu, d, cmd)),
        ("Optimizer step", section_from_rows(gpu, "optim", "optimizer rows", cmd, render_optim)),
        ("GPT-2 124M", gpt2_section(d)),
        ("FP8", fp8_section(gpu, fp8, d)),
        ("Speed-ups", speedups_section(d)),
        ("CPU", cpu_section(cpu, d)),
    ]
    page = "# Benchmarks\n\n" + "\n\n".join(f"## {title}\n\n{body}" for title, body in sections) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(page)
    print(f"bench_report: wrote {args.out}")


if __name__ == "__main__":
    main()
