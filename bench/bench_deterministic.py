#!/usr/bin/env python3
"""deterministic=True's forms against the default, by sequence length: the
fused kernel in turns (ORDERED_DQ: one launch, a head's key blocks adding
dQ one after another), its serial launches (flash_bwd.serial_schedule: S
dq_accum slices, a launch per S key blocks) and the pair (atomic_dq=False), with
deterministic=False (the fused kernel, atomics in no order) as the
reference. H200-style 16k tokens (batch 16384 / seqlen, heads 2048 /
head_dim), bf16, TFLOP/s of the backward alone (2.5x forward FLOPs,
halved for causal), median of CUDA-event-timed calls with the GPU kept
busy. --profile adds, per row, the serial call's device time by kernel
(torch.profiler: the fused launches, the slices' zeroing and sum, the
conversion).

    python3 bench/bench_deterministic.py [--head-dims 64,128] [--seqlens 1024,4096,16384]
        [--causal 0,1] [--profile]
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from bench_flash import kernel_table, median_ms  # noqa: E402

TOKENS, HIDDEN = 16384, 2048


def ints(text):
    return [int(x) for x in text.split(",") if x]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--head-dims", type=ints, default=[64, 128])
    p.add_argument("--seqlens", type=ints, default=[1024, 2048, 4096, 8192, 16384])
    p.add_argument("--causal", type=ints, default=[0, 1])
    p.add_argument("--iters", type=int, default=15)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("error: needs a CUDA GPU")
    import tilec
    from tilec import flash_bwd, runtime_support, strategy

    sms = runtime_support.sm_count(0)
    print("| d | causal | seqlen | atomic | ordered | serial | pair | ordered/atomic | serial/atomic | "
          "pair/atomic | S | launches |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for d in args.head_dims:
        for causal in map(bool, args.causal):
            for s in args.seqlens:
                b, h = max(1, TOKENS // s), HIDDEN // d
                q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
                                 for _ in range(4))
                scale = d ** -0.5
                out, lse = tilec.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal,
                                                 return_lse=True)
                flops = 2.5 * 4 * b * h * s * s * d / (2 if causal else 1)
                forms = {"atomic": dict(deterministic=False, atomic_dq=True),
                         "ordered": dict(deterministic=True, atomic_dq=True,
                                         deterministic_form="ordered"),
                         "serial": dict(deterministic=True, atomic_dq=True,
                                        deterministic_form="serial"),
                         "pair": dict(deterministic=True, atomic_dq=False)}
                tf = {}
                for name, kw in forms.items():
                    def call(kw=kw):
                        flash_bwd._flash_attn_backward(dout, q, k, v, out, lse, scale, causal, **kw)
                    tf[name] = flops / (median_ms(call, args.iters, 3) * 1e-3) / 1e12
                cfg = strategy.flash_bwd_config(head_dim=d, causal=causal)
                a = cfg.atomic
                blocks = -(-s // a.block_n)
                splits = flash_bwd.serial_schedule(
                    blocks, b * h * cfg.atomic_split, sms, a.num_warps,
                    b * h * -(-s // a.block_m) * flash_bwd._dq_accum_rows(cfg, d) * a.block_m * 4)
                print(f"| {d} | {'yes' if causal else 'no'} | {s} | {tf['atomic']:.1f} | "
                      f"{tf['ordered']:.1f} | {tf['serial']:.1f} | {tf['pair']:.1f} | "
                      f"{tf['ordered'] / tf['atomic']:.2f}x | {tf['serial'] / tf['atomic']:.2f}x | "
                      f"{tf['pair'] / tf['atomic']:.2f}x | {splits} | {-(-blocks // splits)} |",
                      flush=True)
                if args.profile:
                    kw = forms["serial"]
                    table = kernel_table(lambda: flash_bwd._flash_attn_backward(
                        dout, q, k, v, out, lse, scale, causal, **kw))
                    print("  serial call, µs by kernel: " + "; ".join(
                        f"{name[:60]} {us:.0f}" for name, us in
                        sorted(table.items(), key=lambda x: -x[1])))
                del q, k, v, dout, out, lse
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
