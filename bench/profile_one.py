#!/usr/bin/env python3
"""Runs one flash-attention forward of tilec and of torch's FA2 (SDPA FLASH)
on the same inputs, for a profiler to attach to (bench/profile.sh runs it
under Nsight Compute). Each runs once to warm up, then once more.

    python3 bench/profile_one.py --artifacts build/artifacts --kernel flash_fwd_f16_d128 --seqlen 2048
"""
import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_flash import FlashKernel, load_runtime  # noqa: E402

TOKENS, HIDDEN = 16384, 2048  # the benchmark's shapes (bench_flash.py)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifacts", default="build/artifacts")
    parser.add_argument("--kernel", default="flash_fwd_f16_d128")
    parser.add_argument("--seqlen", type=int, default=2048)
    args = parser.parse_args()
    runtime = load_runtime()
    fk = FlashKernel(runtime, str(Path(args.artifacts) / f"{args.kernel}.json"))
    d, s = fk.head_dim, args.seqlen
    batch, heads = TOKENS // s, HIDDEN // d
    q, k, v = (torch.randn(batch, s, heads, d, device="cuda", dtype=fk.dtype) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(batch, heads, s, device="cuda", dtype=torch.float32)
    scale = d ** -0.5
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    for _ in range(2):
        fk(q, k, v, o, lse, scale)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(qt, kt, vt, is_causal=fk.causal, scale=scale)
    torch.cuda.synchronize()
    print(f"ran {fk.name} and FA2 at batch {batch}, heads {heads}, seqlen {s}")


if __name__ == "__main__":
    main()
