#!/usr/bin/env python3
"""Tune strategy.BWD_TABLE on a GPU host: time the backward under each
candidate configuration of its two forms,

  pair    the deterministic default: flash_bwd_dq then flash_bwd_dkdv (7
          matmuls per block pair). The dq kernel's blocks are varied with
          dkdv at BWD_DEFAULT's, dkdv's with dq at BWD_DEFAULT's, then the
          best of each are timed together ("pair best").
  fused   FA2's single kernel (atomic_dq=True, deterministic=False: dK/dV
          plus dQ added with tile.atomic_add, 5 matmuls)

at d64/d128 (--head-dims: any; a candidate's head dims name the tile
width D = max(16, next_power_of_2(head_dim)) it applies to, so d96 takes
d128's and d192 d256's), causal or not, 2k and 16k tokens per batch (bench_bwd's shapes:
batch = 16384 / seqlen, heads = 2048 / head_dim), bf16, beside torch SDPA's
FLASH (FA2) backward in the same run; then forward+backward through
flash_attn_func's autograd with the row's winners, deterministic=False (the
fused kernel if it won) and True (the pair), beside FA2's. Kernels compile here through the CLI
bundle (TILEC_CLI, as bench/gpu.sh sets it), all candidates at once in
threads; every call is timed as users call it, through
tilec.flash_bwd._flash_attn_backward (what autograd's backward calls), the
median of CUDA-event-timed calls (bench_flash.median_ms). Gradients are
checked against FA2's (relative error < 1e-2); a wrong one prints '!'.
TFLOP/s by flash_attn's convention (backward = 2.5x the forward's
4·b·h·s²·d, halved when causal).

    python3 bench/tune_bwd.py [--head-dims 64,128] [--seqlens 2048,16384] [--iters 20]
    python3 bench/tune_bwd.py --device cpu --quick     # smoke test, CPU runner, < 1 min
    python3 bench/tune_bwd.py --grid       # the table pair beside DKDV_GRID (dkdv warp grids)
    python3 bench/tune_bwd.py --head-dims 32,256 --seqlens 4096 --list   # the columns, no GPU

--device cpu runs the same candidates' kernels on the CPU runner at a tiny
shape and checks them against a float64 reference (the times there mean
nothing). The last lines print the winners as BWD_TABLE entries: copy them
into python/tilec/strategy.py and record the run in bench/RESULTS.md.
"""

import argparse
import concurrent.futures
import math
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "python"), str(REPO / "bench")]

from tilec.strategy import tile_width  # noqa: E402  (D, the width a candidate's head dims name)

TOKENS = 16384
HIDDEN = 2048

# FlashConfig fields: (block_m, block_n, num_warps, num_stages, smem_epilogue),
# each with the head dims it is tried at (ptxas sm_90a/sm_80 spills, f16,
# 2026-12-01: the others spill hundreds of bytes or do not compile: 8 warps
# cannot split the fused kernel's 64 dQᵀ rows at d64).
# An optional third field is the kernel's SPLIT_D (FlashBwdConfig.dq_split,
# dkdv_split, atomic_split: programs per block, each 1/split of the head_dim
# columns; default 1).
# dq: BLOCK_M query rows per program, loop over BLOCK_N keys.
DQ = [
    ((64, 64, 4, 2, False), (64, 128)),   # BWD_DEFAULT
    ((64, 32, 4, 2, False), (64, 128)),
    ((128, 64, 8, 2, False), (64, 128)),
    ((128, 32, 8, 2, False), (64, 128)),
    ((128, 32, 4, 2, False), (64,)),      # 32 rows per warp: half the B-operand traffic
    ((64, 128, 4, 2, False), (64,)),      # run 2's d64 winner beside dkdv 64x64
    # bwdwide (ptxas sm_90a PTX -> sm_90a, bf16, non-causal / causal spills,
    # shared memory; unmeasured): D = 32 and 256
    ((128, 64, 4, 2, False), (32,)),      # 32 query rows per warp
    ((128, 32, 8, 2, False), (256,)),     # 0 / -, 192 KB (over sm_80's 163: sm_90a only)
]
# dkdv and fused: BLOCK_N key rows per program, loop over BLOCK_M queries.
# dkdv at num_stages 1: the schedule these were tuned with (Q and dO not
# prefetched; DKDV_GRID has the prefetched num_stages 2).
DKDV = [
    ((32, 64, 4, 1, False), (64, 128)),   # BWD_DEFAULT
    ((16, 64, 4, 1, False), (64, 128)),
    ((64, 64, 4, 1, False), (64, 128)),
    ((16, 128, 8, 1, False), (64, 128)),
    ((32, 128, 8, 1, False), (64, 128)),
    ((16, 128, 4, 1, False), (64,)),      # 32 key rows per warp
    ((32, 128, 4, 1, False), (64,)),
    # bwdwide: BWD_WIDE's dK/dV (head_dim split over 2 programs): 0 / -, 112 KB
    ((16, 64, 4, 2, False), (256,), 2),
    ((32, 128, 4, 1, False), (32,)),      # the d64 table's: 0 / -, 4 KB
]
FUSED = [
    ((16, 64, 4, 2, False), (64, 128)),   # BWD_DEFAULT.atomic
    ((32, 64, 4, 2, False), (64, 128)),
    ((64, 64, 4, 2, False), (64,)),
    ((16, 128, 4, 2, False), (64,)),      # 32 key rows per warp
    ((16, 128, 8, 2, False), (128,)),
    ((32, 128, 8, 2, False), (128,)),
    # 650 bytes of spills, yet 181 TFLOP/s in run 2; num_stages 1 since Q and dO are
    # prefetched across the dQ atomics (stages 2: 180 KB of shared, over sm_80's 163)
    ((64, 128, 8, 1, False), (128,)),
    # bwdwide: BWD_WIDE's blocks with the head_dim split over 2 programs
    # (each adds its half of dQᵀ): 0 / -, 106 KB; 7 matmuls' HMMAs per block
    # pair instead of 5
    ((16, 64, 4, 1, False), (256,), 2),
]
# dkdv with a 2-D warp grid (FlashBwdConfig.dkdv_warps_n, the kernel's
# WARPS_N): (config, warps_n, head dims). num_stages 2 prefetches Q and dO
# one iteration ahead (tile-pipeline's ring, also for loads two dots read);
# num_stages 1 is the schedule every dkdv kernel had before (its loads, read
# by two dots each, were not prefetched). ptxas spills, stores+loads in
# bytes, sm_90 (what the H200 runs), bf16, non-causal / causal, 2026-12-01:
DKDV_GRID = [
    ((64, 64, 4, 2, False), 1, (128,)),       # d128 table blocks, prefetched: 152 / 340
    ((64, 64, 4, 1, False), 2, (128,)),       # 2x2 grid, 32x32 of Sᵀ per warp: 204 / 204
    ((64, 64, 4, 2, False), 2, (128,)),       # 224 / 252
    ((64, 128, 8, 1, False), 4, (128,)),      # FA2's d128 blocks, 2x4 grid: 16 / -
    ((64, 128, 8, 2, False), 4, (128,)),      # 0 / 196
    ((64, 128, 8, 2, False), 2, (128,)),      # 4x2 (FA2's dK/dV atom layout): 224 / 256
    ((32, 64, 4, 2, False), 2, (128,)),       # 0 / 0
    ((32, 128, 4, 2, False), 1, (64,)),       # d64 table blocks, prefetched: 108 / -
    ((64, 64, 4, 1, False), 2, (64,)),        # 0 / 0
    ((64, 64, 4, 2, False), 2, (64,)),        # 0 / -
    ((64, 128, 8, 1, False), 2, (64,)),       # 0 / 0
    ((64, 128, 8, 2, False), 2, (64,)),       # 0 / 0
    ((32, 128, 4, 2, False), 2, (64,)),       # 60 / -
    # tile-insert-waits region-barriers: no WAR barrier before the Pᵀ and dSᵀ
    # writes (5 -> 3 bar.sync per iteration, SASS otherwise the same)
    ((64, 64, 4, 2, False, "row", "region-barriers=true"), 2, (128,)),  # 224 / 252
    ((32, 64, 4, 2, False, "row", "region-barriers=true"), 2, (128,)),  # 0 / 0
    # bwdspill: one buffer per tile, Q and dO prefetched after their last
    # reader (tile-pipeline after-last-use): FA2's d128 blocks without the
    # ring's spills (s2 above: 0 / 196; s1 unprefetched: 16 / -), 4 bar.sync
    ((64, 128, 8, 1, False, "row", "region-barriers=true prefetch-after-last-use=true"), 4,
     (128,)),                                                             # 0 / 0
    # bwdwide, unmeasured (sm_90a PTX -> sm_90a spills non-causal / causal,
    # shared memory): D = 256 at FA2's d256 blocks (64 x 64, 8 warps, 2 x 4),
    # unsplit (BWD_WIDE splits the head_dim over 2 programs)
    ((64, 64, 8, 1, False, "row", "region-barriers=true"), 4, (256,)),   # 0 / 4+4, 144 KB
    ((64, 64, 8, 2, False, "row", "region-barriers=true"), 4, (256,)),   # 0 / -, 208 KB (sm_90a)
    # D = 32
    ((64, 128, 8, 2, False, "row", "region-barriers=true"), 2, (32,)),   # 0 / -, 64 KB
    ((128, 128, 8, 2, False, "row", "region-barriers=true"), 4, (32,)),  # 0 / -, 112 KB
]
# The fused kernel (atomic dQ, 5 matmuls) with its four dK/dV dots on a warp
# grid (FlashBwdConfig.atomic_warps_n; the dQᵀ dot stays split-Q); sm_90
# spills (stores+loads bytes), non-causal, 2026-12-01. Since bwdfast the
# num_stages 2 kernels prefetch Q and dO across the dQ atomics (before, s1 and
# s2 were one kernel) and write dSᵀ to shared memory once; RB =
# region-barriers (tile-insert-waits: 5 -> 3 bar.sync per iteration).
RB = ("row", "region-barriers=true")
ALU = ("row", "region-barriers=true prefetch-after-last-use=true")
# Spills non-causal / causal (bytes, sm_90, bwdfast head):
FUSED_GRID = [
    ((16, 64, 4, 2, False), 2, (128,)),       # 0 / 0
    ((32, 64, 4, 2, False), 2, (128,)),       # 124 / 0 (run 8's best, 207, unprefetched then)
    ((32, 64, 4, 1, False), 2, (128,)),       # 168 / 112 (unprefetched, as run 8's s1 and s2)
    ((32, 128, 8, 2, False), 4, (128,)),      # 0 / 20 (run 8: 160, unprefetched, 5 more bar.sync)
    ((32, 128, 8, 2, False), 2, (128,)),      # 164 / 48
    ((16, 64, 4, 2, False, *RB), 2, (128,)),  # 0 / 0
    ((32, 64, 4, 2, False, *RB), 2, (128,)),  # 124 / 0
    ((32, 128, 8, 2, False, *RB), 4, (128,)), # 0 / 20
    ((64, 128, 8, 1, False, *RB), 8, (128,)), # 188 / 288 (FA2's blocks; 1 CTA/SM, unprefetched)
    ((64, 128, 8, 1, False, *RB), 4, (128,)), # 560 / 576
    ((64, 64, 4, 2, False), 2, (64,)),        # 0
    ((64, 64, 4, 1, False), 2, (64,)),
    ((64, 64, 4, 1, False), 1, (64,)),        # run 3's d64 fused winner, unprefetched
    ((64, 64, 4, 2, False, *RB), 2, (64,)),
    # bwdspill: Kᵀ (dQᵀ's A) read transposed from K's shared tile instead of
    # a register copy held through the loop (FA2's blocks above: 240+320 ->
    # 16+16); a 4th field is the dQᵀ dot's own warps_n (atomic_dq_warps_n;
    # 2: a 4 x 2 grid, 32 head-dim rows x 32 queries per warp, FA2's dQ atom
    # layout: 0 / 80, 868 SASS instructions per iteration instead of 915).
    ((64, 128, 8, 1, False, *RB), 4, (128,), 2),  # 0 / 80
    ((64, 128, 8, 2, False, *RB), 4, (128,)),     # 108 / - (s2: 160 KB, fits sm_80's 163)
    ((64, 128, 8, 2, False, *RB), 4, (128,), 2),  # 128 / 208
    ((64, 128, 8, 1, False, *RB), 8, (128,), 2),  # 80 / -
    ((32, 64, 4, 2, False, *RB), 2, (128,), 2),   # 24 / -
    # d64, FA2's d64 blocks (128 x 128, 8 warps; its dQ atom layout 4 x 2 of
    # 128 queries x 64: here dQᵀ 64 x 128 on 2 x 4) and 64 x 128 prefetched
    ((128, 128, 8, 1, False, *RB), 4, (64,), 4),  # 0 / -
    ((128, 128, 8, 2, False, *RB), 4, (64,), 4),  # 128 / 16
    ((64, 128, 8, 2, False, *RB), 4, (64,), 2),   # 0 / -
    # stages 1 with Q and dO prefetched into their own buffer after their
    # last reader (tile-pipeline after-last-use; 4 bar.sync per iteration)
    ((64, 128, 8, 1, False, *ALU), 4, (128,), 2),  # 48 / 48, 1-2 LDL per iteration
    ((32, 64, 4, 1, False, *ALU), 2, (128,), 2),   # 56 / -, none in the loops
    ((128, 128, 8, 1, False, *ALU), 4, (64,), 4),  # 72 / 120, 1-6 LDL
    # bwdwide, unmeasured: D = 256 (head_dim 192 and 256) at FA2's d256
    # blocks, 64 queries x 64 keys over 8 warps (its AtomLayoutMSdP 4, NdKV 2,
    # MdQ 2: dK/dV dots on 2 x 4, dQᵀ on 4 x 2), unsplit: 5 matmuls' HMMAs
    # (320 per iteration), 144 KB (fits sm_80's 163). sm_90a PTX -> sm_90a,
    # spills non-causal / causal bytes (stores + loads), SASS per iteration:
    ((64, 64, 8, 1, False, *RB), 4, (256,), 2),   # 24+28 / 8+8, 800 (LDL 2-4)
    ((64, 64, 8, 1, False, *RB), 2, (256,), 2),   # 32+44 / 0, 873 (LDSM 192 vs 168)
    ((64, 64, 8, 2, False, *RB), 4, (256,), 2),   # 52+80 / -, 208 KB (sm_90a only)
    # D = 32: dQᵀ's 32 rows need a grid (atomic_dq_warps_n 2 at 4 warps, 4
    # at 8; split-Q is refused, atomic_dq_fits). FA2's d32 blocks are 128 x
    # 128 over 8 warps. All spill-free on sm_90a:
    ((128, 128, 8, 2, False, *RB), 2, (32,), 4),  # 0 / 0, 112 KB
    ((128, 128, 8, 2, False, *RB), 4, (32,), 4),  # 0 / -, 112 KB
    ((64, 128, 8, 2, False, *RB), 2, (32,), 4),   # 0 / -, 64 KB
    ((128, 64, 4, 2, False, *RB), 2, (32,), 2),   # 0 / -, 72 KB
    ((64, 64, 4, 2, False, *RB), 2, (32,), 2),    # 0 / -, 40 KB
    # session 14: BWD_TABLE d128's kernel (64 x 128 s2, 4 x 2 grids; the
    # table's column above) carries the Q/dO ring's addresses since the loop's
    # dK + dV take 128 registers (carry-ring-addresses' carried-tiles rule,
    # xor-ring-phases auto -> all: 2 LDL per iteration on sm_90a), against
    # the kernel before (carry off: 7 LDL) and with only ldmatrix.trans
    # tiles' phases XOR-derived (trans: 5 LDL + 2 STL):
    ((64, 128, 8, 2, False, "row", "region-barriers=true carry-ring-addresses=false"), 4, (128,), 2),
    ((64, 128, 8, 2, False, "row", "region-barriers=true xor-ring-phases=trans"), 4, (128,), 2),
]


def fused_grid(entries=None):
    """FUSED_GRID as (config, warps_n, dims, dq_warps_n) tuples (the 4th field
    defaults to 1: the dQᵀ dot split-Q)."""
    return [(e[0], e[1], e[2], e[3] if len(e) > 3 else 1) for e in (entries or FUSED_GRID)]
QUICK = dict(dq=DQ[:2], dkdv=DKDV[:2], fused=FUSED[:2], grid=DKDV_GRID[8:10],
             fused_grid=FUSED_GRID[10:11])


def quick_lists(head_dims):
    """--quick: QUICK, or where a head dim's D has none of QUICK's
    candidates, the first two of each list that apply to it (one of the
    grid lists)."""
    lists = dict(dq=DQ, dkdv=DKDV, fused=FUSED, grid=DKDV_GRID, fused_grid=FUSED_GRID)
    out = {k: list(v) for k, v in QUICK.items()}
    dims_of = dict(dq=1, dkdv=1, fused=1, grid=2, fused_grid=2)
    for d in head_dims:
        D = tile_width(d)
        for key, entries in lists.items():
            if any(D in e[dims_of[key]] for e in out[key]):
                continue
            n = 1 if key in ("grid", "fused_grid") else 2
            out[key] += [e for e in entries if D in e[dims_of[key]]][:n]
    return out


def flops(b, h, s, d, causal):
    return 2.5 * 4 * b * h * s * s * d / (2 if causal else 1)


def reference_grads(q, k, v, dout, scale, causal):
    """float64 autograd of softmax(scale·QKᵀ)V (top-left causal, sq == sk)."""
    q, k, v = (x.detach().double().requires_grad_() for x in (q, k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), v)
    return torch.autograd.grad(o, (q, k, v), dout.double())


def fa2_grads(q, k, v, dout, scale, causal):
    """(time fn, grads) of SDPA FLASH's backward on a retained graph."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    leaves = [x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v)]
    dout_t = dout.transpose(1, 2)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale)
    grads = torch.autograd.grad(out, leaves, dout_t, retain_graph=True)
    return (lambda: torch.autograd.grad(out, leaves, dout_t, retain_graph=True),
            [g.transpose(1, 2) for g in grads])


def rel_err(mine, ref):
    worst = 0.0
    for g, r in zip(mine, ref):
        g, r = g.double(), r.double()
        worst = max(worst, ((g - r).norm() / r.norm().clamp_min(1e-30)).item())
    return worst


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--quick", action="store_true",
                        help="two candidates per kernel, one shape per (d, causal) (CPU smoke)")
    parser.add_argument("--head-dims", default=None, help="default 64,128 (--device cpu --quick: 64)")
    parser.add_argument("--causal", default="0,1", help="0, 1 or 0,1")
    parser.add_argument("--seqlens", default="2048,16384")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-pair", action="store_true", help="fused candidates only")
    parser.add_argument("--no-fused", action="store_true", help="pair candidates only")
    parser.add_argument("--columns", default=None,
                        help="only the candidates whose label matches this regex (and the table's pair)")
    parser.add_argument("--list", action="store_true",
                        help="print each (head dim, causal)'s columns (after --columns) and exit")
    parser.add_argument("--grid", action="store_true",
                        help="only the table's pair, DKDV_GRID and FUSED_GRID (warp grids, prefetch)")
    args = parser.parse_args()
    cpu = args.device == "cpu"
    if not cpu and not args.list and not torch.cuda.is_available():
        sys.exit("error: --device cuda needs a CUDA GPU (or pass --device cpu)")
    import tilec
    from tilec import flash_bwd as fb
    from tilec import strategy
    from tilec.strategy import FlashBwdConfig, FlashConfig

    dtype = getattr(torch, args.dtype)
    head_dims = [int(x) for x in (args.head_dims or ("64" if cpu and args.quick else "64,128"))
                 .split(",")]
    causals = [bool(int(x)) for x in args.causal.split(",")]
    seqlens = [int(x) for x in args.seqlens.split(",")]
    cand = quick_lists(head_dims) if args.quick else dict(dq=DQ, dkdv=DKDV, fused=FUSED,
                                                          grid=DKDV_GRID, fused_grid=FUSED_GRID)
    if args.grid:
        cand = dict(dq=[], dkdv=[], fused=[], grid=cand["grid"], fused_grid=cand["fused_grid"])
    if args.no_pair:
        cand = dict(cand, dq=[], dkdv=[], grid=[])
    if args.no_fused:
        cand = dict(cand, fused=[], fused_grid=[])
    def split_list(entries):  # (FlashConfig, dims, split)
        return [(FlashConfig(*e[0]), e[1], e[2] if len(e) > 2 else 1) for e in entries]

    dq_cfgs = split_list(cand["dq"])
    dkdv_cfgs = split_list(cand["dkdv"])
    fused_cfgs = split_list(cand["fused"])
    grid_cfgs = [(FlashConfig(*c), wn, dims) for c, wn, dims in cand["grid"]]
    fused_grid_cfgs = [(FlashConfig(*c), wn, dqwn, dims)
                       for c, wn, dims, dqwn in fused_grid(cand.get("fused_grid", []) or [])]
    def base_of(d, causal):
        """The configuration flash_attn uses today (BWD_TABLE or BWD_DEFAULT)."""
        return strategy.flash_bwd_config(head_dim=d, causal=causal)

    sp = lambda n: f"-split{n}" if n != 1 else ""

    def fused_ok(cfg, d):
        # the kernel's dQᵀ must split over its warps (fb.atomic_dq_fits);
        # fb.fused_applies: head_dim <= 256
        return fb.fused_applies(d) and fb.atomic_dq_fits(cfg, d)

    # Each candidate as (column, FlashBwdConfig, fused?): the table's pair,
    # then one kernel's blocks varied around it, then the fused kernel's.
    # Candidates match by tile width D (a d96 call takes d128's, d192 d256's).
    def columns(d, causal):
        base = base_of(d, causal)
        D = tile_width(d)
        cols = [("pair (table)", base, False)]
        cols += [(f"dq {c.tag}{sp(n)}", replace(base, dq=c, dq_split=n), False)
                 for c, dims, n in dq_cfgs if D in dims and (c, n) != (base.dq, base.dq_split)]
        cols += [(f"dkdv {c.tag}{sp(n)}", replace(base, dkdv=c, dkdv_split=n, dkdv_warps_n=1), False)
                 for c, dims, n in dkdv_cfgs
                 if D in dims and (c, n, 1) != (base.dkdv, base.dkdv_split, base.dkdv_warps_n)]
        cols += [(f"dkdv {c.tag}-wn{wn}", replace(base, dkdv=c, dkdv_warps_n=wn, dkdv_split=1), False)
                 for c, wn, dims in grid_cfgs
                 if D in dims and (c, wn, 1) != (base.dkdv, base.dkdv_warps_n, base.dkdv_split)]
        cols += [(f"fused {c.tag}{sp(n)}", cfg, True) for c, dims, n in fused_cfgs
                 for cfg in [replace(base, atomic=c, atomic_split=n, atomic_warps_n=1,
                                     atomic_dq_warps_n=1)]
                 if D in dims and fused_ok(cfg, d)]
        cols += [(f"fused {c.tag}-wn{wn}" + (f"-dqwn{dqwn}" if dqwn != 1 else ""), cfg, True)
                 for c, wn, dqwn, dims in fused_grid_cfgs
                 for cfg in [replace(base, atomic=c, atomic_warps_n=wn, atomic_dq_warps_n=dqwn,
                                     atomic_split=1)]
                 if D in dims and fused_ok(cfg, d)]
        if args.columns:
            cols = [col for col in cols if col[0] == "pair (table)" or re.search(args.columns, col[0])]
        return cols

    name = "float16" if dtype == torch.float16 else "bfloat16"
    if args.list:
        for d in head_dims:
            for causal in causals:
                print(f"d{d} causal={causal}: " + "; ".join(c[0] for c in columns(d, causal)))
        return 0

    def kernels(d, causal, cfg, fused):
        saved = dict(strategy.BWD_TABLE)
        strategy.BWD_TABLE[("sm_80", d, causal)] = cfg
        try:
            kdq, kdkdv, _ = fb.flash_bwd_kernels(name, d, causal, atomic_dq=fused)
        finally:
            strategy.BWD_TABLE.clear()
            strategy.BWD_TABLE.update(saved)
        return [kdkdv] if fused else [kdq, kdkdv]

    # Compile every candidate up front (GPU: through the CLI, in threads).
    failed = {}
    jobs = [(d, causal, col, cfg, fused) for d in head_dims for causal in causals
            for col, cfg, fused in columns(d, causal)]

    def build(d, causal, cfg, fused):
        for kernel in kernels(d, causal, cfg, fused):
            if cpu:
                kernel.verify()
            else:
                kernel.launcher(device=0)

    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(1 if cpu else 12) as pool:
        futures = {pool.submit(build, d, causal, cfg, fused): (d, causal, col)
                   for d, causal, col, cfg, fused in jobs}
        for fut in concurrent.futures.as_completed(futures):
            if fut.exception() is not None:
                key = futures[fut]
                failed[key] = str(fut.exception()).splitlines()[0][:200]
                print(f"compile failed d{key[0]} causal={key[1]} {key[2]}: {failed[key]}")
    print(f"compiled {len(jobs)} candidates in {time.time() - t0:.0f} s")

    if cpu:
        median = None
    else:
        from bench_flash import median_ms

        def median(fn):
            return median_ms(fn, args.iters, args.warmup)

    def fwd_bwd_cells(q, k, v, dout, scale, causal, d, times, fl):
        """Forward+backward as training runs it (flash_attn_func's autograd)
        with this row's winners in BWD_TABLE: the default (deterministic=False:
        the fused kernel where it won) and deterministic=True (the best pair),
        beside SDPA FLASH's."""
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        pairs = [v for v in times.values() if not v[2]]
        fused = [v for v in times.values() if v[2]]
        bp = min(pairs, key=lambda v: v[0]) if pairs else None
        bf = min(fused, key=lambda v: v[0]) if fused else None
        cfg = bp[1] if bp else base_of(d, causal)
        if bf:
            cfg = replace(cfg, atomic=bf[1].atomic, atomic_warps_n=bf[1].atomic_warps_n,
                          atomic_dq_warps_n=bf[1].atomic_dq_warps_n,
                          atomic_split=bf[1].atomic_split,
                          fused=not bp or bf[0] < bp[0])
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        tl_ = [x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v)]
        dout_t = dout.transpose(1, 2)

        def fa2():
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                o = F.scaled_dot_product_attention(*tl_, is_causal=causal, scale=scale)
            torch.autograd.grad(o, tl_, dout_t)

        saved = dict(strategy.BWD_TABLE)
        strategy.BWD_TABLE[("sm_80", d, causal)] = cfg
        try:
            def mine(det):
                o = tilec.flash_attn_func(*leaves, softmax_scale=scale, causal=causal,
                                          deterministic=det)
                torch.autograd.grad(o, leaves, dout)

            t_fa2 = median(fa2)
            t_def = median(lambda: mine(False))
            t_det = median(lambda: mine(True))
        finally:
            strategy.BWD_TABLE.clear()
            strategy.BWD_TABLE.update(saved)
        tf = lambda t: f"{fl / t / 1e9:.0f} ({t:.3f})"
        return [tf(t_fa2), tf(t_def) + (" fused" if cfg.fused else " pair"), tf(t_det),
                f"{t_fa2 / t_def:.2f}x", f"{t_def / t_det:.2f}x"]

    device = "cpu" if cpu else torch.cuda.get_device_name()
    print(f"device: {device}  {name}; backward TFLOP/s (ms); '!' = gradients wrong")
    winners = {}
    bad_any = False
    for d in head_dims:
        cols = columns(d, False)
        header = (["causal", "seqlen", "FA2"] + [c[0] for c in cols] + ["pair best", "best/FA2"]
                  + ([] if cpu else ["FA2 f+b", "tilec f+b", "tilec f+b det", "f+b/FA2", "det/default"]))
        print(f"\n### d{d}\n")
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for causal in causals:
            per_seqlen = []
            for s in (seqlens[:1] if args.quick and cpu else seqlens):
                if cpu:
                    b, h, s = 1, 2, 80 if args.quick else s
                else:
                    b, h = max(1, TOKENS // s), HIDDEN // d
                dev = "cpu" if cpu else "cuda"
                torch.manual_seed(0)
                q, k, v, dout = (torch.randn(b, s, h, d, device=dev, dtype=dtype) for _ in range(4))
                scale = d ** -0.5
                out, lse = tilec.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal,
                                                 return_lse=True)
                fl = flops(b, h, s, d, causal)
                cells = [str(causal), str(s)]
                if cpu:
                    ref = reference_grads(q, k, v, dout, scale, causal)
                    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
                    cells.append("n/a")
                    fa2_t = None
                else:
                    fa2_fn, ref = fa2_grads(q, k, v, dout, scale, causal)
                    tol = 1e-2
                    fa2_t = median(fa2_fn)
                    cells.append(f"{fl / fa2_t / 1e9:.0f} ({fa2_t:.3f})")
                times = {}

                def run(col, cfg, fused):
                    saved = dict(strategy.BWD_TABLE)
                    strategy.BWD_TABLE[("sm_80", d, causal)] = cfg
                    try:
                        fn = lambda: fb._flash_attn_backward(dout, q, k, v, out, lse, scale, causal,
                                                             deterministic=not fused,
                                                             atomic_dq=fused)
                        err = rel_err(fn(), ref)
                        t = median(fn) if median else None
                    finally:
                        strategy.BWD_TABLE.clear()
                        strategy.BWD_TABLE.update(saved)
                    bad = not err < tol
                    if t is not None and not bad:
                        times[col] = (t, cfg, fused)
                    txt = f"{fl / t / 1e9:.0f} ({t:.3f})" if t is not None else f"err {err:.1e}"
                    return txt + (" !" if bad else ""), bad

                for col, cfg, fused in columns(d, causal):
                    if (d, causal, col) in failed:
                        cells.append("n/a")
                        continue
                    txt, bad = run(col, cfg, fused)
                    bad_any |= bad
                    cells.append(txt)
                # The best dq with the best dkdv (the table's where none was varied).
                base = base_of(d, causal)
                best_dq, best_dqs = min(((t, (c.dq, c.dq_split)) for col, (t, c, f) in times.items()
                                         if col.startswith("dq ") or col == "pair (table)"),
                                        default=(None, (base.dq, base.dq_split)),
                                        key=lambda x: x[0] or 0)[1]
                best_dkdv, best_wn, best_dkdvs = min(
                    ((t, (c.dkdv, c.dkdv_warps_n, c.dkdv_split)) for col, (t, c, f) in times.items()
                     if col.startswith("dkdv ") or col == "pair (table)"),
                    default=(None, (base.dkdv, base.dkdv_warps_n, base.dkdv_split)),
                    key=lambda x: x[0] or 0)[1]
                pair = replace(base, dq=best_dq, dq_split=best_dqs, dkdv=best_dkdv,
                               dkdv_warps_n=best_wn, dkdv_split=best_dkdvs)
                if (dq_cfgs or dkdv_cfgs or grid_cfgs) and not cpu:
                    txt, bad = run("pair best", pair, False)
                    bad_any |= bad
                    cells.append(f"{txt} dq {best_dq.tag}{sp(best_dqs)} dkdv {best_dkdv.tag}"
                                 + (f"-wn{best_wn}" if best_wn != 1 else "") + sp(best_dkdvs))
                else:
                    cells.append("n/a")
                if fa2_t and times:
                    col, (t, _, _) = min(times.items(), key=lambda x: x[1][0])
                    cells.append(f"{fa2_t / t:.2f}x {col}")
                else:
                    cells.append("n/a")
                if not cpu:
                    cells += fwd_bwd_cells(q, k, v, dout, scale, causal, d, times, fl / 2.5 * 3.5)
                print("| " + " | ".join(cells) + " |", flush=True)
                per_seqlen.append(times)
                del q, k, v, dout, out, lse, ref
                if not cpu:
                    torch.cuda.empty_cache()
            winners[(d, causal)] = per_seqlen
    # Winners: per form, the configuration with the least total time over
    # the seqlens; printed as one BWD_TABLE entry per (head_dim, causal), with
    # fused=True when the fused kernel's total beats the pair's.
    def fc(c):
        # (copy_bounds and lowering_options too when set: the line must build
        # the kernel that was measured, region-barriers included)
        extra = "" if not c.lowering_options and c.copy_bounds == "row" else \
            f", {c.copy_bounds!r}" + (f", {c.lowering_options!r}" if c.lowering_options else "")
        return (f"FlashConfig({c.block_m}, {c.block_n}, {c.num_warps}, {c.num_stages}, "
                f"{c.smem_epilogue}{extra})")

    print("\n# BWD_TABLE entries (least total time over the seqlens measured):")
    for (d, causal), per_seqlen in winners.items():
        if not per_seqlen or any(not t for t in per_seqlen):
            continue
        best = {}
        for label, fused in (("pair", False), ("fused", True)):
            cols = set.intersection(*(set(c for c, v in t.items() if v[2] == fused)
                                      for t in per_seqlen))
            # "pair best" combines each row's own winners: one config only if
            # every row's is the same.
            if "pair best" in cols and len({t["pair best"][1] for t in per_seqlen}) > 1:
                cols.discard("pair best")
            if cols:
                total = {c: sum(t[c][0] for t in per_seqlen) for c in cols}
                col = min(total, key=total.get)
                best[label] = (total[col], per_seqlen[0][col][1], col)
        if not best:
            continue
        pair = best.get("pair", (None, base_of(d, causal), "table"))
        fused = best.get("fused")
        win = fused is not None and (pair[0] is None or fused[0] < pair[0])
        cfg = pair[1]
        parts = [f"dq={fc(cfg.dq)}", f"dkdv={fc(cfg.dkdv)}"]
        if cfg.dq_split != 1:
            parts.append(f"dq_split={cfg.dq_split}")
        if cfg.dkdv_split != 1:
            parts.append(f"dkdv_split={cfg.dkdv_split}")
        if cfg.dkdv_warps_n != 1:
            parts.append(f"dkdv_warps_n={cfg.dkdv_warps_n}")
        if fused:
            parts.append(f"atomic={fc(fused[1].atomic)}")
            if fused[1].atomic_split != 1:
                parts.append(f"atomic_split={fused[1].atomic_split}")
            if fused[1].atomic_warps_n != 1:
                parts.append(f"atomic_warps_n={fused[1].atomic_warps_n}")
            if fused[1].atomic_dq_warps_n != 1:
                parts.append(f"atomic_dq_warps_n={fused[1].atomic_dq_warps_n}")
        parts.append(f"fused={win}")
        ms = lambda b: "-" if cpu or b is None or b[0] is None else f"{b[0]:.3f} ms"
        print(f"# d{d} causal={causal}: pair {pair[2]} ({ms(pair)}), fused "
              f"{fused[2] if fused else '-'} ({ms(fused)})\n"
              f"    (\"sm_80\", {d}, {causal}): FlashBwdConfig({', '.join(parts)}),")
    return 1 if bad_any or failed and cpu else 0


if __name__ == "__main__":
    sys.exit(main())
