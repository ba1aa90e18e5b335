"""Combine of split-KV partial results (flash-decoding's second kernel), in the
tilec DSL.

Each of `num_splits` partial results covers a subset of the keys and holds,
per row, a normalized output O_i (f32) and its log-sum-exp lse_i (−inf when
the split saw no key). They merge exactly:

    lse = log Σ_i exp(lse_i)            (computed as M + log Σ exp(lse_i − M), M = max lse_i)
    out = Σ_i exp(lse_i − lse) · O_i

A row that no split saw (every lse_i = −inf) gets out = 0 and lse = +inf,
flash_attn's convention for a row with no visible key.

Rows are addressed as (outer, row): program (r, o) merges row r of outer
slice o. FA3's layout (splits, batch, seqlen, heads, d) is outer = batch and
row = seqlen × heads flattened; the decode kernel's (splits, batch, heads,
seqlen_q, d) is outer = batch and row = heads × seqlen_q. The last dimension
is contiguous; lse rows have stride 1.

The combine is latency-bound, not bandwidth-bound (a decode call's partials
are a few hundred KB, in L2): what costs is the chain of dependent loads
(run 23: a 16-row program looping over the splits one load after another
took 31.9 µs for 29 splits, more than the decode kernel). So a program
merges one row, and reads SPLITS_TILE splits of it at once: its lse as a
(1, splits) tile, its partial outputs as a (d, splits) tile (the splits
along the last axis, so both reductions run along a row), the second load
independent of the first. Up to SPLITS_TILE splits that is two round
trips; more take a loop of such tiles. Splits past the last read as padding
(−inf lse, weight 0).
"""

from __future__ import annotations

import tilec
from tilec import language as tl
from tilec.strategy import Strategy

_S = Strategy()  # the strategy record: its defaults are the knobs' defaults


def _name(DTYPE, HEAD_DIM, SPLITS_TILE, **_):
    return f"flash_combine_{DTYPE.name}_d{HEAD_DIM}_s{SPLITS_TILE}"


@tilec.jit(grid=("rows", "outer", 1), name=_name, num_warps="NUM_WARPS",
           variant={"dtype": "DTYPE", "head_dim": "HEAD_DIM"})
def flash_combine(out_partial: tl.ptr(tl.float32), lse_partial: tl.ptr(tl.float32),
                  out: tl.ptr(DTYPE), lse: tl.ptr(tl.float32),
                  num_splits: tl.int32, rows: tl.int32, outer: tl.int32,
                  stride_ops: tl.int64, stride_opo: tl.int64, stride_opr: tl.int64,
                  stride_lps: tl.int64, stride_lpo: tl.int64,
                  stride_oo: tl.int64, stride_or: tl.int64, stride_lo: tl.int64,
                  DTYPE: tl.constexpr = tl.float32, HEAD_DIM: tl.constexpr = 128,
                  SPLITS_TILE: tl.constexpr = 64, NUM_WARPS: tl.constexpr = _S.num_warps,
                  PRIOR_WAIT: tl.constexpr = False):
    if PRIOR_WAIT:                    # as flash_combine_chunks
        tl.wait_prior_kernels()
        tl.launch_dependents()
    r = tl.program_id(0)
    o = tl.program_id(1)
    D = max(16, tl.next_power_of_2(HEAD_DIM))
    lview = tl.view(lse_partial + (o * stride_lpo + r), (1, num_splits), (1, stride_lps))
    oview = tl.view(out_partial + (o * stride_opo + r * stride_opr), (HEAD_DIM, num_splits), (1, stride_ops))
    m = tl.full((1,), float("-inf"), tl.float32)
    for i in range(0, num_splits, SPLITS_TILE):
        m = tl.maximum(m, tl.max(tl.load(lview, (0, i), (1, SPLITS_TILE), padding="neg_inf"), 1))
    m = tl.where(m == float("-inf"), 0.0, m)
    total = tl.zeros((1,), tl.float32)
    acc = tl.zeros((D,), tl.float32)
    for i in range(0, num_splits, SPLITS_TILE):
        w = tl.exp(tl.load(lview, (0, i), (1, SPLITS_TILE), padding="neg_inf") - m[:, None])
        total = total + tl.sum(w, 1)
        acc = acc + tl.sum(tl.load(oview, (0, i), (D, SPLITS_TILE)) * w, 1)
    seen = total > 0.0
    outv = tl.view(out + (o * stride_oo + r * stride_or), (1, HEAD_DIM), (1, 1))
    tl.store(outv, (0, 0), (acc / tl.where(seen, total, 1.0))[None, :].to(DTYPE))
    lsev = tl.view(lse + (o * stride_lo + r), (1,), (1,))
    tl.store(lsev, (0,), tl.where(seen, m + tl.log(total), float("inf")))


def _chunk_name(DTYPE, HEAD_DIM, SPLITS_TILE, D_TILE, NUM_WARPS, **_):
    return f"flash_combine_{DTYPE.name}_d{HEAD_DIM}_s{SPLITS_TILE}c{D_TILE}w{NUM_WARPS}"


@tilec.jit(grid=("rows", "outer", "cdiv(HEAD_DIM, D_TILE)"), name=_chunk_name, num_warps="NUM_WARPS",
           variant={"dtype": "DTYPE", "head_dim": "HEAD_DIM"})
def flash_combine_chunks(out_partial: tl.ptr(tl.float32), lse_partial: tl.ptr(tl.float32),
                         out: tl.ptr(DTYPE), lse: tl.ptr(tl.float32),
                         num_splits: tl.int32, rows: tl.int32, outer: tl.int32,
                         stride_ops: tl.int64, stride_opo: tl.int64, stride_opr: tl.int64,
                         stride_lps: tl.int64, stride_lpo: tl.int64,
                         stride_oo: tl.int64, stride_or: tl.int64, stride_lo: tl.int64,
                         DTYPE: tl.constexpr = tl.float32, HEAD_DIM: tl.constexpr = 128,
                         SPLITS_TILE: tl.constexpr = 64, D_TILE: tl.constexpr = 32,
                         NUM_WARPS: tl.constexpr = 1, PRIOR_WAIT: tl.constexpr = False):
    """The combine with the partial outputs read as (splits, D_TILE) tiles,
    each split's D_TILE features contiguous (flash_combine's (d, splits)
    tile reads 4-byte elements a split stride apart: run 25, 5.1 us for 32
    rows of 32 splits). One warp per program (the reduction runs along the
    splits axis, which must not cross warps); program (r, o, c) merges
    features [c·D_TILE, (c+1)·D_TILE) of row r in one pass over the split
    tiles (an online max), a tile's lse and O loads independent, so up to
    SPLITS_TILE splits are one round trip. Program c = 0 writes lse. The
    max starts at −1e30 so that a tile of −inf splits weighs 0, not NaN.
    PRIOR_WAIT: launched early (programmatic dependent launch, sm_90+), it
    waits for the decode kernel before it reads a partial."""
    if PRIOR_WAIT:
        tl.wait_prior_kernels()
        tl.launch_dependents()
    r = tl.program_id(0)
    o = tl.program_id(1)
    c = tl.program_id(2)
    lview = tl.view(lse_partial + (o * stride_lpo + r), (num_splits, 1), (stride_lps, 1))
    oview = tl.view(out_partial + (o * stride_opo + r * stride_opr + c * D_TILE),
                    (num_splits, HEAD_DIM - c * D_TILE), (stride_ops, 1))
    m = tl.full((1,), -1e30, tl.float32)
    total = tl.zeros((1,), tl.float32)
    acc = tl.zeros((1, D_TILE), tl.float32)
    for i in range(0, num_splits, SPLITS_TILE):
        li = tl.load(lview, (i, 0), (SPLITS_TILE, 1), padding="neg_inf")
        oi = tl.load(oview, (i, 0), (SPLITS_TILE, D_TILE))
        m_new = tl.maximum(m, tl.max(li, 0))
        alpha = tl.exp(m - m_new)
        w = tl.exp(li - m_new[None, :])
        total = total * alpha + tl.sum(w, 0)
        acc = acc * alpha[:, None] + tl.sum(oi * w, 0)[None, :]
        m = m_new
    seen = total > 0.0
    outv = tl.view(out + (o * stride_oo + r * stride_or + c * D_TILE), (1, HEAD_DIM - c * D_TILE), (1, 1))
    tl.store(outv, (0, 0), (acc / tl.where(seen, total, 1.0)[:, None]).to(DTYPE))
    lsev = tl.view(lse + (o * stride_lo + r), (1 - tl.minimum(c, 1),), (1,))
    tl.store(lsev, (0,), tl.where(seen, m + tl.log(total), float("inf")))
