"""FlashAttention-2 backward in the tilec DSL (the paper's Algorithm 2): the
pair, two kernels that need no atomics (deterministic gradients), or FA2's
single fused kernel (flash_bwd_dkdv with ATOMIC_DQ, below):

* ``flash_bwd_dq``: one program per BLOCK_M rows of Q and (batch, head). It
  first computes Delta_i = rowsum(dO_i ∘ O_i) for its rows and writes it out,
  with lse2_i = lse_i·log2e (+inf for a row with no key), for the dK/dV
  kernel (no separate preprocess kernel; dK/dV's loop then has one masking
  select, its causal mask, which tile-split-masked-loops needs), then loops over
  the K/V blocks its rows can see, recomputing P from Q, K and the forward's
  lse, and accumulates dQ_i += dS·K_j in f32 registers (row-parallel dQ).
* ``flash_bwd_dkdv``: one program per BLOCK_N rows of K/V and (batch, head):
  loops over the Q blocks that can see its keys, recomputing P the same way,
  and accumulates dV_j += Pᵀ·dO_i and dK_j += dSᵀ·Q_i. With ATOMIC_DQ it is
  FA2's single backward kernel: it also adds dQ_iᵀ += Kᵀ·dSᵀ into an f32
  buffer with tl.atomic_add (unscaled: the caller's conversion multiplies by
  scale; Delta and lse2 then come from the caller, not from the dq kernel).
  In no fixed order, so not deterministic, unless SERIAL_DQ: then the caller
  launches it once per group of S key blocks, each program adding into its
  own slice of S dq_accum slices (a single adder per element per launch),
  and sums the slices in a fixed order (flash_bwd.py's serial schedule).
  The buffer is blocked, (batch, heads, cdiv(seqlen_q, BLOCK_M), R,
  BLOCK_M) (varlen: (total_q, heads, head_dim)), R the head-dim rows: D, or
  the pieces' total below.

Head dims that are not powers of two are computed in power-of-two column
pieces, as the forward's (strategy.bwd_head_dim_pieces: d96 = 64 + 32,
d192 = 128 + 64): per-piece loads, S/dP (and their transposes) summed over
the pieces' dots, one dQ/dK/dV accumulator and one fused dQᵀ dot per piece.
SPLIT_D > 1 keeps one padded tile (its columns start at a run-time offset).

DQ_WARPS_N > 1 (ATOMIC_DQ): the dQᵀ dot on its own grid, head_dim rows x
query columns (1: split-Q over head_dim rows).

WARPS_N > 1 (dkdv): FlashAttention-2's 2-D warp grid for all four dots
(tile.dot's warps_n): (NUM_WARPS / WARPS_N) warps along the keys, WARPS_N
along the queries (Sᵀ, dPᵀ) or head_dim (dK, dV); K, V, Pᵀ and dSᵀ are read
from shared memory (Pᵀ and dSᵀ written there each iteration), and each warp
reads only its share of Q and dO instead of all of them.

Run dq first, then dkdv. The dK/dV kernel is written transposed by hand: it
computes Sᵀ = K_j·Q_iᵀ (keys are its rows, so its accumulators dK and dV are
mma accumulators of rows it owns, split over warps like O in the forward),
and Pᵀ, dPᵀ = V_j·dO_iᵀ and dSᵀ directly; tl.trans of P and dS costs shared
memory round trips and (at head_dim 128) spills.

    S = Q·Kᵀ                  P = exp2(S·c − lse·log2e),  c = scale·log2e
    dP = dO·Vᵀ                dS = P ∘ (dP − Delta)
    dV = Pᵀ·dO                dK = scale·dSᵀ·Q           dQ = scale·dS·K

Layouts as the forward (kernels/flash_fwd.py): (batch, seqlen, heads,
head_dim) with strides in elements; lse, Delta and lse2 (batch, heads,
seqlen_q) f32, all three with lse's strides. Grouped-query attention: query head h reads K/V head h // GROUP; the dK/dV
kernel writes one dK/dV per query head (dk/dv have num_heads heads) and the
caller sums each group. Causal: query i sees keys j <= i + causal_offset;
flash_attn >= 2.1 aligns it bottom-right (causal_offset = seqlen_k -
seqlen_q), tilec's forward before the variants rewrite top-left (0). Rows that see no key (lse =
+inf; -inf is taken as +inf too) get zero gradients: P is exactly 0 there.
The masks are one tl.where on S (-inf where masked), so
tile-split-masked-loops skips the blocks nothing can see and masks only the
partial ones.

Variants: the forward's switches (kernels/flash_fwd.py), with its helpers
`visible` (causal/window) and `alibi_bias`. WINDOW, ALIBI and VARLEN as the
forward (VARLEN: sequence b's rows are cu_seqlens_q/k[b]..[b+1], its own
bottom-right alignment; causal_offset is then unused). DROPOUT: the
forward's keep mask regenerated from (seed, rng_offset) by
flash_fwd.dropout_keep (Philox, never stored); with Z = keep/(1 − p),
dV = (P∘Z)ᵀ·dO and dP = Z ∘ (dO·Vᵀ) (Delta = rowsum(dO ∘ O) still holds).
SOFTCAP: the scores
are softcap·t with t = tanh(scale·qk/softcap), so dS is scaled by (1 − t²)
before dQ = scale·dS·K and dK = scale·dSᵀ·Q. With SOFTCAP or ALIBI P is
exp2(s·log2e − lse2) of the final scores s.
"""

from __future__ import annotations

import math

import tilec
from tilec import kernel_files
from tilec import language as tl
from tilec.strategy import Strategy, bwd_head_dim_pieces, dot_warps_n

_S = Strategy()  # the strategy record: its defaults are the knobs' defaults

LOG2E = math.log2(math.e)

# The fused kernel's dq_accum blocks (rows x columns of dQᵀ, tl.view's block):
# one mma accumulator fragment per warp instruction, see flash_bwd_dkdv.
DQ_ACCUM_BLOCK = (8, 8)


def dq_accum_tile(ptr, R, BLOCK_M):
    """The view of one query block's dQᵀ in dq_accum (R head-dim rows x
    BLOCK_M queries at `ptr`) as the fused kernel adds it and
    flash_bwd_convert_dq reads it: 8x8 row-major blocks (DQ_ACCUM_BLOCK),
    BLOCK_M / 8 blocks to a block row."""
    return tl.view(ptr, (R, BLOCK_M), (8 * BLOCK_M, 64), block=DQ_ACCUM_BLOCK)


_fwd = kernel_files.load("flash_fwd")
# The forward's mask, score and dropout helpers, and its piecewise Q·Kᵀ.
alibi_bias, visible, dropout_keep, sequence_bounds, dot_pieces, longest_first = (
    _fwd.alibi_bias, _fwd.visible, _fwd.dropout_keep, _fwd.sequence_bounds, _fwd.dot_pieces,
    _fwd.longest_first)


def _variants(CAUSAL, WINDOW=False, SOFTCAP=False, ALIBI=False, VARLEN=False, DROPOUT=False, **_):
    return ("_causal" * CAUSAL + "_window" * WINDOW + "_softcap" * SOFTCAP + "_alibi" * ALIBI
            + "_varlen" * VARLEN + "_dropout" * DROPOUT)


def _dq_name(DTYPE, HEAD_DIM, CAUSAL, **kw):
    return f"flash_bwd_dq_{DTYPE.name}_d{HEAD_DIM}" + _variants(CAUSAL, **kw)


def _dkdv_name(DTYPE, HEAD_DIM, CAUSAL, ATOMIC_DQ=False, SERIAL_DQ=False, ORDERED_DQ=False,
               **kw):
    serial = "_serial" * bool(SERIAL_DQ) + "_ordered" * bool(ORDERED_DQ)
    return (f"flash_bwd_dkdv{'_atomic' if ATOMIC_DQ else ''}{serial}"
            f"_{DTYPE.name}_d{HEAD_DIM}" + _variants(CAUSAL, **kw))


def probabilities(s, mask, l2, c, scale, softcap, slope, rows, kq, CAUSAL, SOFTCAP, ALIBI):
    """(P, tanh) recomputed from the raw scores s = Q·Kᵀ of a block, or their
    transpose (both kernels: l2 = lse·log2(e) broadcast along the key axis,
    rows/kq the query and key indices in s's orientation, c = scale·log2(e)):
    the forward's scores -- capped, biased, -inf where masked -- then
    P = exp(scores − lse). tanh is SOFTCAP's (for dS's 1 − tanh²), else None."""
    t = None
    if SOFTCAP or ALIBI:  # the forward's scores, in natural-log units
        s = s * (scale / softcap if SOFTCAP else scale)
        if SOFTCAP:
            t = tl.tanh(s)
            s = softcap * t
        if ALIBI:
            s = alibi_bias(s, slope, rows, kq, CAUSAL)
        s = tl.where(mask, s, float("-inf"))
        return tl.exp2(s * LOG2E - l2), t
    s = tl.where(mask, s, float("-inf"))
    return tl.exp2(s * c - l2), t


def rowsum_product(x_pieces, y_pieces):
    """rowsum(X ∘ Y) in f32 over head-dim pieces (Delta = rowsum(dO ∘ O))."""
    acc = tl.sum(x_pieces[0].to(tl.float32) * y_pieces[0].to(tl.float32), 1)
    for x, y in zip(x_pieces[1:], y_pieces[1:]):
        acc = acc + tl.sum(x.to(tl.float32) * y.to(tl.float32), 1)
    return acc


def _pre_name(DTYPE, HEAD_DIM, **_):
    return f"flash_bwd_preprocess_{DTYPE.name}_d{HEAD_DIM}"


@tilec.jit(grid=("cdiv(seqlen_q, BLOCK_M)", "batch * num_heads", "1"), name=_pre_name,
           num_warps="NUM_WARPS", variant={"kind": "bwd_preprocess", "dtype": "DTYPE",
                                           "head_dim": "HEAD_DIM", "block_m": "BLOCK_M"})
def flash_bwd_preprocess(o: tl.ptr(DTYPE), do: tl.ptr(DTYPE), lse: tl.ptr(tl.float32),
                         delta: tl.ptr(tl.float32), lse2: tl.ptr(tl.float32),
                         seqlen_q: tl.int32, num_heads: tl.int32, batch: tl.int32,
                         stride_ob: tl.int64, stride_os: tl.int64, stride_oh: tl.int64,
                         stride_dob: tl.int64, stride_dos: tl.int64, stride_doh: tl.int64,
                         stride_lseb: tl.int64, stride_lseh: tl.int64,
                         DTYPE: tl.constexpr = tl.float16, HEAD_DIM: tl.constexpr = 128,
                         BLOCK_M: tl.constexpr = 64, NUM_WARPS: tl.constexpr = 4):
    """What the fused kernel (flash_bwd_dkdv with ATOMIC_DQ) reads besides
    the inputs, as the dq kernel's prologue computes it for the pair:
    Delta = rowsum(dO ∘ O) in f32 and lse2 = lse·log2e (+inf for a row with
    no key, also when lse is -inf). Memory-bound: reads O and dO once."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b, h = pid_bh // num_heads, pid_bh % num_heads
    row0 = pid_m * BLOCK_M
    ov = tl.view(o + (b * stride_ob + h * stride_oh), (seqlen_q, HEAD_DIM), (stride_os, 1))
    dov = tl.view(do + (b * stride_dob + h * stride_doh), (seqlen_q, HEAD_DIM), (stride_dos, 1))
    lsev = tl.view(lse + (b * stride_lseb + h * stride_lseh), (seqlen_q,), (1,))
    deltav = tl.view(delta + (b * stride_lseb + h * stride_lseh), (seqlen_q,), (1,))
    lse2v = tl.view(lse2 + (b * stride_lseb + h * stride_lseh), (seqlen_q,), (1,))
    PIECES = bwd_head_dim_pieces(HEAD_DIM)                  # as the forward's (d96 = 64 + 32)
    ots = [tl.load(ov, (row0, pc), (BLOCK_M, pw)) for pc, pw in PIECES]
    dots = [tl.load(dov, (row0, pc), (BLOCK_M, pw)) for pc, pw in PIECES]
    tl.store(deltav, (row0,), rowsum_product(dots, ots))
    li = tl.load(lsev, (row0,), (BLOCK_M,))
    li = tl.where(li == float("-inf"), float("inf"), li)
    tl.store(lse2v, (row0,), li * LOG2E)


@tl.constexpr_function
def _row_chunks(rows, chunk, used):
    """(offset, width) pieces of `rows` (a multiple of 16): its powers of two,
    widest first, each cut to at most `chunk` (96 -> 64 + 32), so every load
    lies inside the view (no bounds predicates) and tiles stay powers of two;
    pieces at or past row `used` (the head dim: padding) are left out."""
    out, r = [], 0
    while r < min(rows, used):
        w = min(chunk, 1 << ((rows - r).bit_length() - 1))
        out.append((r, w))
        r += w
    return tuple(out)


def _convert_name(DTYPE, HEAD_DIM, R, BLOCK_M, **_):
    return (f"flash_bwd_convert_dq_{DTYPE.name}_d{HEAD_DIM}_m{BLOCK_M}"
            + (f"_r{R}" if R != HEAD_DIM else ""))


@tilec.jit(grid=("cdiv(seqlen_q, BLOCK_M)", "batch * num_heads", "1"), name=_convert_name,
           num_warps="NUM_WARPS", variant={"kind": "bwd_convert_dq", "dtype": "DTYPE",
                                           "head_dim": "HEAD_DIM", "block_m": "BLOCK_M"})
def flash_bwd_convert_dq(dq_accum: tl.ptr(tl.float32), dq: tl.ptr(DTYPE),
                         seqlen_q: tl.int32, num_heads: tl.int32, batch: tl.int32,
                         stride_dqab: tl.int64, stride_dqah: tl.int64,
                         stride_dqb: tl.int64, stride_dqs: tl.int64, stride_dqh: tl.int64,
                         scale: tl.float32,
                         DTYPE: tl.constexpr = tl.float16, HEAD_DIM: tl.constexpr = 128,
                         R: tl.constexpr = 128, BLOCK_M: tl.constexpr = 64,
                         CHUNK: tl.constexpr = 256, QCOLS: tl.constexpr = 8,
                         NUM_WARPS: tl.constexpr = 4):
    """dq = scale·dQ from the fused kernel's (flash_bwd_dkdv with ATOMIC_DQ)
    blocked f32 accumulator, (batch, heads, cdiv(seqlen_q, BLOCK_M), R,
    BLOCK_M): query block i's dQᵀ, R head-dim rows. One program per (query
    block, batch·head) transposes its tile back into dq's (BLOCK_M, HEAD_DIM)
    rows in DTYPE (the view bounds the rows past seqlen_q and the columns
    past HEAD_DIM). Memory-bound; it replaces torch's strided
    permute-and-multiply (0.9 TB/s on an H200 at d128).
    Tiles of (up to CHUNK) head-dim rows x QCOLS = 8 queries: tl.trans only
    relabels registers (no shared memory), so a thread's 16-byte load (4
    queries of one head-dim row) becomes 4 dq rows of one column; with 8
    queries a warp's store still fills whole 32-byte sectors (16 columns of
    2 dq rows) where a BLOCK_M-wide tile's wrote 4 bytes per sector. Rows in
    power-of-two pieces (_row_chunks: R = 96 is 64 + 32) keep every load
    inside the view. All loads come before the stores, which ptxas cannot
    move loads past."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b, h = pid_bh // num_heads, pid_bh % num_heads
    row0 = pid_m * BLOCK_M
    # The block's dQᵀ in 8x8 blocks: a QCOLS = 8 column strip of it is R / 8
    # contiguous 256-byte blocks.
    blk = dq_accum_tile(dq_accum + (b * stride_dqab + h * stride_dqah + row0 * R), R, BLOCK_M)
    dqv = tl.view(dq + (b * stride_dqb + h * stride_dqh), (seqlen_q, HEAD_DIM), (stride_dqs, 1))
    PARTS = [(c, w, j) for c, w in _row_chunks(R, CHUNK, HEAD_DIM)
             for j in range(0, BLOCK_M, QCOLS)]
    ts = [tl.load(blk, (c, j), (w, QCOLS)) for c, w, j in PARTS]
    for (c, w, j), t in zip(PARTS, ts):
        tl.store(dqv, (row0 + j, c), (tl.trans(t) * scale).to(DTYPE))


@tilec.jit(grid=("cdiv(seqlen_q, BLOCK_M)", "batch * num_heads", "SPLIT_D"), name=_dq_name,
           num_warps="NUM_WARPS", num_stages="NUM_STAGES", smem_epilogue="SMEM_EPILOGUE",
           variant={"kind": "bwd_dq", "dtype": "DTYPE", "head_dim": "HEAD_DIM", "causal": "CAUSAL",
                    "window": "WINDOW", "softcap": "SOFTCAP", "alibi": "ALIBI", "varlen": "VARLEN",
                    "block_m": "BLOCK_M", "block_n": "BLOCK_N"})
def flash_bwd_dq(q: tl.ptr(DTYPE), k: tl.ptr(DTYPE), v: tl.ptr(DTYPE), o: tl.ptr(DTYPE),
                 do: tl.ptr(DTYPE), lse: tl.ptr(tl.float32), delta: tl.ptr(tl.float32),
                 lse2: tl.ptr(tl.float32), dq: tl.ptr(DTYPE), seqlen_q: tl.int32, seqlen_k: tl.int32,
                 num_heads: tl.int32, group: tl.int32, batch: tl.int32,
                 causal_offset: tl.int32,
                 stride_qb: tl.int64, stride_qs: tl.int64, stride_qh: tl.int64,
                 stride_kb: tl.int64, stride_ks: tl.int64, stride_kh: tl.int64,
                 stride_vb: tl.int64, stride_vs: tl.int64, stride_vh: tl.int64,
                 stride_ob: tl.int64, stride_os: tl.int64, stride_oh: tl.int64,
                 stride_dob: tl.int64, stride_dos: tl.int64, stride_doh: tl.int64,
                 stride_dqb: tl.int64, stride_dqs: tl.int64, stride_dqh: tl.int64,
                 stride_lseb: tl.int64, stride_lseh: tl.int64, scale: tl.float32,
                 window_left: tl.int32, window_right: tl.int32, softcap: tl.float32,
                 alibi: tl.ptr(tl.float32), stride_alibi_b: tl.int64,
                 cu_seqlens_q: tl.ptr(tl.int32), cu_seqlens_k: tl.ptr(tl.int32),
                 seqused_k: tl.ptr(tl.int32), use_seqused_k: tl.int32,
                 err: tl.ptr(tl.int32) if VARLEN else None, total_q: tl.int32 if VARLEN else None,
                 total_k: tl.int32 if VARLEN else None,
                 dropout_p: tl.float32 if DROPOUT else None, seed: tl.int64 if DROPOUT else None,
                 rng_offset: tl.int64 if DROPOUT else None,
                 DTYPE: tl.constexpr = tl.float16, HEAD_DIM: tl.constexpr = 128,
                 CAUSAL: tl.constexpr = False, WINDOW: tl.constexpr = False,
                 SOFTCAP: tl.constexpr = False, ALIBI: tl.constexpr = False,
                 VARLEN: tl.constexpr = False, DROPOUT: tl.constexpr = False,
                 BLOCK_M: tl.constexpr = 64,
                 BLOCK_N: tl.constexpr = 64, NUM_WARPS: tl.constexpr = _S.num_warps,
                 NUM_STAGES: tl.constexpr = _S.num_stages, SMEM_EPILOGUE: tl.constexpr = False,
                 SPLIT_D: tl.constexpr = 1):
    tl.assume(scale > 0)
    if SOFTCAP: tl.assume(softcap > 0)  # noqa: E701
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    if CAUSAL and not WINDOW:  # the last query blocks (most keys) first (a window's are even)
        pid_m, pid_bh = longest_first(pid_m, pid_bh, tl.cdiv(seqlen_q, BLOCK_M), batch * num_heads,
                                      True, seqlen_k, HEAD_DIM)
    b, h = pid_bh // num_heads, pid_bh % num_heads
    hk = h // group
    row0 = pid_m * BLOCK_M
    bq, bk, diag = b, b, causal_offset
    max_q, max_k = seqlen_q, seqlen_k                       # the grid's (dropout's counters)
    if VARLEN:  # sequence b, as the forward's VARLEN (the caller passes stride_*b = stride_*s)
        bq, bk, seqlen_q, seqlen_k = sequence_bounds(cu_seqlens_q, cu_seqlens_k, seqused_k,
                                                     use_seqused_k, b, err, total_q, total_k,
                                                     max_q, max_k)
        diag = seqlen_k - seqlen_q
        if row0 >= seqlen_q:
            return
    qv = tl.view(q + (bq * stride_qb + h * stride_qh), (seqlen_q, HEAD_DIM), (stride_qs, 1))
    kv = tl.view(k + (bk * stride_kb + hk * stride_kh), (seqlen_k, HEAD_DIM), (stride_ks, 1))
    vv = tl.view(v + (bk * stride_vb + hk * stride_vh), (seqlen_k, HEAD_DIM), (stride_vs, 1))
    ov = tl.view(o + (bq * stride_ob + h * stride_oh), (seqlen_q, HEAD_DIM), (stride_os, 1))
    dov = tl.view(do + (bq * stride_dob + h * stride_doh), (seqlen_q, HEAD_DIM), (stride_dos, 1))
    dqv = tl.view(dq + (bq * stride_dqb + h * stride_dqh), (seqlen_q, HEAD_DIM), (stride_dqs, 1))
    lsev = tl.view(lse + (bq * stride_lseb + h * stride_lseh), (seqlen_q,), (1,))
    deltav = tl.view(delta + (bq * stride_lseb + h * stride_lseh), (seqlen_q,), (1,))
    lse2v = tl.view(lse2 + (bq * stride_lseb + h * stride_lseh), (seqlen_q,), (1,))
    D = max(16, tl.next_power_of_2(HEAD_DIM))
    # The head dim in power-of-two column pieces (pc, pw), as the forward's
    # (strategy.bwd_head_dim_pieces: d96 = 64 + 32, d192 = 128 + 64; a power
    # of two, or SPLIT_D > 1, is one tile of width D): Q, dO, O, K, V are
    # loaded per piece, S and dP sum the pieces' dots, dQ keeps one
    # accumulator per piece. The views bound the columns past HEAD_DIM.
    PIECES = bwd_head_dim_pieces(HEAD_DIM, SPLIT_D)
    slope = None
    if ALIBI:
        slope = tl.load(alibi + (b * stride_alibi_b + h))
    qts = [tl.load(qv, (row0, pc), (BLOCK_M, pw)) for pc, pw in PIECES]
    dots = [tl.load(dov, (row0, pc), (BLOCK_M, pw)) for pc, pw in PIECES]
    # Delta_i = rowsum(dO_i ∘ O_i), in f32 (the preprocess of Algorithm 2).
    ots = [tl.load(ov, (row0, pc), (BLOCK_M, pw)) for pc, pw in PIECES]
    di = rowsum_product(dots, ots)
    tl.store(deltav, (row0,), di)
    li = tl.load(lsev, (row0,), (BLOCK_M,))
    li = tl.where(li == float("-inf"), float("inf"), li)    # a row with no key: P = 0
    c = scale * LOG2E
    l2 = li * LOG2E
    tl.store(lse2v, (row0,), l2)                            # for the dK/dV kernel
    # SPLIT_D > 1 (head_dim > 128): program_id(2) owns dQ columns [c0, c0 + DS)
    # (every split writes the same Delta and lse2).
    DS = D // SPLIT_D
    c0 = 0
    if SPLIT_D > 1:
        c0 = tl.program_id(2) * DS
    accs = [tl.zeros((BLOCK_M, pw // SPLIT_D), tl.float32) for pc, pw in PIECES]
    rows = (row0 + tl.arange(0, BLOCK_M))[:, None]
    if DROPOUT:
        rp = 1.0 / (1.0 - dropout_p)
    for j in range(0, tl.cdiv(seqlen_k, BLOCK_N)):
        col0 = j * BLOCK_N
        kts = [tl.load(kv, (col0, pc), (BLOCK_N, pw)) for pc, pw in PIECES]
        vts = [tl.load(vv, (col0, pc), (BLOCK_N, pw)) for pc, pw in PIECES]
        s = dot_pieces(qts, kts)                               # S = Q·Kᵀ
        kq = (col0 - diag + tl.arange(0, BLOCK_N))[None, :]  # the query row each key aligns with
        mask = kq < seqlen_q                                # keys past seqlen_k do not exist
        if CAUSAL or WINDOW:
            mask = visible(mask, rows, kq, window_left, window_right, CAUSAL, WINDOW)
        p, t = probabilities(s, mask, l2[:, None], c, scale, softcap, slope, rows, kq,
                             CAUSAL, SOFTCAP, ALIBI)        # P = exp(scale·S − lse)
        dp = dot_pieces(dots, vts)                             # dP = dO·Vᵀ
        if DROPOUT:  # the forward's mask, regenerated: dP of P ∘ Z, Z = keep / (1 - p)
            keep = dropout_keep(seed, rng_offset, dropout_p, pid_bh, rows,
                                (col0 + tl.arange(0, BLOCK_N))[None, :], max_q, max_k)
            dp = tl.where(keep, dp * rp, 0.0)
        ds = p * (dp - di[:, None])                         # dS = P ∘ (dP − Delta)
        if SOFTCAP:                                         # through softcap·tanh(·/softcap)
            ds = ds * (1.0 - t * t)
        ks = kts
        if SPLIT_D > 1:
            ks = [tl.load(kv, (col0, c0), (BLOCK_N, DS))]
        accs = [tl.dot(ds.to(DTYPE), kt, acc) for kt, acc in zip(ks, accs)]  # dQ += dS·K
    for (pc, pw), acc in zip(PIECES, accs):
        tl.store(dqv, (row0, c0 if SPLIT_D > 1 else pc), (acc * scale).to(DTYPE))


@tilec.jit(grid=("cdiv(seqlen_k, BLOCK_N)", "batch * num_heads", "SPLIT_D"), name=_dkdv_name,
           num_warps="NUM_WARPS", num_stages="NUM_STAGES", smem_epilogue="SMEM_EPILOGUE",
           lowering_options="LOWERING_OPTIONS",
           variant={"kind": "bwd_dkdv", "dtype": "DTYPE", "head_dim": "HEAD_DIM",
                    "causal": "CAUSAL", "window": "WINDOW", "softcap": "SOFTCAP", "alibi": "ALIBI",
                    "varlen": "VARLEN", "block_m": "BLOCK_M", "block_n": "BLOCK_N",
                    "atomic_dq": "ATOMIC_DQ", "serial_dq": "SERIAL_DQ",
                    "ordered_dq": "ORDERED_DQ"})
def flash_bwd_dkdv(q: tl.ptr(DTYPE), k: tl.ptr(DTYPE), v: tl.ptr(DTYPE), do: tl.ptr(DTYPE),
                   lse2: tl.ptr(tl.float32), delta: tl.ptr(tl.float32),
                   dk: tl.ptr(DTYPE), dv: tl.ptr(DTYPE), dq_accum: tl.ptr(tl.float32),
                   seqlen_q: tl.int32, seqlen_k: tl.int32,
                   num_heads: tl.int32, group: tl.int32, batch: tl.int32,
                   causal_offset: tl.int32,
                   stride_qb: tl.int64, stride_qs: tl.int64, stride_qh: tl.int64,
                   stride_kb: tl.int64, stride_ks: tl.int64, stride_kh: tl.int64,
                   stride_vb: tl.int64, stride_vs: tl.int64, stride_vh: tl.int64,
                   stride_dob: tl.int64, stride_dos: tl.int64, stride_doh: tl.int64,
                   stride_dkb: tl.int64, stride_dks: tl.int64, stride_dkh: tl.int64,
                   stride_dvb: tl.int64, stride_dvs: tl.int64, stride_dvh: tl.int64,
                   stride_dqab: tl.int64, stride_dqas: tl.int64, stride_dqah: tl.int64,
                   stride_lseb: tl.int64, stride_lseh: tl.int64, scale: tl.float32,
                   window_left: tl.int32, window_right: tl.int32, softcap: tl.float32,
                   alibi: tl.ptr(tl.float32), stride_alibi_b: tl.int64,
                   cu_seqlens_q: tl.ptr(tl.int32), cu_seqlens_k: tl.ptr(tl.int32),
                   seqused_k: tl.ptr(tl.int32), use_seqused_k: tl.int32,
                   err: tl.ptr(tl.int32) if VARLEN else None, total_q: tl.int32 if VARLEN else None,
                   total_k: tl.int32 if VARLEN else None,
                   dropout_p: tl.float32 if DROPOUT else None, seed: tl.int64 if DROPOUT else None,
                   rng_offset: tl.int64 if DROPOUT else None,
                   n_base: tl.int32 if SERIAL_DQ else None,
                   stride_dqa_split: tl.int64 if SERIAL_DQ else None,
                   turns: tl.ptr(tl.int32) if ORDERED_DQ else None,
                   DTYPE: tl.constexpr = tl.float16, HEAD_DIM: tl.constexpr = 128,
                   CAUSAL: tl.constexpr = False, WINDOW: tl.constexpr = False,
                   SOFTCAP: tl.constexpr = False, ALIBI: tl.constexpr = False,
                   VARLEN: tl.constexpr = False, DROPOUT: tl.constexpr = False,
                   BLOCK_M: tl.constexpr = 64,
                   BLOCK_N: tl.constexpr = 64, NUM_WARPS: tl.constexpr = _S.num_warps,
                   NUM_STAGES: tl.constexpr = _S.num_stages, SMEM_EPILOGUE: tl.constexpr = False,
                   SPLIT_D: tl.constexpr = 1, ATOMIC_DQ: tl.constexpr = False,
                   SERIAL_DQ: tl.constexpr = False, ORDERED_DQ: tl.constexpr = False,
                   WARPS_N: tl.constexpr = 1, DQ_WARPS_N: tl.constexpr = 1,
                   LOWERING_OPTIONS: tl.constexpr = ""):
    tl.assume(scale > 0)
    if SOFTCAP: tl.assume(softcap > 0)  # noqa: E701
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    if SERIAL_DQ:
        # (Launch it only through tilec.flash_bwd._launch_serial: its grid's
        # axis 0 is S, not the manifest's cdiv(seqlen_k, BLOCK_N), which
        # would add past the S slices.)
        # One launch of the deterministic fused backward (ATOMIC_DQ): its
        # grid's axis 0 is the launch's S key blocks n_base + [0, S), and
        # program_id(0) = s adds its dQᵀ into dq_accum slice s, which no
        # other program of the launch touches. Launches run in stream order,
        # so each element's adds come in a fixed order (slice s gets key
        # blocks s, S + s, 2S + s, ...): bitwise deterministic.
        dq_accum = dq_accum + pid_n * stride_dqa_split
        pid_n = pid_n + n_base
    elif CAUSAL and not WINDOW and not ORDERED_DQ:  # the first key blocks (most queries) first
        pid_n, pid_bh = longest_first(pid_n, pid_bh, tl.cdiv(seqlen_k, BLOCK_N), batch * num_heads,
                                      False, seqlen_q, HEAD_DIM)
    b, h = pid_bh // num_heads, pid_bh % num_heads
    hk = h // group
    col0 = pid_n * BLOCK_N
    bq, bk, diag = b, b, causal_offset
    max_q, max_k = seqlen_q, seqlen_k                       # the grid's (dropout's counters)
    if VARLEN:  # sequence b, as the forward's VARLEN (the caller passes stride_*b = stride_*s)
        bq, bk, seqlen_q, seqlen_k = sequence_bounds(cu_seqlens_q, cu_seqlens_k, seqused_k,
                                                     use_seqused_k, b, err, total_q, total_k,
                                                     max_q, max_k)
        diag = seqlen_k - seqlen_q
        if col0 >= seqlen_k:  # past this sequence's keys (the caller zeroed dk, dv)
            return
    qv = tl.view(q + (bq * stride_qb + h * stride_qh), (seqlen_q, HEAD_DIM), (stride_qs, 1))
    kv = tl.view(k + (bk * stride_kb + hk * stride_kh), (seqlen_k, HEAD_DIM), (stride_ks, 1))
    vv = tl.view(v + (bk * stride_vb + hk * stride_vh), (seqlen_k, HEAD_DIM), (stride_vs, 1))
    dov = tl.view(do + (bq * stride_dob + h * stride_doh), (seqlen_q, HEAD_DIM), (stride_dos, 1))
    dkv = tl.view(dk + (bk * stride_dkb + h * stride_dkh), (seqlen_k, HEAD_DIM), (stride_dks, 1))
    dvv = tl.view(dv + (bk * stride_dvb + h * stride_dvh), (seqlen_k, HEAD_DIM), (stride_dvs, 1))
    lse2v = tl.view(lse2 + (bq * stride_lseb + h * stride_lseh), (seqlen_q,), (1,))
    deltav = tl.view(delta + (bq * stride_lseb + h * stride_lseh), (seqlen_q,), (1,))
    D = max(16, tl.next_power_of_2(HEAD_DIM))
    # The head dim in power-of-two column pieces (pc, pw), as the forward's
    # (strategy.bwd_head_dim_pieces: d96 = 64 + 32, d192 = 128 + 64; a power
    # of two, SPLIT_D > 1, or a piece whose dots have no warp grid: one tile
    # of width D): K, V, Q, dO are loaded per piece, Sᵀ and dPᵀ sum the
    # pieces' dots, dK and dV keep one accumulator per piece, and the fused
    # kernel adds one dQᵀ per piece (its head-dim rows). WN, DQWN: each
    # piece's warp grid for its dK/dV and dQᵀ dots (strategy.dot_warps_n:
    # WARPS_N / DQ_WARPS_N where the piece's width allows).
    PIECES = bwd_head_dim_pieces(HEAD_DIM, SPLIT_D, NUM_WARPS, BLOCK_N, WARPS_N,
                                 BLOCK_M if ATOMIC_DQ else 0, DQ_WARPS_N)
    WN = [dot_warps_n(BLOCK_N, pw // SPLIT_D, NUM_WARPS, WARPS_N) for pc, pw in PIECES]
    DQWN = [dot_warps_n(pw // SPLIT_D, BLOCK_M, NUM_WARPS, DQ_WARPS_N) if ATOMIC_DQ else 1
            for pc, pw in PIECES]
    # The fused kernel's blocked dq_accum: R head-dim rows per query block
    # (the pieces' total: head_dim rounded up to 16, or D for one tile).
    R = PIECES[-1][0] + PIECES[-1][1]
    if ATOMIC_DQ and VARLEN:
        # dQᵀ of this (sequence, head): element (d, i) is dq_accum[bq + i, h, d].
        dqtv = tl.view(dq_accum + (bq * stride_dqab + h * stride_dqah), (HEAD_DIM, seqlen_q),
                       (1, stride_dqas))
    slope = None
    if ALIBI:
        slope = tl.load(alibi + (b * stride_alibi_b + h))
    kps = [tl.load(kv, (col0, pc), (BLOCK_N, pw)) for pc, pw in PIECES]
    vps = [tl.load(vv, (col0, pc), (BLOCK_N, pw)) for pc, pw in PIECES]
    c = scale * LOG2E
    # SPLIT_D > 1 (head_dim > 128): program_id(2) owns head_dim columns
    # [c0, c0 + DS) of dK and dV, so its accumulators stay 2·BLOCK_N·DS f32;
    # S and dP (full head_dim) are computed by each of the SPLIT_D programs.
    DS = D // SPLIT_D
    c0 = 0
    if SPLIT_D > 1:
        c0 = tl.program_id(2) * DS
    dk_accs = [tl.zeros((BLOCK_N, pw // SPLIT_D), tl.float32) for pc, pw in PIECES]
    dv_accs = [tl.zeros((BLOCK_N, pw // SPLIT_D), tl.float32) for pc, pw in PIECES]
    kts = kps                                               # dQᵀ's A operands are Kᵀ of these columns
    if ATOMIC_DQ and SPLIT_D > 1:
        kts = [tl.load(kv, (col0, c0), (BLOCK_N, DS))]
    kq = (col0 - diag + tl.arange(0, BLOCK_N))[:, None]     # this program's keys (rows of Sᵀ), aligned
    if DROPOUT:
        keys = (col0 + tl.arange(0, BLOCK_N))[:, None]
        rp = 1.0 / (1.0 - dropout_p)
    # The query blocks, in one run-time loop (RANGES: its bounds).
    nq = tl.cdiv(seqlen_q, BLOCK_M)
    RANGES = ((0, nq),)
    if ORDERED_DQ:
        # The deterministic fused kernel in one launch (ATOMIC_DQ, no
        # window, not varlen): the key blocks of a (batch, head) add into
        # query block i's dQᵀ one after another, in the order the GPU starts
        # them (program_id(0) counts down: the last key block first), each
        # waiting for its turn on the block's counter, so every element's
        # adds come in a fixed order (bitwise deterministic) into one region
        # per head, which stays in L2 like the atomic form's; the serial
        # form's S regions per launch did not (session 15, run 5). A block
        # waits only for blocks that started before it, so no wait is
        # endless. Turn of key block n at query block i: the visitors of i
        # after n, i.e. last(i) - n, last(i) the last key block that sees
        # i. Causal: the loop starts at the first query block that sees key
        # col0, so the blocks a program visits are exactly those the turn
        # formula counts (tile-split-masked-loops skips nothing here: the
        # turn ops write memory), and the heaviest key blocks start last
        # (no longest_first: it would start blocks after the ones they wait
        # for). A block's turn is passed at the start of the program's next
        # query block, not right after its adds (the pass's release fence
        # would wait for them: 0.79x of the atomic form against 0.85x at d128,
        # H200, session 16 run 1); the first block passes on slot nq, which
        # nobody waits on. turns: (SPLIT_D, batch * num_heads, nq + 1)
        # zeroed int32.
        turn_base = turns + (tl.program_id(2) * (batch * num_heads) + pid_bh) * (nq + 1)
        last_n = tl.cdiv(seqlen_k, BLOCK_N) - 1
        if CAUSAL:
            RANGES = ((tl.maximum(col0 - diag, 0) // BLOCK_M, nq),)
    for lo, hi in RANGES:
        for i in range(lo, hi):
            row0 = i * BLOCK_M
            if ORDERED_DQ:  # read early: by the adds the turn has usually come
                seen = tl.load(turn_base + i, volatile=True)
                tl.pass_turn(turn_base + tl.where(i > lo, i - 1, nq))  # the previous block's
            qps = [tl.load(qv, (row0, pc), (BLOCK_M, pw)) for pc, pw in PIECES]
            dops = [tl.load(dov, (row0, pc), (BLOCK_M, pw)) for pc, pw in PIECES]
            l2 = tl.load(lse2v, (row0,), (BLOCK_M,))
            di = tl.load(deltav, (row0,), (BLOCK_M,))
            st = dot_pieces(kps, qps, WARPS_N)                     # Sᵀ = K·Qᵀ
            rows = (row0 + tl.arange(0, BLOCK_M))[None, :]      # the queries: columns of Sᵀ
            mask = rows < seqlen_q
            if CAUSAL or WINDOW:
                mask = visible(mask, rows, kq, window_left, window_right, CAUSAL, WINDOW)
            pt, tt = probabilities(st, mask, l2[None, :], c, scale, softcap, slope, rows, kq,
                                   CAUSAL, SOFTCAP, ALIBI)      # Pᵀ
            qs, dos = qps, dops
            if SPLIT_D > 1:
                qs = [tl.load(qv, (row0, c0), (BLOCK_M, DS))]
                dos = [tl.load(dov, (row0, c0), (BLOCK_M, DS))]
            if DROPOUT:  # the forward's mask, regenerated (transposed counters)
                keep = dropout_keep(seed, rng_offset, dropout_p, pid_bh, rows, keys, max_q, max_k)
                ptd = tl.where(keep, pt * rp, 0.0).to(DTYPE)    # dV += (P∘Z)ᵀ·dO
            else:
                ptd = pt.to(DTYPE)                              # dV += Pᵀ·dO
            dv_accs = [tl.dot(ptd, dop, acc, warps_n=wn) for dop, acc, wn in zip(dos, dv_accs, WN)]
            dpt = dot_pieces(vps, dops, WARPS_N)                   # dPᵀ = V·dOᵀ
            if DROPOUT:
                dpt = tl.where(keep, dpt * rp, 0.0)
            dst = pt * (dpt - di[None, :])                      # dSᵀ = Pᵀ ∘ (dPᵀ − Delta)
            if SOFTCAP:
                dst = dst * (1.0 - tt * tt)
            dk_accs = [tl.dot(dst.to(DTYPE), qp, acc, warps_n=wn)
                       for qp, acc, wn in zip(qs, dk_accs, WN)]  # dK += dSᵀ·Q
            if ATOMIC_DQ:
                # FA2's dQ: dQ_iᵀ += Kᵀ·dSᵀ (D x BLOCK_M, rows = head_dim
                # split over the warps), added atomically into f32 dq_accum;
                # unscaled: the caller multiplies by scale once, when it
                # converts (not BLOCK_M·D multiplies per iteration).
                # DQ_WARPS_N > 1: on a (NUM_WARPS / DQ_WARPS_N) x DQ_WARPS_N
                # grid (FA2's dQ atom layout), Kᵀ read transposed from K's tile.
                # SPLIT_D > 1: this program adds dQᵀ's rows [c0, c0 + DS) only
                # (Kᵀ of its columns), so the SPLIT_D programs add each element once.
                # Pieces: one dQᵀ dot per piece, adding its rows [pc, pc + pw).
                # ORDERED_DQ: the adds of all pieces in this block's turn.
                for (pc, pw), ktp, dqwn in zip(PIECES, kts, DQWN):
                    dqt = tl.dot(tl.trans(ktp), dst.to(DTYPE),
                                 tl.zeros((pw // SPLIT_D, BLOCK_M), tl.float32), warps_n=dqwn)
                    if ORDERED_DQ and pc == 0:
                        last = last_n
                        if CAUSAL:  # the last key block some row of query block i sees
                            last = tl.minimum(last_n, ((i + 1) * BLOCK_M - 1 + diag) // BLOCK_N)
                        tl.wait_turn(turn_base + i, last - pid_n, seen)
                    if VARLEN:
                        tl.atomic_add(dqtv, (c0 if SPLIT_D > 1 else pc, row0), dqt)
                    else:
                        # dq_accum is (batch, heads, cdiv(seqlen_q, BLOCK_M), R, BLOCK_M):
                        # query block i's dQᵀ as an R x BLOCK_M tile of 8x8 row-major
                        # blocks (DQ_ACCUM_BLOCK), so each thread's accumulator
                        # pair is adjacent (one red.global.add.v2.f32 on sm_90)
                        # and a warp's 32 pairs are one 256-byte block: 2 L2
                        # requests per red, where row-major rows made 8 (4x FA2's
                        # L2 requests, the reds stalled on a full memory queue).
                        # The tile lies inside its view (no bounds predicates;
                        # rows past seqlen_q and columns past head_dim are padding
                        # flash_bwd_convert_dq drops).
                        blk = dq_accum_tile(dq_accum + (bq * stride_dqab + h * stride_dqah + row0 * R),
                                            R, BLOCK_M)
                        tl.atomic_add(blk, (c0 if SPLIT_D > 1 else pc, 0), dqt)
        if ORDERED_DQ:  # the last block's turn
            tl.pass_turn(turn_base + tl.where(hi > lo, hi - 1, nq))
    for (pc, pw), acc in zip(PIECES, dk_accs):
        tl.store(dkv, (col0, c0 if SPLIT_D > 1 else pc), (acc * scale).to(DTYPE))
    for (pc, pw), acc in zip(PIECES, dv_accs):
        tl.store(dvv, (col0, c0 if SPLIT_D > 1 else pc), acc.to(DTYPE))
