#!/usr/bin/env python3
"""One public-API call shape, run for a profiler: a warm-up, then --calls
calls (ncu's --launch-skip/--launch-count pick among them). Cases:

  varlen-mixed   flash_attn_varlen_func, 64 causal documents of 100..4000
                 tokens (bench_variants' case), h16 d128 bf16
  varlen-equal   the same with 64 documents of 2048 tokens
  dense-causal   flash_attn_func (16, 2048, 16, 128) causal, for comparison
  decode-gqa-b1  flash_attn_with_kvcache, batch 1, 32/8 heads, kv 32k, d128
  decode-page16  the same with a paged cache of 16-token pages, shuffled
  bwd[-causal][-atomic]  the backward alone (flash_bwd._flash_attn_backward),
                 (4, 4096, 16, 128) bf16; -atomic: the fused dK/dV + atomic
                 dQ kernel (atomic_dq=True) instead of the dq/dkdv pair
  bwd-grid[-causal]  the pair with dK/dV on a 2x4 warp grid (64 queries x
                 128 keys over 8 warps, warps_n 4, Q/dO prefetched);
                 bwd-grid22: 64x64 over 4 warps, 2x2, not prefetched
  bwd-fused-rb[-causal]  the fused kernel (atomic dQ), 32 queries x 64 keys
                 over 4 warps, 2x2 grid, prefetched, with region-barriers
                 (tile-insert-waits), small (1, 1024, 4, 128): for racecheck
  bwd-grid22-rb  the pair, dK/dV 64x64 2x2 prefetched with region-barriers,
                 small (1, 1024, 4, 128)

    ncu --kernel-name regex:flash --launch-skip 2 --launch-count 1 \\
        python3 bench/profile_call.py varlen-mixed
"""
import sys

import torch

import tilec

D, DT = 128, torch.bfloat16


def varlen(lens, h=16):
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(sum(lens), h, D, device="cuda", dtype=DT) for _ in range(3))
    return lambda: tilec.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True)


def decode(page=None, b=1, hq=32, hk=8, kv=32768):
    q = torch.randn(b, 1, hq, D, device="cuda", dtype=DT)
    seqlens = torch.full((b,), kv, dtype=torch.int32, device="cuda")
    if page is None:
        kc, vc = (torch.randn(b, kv, hk, D, device="cuda", dtype=DT) for _ in range(2))
        return lambda: tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens)
    pages = b * kv // page
    kc, vc = (torch.randn(pages, page, hk, D, device="cuda", dtype=DT) for _ in range(2))
    table = torch.randperm(pages, device="cuda").to(torch.int32).reshape(b, kv // page)
    return lambda: tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=table)


def backward(causal=False, atomic=False, b=4, s=4096, h=16):
    from tilec.flash_bwd import _flash_attn_backward

    q, k, v, do = (torch.randn(b, s, h, D, device="cuda", dtype=DT) for _ in range(4))
    out, lse = tilec.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)[:2]
    return lambda: _flash_attn_backward(do, q, k, v, out, lse, causal=causal,
                                        deterministic=not atomic, atomic_dq=atomic)


def backward_grid(dkdv, warps_n, causal=False):
    """The backward with the dK/dV kernel on a 2-D warp grid (bwd2d):
    `dkdv` FlashConfig fields, `warps_n` its dkdv_warps_n."""
    from dataclasses import replace

    from tilec import strategy
    from tilec.strategy import FlashConfig

    key = ("sm_80", D, causal)
    strategy.BWD_TABLE[key] = replace(strategy.flash_bwd_config(head_dim=D, causal=causal),
                                      dkdv=FlashConfig(*dkdv), dkdv_warps_n=warps_n)
    return backward(causal=causal)


def backward_region_barriers(causal=False, atomic=True):
    """bwdfast's region-barriers schedule, small enough for racecheck."""
    from dataclasses import replace

    from tilec import strategy
    from tilec.strategy import FlashConfig

    cfg = strategy.flash_bwd_config(head_dim=D, causal=causal)
    rb = ("row", "region-barriers=true")
    if atomic:
        cfg = replace(cfg, atomic=FlashConfig(32, 64, 4, 2, False, *rb), atomic_warps_n=2)
    else:
        cfg = replace(cfg, dkdv=FlashConfig(64, 64, 4, 2, False, *rb), dkdv_warps_n=2)
    strategy.BWD_TABLE[("sm_80", D, causal)] = cfg
    return backward(causal=causal, atomic=atomic, b=1, s=1024, h=4)


def main():
    case = sys.argv[1] if len(sys.argv) > 1 else "varlen-mixed"
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    gen = torch.Generator().manual_seed(0)
    fn = {
        "varlen-mixed": lambda: varlen(torch.randint(100, 4001, (64,), generator=gen).tolist()),
        "varlen-equal": lambda: varlen([2048] * 64),
        "dense-causal": lambda: (lambda q: lambda: tilec.flash_attn_func(q, q, q, causal=True))(
            torch.randn(16, 2048, 16, D, device="cuda", dtype=DT)),
        "decode-gqa-b1": lambda: decode(),
        "decode-page16": lambda: decode(page=16),
        "bwd": lambda: backward(),
        "bwd-causal": lambda: backward(causal=True),
        "bwd-atomic": lambda: backward(atomic=True),
        "bwd-causal-atomic": lambda: backward(causal=True, atomic=True),
        "bwd-grid": lambda: backward_grid((64, 128, 8, 2, False), 4),
        "bwd-grid-causal": lambda: backward_grid((64, 128, 8, 2, False), 4, causal=True),
        "bwd-grid22": lambda: backward_grid((64, 64, 4, 1, False), 2),
        "bwd-fused-rb": lambda: backward_region_barriers(),
        "bwd-fused-rb-causal": lambda: backward_region_barriers(causal=True),
        "bwd-grid22-rb": lambda: backward_region_barriers(atomic=False),
        # BWD_TABLE's own fused kernel, small enough for racecheck.
        "bwd-table-fused": lambda: backward(atomic=True, b=1, s=1024, h=4),
        "bwd-table-fused-causal": lambda: backward(causal=True, atomic=True, b=1, s=1024, h=4),
    }[case]()
    fn()
    torch.cuda.synchronize()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    print(f"{case}: {calls} calls done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
