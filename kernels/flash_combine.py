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
"""

from __future__ import annotations

import tilec
from tilec import language as tl
from tilec.strategy import Strategy

_S = Strategy()  # the strategy record: its defaults are the knobs' defaults


def _name(DTYPE, HEAD_DIM, BLOCK_M, **_):
    return f"flash_combine_{DTYPE.name}_d{HEAD_DIM}_m{BLOCK_M}"


@tilec.jit(grid=("cdiv(rows, BLOCK_M)", "outer", 1), name=_name, num_warps="NUM_WARPS",
           variant={"dtype": "DTYPE", "head_dim": "HEAD_DIM", "block_m": "BLOCK_M"})
def flash_combine(out_partial: tl.ptr(tl.float32), lse_partial: tl.ptr(tl.float32),
                  out: tl.ptr(DTYPE), lse: tl.ptr(tl.float32),
                  num_splits: tl.int32, rows: tl.int32, outer: tl.int32,
                  stride_ops: tl.int64, stride_opo: tl.int64, stride_opr: tl.int64,
                  stride_lps: tl.int64, stride_lpo: tl.int64,
                  stride_oo: tl.int64, stride_or: tl.int64, stride_lo: tl.int64,
                  DTYPE: tl.constexpr = tl.float32, HEAD_DIM: tl.constexpr = 128,
                  BLOCK_M: tl.constexpr = 16, NUM_WARPS: tl.constexpr = _S.num_warps):
    pid_m = tl.program_id(0)
    o = tl.program_id(1)
    row0 = pid_m * BLOCK_M
    D = max(16, tl.next_power_of_2(HEAD_DIM))
    # Pass 1: the largest lse of each row over the splits.
    lse_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    for i in range(0, num_splits):
        lv = tl.view(lse_partial + (i * stride_lps + o * stride_lpo), (rows,), (1,))
        lse_max = tl.maximum(lse_max, tl.load(lv, (row0,), (BLOCK_M,), padding="neg_inf"))
    lse_max = tl.where(lse_max == float("-inf"), 0.0, lse_max)  # rows no split saw
    # Pass 2: Σ exp(lse_i − M) and Σ exp(lse_i − M)·O_i.
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for i in range(0, num_splits):
        lv = tl.view(lse_partial + (i * stride_lps + o * stride_lpo), (rows,), (1,))
        ov = tl.view(out_partial + (i * stride_ops + o * stride_opo), (rows, HEAD_DIM),
                     (stride_opr, 1))
        w = tl.exp(tl.load(lv, (row0,), (BLOCK_M,), padding="neg_inf") - lse_max)
        total = total + w
        acc = acc + w[:, None] * tl.load(ov, (row0, 0), (BLOCK_M, D))
    seen = total > 0.0
    outv = tl.view(out + o * stride_oo, (rows, HEAD_DIM), (stride_or, 1))
    lsev = tl.view(lse + o * stride_lo, (rows,), (1,))
    tl.store(outv, (row0, 0), (acc / tl.where(seen, total, 1.0)[:, None]).to(DTYPE))
    tl.store(lsev, (row0,), tl.where(seen, lse_max + tl.log(total), float("inf")))
