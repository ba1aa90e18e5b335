#!/usr/bin/env python3
"""GPU check of tile-skip-warp-blocks (the warp-blocks lowering option):
flash_attn_func's window kernels with the option off, on (the default for
causal windows), with full-warps and without the pruned tests, each against
a float32 reference with the window's mask, on shapes chosen to catch a wrong
skip: windows narrower than a warp's rows and than a block, widths that are
not multiples of 16, seqlen_q != seqlen_k either way, causal and (l, r)
windows. Prints one line per case and option; '!' marks a mismatch; exits 1
if any.

    python3 bench/check_warp_blocks.py [--head-dims 64,128]
"""
import argparse
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "python")]

CASES = [  # (batch, seqlen_q, seqlen_k, heads, window_left, window_right, causal)
    (2, 2048, 2048, 4, 1024, 0, True),
    (1, 1000, 1000, 2, 20, 0, True),     # narrower than a warp's 32 rows
    (1, 777, 777, 2, 8, 0, True),        # narrower than a block
    (1, 1024, 1024, 2, 100, 0, True),    # not a multiple of 16
    (1, 300, 1100, 2, 77, 0, True),      # seqlen_q < seqlen_k (bottom right)
    (1, 1100, 300, 2, 77, 0, True),      # seqlen_q > seqlen_k: leading rows see nothing
    (1, 1000, 1000, 2, 64, 64, False),   # (w, w)
    (1, 900, 600, 2, 19, 45, False),
]
OPTIONS = ["warp-blocks=false", "", "warp-blocks=true full-warps=true",
           "warp-blocks=true warp-prune-tests=false", "warp-blocks=true"]


def reference(q, k, v, left, right, causal):
    b, sq, h, d = q.shape
    sk = k.shape[1]
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    if causal:
        right = 0
    vis = (j >= i + sk - sq - left) & (j <= i + sk - sq + right)
    s = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()) / d ** 0.5
    s = s.masked_fill(~vis, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, v.float())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--head-dims", default="64,128")
    args = p.parse_args()
    import tilec
    from tilec import flash_attn as fa
    from tilec import strategy

    bad = 0
    torch.manual_seed(0)
    for d in (int(x) for x in args.head_dims.split(",")):
        for b, sq, sk, h, left, right, causal in CASES:
            q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(b, sk, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            ref = reference(q, k, v, left, right, causal)
            for opts in OPTIONS:
                base = strategy.TABLE.get(("sm_80", d, causal), strategy.DEFAULT)
                strategy.VARIANT_TABLE[("sm_80", d)] = strategy.FlashConfig(
                    base.block_m, base.block_n, base.num_warps, base.num_stages, base.smem_epilogue,
                    base.copy_bounds, opts)
                fa._KERNELS.clear()
                fa._GPU_LAUNCHES.clear()
                try:
                    out = tilec.flash_attn_func(q, k, v, causal=causal, window_size=(left, right))
                    err = ((out.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
                    finite = bool(torch.isfinite(out).all())
                    fail = not finite or err > 2e-2
                    msg = f"rel err {err:.1e}" + ("" if finite else " non-finite")
                except Exception as e:  # a compile or launch failure is a failure
                    fail, msg = True, f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                bad += fail
                print(f"d{d} b{b} sq{sq} sk{sk} window ({left},{right}) causal={causal} "
                      f"[{opts or 'default'}]: {msg}" + (" !" if fail else ""), flush=True)
    strategy.VARIANT_TABLE.clear()
    print(f"check_warp_blocks: {bad} failures")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
