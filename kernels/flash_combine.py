"""Combine of split-KV partial results (flash-decoding's second kernel), in the
tilec DSL.

Each of `num_splits` partial results covers a subset of the keys and holds,
per row, a normalized output O_i (f32) and its log-sum-exp lse_i (−inf when
the split saw no key). They merge exactly:

    lse = log Σ_i exp(lse_i)            (computed as M + log Σ exp(lse_i − M), M = max lse_i)
    out = Σ_i exp(lse_i − lse) · O_i

A row that no split saw (every lse_i = −inf) gets out = 0 and lse = +inf,
flash_attn's convention for a row with no visible key.

Rows are addressed as (outer, row): program (pid_m, o) merges rows
pid_m·BLOCK_M ... of outer slice o. FA3's layout (splits, batch, seqlen,
heads, d) is outer = batch and row = seqlen × heads flattened; the decode
kernel's (splits, batch, heads, seqlen_q, d) is outer = batch and row =
heads × seqlen_q. The last dimension is contiguous; lse rows have stride 1.

The combine is latency-bound, not bandwidth-bound (a decode call's partials
are a few hundred KB, in L2): what costs is the chain of dependent loads.
So every split's lse is read in one tile load (SPLITS_TILE splits at a time;
one load for up to 128 splits), and the partial outputs UNROLL splits per
loop iteration, their loads independent of each other; BLOCK_M is small
(4 rows) so that a decode call's rows make many programs. Splits past the
last read nothing (views of size 0: padding, weight 0).
"""

from __future__ import annotations

import tilec
from tilec import language as tl


def _name(DTYPE, HEAD_DIM, BLOCK_M, **_):
    return f"flash_combine_{DTYPE.name}_d{HEAD_DIM}_m{BLOCK_M}"


def _weighted(out_partial, lse_partial, i, num_splits, o, row0, rows, lse_max, stride_ops, stride_opo,
              stride_opr, stride_lps, stride_lpo, BLOCK_M, D, HEAD_DIM):
    """exp(lse_i − M)·O_i for split i (0 when there is no split i)."""
    n = rows * tl.minimum(tl.maximum(num_splits - i, 0), 1)
    lv = tl.view(lse_partial + (i * stride_lps + o * stride_lpo), (n,), (1,))
    ov = tl.view(out_partial + (i * stride_ops + o * stride_opo), (n, HEAD_DIM), (stride_opr, 1))
    w = tl.exp(tl.load(lv, (row0,), (BLOCK_M,), padding="neg_inf") - lse_max)
    return w[:, None] * tl.load(ov, (row0, 0), (BLOCK_M, D))


@tilec.jit(grid=("cdiv(rows, BLOCK_M)", "outer", 1), name=_name, num_warps="NUM_WARPS",
           variant={"dtype": "DTYPE", "head_dim": "HEAD_DIM", "block_m": "BLOCK_M"})
def flash_combine(out_partial: tl.ptr(tl.float32), lse_partial: tl.ptr(tl.float32),
                  out: tl.ptr(DTYPE), lse: tl.ptr(tl.float32),
                  num_splits: tl.int32, rows: tl.int32, outer: tl.int32,
                  stride_ops: tl.int64, stride_opo: tl.int64, stride_opr: tl.int64,
                  stride_lps: tl.int64, stride_lpo: tl.int64,
                  stride_oo: tl.int64, stride_or: tl.int64, stride_lo: tl.int64,
                  DTYPE: tl.constexpr = tl.float32, HEAD_DIM: tl.constexpr = 128,
                  BLOCK_M: tl.constexpr = 4, SPLITS_TILE: tl.constexpr = 128,
                  NUM_WARPS: tl.constexpr = 4):
    pid_m = tl.program_id(0)
    o = tl.program_id(1)
    row0 = pid_m * BLOCK_M
    D = max(16, tl.next_power_of_2(HEAD_DIM))
    UNROLL = 8
    # Pass 1: the largest lse of each row, and Σ exp(lse_i − M) (a second
    # sweep over the same tiles, in L1), SPLITS_TILE splits per load.
    # The tile is (rows, splits): reductions run along its last axis.
    lview = tl.view(lse_partial + o * stride_lpo, (rows, num_splits), (1, stride_lps))
    lse_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    for i in range(0, num_splits, SPLITS_TILE):
        lse_max = tl.maximum(lse_max, tl.max(tl.load(lview, (row0, i), (BLOCK_M, SPLITS_TILE),
                                                     padding="neg_inf"), 1))
    lse_max = tl.where(lse_max == float("-inf"), 0.0, lse_max)  # rows no split saw
    total = tl.zeros((BLOCK_M,), tl.float32)
    for i in range(0, num_splits, SPLITS_TILE):
        total = total + tl.sum(tl.exp(tl.load(lview, (row0, i), (BLOCK_M, SPLITS_TILE), padding="neg_inf")
                                      - lse_max[:, None]), 1)
    # Pass 2: Σ exp(lse_i − M)·O_i, UNROLL splits per iteration.
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for i in range(0, num_splits, UNROLL):
        a0 = _weighted(out_partial, lse_partial, i, num_splits, o, row0, rows, lse_max, stride_ops,
                       stride_opo, stride_opr, stride_lps, stride_lpo, BLOCK_M, D, HEAD_DIM)
        a1 = _weighted(out_partial, lse_partial, i + 1, num_splits, o, row0, rows, lse_max, stride_ops,
                       stride_opo, stride_opr, stride_lps, stride_lpo, BLOCK_M, D, HEAD_DIM)
        a2 = _weighted(out_partial, lse_partial, i + 2, num_splits, o, row0, rows, lse_max, stride_ops,
                       stride_opo, stride_opr, stride_lps, stride_lpo, BLOCK_M, D, HEAD_DIM)
        a3 = _weighted(out_partial, lse_partial, i + 3, num_splits, o, row0, rows, lse_max, stride_ops,
                       stride_opo, stride_opr, stride_lps, stride_lpo, BLOCK_M, D, HEAD_DIM)
        a4 = _weighted(out_partial, lse_partial, i + 4, num_splits, o, row0, rows, lse_max, stride_ops,
                       stride_opo, stride_opr, stride_lps, stride_lpo, BLOCK_M, D, HEAD_DIM)
        a5 = _weighted(out_partial, lse_partial, i + 5, num_splits, o, row0, rows, lse_max, stride_ops,
                       stride_opo, stride_opr, stride_lps, stride_lpo, BLOCK_M, D, HEAD_DIM)
        a6 = _weighted(out_partial, lse_partial, i + 6, num_splits, o, row0, rows, lse_max, stride_ops,
                       stride_opo, stride_opr, stride_lps, stride_lpo, BLOCK_M, D, HEAD_DIM)
        a7 = _weighted(out_partial, lse_partial, i + 7, num_splits, o, row0, rows, lse_max, stride_ops,
                       stride_opo, stride_opr, stride_lps, stride_lpo, BLOCK_M, D, HEAD_DIM)
        acc = acc + (((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)))
    seen = total > 0.0
    outv = tl.view(out + o * stride_oo, (rows, HEAD_DIM), (stride_or, 1))
    lsev = tl.view(lse + o * stride_lo, (rows,), (1,))
    tl.store(outv, (row0, 0), (acc / tl.where(seen, total, 1.0)[:, None]).to(DTYPE))
    tl.store(lsev, (row0,), tl.where(seen, lse_max + tl.log(total), float("inf")))
