#!/usr/bin/env python3
"""The fused backward's dQ conversion on a GPU: kernels/flash_bwd.py's
flash_bwd_convert_dq (the blocked f32 dq_accum, (batch, heads, blocks, R,
BLOCK_M), back to dq (batch, seqlen_q, heads, head_dim) times scale) against
the torch permute-and-multiply it replaced and a plain copy of as many bytes
(the bandwidth ceiling), per head dim at the fused kernel's BLOCK_M and R.
Each kernel's output is checked bitwise against torch's. --variants also
times other tile shapes (QCOLS, CHUNK, NUM_WARPS); --e2e the whole fused
backward (atomic_dq=True) with the kernel and with the torch conversion.

    python3 bench/bench_convert_dq.py [--variants] [--e2e] [--shape 4,4096,16]
"""

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_flash import median_ms  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

from tilec import flash_bwd as fb  # noqa: E402
from tilec import kernel_files, strategy  # noqa: E402
from tilec import language as tl  # noqa: E402


def unblock(dq_accum, block):
    """dq_accum's logical (batch, heads, blocks, R, BLOCK_M) dQᵀ tiles from its
    memory: row-major tiles, or tiles of `block` (b0, b1) row-major blocks
    (kernels/flash_bwd.py's DQ_ACCUM_BLOCK)."""
    if block is None:
        return dq_accum
    b, h, n, r, m = dq_accum.shape
    b0, b1 = block
    return (dq_accum.view(b, h, n, r // b0, m // b1, b0, b1).permute(0, 1, 2, 3, 5, 4, 6)
            .reshape(b, h, n, r, m))


def torch_convert(dq_accum, dq, scale):
    """The torch conversion flash_bwd_convert_dq replaced (row-major tiles)."""
    b, sq, hq, d = dq.shape
    _, _, nblk, _, bm = dq_accum.shape
    full = torch.empty((b, nblk * bm, hq, d), dtype=dq.dtype, device=dq.device)
    torch.mul(dq_accum.permute(0, 2, 4, 1, 3)[..., :d], scale, out=full.view(b, nblk, bm, hq, d))
    return full[:, :sq]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="4,4096,16", help="batch,seqlen_q,heads")
    p.add_argument("--head-dims", default="64,96,128,192,256")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--variants", action="store_true")
    p.add_argument("--e2e", action="store_true")
    p.add_argument("--iters", type=int, default=50)
    args = p.parse_args()
    b, sq, hq = (int(x) for x in args.shape.split(","))
    dtype = getattr(torch, args.dtype)
    mod = kernel_files.load("flash_bwd")
    block = getattr(mod, "DQ_ACCUM_BLOCK", None)
    print(f"dq_accum tiles: {'row-major' if block is None else f'{block} blocks'}")
    x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x), args.iters, 5)
    print(f"copy 256 MiB: {ms * 1e3:.0f} us, {2 * x.numel() / ms / 1e9:.2f} TB/s")
    for d in (int(s) for s in args.head_dims.split(",")):
        cfg = strategy.flash_bwd_config(head_dim=d, causal=False)
        bm, rows = cfg.atomic.block_m, fb._dq_accum_rows(cfg, d)
        nblk = -(-sq // bm)
        acc = torch.randn((b, hq, nblk, rows, bm), dtype=torch.float32, device="cuda")
        dq = torch.empty((b, sq, hq, d), dtype=dtype, device="cuda")
        scale = 1 / math.sqrt(d)
        nbytes = acc.numel() * 4 + dq.numel() * dq.element_size()
        ref = torch_convert(unblock(acc, block), dq, scale)
        ms = median_ms(lambda: torch_convert(acc, dq, scale), args.iters, 5)
        print(f"d{d} R{rows} BLOCK_M {bm}, {nbytes / 1e6:.0f} MB: torch {ms * 1e3:.0f} us "
              f"{nbytes / ms / 1e9:.2f} TB/s")
        runs = [("default", {})]
        if args.variants:
            runs += [(f"QCOLS={q} CHUNK={c} NUM_WARPS={w}", dict(QCOLS=q, CHUNK=c, NUM_WARPS=w))
                     for q, c, w in ((8, 256, 4), (8, 256, 8), (16, 256, 4), (4, 256, 4),
                                     (min(bm, 64), 64, 4))]
        for label, kw in runs:
            kernel = fb.convert_dq_kernel(args.dtype, d, rows, bm)
            if kw:
                kernel = mod.flash_bwd_convert_dq.specialize(
                    DTYPE=tl.bfloat16 if dtype == torch.bfloat16 else tl.float16, HEAD_DIM=d,
                    R=rows, BLOCK_M=bm, **kw)
            sa = acc.stride()
            kargs = (acc, dq, sq, hq, b, sa[0], sa[1], *dq.stride()[:3], scale)
            dq.fill_(float("nan"))
            kernel(*kargs)
            ok = torch.equal(dq, ref)
            ms = median_ms(lambda: kernel(*kargs), args.iters, 5)
            print(f"   {label:32s} {ms * 1e3:6.0f} us {nbytes / ms / 1e9:5.2f} TB/s"
                  f"{'' if ok else '  MISMATCH'}")
    if args.e2e:
        e2e(b, sq, hq, dtype, args, block)


def e2e(b, sq, hq, dtype, args, block):
    """The whole fused backward with the kernel and with the torch conversion
    (its time; on row-major tiles), and the kernel's dq against torch's
    conversion of the same (unblocked) accumulator, bitwise."""
    saved = fb._dq_from_accum
    seen = {}

    def with_torch(dq_accum, dq, varlen, scale, dtype, on_gpu):
        return torch_convert(dq_accum, dq, scale)

    def checked(dq_accum, dq, varlen, scale, dtype, on_gpu):
        seen["ref"] = torch_convert(unblock(dq_accum, block), dq, scale)
        return saved(dq_accum, dq, varlen, scale, dtype, on_gpu)

    for d in (64, 128, 256):
        q, k, v, dout = (torch.randn(b, sq, hq, d, dtype=dtype, device="cuda") for _ in range(4))
        from tilec.flash_attn import _flash_attn_forward

        out, lse = _flash_attn_forward(q, k, v, None, False)[:2]
        times = {}
        for name, fn in (("kernel", saved), ("torch", with_torch), ("check", checked)):
            fb._dq_from_accum = fn
            try:
                call = lambda: fb._flash_attn_backward(dout, q, k, v, out, lse, None, False,  # noqa: E731
                                                       deterministic=False, atomic_dq=True)
                if name == "check":
                    same = torch.equal(call()[0], seen["ref"])
                else:
                    times[name] = median_ms(call, 20, 3)
            finally:
                fb._dq_from_accum = saved
        print(f"e2e d{d} fused backward: kernel conversion {times['kernel']:.3f} ms, torch "
              f"{times['torch']:.3f} ms ({100 * (1 - times['kernel'] / times['torch']):.1f}% less)"
              f"{', dq bitwise as torch' if same else ', dq MISMATCH'}")


if __name__ == "__main__":
    main()
