#!/usr/bin/env python3
"""Where a backward call's time goes: every CUDA kernel (and memset/copy) one
backward launches, tilec's (flash_attn_func's autograd path:
_flash_attn_backward with deterministic=False, as training runs it) next to
torch SDPA's FLASH (FA2) and CUDNN, from torch.profiler's device timeline,
with each call's wall time (CUDA events, GPU kept busy) beside the sum of
its kernels. On a GPU host:

    python3 bench/profile_bwd.py [--seqlen 4096] [--head-dim 128] [--causal] [--dtype bf16]
    python3 bench/profile_bwd.py --once tilec|fa2   # one warm call for ncu to attach to

At 16k tokens (batch = 16384 / seqlen, heads = 2048 / head_dim), as
bench_bwd.py. A kernel that is not the main one but costs more than a few
percent of the call is the finding this script is for.
"""
import argparse
import sys
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from bench_bwd import sdpa_runs  # noqa: E402
from bench_flash import kernel_table, median_ms  # noqa: E402


def calls(args):
    import tilec
    from tilec.flash_bwd import _flash_attn_backward

    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    d, s = args.head_dim, args.seqlen
    b, h = 16384 // s, 2048 // d
    torch.manual_seed(0)
    q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(4))
    scale = d ** -0.5
    out, lse = tilec.flash_attn_func(q, k, v, softmax_scale=scale, causal=args.causal,
                                     return_lse=True)
    fns = {"tilec": lambda: _flash_attn_backward(dout, q, k, v, out, lse, scale, args.causal,
                                                 deterministic=False)}
    for label, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        runs = sdpa_runs(backend, q, k, v, dout, scale, args.causal)
        if runs is not None:
            fns[label] = runs[0]
    flops = 2.5 * 4 * b * h * s * s * d / (2 if args.causal else 1)
    return fns, flops, (b, s, h, d)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "f16"))
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--once", choices=("tilec", "fa2", "cudnn"), default=None,
                   help="run that backward twice (warm-up, then the one to profile) and exit")
    args = p.parse_args()
    fns, flops, shape = calls(args)
    if args.once:
        fns[args.once]()
        torch.cuda.synchronize()
        fns[args.once]()
        torch.cuda.synchronize()
        return
    print(f"backward, {args.dtype}, (b, s, h, d) = {shape}, causal={args.causal}")
    for label, fn in fns.items():
        ms = median_ms(fn, args.iters, 3)
        table = kernel_table(fn)
        total = sum(table.values())
        print(f"\n{label}: call {ms * 1e3:.0f} µs ({flops / ms / 1e9:.0f} TFLOP/s), kernels {total:.0f} µs")
        for name, us in sorted(table.items(), key=lambda kv: -kv[1]):
            print(f"  {us:9.1f} µs {100 * us / total:5.1f}%  {name[:110]}")


if __name__ == "__main__":
    main()
