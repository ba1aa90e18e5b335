#!/usr/bin/env python3
"""Where does varlen lose time? (issue 15: 64 causal documents of 100..4000
tokens, bf16 d128 16 heads, ran at half of dense-causal speed.)

Kernel time (CUDA events with the GPU kept busy, median of --iters) of
tilec.flash_attn_varlen_func against the same sequences through the dense
kernel (tilec.flash_attn_func), for:
  equal      L tokens x n documents: varlen vs dense (n, L) in one launch
  mixed      the benchmark's 64 lengths uniform in 100..4000 (seed 0, as
             bench_variants.bench_varlen), as drawn ("shuffled"), sorted
             longest first and shortest first, and rounded up to 128
  per doc    each document alone through the dense kernel, kernel times
             summed (issue 15's bound: varlen no slower than this)
Then the call as users see it (GPU idle before each call, host work counts)
for 64 x 512 and the mixed case, and the mixed case's error against the
per-document dense outputs. TFLOP/s over visible scores (causal).

    python3 bench/probe_varlen.py [--iters 30] [--configs 64x64w4,128x128w8]
"""
import argparse
import math

import torch

import tilec
from bench_flash import median_ms

H, D, DT = 16, 128, torch.bfloat16


def flops(lens):
    return 4 * D * H * sum(n * (n + 1) // 2 for n in lens)


def packed(lens):
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(sum(lens), H, D, device="cuda", dtype=DT) for _ in range(3))
    return cu, q, k, v


def varlen_call(lens, tensors=None):
    cu, q, k, v = tensors or packed(lens)
    return lambda: tilec.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True)


def per_doc_ms(lens, tensors, iters):
    """Sum over documents of the dense kernel's time on that document alone."""
    cu, q, k, v = tensors
    total = 0.0
    for b in range(len(lens)):
        a, e = int(cu[b]), int(cu[b + 1])
        qd, kd, vd = (t[a:e][None] for t in (q, k, v))
        total += median_ms(lambda: tilec.flash_attn_func(qd, kd, vd, causal=True), iters, 2, busy=True)
    return total


def config_call(lens, tensors, block_m, block_n, warps):
    """The varlen kernel with another block configuration, launched directly
    with the arguments flash_attn_varlen_func's fast path passes."""
    from tilec import flash_attn as fa
    from tilec import language as tl

    kernel = fa.flash_fwd_kernel().specialize(
        DTYPE=tl.bfloat16, HEAD_DIM=D, CAUSAL=True, VARLEN=True, BLOCK_M=block_m, BLOCK_N=block_n,
        NUM_WARPS=warps, NUM_STAGES=2, SMEM_EPILOGUE=False, COPY_BOUNDS="row")
    cu, q, k, v = tensors
    o, lse = torch.empty_like(q), torch.empty(H, q.shape[0], device="cuda", dtype=torch.float32)
    slopes, ints = torch.zeros(4, device="cuda"), torch.zeros(4, device="cuda", dtype=torch.int32)
    # The kernel's error record for bad cu_seqlens (flash_attn._sequence_errors; not read here).
    errors = torch.zeros(4 + 4 * len(lens), device="cuda", dtype=torch.int32)
    s0, row_ = q.stride(0), H * D
    args = (q, k, v, o, lse, max(lens), max(lens), H, len(lens), 1, s0, s0, D, s0, s0, D, s0, s0, D,
            row_, row_, D, 1, q.shape[0], 1.0 / math.sqrt(D), 0, 0, 1.0, slopes, 0, cu, cu, ints, 0,
            errors, q.shape[0], k.shape[0])
    return lambda: kernel(*args)


def row(name, ms, lens, extra=""):
    print(f"| {name} | {ms:.3f} | {flops(lens) / ms / 1e9:.0f} | {extra} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--configs", default="64x64w4",
                        help="other BLOCK_MxBLOCK_Nw(warps) configurations to time on the mixed case "
                             "('' for none; the table's is 128x64w4)")
    args = parser.parse_args()
    kernel_ms = lambda fn: median_ms(fn, args.iters, 3, busy=True)  # noqa: E731
    user_ms = lambda fn: median_ms(fn, args.iters, 3, busy=False)  # noqa: E731

    print("| case | kernel ms | TFLOP/s | vs |")
    print("|---|---:|---:|---|")
    for L, n in ((2048, 16), (2048, 64), (2000, 64), (512, 64)):
        lens = [L] * n
        q, k, v = (torch.randn(n, L, H, D, device="cuda", dtype=DT) for _ in range(3))
        t_dense = kernel_ms(lambda: tilec.flash_attn_func(q, k, v, causal=True))
        t_var = kernel_ms(varlen_call(lens))
        row(f"dense ({n}, {L})", t_dense, lens)
        row(f"varlen {n} x {L}", t_var, lens, f"{t_dense / t_var:.2f}x dense")

    gen = torch.Generator().manual_seed(0)
    lens = torch.randint(100, 4001, (64,), generator=gen).tolist()
    tensors = packed(lens)
    t_mixed = kernel_ms(varlen_call(lens, tensors))
    t_doc = per_doc_ms(lens, tensors, args.iters)
    row("varlen 64 x 100..4000 (shuffled, the benchmark)", t_mixed, lens,
        f"{t_doc / t_mixed:.2f}x per-doc dense")
    row("dense, each document alone, kernel times summed", t_doc, lens)
    for name, order in (("sorted longest first", sorted(lens, reverse=True)),
                        ("sorted shortest first", sorted(lens)),
                        ("lengths rounded up to 128", [-(-n // 128) * 128 for n in lens])):
        t = kernel_ms(varlen_call(order))
        row(f"varlen 64 x 100..4000, {name}", t, order, f"{t_mixed / t:.2f}x shuffled")
    for cfg in filter(None, args.configs.split(",")):
        bm, rest = cfg.split("x")
        bn, warps = rest.split("w")
        t = kernel_ms(config_call(lens, tensors, int(bm), int(bn), int(warps)))
        row(f"varlen 64 x 100..4000, {cfg} blocks", t, lens, f"{t_mixed / t:.2f}x the table's")
    # Work the grid holds: programs with rows (the rest exit after 4 scalar loads).
    blocks = math.ceil(max(lens) / 128)
    real = sum(math.ceil(n / 128) for n in lens)
    print(f"\ngrid {blocks} x {H} x {len(lens)}: {real * H} programs with rows, "
          f"{(blocks * len(lens) - real) * H} past their document (exit early)")

    print("\n| call as users see it (GPU idle before it) | ms |")
    print("|---|---:|")
    print(f"| varlen 64 x 512 | {user_ms(varlen_call([512] * 64)):.3f} |")
    q, k, v = (torch.randn(64, 512, H, D, device="cuda", dtype=DT) for _ in range(3))
    print(f"| dense (64, 512) | {user_ms(lambda: tilec.flash_attn_func(q, k, v, causal=True)):.3f} |")
    print(f"| varlen 64 x 100..4000 | {user_ms(varlen_call(lens, tensors)):.3f} |")

    # The mixed case's numerics against the dense kernel on each document.
    cu, q, k, v = tensors
    out = varlen_call(lens, tensors)()
    ref = torch.cat([tilec.flash_attn_func(*(t[int(cu[b]):int(cu[b + 1])][None] for t in (q, k, v)),
                                           causal=True)[0] for b in range(len(lens))])
    err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    print(f"\nmixed case: ||varlen - per-doc dense|| / ||per-doc dense|| = {err:.2e} (bf16: < 1e-2 expected)")


if __name__ == "__main__":
    main()
