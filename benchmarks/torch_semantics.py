#!/usr/bin/env python3
"""Replays benchmarks/torch_semantics.cpp's cases in PyTorch and compares values and gradients.

Usage: torch_semantics [cpu|cuda] > ag.jsonl; python3 benchmarks/torch_semantics.py ag.jsonl [cpu|cuda]
Float64 cases must agree to 1e-9 relative, float32 ones to 1e-5 (PyTorch's CPU and CUDA
kernels sum in other orders). Prints one line per disagreement and a summary; exits 1 on any.
"""
import json
import math
import sys

import torch
import torch.nn.functional as F

inf = math.inf


def rnn_module(cls, nin, hidden, layers=1, bidirectional=False, batch_first=False, bias=True, **kw):
    """An nn.RNN/LSTM/GRU case: x, h0 (and c0), then the parameters by their state_dict names.

    The module loads them with load_state_dict (strict: names and shapes), and runs the _VF call
    its forward makes, over the given tensors in its _flat_weights_names order, so that their
    gradients are the ones compared (torch 1.13's functional_call leaves an RNN's flat weights
    stale).
    """
    lstm = cls is torch.nn.LSTM

    def run(x, h0, *rest):
        m = cls(nin, hidden, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first, bias=bias, **kw)
        m = m.to(dtype=x.dtype, device=x.device)
        weights = rest[1:] if lstm else rest
        given = dict(zip([n for n, _ in m.named_parameters()], weights))
        m.load_state_dict({n: t.detach() for n, t in given.items()})
        flat = [given[n] for n in m._flat_weights_names]
        unbatched = x.dim() == 2
        if unbatched:
            x, h0, rest = x.unsqueeze(1), h0.unsqueeze(1), tuple(r.unsqueeze(1) if i == 0 and lstm else r for i, r in enumerate(rest))
        # train=True (dropout 0 keeps it deterministic): cuDNN's RNN runs backward in training mode only.
        args = (bias, layers, 0.0, True, bidirectional, batch_first)
        if lstm:
            out, hn, cn = torch._VF.lstm(x, (h0, rest[0]), flat, *args)
            states = [hn, cn]
        else:
            fn = {torch.nn.GRU: torch._VF.gru}.get(cls) or (torch._VF.rnn_relu if kw.get("nonlinearity") == "relu" else torch._VF.rnn_tanh)
            out, hn = fn(x, h0, flat, *args)
            states = [hn]
        if unbatched:
            out, states = out.squeeze(1), [s.squeeze(1) for s in states]
        # The module itself gives the same values (it ran on the loaded copies).
        ref = m(x.squeeze(1) if unbatched else x, (h0.squeeze(1), rest[0].squeeze(1)) if lstm and unbatched else ((h0, rest[0]) if lstm else (h0.squeeze(1) if unbatched else h0)))
        assert torch.allclose(ref[0], out), "the module and its _VF call disagree"
        return torch.cat([out.reshape(-1)] + [s.reshape(-1) for s in states])

    return run


def pattern_mask(L, S, dev):
    """torch_semantics.cpp's pattern_mask: true (may attend) where i != 1 and (i + j) % 3 != 0."""
    return torch.tensor([[i != 1 and (i + j) % 3 != 0 for j in range(S)] for i in range(L)], device=dev)


def mha(E, H, batch_first, need_weights, padding, self_causal):
    """A MultiheadAttention case: query, key, value, then in_proj_weight, in_proj_bias,
    out_proj.weight, out_proj.bias, through F.multi_head_attention_forward (the module's own
    call) so that the given tensors get the gradients."""
    def run(q, k, v, w_in, b_in, w_out, b_out):
        if self_causal:
            k = v = q
        if batch_first:
            q, k, v = (t.transpose(0, 1) for t in (q, k, v))
        L, N, S = q.shape[0], q.shape[1], k.shape[0]
        kpm = None
        if padding:
            kpm = torch.tensor([[(n + j) % 4 == 3 for j in range(S)] for n in range(N)], device=q.device)
        mask = torch.triu(torch.ones(S, S, device=q.device), 1) > 0 if self_causal else None
        out, w = F.multi_head_attention_forward(q, k, v, E, H, w_in, b_in, None, None, False, 0.0, w_out, b_out,
                                                training=True, key_padding_mask=kpm, need_weights=need_weights,
                                                attn_mask=mask, is_causal=self_causal)
        if batch_first:
            out = out.transpose(0, 1)
        return torch.cat([out.reshape(-1), w.reshape(-1)]) if need_weights else out
    return run


CASES = {
    "rnn_tanh_cell": lambda x, h, wi, wh, bi, bh: torch.rnn_tanh_cell(x, h, wi, wh, bi, bh),
    "rnn_relu_cell": lambda x, h, wi, wh, bi, bh: torch.rnn_relu_cell(x, h, wi, wh, bi, bh),
    # torch's cell ops take batches; nn.RNNCell and friends add the batch dim for 1-D input.
    "rnn_tanh_cell_unbatched_nobias": lambda x, h, wi, wh: torch.rnn_tanh_cell(x[None], h[None], wi, wh)[0],
    "lstm_cell": lambda x, h, c, wi, wh, bi, bh: torch.cat(torch.lstm_cell(x, (h, c), wi, wh, bi, bh), 1),
    "lstm_cell_unbatched_nobias": lambda x, h, c, wi, wh: torch.cat(torch.lstm_cell(x[None], (h[None], c[None]), wi, wh), 1)[0],
    "gru_cell": lambda x, h, wi, wh, bi, bh: torch.gru_cell(x, h, wi, wh, bi, bh),
    "gru_cell_unbatched_nobias": lambda x, h, wi, wh: torch.gru_cell(x[None], h[None], wi, wh)[0],
    "lstm_2layer_bidir_batch_first": rnn_module(torch.nn.LSTM, 3, 5, 2, True, True),
    "lstm_3layer_nobias": rnn_module(torch.nn.LSTM, 3, 4, 3, bias=False),
    "lstm_unbatched": rnn_module(torch.nn.LSTM, 3, 4),
    "gru_2layer_bidir": rnn_module(torch.nn.GRU, 3, 5, 2, True),
    "gru_3layer_nobias": rnn_module(torch.nn.GRU, 3, 4, 3, bias=False),
    "rnn_tanh_2layer_bidir": rnn_module(torch.nn.RNN, 3, 5, 2, True),
    "rnn_relu_2layer_bidir_batch_first": rnn_module(torch.nn.RNN, 3, 5, 2, True, True, nonlinearity="relu"),
    "l1_loss_none": lambda x, y: F.l1_loss(x, y, reduction="none"),
    "l1_loss_mean": lambda x, y: F.l1_loss(x, y),
    "l1_loss_sum": lambda x, y: F.l1_loss(x, y, reduction="sum"),
    "mse_loss_none": lambda x, y: F.mse_loss(x, y, reduction="none"),
    "mse_loss_mean": lambda x, y: F.mse_loss(x, y),
    "smooth_l1_loss_mean": lambda x, y: F.smooth_l1_loss(x, y),
    "smooth_l1_loss_beta05_none": lambda x, y: F.smooth_l1_loss(x, y, reduction="none", beta=0.5),
    "smooth_l1_loss_beta0_sum": lambda x, y: F.smooth_l1_loss(x, y, reduction="sum", beta=0.0),
    "huber_loss_mean": lambda x, y: F.huber_loss(x, y),
    "huber_loss_delta05_none": lambda x, y: F.huber_loss(x, y, reduction="none", delta=0.5),
    "soft_margin_loss_mean": lambda x, y: F.soft_margin_loss(x, y),
    "soft_margin_loss_none": lambda x, y: F.soft_margin_loss(x, y, reduction="none"),
    "kl_div_none": lambda x, y: F.kl_div(x, y, reduction="none"),
    "kl_div_mean": lambda x, y: F.kl_div(x, y, reduction="mean"),
    "kl_div_batchmean": lambda x, y: F.kl_div(x, y, reduction="batchmean"),
    "kl_div_log_target_sum": lambda x, y: F.kl_div(x, y, reduction="sum", log_target=True),
    "kl_div_zero_target_none": lambda x, y: F.kl_div(x, y, reduction="none"),
    "poisson_nll_loss_mean": lambda x, y: F.poisson_nll_loss(x, y),
    "poisson_nll_loss_rates_none": lambda x, y: F.poisson_nll_loss(x, y, log_input=False, reduction="none"),
    "poisson_nll_loss_full_none": lambda x, y: F.poisson_nll_loss(x, y, full=True, reduction="none"),
    "hinge_embedding_loss_none": lambda x, y: F.hinge_embedding_loss(x, y, reduction="none"),
    "hinge_embedding_loss_margin05_mean": lambda x, y: F.hinge_embedding_loss(x, y, margin=0.5),
    "bce_with_logits_none": lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction="none"),
    "bce_with_logits_sum": lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction="sum"),
    "bce_none": lambda x, y: F.binary_cross_entropy(x, y, reduction="none"),
    "margin_ranking_loss_margin05": lambda a, b, y: F.margin_ranking_loss(a, b, y, margin=0.5),
    "margin_ranking_loss_none": lambda a, b, y: F.margin_ranking_loss(a, b, y, reduction="none"),
    "cosine_embedding_loss_margin02": lambda a, b, y: F.cosine_embedding_loss(a, b, y, margin=0.2),
    "cosine_embedding_loss_none": lambda a, b, y: F.cosine_embedding_loss(a, b, y, reduction="none"),
    "triplet_margin_loss": lambda a, p, n: F.triplet_margin_loss(a, p, n),
    "triplet_margin_loss_p1_swap_none": lambda a, p, n: F.triplet_margin_loss(a, p, n, margin=0.7, p=1, swap=True, reduction="none"),
    "multi_margin_loss": lambda x, t: F.multi_margin_loss(x, t),
    "multi_margin_loss_p2_w_none": lambda x, t, w: F.multi_margin_loss(x, t, p=2, margin=0.5, weight=w, reduction="none"),
    "multilabel_margin_loss": lambda x, t: F.multilabel_margin_loss(x, t),
    "multilabel_margin_loss_none": lambda x, t: F.multilabel_margin_loss(x, t, reduction="none"),
    "norm_default": lambda x: torch.linalg.vector_norm(x),
    "norm_p1_dim1": lambda x: torch.linalg.vector_norm(x, 1, dim=1),
    "norm_inf_dim0_keep": lambda x: torch.linalg.vector_norm(x, inf, dim=0, keepdim=True),
    "norm_neginf_dim1": lambda x: torch.linalg.vector_norm(x, -inf, dim=1),
    "norm_p3": lambda x: torch.linalg.vector_norm(x, 3),
    "norm_p05_dim1": lambda x: torch.linalg.vector_norm(x, 0.5, dim=1),
    "norm_p0_dim1": lambda x: torch.linalg.vector_norm(x, 0, dim=1),
    "norm_zero_row_p2": lambda x: torch.norm(x, 2, dim=1),
    "dist_p2": lambda a, b: torch.dist(a, b),
    "dist_p1": lambda a, b: torch.dist(a, b, 1),
    "normalize_default": lambda x: F.normalize(x),
    "normalize_p1_dim0": lambda x: F.normalize(x, p=1, dim=0),
    "cosine_similarity_dim1": lambda a, b: F.cosine_similarity(a, b),
    "cosine_similarity_dim0_bcast": lambda a, b: F.cosine_similarity(a, b, dim=0),
    "pairwise_distance": lambda a, b: F.pairwise_distance(a, b),
    "pairwise_distance_p1_keep": lambda a, b: F.pairwise_distance(a, b, p=1, keepdim=True),
    "cdist_p2": lambda a, b: torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist"),
    "cdist_p1_batched": lambda a, b: torch.cdist(a, b, 1),
    "cdist_inf": lambda a, b: torch.cdist(a, b, inf),
    "pdist_p2": lambda x: F.pdist(x),
    "pdist_p15": lambda x: F.pdist(x, 1.5),
    "renorm_p2_dim0": lambda x: torch.renorm(x, 2, 0, 1.5),
    "renorm_p1_dim1": lambda x: torch.renorm(x, 1, 1, 2.0),
    "cumprod_dim1": lambda x: torch.cumprod(x, 1),
    "cumprod_zeros_dim1": lambda x: torch.cumprod(x, 1),
    "cumprod_zeros_dim0": lambda x: torch.cumprod(x, 0),
    "softmin_dim1": lambda x: F.softmin(x, 1),
    "group_norm_2_affine": lambda x, w, b: F.group_norm(x, 2, w, b),
    "group_norm_1_images": lambda x: F.group_norm(x, 1),
    "addcmul_bcast": lambda x, a, b: torch.addcmul(x, a, b, value=0.5),
    "addcdiv": lambda x, a, b: torch.addcdiv(x, a, b, value=-2),
    "lerp_tensor": lambda a, b, w: torch.lerp(a, b, w),
    "lerp_scalar": lambda a, b: torch.lerp(a, b, 0.3),
    "dot": lambda a, b: torch.dot(a, b),
    "tensordot_2": lambda a, b: torch.tensordot(a, b, 2),
    "tensordot_lists": lambda a, b: torch.tensordot(a, b, ([0, 2], [1, 0])),
    "bilinear": lambda a, b, w, bias: F.bilinear(a, b, w, bias),
    "cross_default_dim": lambda a, b: torch.cross(a, b),
    "cross_dim_last": lambda a, b: torch.cross(a, b, dim=-1),
    "index_add_alpha": lambda x, i, s: torch.index_add(x, 0, i, s, alpha=2),
    "index_copy_dim1": lambda x, i, s: torch.index_copy(x, 1, i, s),
    "gather_dim1": lambda x, i: torch.gather(x, 1, i),
    "scatter_add_dim0": lambda x, i, s: torch.scatter_add(x, 0, i, s),
    "index_put_two_dims": lambda x, i, j, v: torch.index_put(x, (i, j), v),
    "index_put_accumulate": lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True),
    "grid_sample_bilinear_zeros": lambda x, g: F.grid_sample(x, g, align_corners=False),
    "grid_sample_bilinear_border_ac": lambda x, g: F.grid_sample(x, g, padding_mode="border", align_corners=True),
    "grid_sample_bilinear_reflection": lambda x, g: F.grid_sample(x, g, padding_mode="reflection", align_corners=False),
    "mv": lambda a, x: torch.mv(a, x),
    "addmv": lambda y, a, x: torch.addmv(y, a, x, beta=0.5, alpha=2),
    "addr": lambda m, a, b: torch.addr(m, a, b, beta=2, alpha=-1),
    "baddbmm": lambda m, a, b: torch.baddbmm(m, a, b, beta=0.5, alpha=1.5),
    "addbmm": lambda m, a, b: torch.addbmm(m, a, b, beta=2),
    "multi_dot_1d_ends": lambda a, b, c, d: torch.linalg.multi_dot([a, b, c, d]),
    "chain_matmul": lambda a, b, c: torch.linalg.multi_dot([a, b, c]),
    "matmul_1d_1d": lambda a, b: torch.matmul(a, b),
    "matmul_1d_3d": lambda a, b: torch.matmul(a, b),
    "matmul_3d_1d": lambda a, b: torch.matmul(a, b),
    "matmul_bcast": lambda a, b: torch.matmul(a, b),
    "prelu_one": lambda x, w: F.prelu(x, w),
    "prelu_channels": lambda x, w: F.prelu(x, w),
    "grid_sample_nearest": lambda x, g: F.grid_sample(x, g, mode="nearest", align_corners=False),
    "conv1d_s2_p1": lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1),
    "conv1d_d2_g2": lambda x, w: F.conv1d(x, w, dilation=2, groups=2),
    "conv1d_unbatched": lambda x, w: F.conv1d(x, w),
    "conv3d_p1": lambda x, w, b: F.conv3d(x, w, b, padding=1),
    "conv3d_s_d_g2": lambda x, w: F.conv3d(x, w, stride=(2, 1, 2), padding=(0, 1, 1), dilation=(1, 2, 1), groups=2),
    "conv_transpose1d_s2_p1_op1": lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1),
    "conv_transpose1d_g2_d2": lambda x, w: F.conv_transpose1d(x, w, groups=2, dilation=2),
    "conv_transpose2d_s2_p1_op1": lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
    "conv_transpose2d_mixed": lambda x, w: F.conv_transpose2d(x, w, stride=(1, 2), padding=(0, 1), output_padding=(0, 1), groups=2, dilation=(2, 1)),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "masked_fill_bcast": lambda x, m: x.masked_fill(m != 0, -1.5),
    "tril_diag1": lambda x: torch.tril(x, 1),
    "triu_diag_neg1": lambda x: torch.triu(x, -1),
    "embedding": lambda i, w: F.embedding(i, w),
    "embedding_padding_idx": lambda i, w: F.embedding(i, w, padding_idx=2),
    "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
    "sdpa_causal_scale": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.4),
    "sdpa_bool_mask_dead_row": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=pattern_mask(5, 6, q.device)),
    "sdpa_float_mask": lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
    "mha_padding_weights": mha(8, 2, False, True, True, False),
    "mha_batch_first_noweights": mha(8, 4, True, False, True, False),
    "mha_self_causal_batch_first": mha(8, 2, True, False, False, True),
    "conv_transpose3d_s2": lambda x, w, b: F.conv_transpose3d(x, w, b, stride=2, padding=(0, 1, 0), output_padding=(1, 0, 1)),
}
DTYPES = {"float64": torch.float64, "float32": torch.float32, "int64": torch.int64}


def num(v):
    return float(v) if not isinstance(v, str) else float(v.replace("inf", "inf"))


def tensor(t, dev):
    return torch.tensor([num(v) for v in t["values"]], dtype=torch.float64).to(DTYPES[t["dtype"]]).reshape(t["shape"]).to(dev)


def close(a, b, tol):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= tol * max(1.0, abs(b))


def float64_answer(fn, c, dev):
    """PyTorch's values and gradients in float64 for a case's inputs, keyed as the mismatches are."""
    inputs = [tensor(t, dev) for t in c["inputs"]]
    inputs = [t.double() if t.is_floating_point() else t for t in inputs]
    floating = [i for i, t in enumerate(inputs) if t.is_floating_point() and c.get("grads", [None] * 9)[i] is not None]
    for i in floating:
        inputs[i].requires_grad_(True)
    out = fn(*inputs)
    w = torch.cos(torch.arange(out.numel(), dtype=torch.float64)).reshape(out.shape).to(dev)
    (out * w).sum().backward()
    ref = dict(enumerate(out.detach().flatten().tolist()))
    for i in floating:
        g = inputs[i].grad
        vals = g.flatten().tolist() if g is not None else [0.0] * len(c["grads"][i]["values"])
        ref.update({f"grad{i}[{k}]": v for k, v in enumerate(vals)})
    return ref


def main():
    path, dev = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cpu"
    # PyTorch's cuDNN convolutions round float32 through TF32 by default (cudnn.allow_tf32);
    # ampgrad's float32 is float32 unless ag::set_allow_tf32(true): compare float32 with float32.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    bad, checked = 0, 0
    for line in open(path):
        c = json.loads(line)
        if c["name"] == "test01":
            want = [str(torch.get_default_dtype())]
            want.append(str(torch.tensor(3.14).dtype))
            torch.set_default_dtype(torch.float16)
            want.append(str(torch.tensor(3.14).dtype))
            torch.set_default_dtype(torch.float32)
            got = ["torch." + s for s in c["lines"]]
            checked += 1
            if got != want:
                bad += 1
                print("test01: ampgrad", got, "torch", want)
            continue
        fn = CASES.get(c["name"])
        if fn is None:
            print("no torch case for", c["name"])
            bad += 1
            continue
        inputs = [tensor(t, dev) for t in c["inputs"]]
        floating = [i for i, t in enumerate(inputs) if t.is_floating_point() and c.get("grads", [None] * 9)[i] is not None]
        for i in floating:
            inputs[i].requires_grad_(True)
        dtype = c["inputs"][0]["dtype"]
        tol = 1e-9 if dtype == "float64" else 1e-5
        try:
            out = fn(*inputs)
        except RuntimeError as e:
            if "error" in c:
                continue  # both refuse
            print(f"{c['name']} {dtype}: torch raised {e}")
            bad += 1
            continue
        if "error" in c:
            print(f"{c['name']} {dtype}: ampgrad raised {c['error']}; torch gave {out}")
            bad += 1
            continue
        checked += 1
        if list(out.shape) != c["out"]["shape"] or str(out.dtype) != "torch." + c["out"]["dtype"]:
            print(f"{c['name']} {dtype}: out {c['out']['shape']} {c['out']['dtype']} vs torch {list(out.shape)} {out.dtype}")
            bad += 1
            continue
        w = torch.cos(torch.arange(out.numel(), dtype=torch.float64)).to(out.dtype).reshape(out.shape).to(dev)
        try:
            (out * w).sum().backward()
        except RuntimeError as e:  # compare the values alone
            print(f"{c['name']} {dtype}: torch's backward failed ({str(e)[:90]}); values only")
            floating = []
        got_out = [num(v) for v in c["out"]["values"]]
        ref_out = out.detach().double().flatten().tolist()
        errs = [(k, g, r) for k, (g, r) in enumerate(zip(got_out, ref_out)) if not close(g, r, tol)]
        for i in floating:
            g = c["grads"][i]
            ref = inputs[i].grad
            ref_vals = ref.double().flatten().tolist() if ref is not None else [0.0] * len(g["values"])
            errs += [(f"grad{i}[{k}]", a, b) for k, (a, b) in enumerate(zip([num(v) for v in g["values"]], ref_vals)) if not close(a, b, tol)]
        if errs and dtype == "float32":
            # A float32 disagreement is ampgrad's only when ampgrad is the farther of the two
            # from PyTorch's float64 answer on the same inputs (long recurrences and sums
            # differ by their orders: both are rounding, one may be nearer).
            ref64 = float64_answer(fn, c, dev)
            worse = [e for e in errs if abs(e[1] - ref64[e[0]]) > max(abs(e[2] - ref64[e[0]]), tol * max(1.0, abs(ref64[e[0]])))]
            if not worse:
                print(f"{c['name']} {dtype}: {len(errs)} values differ from torch's float32 by more than {tol}, "
                      f"but ampgrad's are nearer torch's float64 answer")
                errs = []
        if errs:
            bad += 1
            print(f"{c['name']} {dtype}: {len(errs)} mismatches, first {errs[:3]}")
    print(f"torch_semantics on {dev}: {checked} cases checked against torch {torch.__version__}, {bad} disagree")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
