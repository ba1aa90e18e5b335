#!/usr/bin/env python3
"""Backward-attention throughput: tilec against torch SDPA's FLASH (FA2) and
CUDNN backends, in the same run.

At 16k tokens per batch (batch = 16384 / seqlen, hidden 2048, heads =
2048 / head_dim), f16/bf16 x head_dim 64/128 x causal, times

  bwd       the backward alone from saved out/lse: tilec's
            _flash_attn_backward (what autograd calls) with deterministic=
            False (flash_attn's default: the table's form, the fused kernel
            with atomic dQ where it applies), "det" with deterministic=True
            (the fused kernel's serial launches where it applies; checked
            bitwise repeatable) and "pair" (atomic_dq=False: the two-kernel
            form, no atomics); SDPA's through torch.autograd.grad on a
            retained graph
  fwd+bwd   out = attention(q, k, v) then out.backward(dout), as training
            runs it (tilec through flash_attn_func's autograd hook)

TFLOP/s by flash_attn's convention: forward FLOPs 4·b·h·s²·d (halved for
causal), backward 2.5x that, forward+backward 3.5x. Each time is the median
of --iters runs (CUDA events) after warmup. tilec's gradients are compared
with FA2's (relative error < 1e-2); a mismatch marks the number with '!'.
Causal fwd+bwd uses seqlen_q == seqlen_k, where the forward's bottom-right
causal and SDPA's (top-left) agree.

    python3 bench/bench_bwd.py [--quick] [--record] [--summary FILE]
"""

import argparse
import datetime
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench_flash import median_ms  # the GPU kept busy: kernel time (busy=True)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

TOKENS = 16384
HIDDEN = 2048
SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
QUICK_SEQLENS = [2048, 16384]
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
COLUMNS = ["dtype", "d", "causal", "seqlen", "tilec bwd", "tilec det bwd", "tilec pair bwd",
           "FA2 bwd", "cuDNN bwd", "tilec/FA2 bwd", "det/bwd", "tilec f+b", "FA2 f+b", "cuDNN f+b",
           "tilec/FA2 f+b"]




def sdpa_runs(backend, q, k, v, dout, scale, causal):
    """(bwd-only fn, fwd+bwd fn, grads, fwd-only fn, out) for one SDPA
    backend on (b, h, s, d) views, or None if the backend refuses the
    configuration (grads and out in q's (b, s, h, d) layout)."""
    leaves = [x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v)]
    dout_t = dout.transpose(1, 2)
    try:
        with sdpa_kernel([backend]):
            out = F.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale)
            g = torch.autograd.grad(out, leaves, dout_t, retain_graph=True)
    except RuntimeError:
        return None

    def bwd():
        torch.autograd.grad(out, leaves, dout_t, retain_graph=True)

    def fwd_bwd():
        with sdpa_kernel([backend]):
            o = F.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale)
        torch.autograd.grad(o, leaves, dout_t)

    def fwd():
        with sdpa_kernel([backend]):
            F.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale)

    return bwd, fwd_bwd, [x.transpose(1, 2) for x in g], fwd, out.transpose(1, 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="seqlens 2k and 16k only")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--record", action="store_true", help="append the table to bench/RESULTS.md")
    parser.add_argument("--summary", default=None, help="write the markdown table here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("error: needs a CUDA GPU")
    import tilec
    from tilec.flash_bwd import _flash_attn_backward

    rows = []
    seqlens = QUICK_SEQLENS if args.quick else SEQLENS
    for dtype in (torch.float16, torch.bfloat16):
        for d in (64, 128):
            for causal in (False, True):
                for s in seqlens:
                    b, h = TOKENS // s, HIDDEN // d
                    q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(4))
                    scale = d ** -0.5
                    flops = 4 * b * h * s * s * d / (2 if causal else 1)
                    out, lse = tilec.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal,
                                                     return_lse=True)

                    def t_bwd(**kw):
                        return _flash_attn_backward(dout, q, k, v, out, lse, scale, causal, **kw)

                    leaves = [x.clone().requires_grad_() for x in (q, k, v)]

                    def t_fwd_bwd():
                        o = tilec.flash_attn_func(*leaves, softmax_scale=scale, causal=causal)
                        torch.autograd.grad(o, leaves, dout)

                    forms = {"tilec bwd": dict(deterministic=False),
                             "tilec det bwd": dict(deterministic=True),
                             "tilec pair bwd": dict(deterministic=True, atomic_dq=False)}
                    tf = lambda ms, mult: mult * flops / (ms * 1e-3) / 1e12
                    row = {"dtype": str(dtype)[6:], "d": d, "causal": causal, "seqlen": s}
                    grads = {}
                    for name, kw in forms.items():
                        row[name] = tf(median_ms(lambda: t_bwd(**kw), args.iters, args.warmup), 2.5)
                        grads[name] = t_bwd(**kw)
                    row["det/bwd"] = row["tilec det bwd"] / row["tilec bwd"]
                    row["tilec f+b"] = tf(median_ms(t_fwd_bwd, args.iters, args.warmup), 3.5)
                    mark = ""
                    again = t_bwd(deterministic=True)
                    if not all(torch.equal(a, b) for a, b in zip(again, grads["tilec det bwd"])):
                        mark = "!"
                        print(f"  deterministic=True not bitwise repeatable at d{d} causal={causal} "
                              f"seqlen {s}", flush=True)
                    for label, backend in (("FA2", SDPBackend.FLASH_ATTENTION),
                                           ("cuDNN", SDPBackend.CUDNN_ATTENTION)):
                        runs = sdpa_runs(backend, q, k, v, dout, scale, causal)
                        if runs is None:
                            row[f"{label} bwd"] = row[f"{label} f+b"] = None
                            continue
                        bwd, fwd_bwd, theirs = runs[:3]
                        row[f"{label} bwd"] = tf(median_ms(bwd, args.iters, args.warmup), 2.5)
                        row[f"{label} f+b"] = tf(median_ms(fwd_bwd, args.iters, args.warmup), 3.5)
                        if label == "FA2":
                            for g, r in zip((g for gs in grads.values() for g in gs),
                                            list(theirs) * len(forms)):
                                if ((g.float() - r.float()).norm() / r.float().norm()).item() > 1e-2:
                                    mark = "!"
                    for kind in ("bwd", "f+b"):
                        fa2 = row[f"FA2 {kind}"]
                        row[f"tilec/FA2 {kind}"] = row[f"tilec {kind}"] / fa2 if fa2 else None
                    row["mark"] = mark
                    rows.append(row)
                    print(fmt_row(row), flush=True)
                    del q, k, v, dout, out, lse, leaves
                    torch.cuda.empty_cache()
    table = markdown(rows)
    print(table)
    if args.summary:
        Path(args.summary).write_text(table + "\n")
    if args.record:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        with RESULTS.open("a") as f:
            f.write(f"\n### Backward ({stamp}, {torch.cuda.get_device_name()}, TFLOP/s; "
                    f"bwd = 2.5x, fwd+bwd = 3.5x forward FLOPs)\n\n{table}\n")
    return 1 if any(r["mark"] for r in rows) else 0


def cell(row, c):
    x = row[c]
    if x is None:
        return "n/a"
    if isinstance(x, float):
        text = f"{x:.2f}x" if "/" in c else f"{x:.1f}"
        return text + (row["mark"] if c.startswith("tilec ") else "")
    return str(x)


def fmt_row(row):
    return "  ".join(f"{c}={cell(row, c)}" for c in COLUMNS)


def markdown(rows):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r, c) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
