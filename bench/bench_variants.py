#!/usr/bin/env python3
"""Throughput of flash_attn's variants through tilec's flash_attn API, with
the peers of issue 15 in the same run (bf16, head_dim 128):

  gqa       32 query / 8 KV heads, seqlen 4k, causal: tilec, FA2 (SDPA FLASH,
            enable_gqa), cuDNN, Flex (torch.compile(flex_attention), causal
            block mask, enable_gqa)
  window    sliding window 1024 causal, seqlen 8k: tilec, Flex (window block
            mask), FA2 dense causal (for the skipped-blocks ratio)
  softcap   softcap 30, causal, seqlen 4k: tilec, Flex (tanh score_mod), FA2
            without softcap (the dense reference)
  alibi     ALiBi (per-head slopes), causal, seqlen 4k: tilec, Flex (bias
            score_mod), FA2 without ALiBi
  varlen    64 documents of 100..4000 tokens, causal: tilec varlen, Flex with a
            document mask over the packed tokens, FA2 one document at a time
            (summed)

TFLOP/s count the scores each query can see: 4·d·(visible pairs)·heads.
Times: median of CUDA-event-timed calls after warmup (bench_flash.median_ms);
tilec is timed as users call it (the public function, Python included). Each
tilec output is checked against SDPA or Flex in the same run ('!' marks a
mismatch). Needs the kernels of <artifacts>/variants (scripts/build_artifacts.py
builds them; bench/flash_variants.py BENCH_KERNELS lists them).

    python3 bench/bench_variants.py --artifacts build/artifacts [--only gqa,window]
"""

import argparse
import contextlib
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "python"), str(REPO / "bench")]

from bench_flash import median_ms  # noqa: E402

D = 128
DT = torch.bfloat16


def flex_fns():
    import torch._dynamo
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 1000)
    return create_block_mask, torch.compile(flex_attention, dynamic=False)


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def visible_pairs(sq, sk, causal, window_left=None):
    """Keys each query sees, summed (bottom-right alignment, sq == sk here)."""
    i = torch.arange(sq, dtype=torch.float64)[:, None]
    j = torch.arange(sk, dtype=torch.float64)[None, :]
    vis = torch.ones(sq, sk, dtype=torch.bool)
    if causal:
        vis &= j <= i + sk - sq
    if window_left is not None:
        vis &= j >= i + sk - sq - window_left
    return int(vis.sum())


def run(name, calls, flops, check, args):
    """Times each (label, fn, context) and prints one line."""
    cells = []
    for label, fn, context in calls:
        try:
            ms = median_ms(fn, args.iters, args.warmup, context)
            cells.append(f"{label} {flops / (ms * 1e-3) / 1e12:6.1f} TFLOP/s ({ms:.3f} ms)")
        except Exception as e:  # a peer that cannot run this shape is n/a
            cells.append(f"{label} n/a ({type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''})")
    err = check()
    print(f"{name:<8} " + " | ".join(cells) + f" | tilec rel err {err:.1e}" + (" !" if err > 2e-2 else ""))


def bench_gqa(tilec, flex, args):
    b, s, hq, hk = 4, 4096, 32, 8
    q = torch.randn(b, s, hq, D, device="cuda", dtype=DT)
    k, v = (torch.randn(b, s, hk, D, device="cuda", dtype=DT) for _ in range(2))
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    flops = 4 * D * visible_pairs(s, s, True) * hq * b
    sdpa = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)
    calls = [("tilec", lambda: tilec.flash_attn_func(q, k, v, causal=True), contextlib.nullcontext),
             ("FA2", sdpa, lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)),
             ("cuDNN", sdpa, lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION))]
    if flex:
        create_block_mask, compiled = flex
        bm = create_block_mask(lambda b_, h, qi, ki: qi >= ki, None, None, s, s, device="cuda")
        calls.append(("Flex", lambda: compiled(qt, kt, vt, block_mask=bm, enable_gqa=True),
                      contextlib.nullcontext))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        ref = sdpa().transpose(1, 2)
    run("gqa", calls, flops, lambda: rel(tilec.flash_attn_func(q, k, v, causal=True), ref), args)


def bench_window(tilec, flex, args):
    b, s, h, w = 2, 8192, 16, 1024
    q, k, v = (torch.randn(b, s, h, D, device="cuda", dtype=DT) for _ in range(3))
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    flops = 4 * D * visible_pairs(s, s, True, w) * h * b
    tl_call = lambda: tilec.flash_attn_func(q, k, v, causal=True, window_size=(w, 0))
    calls = [("tilec", tl_call, contextlib.nullcontext),
             ("FA2 dense causal", lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True),
              lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION))]
    ref = None
    if flex:
        create_block_mask, compiled = flex
        bm = create_block_mask(lambda b_, h_, qi, ki: (qi >= ki) & (qi - ki <= w), None, None, s, s,
                               device="cuda")
        flex_call = lambda: compiled(qt, kt, vt, block_mask=bm)
        calls.append(("Flex", flex_call, contextlib.nullcontext))
        ref = flex_call().transpose(1, 2)
    run("window", calls, flops, lambda: rel(tl_call(), ref) if ref is not None else float("nan"), args)


def bench_softcap(tilec, flex, args):
    b, s, h, cap = 4, 4096, 16, 30.0
    q, k, v = (torch.randn(b, s, h, D, device="cuda", dtype=DT) for _ in range(3))
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    flops = 4 * D * visible_pairs(s, s, True) * h * b
    tl_call = lambda: tilec.flash_attn_func(q, k, v, causal=True, softcap=cap)
    calls = [("tilec", tl_call, contextlib.nullcontext),
             ("FA2 no softcap", lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True),
              lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION))]
    ref = None
    if flex:
        create_block_mask, compiled = flex
        bm = create_block_mask(lambda b_, h_, qi, ki: qi >= ki, None, None, s, s, device="cuda")
        score_mod = lambda score, b_, h_, qi, ki: cap * torch.tanh(score / cap)
        flex_call = lambda: compiled(qt, kt, vt, score_mod=score_mod, block_mask=bm)
        calls.append(("Flex", flex_call, contextlib.nullcontext))
        ref = flex_call().transpose(1, 2)
    run("softcap", calls, flops, lambda: rel(tl_call(), ref) if ref is not None else float("nan"), args)


def bench_alibi(tilec, flex, args):
    b, s, h = 4, 4096, 16
    q, k, v = (torch.randn(b, s, h, D, device="cuda", dtype=DT) for _ in range(3))
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    # Slopes as ALiBi's paper sets them for h heads: 2^(-8 (i+1) / h).
    slopes = torch.tensor([2 ** (-8 * (i + 1) / h) for i in range(h)], device="cuda",
                          dtype=torch.float32)
    flops = 4 * D * visible_pairs(s, s, True) * h * b
    tl_call = lambda: tilec.flash_attn_func(q, k, v, causal=True, alibi_slopes=slopes)
    calls = [("tilec", tl_call, contextlib.nullcontext),
             ("FA2 no alibi", lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True),
              lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION))]
    ref = None
    if flex:
        create_block_mask, compiled = flex
        bm = create_block_mask(lambda b_, h_, qi, ki: qi >= ki, None, None, s, s, device="cuda")
        # flash_attn's bias: -slope * |i + sk - sq - j| (sq == sk here), added to the scaled score.
        score_mod = lambda score, b_, h_, qi, ki: score - slopes[h_] * (qi - ki).abs()
        flex_call = lambda: compiled(qt, kt, vt, score_mod=score_mod, block_mask=bm)
        calls.append(("Flex", flex_call, contextlib.nullcontext))
        ref = flex_call().transpose(1, 2)
    run("alibi", calls, flops, lambda: rel(tl_call(), ref) if ref is not None else float("nan"), args)


def bench_varlen(tilec, flex, args):
    gen = torch.Generator().manual_seed(0)
    lens = torch.randint(100, 4001, (64,), generator=gen).tolist()
    h = 16
    total = sum(lens)
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(total, h, D, device="cuda", dtype=DT) for _ in range(3))
    flops = 4 * D * h * sum(n * (n + 1) // 2 for n in lens)
    tl_call = lambda: tilec.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True)
    docs = [(int(cu[i]), int(cu[i + 1])) for i in range(len(lens))]
    views = [tuple(t[a:e].transpose(0, 1)[None] for t in (q, k, v)) for a, e in docs]

    def per_doc():
        for qd, kd, vd in views:
            F.scaled_dot_product_attention(qd, kd, vd, is_causal=True)

    calls = [("tilec", tl_call, contextlib.nullcontext),
             ("FA2 per document", per_doc, lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION))]
    ref = None
    if flex:
        create_block_mask, compiled = flex
        doc = torch.repeat_interleave(torch.arange(len(lens), device="cuda"),
                                      torch.tensor(lens, device="cuda"))
        bm = create_block_mask(lambda b_, h_, qi, ki: (doc[qi] == doc[ki]) & (qi >= ki), None, None,
                               total, total, device="cuda", _compile=True)  # uncompiled it builds the dense total² mask (141 GB at 130k tokens)
        qt, kt, vt = (t.transpose(0, 1)[None] for t in (q, k, v))
        flex_call = lambda: compiled(qt, kt, vt, block_mask=bm)
        calls.append(("Flex document mask", flex_call, contextlib.nullcontext))
        ref = flex_call()[0].transpose(0, 1)
    run("varlen", calls, flops, lambda: rel(tl_call(), ref) if ref is not None else float("nan"), args)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifacts", default="build/artifacts")
    parser.add_argument("--only", default="gqa,window,softcap,alibi,varlen")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no-flex", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("error: torch sees no CUDA device")
        return 2
    art = Path(args.artifacts)
    os.environ.setdefault("TILEC_ARTIFACTS",
                          os.pathsep.join(str(p) for p in (art, art / "extra", art / "variants")))
    import tilec

    flex = None
    if not args.no_flex:
        try:
            flex = flex_fns()
        except Exception as e:  # older torch
            print(f"Flex n/a: {type(e).__name__}: {e}")
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  bf16 d{D}")
    for name in args.only.split(","):
        try:
            globals()[f"bench_{name}"](tilec, flex, args)
        except Exception as e:
            print(f"{name:<8} ERROR {type(e).__name__}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
