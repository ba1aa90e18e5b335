#!/usr/bin/env python3
"""Where does varlen lose time? (issue 15: 64 documents of 100..4000 tokens ran at
half of dense-causal speed). Times, on the same GPU, bf16 d128 16 heads causal:
  dense      flash_attn_func on (64, L, 16, 128)
  varlen=    flash_attn_varlen_func on the same 64 sequences of L tokens each, packed
  varlen~    64 sequences of lengths uniform in 100..4000 (the issue's case), packed
  dense max  flash_attn_func on (64, 4000, 16, 128) scaled by the work ratio
Each the median of 30 CUDA-event-timed calls after warm-up; TFLOP/s over visible scores.
"""
import torch

import tilec
from bench_flash import median_ms

H, D, DT = 16, 128, torch.bfloat16


def ms(fn, iters=30):
    """Median ms per call, the GPU idle before each (host work counts, as users see it)."""
    return median_ms(fn, iters, 3, busy=False)


def flops(lens):
    return 4 * D * H * sum(n * (n + 1) // 2 for n in lens)


def varlen(lens):
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(sum(lens), H, D, device="cuda", dtype=DT) for _ in range(3))
    return lambda: tilec.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True)


for L in (512, 2048):
    q, k, v = (torch.randn(64, L, H, D, device="cuda", dtype=DT) for _ in range(3))
    t_dense = ms(lambda: tilec.flash_attn_func(q, k, v, causal=True))
    t_var = ms(varlen([L] * 64))
    f = flops([L] * 64)
    print(f"L={L}: dense {t_dense:.3f} ms ({f / t_dense / 1e9:.0f}) | varlen equal {t_var:.3f} ms "
          f"({f / t_var / 1e9:.0f})")
gen = torch.Generator().manual_seed(0)
lens = torch.randint(100, 4001, (64,), generator=gen).tolist()
t = ms(varlen(lens))
print(f"varlen uniform 100..4000: {t:.3f} ms ({flops(lens) / t / 1e9:.0f} TFLOP/s)")
srt = sorted(lens, reverse=True)
t = ms(varlen(srt))
print(f"varlen same lengths sorted longest first: {t:.3f} ms ({flops(srt) / t / 1e9:.0f} TFLOP/s)")
