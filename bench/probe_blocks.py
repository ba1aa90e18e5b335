#!/usr/bin/env python3
"""Is the small-call miss at b1 h24 s3000 d128 (0.92x FA2, run 18) wave
quantization? 24 heads x 24 row blocks of 128 = 576 programs at 2 per SM on
132 SMs is 2.2 waves. Times flash_attn_func with the table's 128-row blocks
and with 64-row blocks (more, shorter programs: 1,128 of them, finer waves),
next to SDPA FLASH (FA2), on shapes from the small-call table. Median of 50
CUDA-event-timed calls after warm-up.
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tilec
from bench_flash import median_ms
from tilec import flash_attn as fa
from tilec import strategy
from tilec.jit import LaunchCache

SHAPES = [(1, 3000, 24, 128, False), (1, 3000, 24, 128, True), (8, 1024, 32, 128, True),
          (2, 8192, 16, 128, True), (1, 2048, 16, 128, False), (4, 4096, 16, 64, True)]


def ms(fn, iters=50):
    """Median ms per call, the GPU idle before each (host work counts, as users see it)."""
    return median_ms(fn, iters, 5, busy=False)


table = strategy.flash_fwd_config
results = {}
for label, override in (("m128", None), ("m64", strategy.FlashConfig(64, 64, 4, 2, False))):
    strategy.flash_fwd_config = table if override is None else (lambda *a, **k: override)
    fa._KERNELS.clear()
    fa._GPU_LAUNCHES = LaunchCache(fa._build_gpu_launch)
    for b, s, h, d, causal in SHAPES:
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.float16) for _ in range(3))
        results[(b, s, h, d, causal, label)] = ms(lambda: tilec.flash_attn_func(q, k, v, causal=causal))
        if label == "m128":
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                results[(b, s, h, d, causal, "FA2")] = ms(
                    lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
print("| shape | causal | tilec m128 ms | tilec m64 ms | FA2 ms | m128/FA2 | m64/FA2 |")
print("|---|---|---:|---:|---:|---:|---:|")
for b, s, h, d, causal in SHAPES:
    r = [results[(b, s, h, d, causal, x)] for x in ("m128", "m64", "FA2")]
    print(f"| b{b} s{s} h{h} d{d} | {causal} | {r[0]:.3f} | {r[1]:.3f} | {r[2]:.3f} | "
          f"{r[2] / r[0]:.2f} | {r[2] / r[1]:.2f} |")
