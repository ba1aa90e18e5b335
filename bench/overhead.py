#!/usr/bin/env python3
"""Per-program fixed cost, in K/V iterations: tilec against FA2.

A program (one BLOCK_M-row block of one head) costs about a + b·n, where n
is its number of K/V blocks. With the grid held fixed (queries and heads
fixed, keys varied), the kernel time is linear in seqlen_k and its intercept
over the slope is a/b: the prologue, epilogue and pipeline fill of one
program measured in iterations of its own loop. This separates "slower
loop" from "more fixed work per program", which short sequences feel most.

    python3 bench/overhead.py --artifacts build/artifacts [--kernel flash_fwd_f16_d128]
"""
import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_flash import median_ms  # noqa: E402
from check_flash import FlashKernel, find_flash_manifests, load_runtime  # noqa: E402

SEQLEN_Q = 512
KEYS = [512, 1024, 2048, 4096]
BLOCK_N = 64  # only scales the intercept into "iterations of 64 keys"


def fit(xs, ys):
    """Least-squares line through (xs, ys): (intercept, slope)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifacts", default="build/artifacts")
    parser.add_argument("--kernel", action="append", help="kernel name (repeatable); default all")
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    runtime = load_runtime()
    paths = find_flash_manifests(args.artifacts)
    if args.kernel:
        paths = [p for p in paths if Path(p).stem in args.kernel]
    print(f"seqlen_q {SEQLEN_Q}, seqlen_k {KEYS}; batch x heads = 32 x (2048 / head_dim)")
    print("| kernel | tilec a/b (iterations) | FA2 a/b (iterations) | tilec us per K/V block | FA2 us per K/V block |")
    print("|---|---:|---:|---:|---:|")
    for path in paths:
        fk = FlashKernel(runtime, str(path))
        if fk.causal:
            continue  # causal work is not linear in seqlen_k at a fixed grid
        d = fk.head_dim
        batch, heads = 32, 2048 // d
        times = {"tilec": [], "FA2": []}
        for sk in KEYS:
            q = torch.randn(batch, SEQLEN_Q, heads, d, device="cuda", dtype=fk.dtype)
            k, v = (torch.randn(batch, sk, heads, d, device="cuda", dtype=fk.dtype) for _ in range(2))
            o = torch.empty_like(q)
            lse = torch.empty(batch, heads, SEQLEN_Q, device="cuda", dtype=torch.float32)
            scale = d ** -0.5
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
            times["tilec"].append(median_ms(lambda: fk(q, k, v, o, lse, scale), args.iters, 5))
            times["FA2"].append(median_ms(
                lambda: F.scaled_dot_product_attention(qt, kt, vt, scale=scale), args.iters, 5,
                context=lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)))
        blocks = [sk / BLOCK_N for sk in KEYS]
        row = []
        for name in ("tilec", "FA2"):
            a, b = fit(blocks, times[name])
            row.append((a / b, b))
        # The slope is the whole grid's time per K/V block (all programs),
        # comparable between the two kernels.
        print(f"| {fk.name} | {row[0][0]:.2f} | {row[1][0]:.2f} | {row[0][1] * 1e3:.2f} | "
              f"{row[1][1] * 1e3:.2f} |")


if __name__ == "__main__":
    main()
