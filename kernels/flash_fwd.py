"""FlashAttention-2 forward in the tilec DSL, written the way the math reads,
with flash_attn 2.x's variants as constexpr switches.

One program computes a BLOCK_M-row block of O = softmax(S)·V for one
(batch, head) with a blocked loop over K/V and the online softmax written
naively (exp, the scale as a multiply, the rescale every iteration, the
division by the row sum after the loop). Masks are ordinary math (one
tl.where over a conjunction of affine comparisons); making them fast (skipped,
unmasked and masked blocks) is the compiler's job. tl.assume(scale > 0)
declares the scale positive (launches check it), so the compiler emits no
fallback loop for a negative scale.

Semantics are flash_attn 2.x's (python/tilec/flash_attn.py maps its API onto
these parameters):
- Layout (batch, seqlen, heads, head_dim), strides in elements (last
  dimension contiguous); lse (batch, heads, seqlen_q) f32.
- GQA/MQA: query head h reads K/V head h // kv_group (kv_group = hq / hk).
- Alignment: query i corresponds to key i + seqlen_k - seqlen_q (bottom right).
  CAUSAL: query i sees keys j <= i + seqlen_k - seqlen_q.
  WINDOW: it sees i + sk - sq - window_left <= j <= i + sk - sq + window_right
  (both bounds runtime values; the caller maps -1 to seqlen_k, as flash_attn;
  window_right >= 0, and with CAUSAL it is not read: a window (w, 0) runs
  as CAUSAL + WINDOW).
- SOFTCAP: scores softcap * tanh(scale * q·k / softcap).
- ALIBI: the bias -slope * |i + sk - sq - j| added after the softcap, slope
  alibi[b * stride_alibi_b + h] (f32; stride 0 for slopes of shape (heads,)).
- SCORE_MOD / MASK_MOD: plain Python functions, FlexAttention's hooks
  score_mod(s, b, h, q_idx, kv_idx) and mask_mod(b, h, q_idx, kv_idx) (q_idx
  (BLOCK_M, 1), kv_idx (1, BLOCK_N), unaligned positions), inlined when the
  kernel is specialized; applied after the switches above. tilec.flex_attention
  runs them through kernels/flex_fwd.py (torch's layout, lse -inf rows).
- VARLEN: q/k/v/o packed (total, heads, head_dim); sequence b's rows are
  cu_seqlens_q/k[b]..[b+1] (its key count seqused_k[b] when use_seqused_k);
  lse (heads, total_q); seqlen_q/seqlen_k are the maxima (the grid's size).
- Rows that see no key get out = 0 and lse = +inf.
"""

from __future__ import annotations

import tilec
from tilec import language as tl
from tilec.strategy import Strategy, head_dim_pieces

_S = Strategy()  # the strategy record: its defaults are the knobs' defaults


def _name(DTYPE, HEAD_DIM, CAUSAL, WINDOW=False, SOFTCAP=False, ALIBI=False, VARLEN=False,
          SCORE_MOD=None, MASK_MOD=None, DROPOUT=False, RETURN_PROBS=False, SPLIT_HEAD_DIM=True, **_):
    from tilec.frontend import static_key  # a digest per user hook: two hooks, two names

    mods = "".join(f"_{what}_{static_key(f)[-17:-1]}" for what, f in (("score", SCORE_MOD), ("mask", MASK_MOD))
                   if f is not None)
    return (f"flash_fwd_{DTYPE.name}_d{HEAD_DIM}" + "_causal" * CAUSAL + "_window" * WINDOW
            + "_softcap" * SOFTCAP + "_alibi" * ALIBI + "_varlen" * VARLEN + "_dropout" * DROPOUT
            + "_probs" * RETURN_PROBS + "_padded" * (not SPLIT_HEAD_DIM and len(head_dim_pieces(HEAD_DIM)) > 1)
            + mods)


# Helpers shared with the backward (kernels/flash_bwd.py), inlined where they
# are called. `rows` are query positions and `kq` the query position each key
# aligns with (key - (seqlen_k - seqlen_q)), as broadcastable tiles of either
# orientation: (BLOCK_M, 1) x (1, BLOCK_N) here, transposed in the dK/dV kernel.

def alibi_bias(s, slope, rows, kq, CAUSAL):
    """s - slope * |i + sk - sq - j|: ALiBi's bias (causal: kq <= rows),
    written as s + |...|·(-slope) so that it contracts to one FMA."""
    dist = rows - kq if CAUSAL else tl.maximum(rows - kq, kq - rows)
    return s + dist.to(tl.float32) * -slope


def visible(mask, rows, kq, window_left, window_right, CAUSAL, WINDOW):
    """`mask` and the causal/window conditions: which keys each query sees.
    With CAUSAL the window's right bound is implied (window_right >= 0: the
    callers map -1 to seqlen_k) and not tested."""
    if CAUSAL:
        mask = mask & (kq <= rows)
    if WINDOW:
        mask = mask & (kq >= rows - window_left)
        if not CAUSAL:
            mask = mask & (kq <= rows + window_right)
    return mask


def dot_pieces(qs, ks, warps_n=1):
    """Q·Kᵀ from head-dim pieces (tuples of tiles, piece i of Q and of K
    holding the same columns): Σ_i q_i·k_iᵀ, accumulated into one S (the
    backward's S, dP and their transposes too, on its warp grid)."""
    s = tl.dot(qs[0], ks[0], trans_b=True, warps_n=warps_n)
    for qt, kt in zip(qs[1:], ks[1:]):
        s = tl.dot(qt, kt, s, trans_b=True, warps_n=warps_n)
    return s


def scores(qs, ks, col0, rows, diag, b, h, seqlen_q, seqlen_k, scale, softcap, slope,
           window_left, window_right, BLOCK_N, CAUSAL, WINDOW, SOFTCAP, ALIBI, SCORE_MOD, MASK_MOD):
    """The forward's scores of one K/V block: S = scale·Q·Kᵀ (Q and K as
    tuples of head-dim pieces), capped, biased, hooked, and -inf where
    masked (rows/diag/slope None when the switches do not use them)."""
    s = dot_pieces(qs, ks)
    unit = softcap if SOFTCAP else scale                    # the scores' last factor (> 0)
    if SOFTCAP:                                             # S = softcap · tanh(scale · Q·Kᵀ / softcap)
        s = tl.tanh(s * (scale / softcap))
    if CAUSAL or WINDOW or ALIBI:
        kq = (col0 - diag + tl.arange(0, BLOCK_N))[None, :]  # the query row each key aligns with
        mask = kq < seqlen_q                                # keys past seqlen_k do not exist
    else:
        cols = (col0 + tl.arange(0, BLOCK_N))[None, :]
        mask = cols < seqlen_k                              # keys past seqlen_k do not exist
    if ALIBI:  # the bias in units of the last factor, so the factor still folds into exp2's FMA
        s = alibi_bias(s, slope / unit, rows, kq, CAUSAL)
    s = s * unit                                            # S = scale·Q·Kᵀ (or capped), biased
    if CAUSAL and WINDOW:  # a causal window implies kq < seqlen_q for every row that is stored
        # (kq <= rows < seqlen_q; rows past the end read the view's zero padding).
        # The dense causal kernel keeps the test.
        mask = visible(kq >= rows - window_left, rows, kq, window_left, window_right, CAUSAL, False)
    elif CAUSAL or WINDOW:
        mask = visible(mask, rows, kq, window_left, window_right, CAUSAL, WINDOW)
    if SCORE_MOD or MASK_MOD:  # user hooks, plain Python traced in (FlexAttention's model)
        kv_idx = (col0 + tl.arange(0, BLOCK_N))[None, :]
        s = SCORE_MOD(s, b, h, rows, kv_idx) if SCORE_MOD else s
        mask = mask & MASK_MOD(b, h, rows, kv_idx) if MASK_MOD else mask
    return tl.where(mask, s, float("-inf"))


# longest_first's sections: the bytes of f16/bf16 rows (two tensors: K and
# V, or Q and dO) the programs of one section may stream at once from L2
# (H100/H200: 50 MB of L2, A100 40).
SECTION_L2_BYTES = 16 << 20


def longest_first(pid_block, pid_bh, blocks, programs, heavy_last, seqlen, HEAD_DIM):
    """A causal mask gives the blocks of one (batch, head) unequal work: key
    block 0 sees every query, query block 0 one key block. The GPU starts a
    grid (blocks, programs) in blockIdx order, x fastest: one head's blocks
    together, so the last heads' heaviest blocks start last and run alone at
    the launch's tail (and the NVVM lowering hands program_id(0) out from the
    top, which puts a head's key block 0 last of its blocks). Renumbered here
    longest processing time first, in sections of heads: the i-th program
    started in a section of S (batch, head)s takes block i // S of its head
    i % S, every head's heaviest block first, the lightest last. S keeps
    the section's streamed rows (`seqlen` of them per head, two tensors)
    within SECTION_L2_BYTES: ordered across all heads, 256 heads of 2k keys
    at d64 (128 MB) thrashed L2 and the pair's causal backward lost 8%
    (session 14 run 4). heavy_last: the heaviest block is the last one
    (query blocks), else the first (key blocks). A permutation of the grid
    on every target; the start order is the NVVM lowering's."""
    section = tl.maximum((SECTION_L2_BYTES // (4 * HEAD_DIM)) // tl.maximum(seqlen, 1), 1)
    section = tl.minimum(section, programs)  # so section * blocks <= the grid (no int32 overflow)
    order = pid_bh * blocks + (blocks - 1 - pid_block)  # the start order (axis 0 counts down)
    first = order // (section * blocks) * section       # the section's first (batch, head)
    width = tl.minimum(section, programs - first)        # its (batch, head)s: the last may have fewer
    inner = order - first * blocks
    block = inner // width
    if heavy_last:
        block = blocks - 1 - block
    return block, first + inner % width


def sequence_bounds(cu_seqlens_q, cu_seqlens_k, seqused_k, use_seqused_k, b, err, total_q,
                    total_k, max_q, max_k):
    """VARLEN's sequence b: (first query row, first key row, seqlen_q,
    seqlen_k) from cu_seqlens (seqlen_k from seqused_k when given). Values
    that sequence_error refuses are reported to `err` and give seqlen_q =
    seqlen_k = 0, so the caller's early exit skips the sequence: nothing
    outside q/k (total_q/k rows) is touched."""
    bq, bk = tl.load(cu_seqlens_q + b), tl.load(cu_seqlens_k + b)
    seqlen_q, seqlen_k = tl.load(cu_seqlens_q + b + 1) - bq, tl.load(cu_seqlens_k + b + 1) - bk
    if use_seqused_k:
        seqlen_k = tl.load(seqused_k + b)
    code, v0, v1 = sequence_error(cu_seqlens_q, cu_seqlens_k, seqused_k, use_seqused_k, b,
                                  total_q, total_k, max_q, max_k)
    if code != 0:
        report_sequence_error(err, b, code, v0, v1)
        seqlen_q, seqlen_k = 0, 0
    return bq, bk, seqlen_q, seqlen_k


def _rows_error(cu, b, total, max_len, base, code, v0, v1):
    """sequence_error's checks of one cu_seqlens (codes base..base + 2)."""
    start, end = tl.load(cu + b), tl.load(cu + b + 1)
    if end - start > max_len:
        code, v0, v1 = base + 2, end - start, max_len
    if end > total:
        code, v0, v1 = base + 1, end, total
    if end < start:
        code, v0, v1 = base, start, end
    if start < 0:
        code, v0, v1 = 8 if base == 1 else 9, start, 0
    return code, v0, v1


def sequence_error(cu_seqlens_q, cu_seqlens_k, seqused_k, use_seqused_k, b, total_q, total_k,
                   max_q, max_k):
    """VARLEN's checks of sequence b's values, in the kernel (the host reads
    CUDA tensors' values only on request): (code, v0, v1), code 0 when b's
    rows are inside q/k (total_q/k rows) and no longer than max_seqlen_q/k;
    else flash_attn.SEQUENCE_ERRORS[code] names the check and v0, v1 its
    values (a later check overrides an earlier one: the last is the most basic)."""
    max_len_k = max_k
    if use_seqused_k != 0:  # then only the used keys must fit max_seqlen_k
        max_len_k = total_k
    code, v0, v1 = _rows_error(cu_seqlens_k, b, total_k, max_len_k, 4, 0, 0, 0)
    if use_seqused_k != 0:
        used, len_k = tl.load(seqused_k + b), tl.load(cu_seqlens_k + b + 1) - tl.load(cu_seqlens_k + b)
        if used > max_k:
            code, v0, v1 = 10, used, max_k
        if used > len_k:
            code, v0, v1 = 7, used, len_k
        if used < 0:
            code, v0, v1 = 7, used, len_k
    return _rows_error(cu_seqlens_q, b, total_q, max_q, 1, code, v0, v1)


def report_sequence_error(err, b, code, v0, v1):
    """Writes sequence b's error record (code, v0, v1, 1) to err[4 + 4b..]
    and sets the flag err[0..3] (every program of sequence b writes the same
    words, so no record is torn; the host reads the first bad b's)."""
    idx = tl.arange(0, 4)
    record = tl.where(idx == 0, code, tl.where(idx == 1, v0, tl.where(idx == 2, v1, 1)))
    tl.store(tl.view(err + 4 + 4 * b, (4,), (1,)), (0,), record)
    tl.store(tl.view(err, (4,), (1,)), (0,), tl.full((4,), 1, tl.int32))


def dropout_keep(seed, rng_offset, dropout_p, bh, rows, cols, max_q, max_k):
    """Which elements dropout keeps (a bool tile): element (b, h, i, j) of S
    is kept when tl.rand(seed, rng_offset + ((b·heads + h)·max_q + i)·max_k
    + j) >= dropout_p (bh = b·heads + h; rows i and cols j in either
    orientation; max_q/max_k the grid's seqlens, varlen's maxima): word 0
    of Philox counter quads rng_offset.. of subsequence 0, a CUDA
    generator's offset / 4 (flash_attn._cuda_philox_quads). The backward
    regenerates the same mask from the same counters."""
    offsets = (bh.to(tl.int64) * max_q + rows) * max_k + cols + rng_offset
    return tl.rand(seed, offsets) >= dropout_p


@tilec.jit(grid=("cdiv(seqlen_q, BLOCK_M)", "num_heads", "batch"), name=_name, num_warps="NUM_WARPS",
           num_stages="NUM_STAGES", smem_epilogue="SMEM_EPILOGUE", copy_bounds="COPY_BOUNDS",
           lowering_options="LOWERING_OPTIONS",
           variant={"dtype": "DTYPE", "head_dim": "HEAD_DIM", "causal": "CAUSAL", "window": "WINDOW",
                    "softcap": "SOFTCAP", "alibi": "ALIBI", "varlen": "VARLEN", "block_m": "BLOCK_M"})
def flash_fwd(q: tl.ptr(DTYPE), k: tl.ptr(DTYPE), v: tl.ptr(DTYPE), o: tl.ptr(DTYPE),
              lse: tl.ptr(tl.float32), seqlen_q: tl.int32, seqlen_k: tl.int32,
              num_heads: tl.int32, batch: tl.int32, kv_group: tl.int32,
              stride_qb: tl.int64, stride_qs: tl.int64, stride_qh: tl.int64,
              stride_kb: tl.int64, stride_ks: tl.int64, stride_kh: tl.int64,
              stride_vb: tl.int64, stride_vs: tl.int64, stride_vh: tl.int64,
              stride_ob: tl.int64, stride_os: tl.int64, stride_oh: tl.int64,
              stride_lseb: tl.int64, stride_lseh: tl.int64, scale: tl.float32,
              window_left: tl.int32, window_right: tl.int32, softcap: tl.float32,
              alibi: tl.ptr(tl.float32), stride_alibi_b: tl.int64,
              cu_seqlens_q: tl.ptr(tl.int32), cu_seqlens_k: tl.ptr(tl.int32),
              seqused_k: tl.ptr(tl.int32), use_seqused_k: tl.int32,
              # Only in the VARLEN kernels: the error record and the tensors' row counts.
              err: tl.ptr(tl.int32) if VARLEN else None, total_q: tl.int32 if VARLEN else None,
              total_k: tl.int32 if VARLEN else None,
              # Only in the DROPOUT / RETURN_PROBS kernels (absent from the others' signature):
              dropout_p: tl.float32 if DROPOUT else None, seed: tl.int64 if DROPOUT else None,
              rng_offset: tl.int64 if DROPOUT else None, probs: tl.ptr(DTYPE) if RETURN_PROBS else None,
              stride_pb: tl.int64 if RETURN_PROBS else None, stride_ph: tl.int64 if RETURN_PROBS else None,
              stride_ps: tl.int64 if RETURN_PROBS else None,
              DTYPE: tl.constexpr = tl.float16, HEAD_DIM: tl.constexpr = 128,
              CAUSAL: tl.constexpr = False, WINDOW: tl.constexpr = False,
              SOFTCAP: tl.constexpr = False, ALIBI: tl.constexpr = False, VARLEN: tl.constexpr = False,
              SCORE_MOD: tl.constexpr = None, MASK_MOD: tl.constexpr = None,
              DROPOUT: tl.constexpr = False, RETURN_PROBS: tl.constexpr = False,
              PROBS_BLOCK_N: tl.constexpr = 64, SPLIT_HEAD_DIM: tl.constexpr = True,
              BLOCK_M: tl.constexpr = 64, BLOCK_N: tl.constexpr = 64,
              NUM_WARPS: tl.constexpr = _S.num_warps, NUM_STAGES: tl.constexpr = _S.num_stages,
              SMEM_EPILOGUE: tl.constexpr = _S.smem_epilogue, COPY_BOUNDS: tl.constexpr = _S.copy_bounds,
              LOWERING_OPTIONS: tl.constexpr = _S.lowering_options):
    tl.assume(scale > 0)  # FA2's scale folding needs it; flash_attn_func maps scale <= 0 onto it
    if SOFTCAP: tl.assume(softcap > 0)  # noqa: E701 (it then folds into exp2's constant like the scale)
    pid_m, h, b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    if CAUSAL and not WINDOW:  # the last query blocks (most keys) first (a window's are even)
        pid_m, hb = longest_first(pid_m, b * num_heads + h, tl.cdiv(seqlen_q, BLOCK_M),
                                  batch * num_heads, True, seqlen_k, HEAD_DIM)
        h, b = hb % num_heads, hb // num_heads
    hk = h // kv_group                                      # GQA/MQA: the K/V head of query head h
    row0 = pid_m * BLOCK_M
    bq, bk, max_q, max_k = b, b, seqlen_q, seqlen_k         # views' "batch" rows; the grid's seqlens
    if VARLEN:  # sequence b: rows cu_seqlens[b]..cu_seqlens[b+1] (the caller passes stride_*b = stride_*s)
        bq, bk, seqlen_q, seqlen_k = sequence_bounds(cu_seqlens_q, cu_seqlens_k, seqused_k,
                                                     use_seqused_k, b, err, total_q, total_k,
                                                     max_q, max_k)
        if row0 >= seqlen_q:                                # past this sequence's end (or bad values)
            return
    # Views of this (batch, head)'s rows: seqlen x head_dim.
    qv = tl.view(q + (bq * stride_qb + h * stride_qh), (seqlen_q, HEAD_DIM), (stride_qs, 1))
    kv = tl.view(k + (bk * stride_kb + hk * stride_kh), (seqlen_k, HEAD_DIM), (stride_ks, 1))
    vv = tl.view(v + (bk * stride_vb + hk * stride_vh), (seqlen_k, HEAD_DIM), (stride_vs, 1))
    ov = tl.view(o + (bq * stride_ob + h * stride_oh), (seqlen_q, HEAD_DIM), (stride_os, 1))
    lsev = tl.view(lse + (bq * stride_lseb + h * stride_lseh), (seqlen_q,), (1,))
    # The head dim in power-of-two column pieces (c, w) (strategy.head_dim_pieces:
    # d96 = 64 + 32, d192 = 128 + 64; a power of two is one piece): Q, K, V
    # and O are loaded/stored per piece at its column offset, S sums the
    # pieces' dots, O keeps one accumulator per piece. The views bound the
    # columns, so a last piece past HEAD_DIM reads zeros and stores nothing there.
    D = max(16, tl.next_power_of_2(HEAD_DIM))
    PIECES = head_dim_pieces(HEAD_DIM) if SPLIT_HEAD_DIM else ((0, D),)
    qs = [tl.load(qv, (row0, c), (BLOCK_M, w)) for c, w in PIECES]
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    accs = [tl.zeros((BLOCK_M, w), tl.float32) for c, w in PIECES]
    rows, diag, slope = None, None, None
    if CAUSAL or WINDOW or ALIBI or SCORE_MOD or MASK_MOD:
        rows = (row0 + tl.arange(0, BLOCK_M))[:, None]      # query rows, for masks and ALiBi
        diag = seqlen_k - seqlen_q                          # bottom right: key i + diag aligns with query i
    if ALIBI:
        slope = tl.load(alibi + (b * stride_alibi_b + h))   # one f32 per (batch, head)
    # Causal ALiBi runs the keys from the diagonal down (FlashAttention-2's
    # order): its bias falls with the distance, so a row's max comes in the
    # first blocks and the lazy rescale keeps O's factor 1 in the others (in
    # key order the max rose with nearly every block: a rescale each). A row
    # may then see no key in its first blocks, as in a window.
    REVERSED = ALIBI and CAUSAL
    nblocks = tl.cdiv(seqlen_k, BLOCK_N)
    for j in range(0, nblocks):
        col0 = (nblocks - 1 - j if REVERSED else j) * BLOCK_N
        ks = [tl.load(kv, (col0, c), (BLOCK_N, w)) for c, w in PIECES]
        vs = [tl.load(vv, (col0, c), (BLOCK_N, w)) for c, w in PIECES]
        s = scores(qs, ks, col0, rows, diag, b, h, seqlen_q, seqlen_k, scale, softcap, slope,
                   window_left, window_right, BLOCK_N, CAUSAL, WINDOW, SOFTCAP, ALIBI, SCORE_MOD,
                   MASK_MOD)
        m_new = tl.maximum(m, tl.max(s, 1))                 # online softmax
        if WINDOW or MASK_MOD or REVERSED:  # a row may see keys only in later blocks: keep exp(s - m_new) = 0, not NaN.
            m_new = tl.maximum(m_new, -1e8)  # not -1e30: FA2's fma(m, c, -m·c) would round to ~1e23
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, 1)                        # (the softmax's sum, before dropout)
        if DROPOUT:
            cols = (col0 + tl.arange(0, BLOCK_N))[None, :]
            p = tl.where(dropout_keep(seed, rng_offset, dropout_p, b * num_heads + h,
                                      (row0 + tl.arange(0, BLOCK_M))[:, None], cols, max_q, max_k), p, 0.0)
        accs = [tl.dot(p.to(DTYPE), vt, acc * alpha[:, None]) for vt, acc in zip(vs, accs)]
        m = m_new
    outs = [acc / l[:, None] for acc in accs]               # O = diag(l)⁻¹·acc (per piece)
    lse_rows = m + tl.log(l)                                # lse = m + log(l)
    if DROPOUT:
        outs = [out * (1.0 / (1.0 - dropout_p)) for out in outs]  # the kept elements, scaled by 1/(1-p)
    if CAUSAL or WINDOW or VARLEN or MASK_MOD:  # rows that saw no key: out 0, lse +inf (a causal one is empty in every block)
        empty = l == 0 if WINDOW or MASK_MOD or REVERSED else m == float("-inf")
        outs = [tl.where(empty[:, None], 0.0, out) for out in outs]
        lse_rows = tl.where(empty, float("inf"), lse_rows)
    for (c, w), out in zip(PIECES, outs):
        tl.store(ov, (row0, c), out.to(DTYPE))
    tl.store(lsev, (row0,), lse_rows)
    if RETURN_PROBS:  # testing only (return_attn_probs): S_dmask, a second pass over the keys
        # FlashAttention-2's layout: its key loop runs from the last block to
        # the first and stores exp(S - m) with m the running row max so far,
        # i.e. the max over this and the later blocks of PROBS_BLOCK_N keys
        # (0 while that is -inf); negated where dropout dropped the element.
        pv = tl.view(probs + (b * stride_pb + h * stride_ph), (seqlen_q, seqlen_k), (stride_ps, 1))
        m_run = tl.full((BLOCK_M,), float("-inf"), tl.float32)
        nblocks = tl.cdiv(seqlen_k, PROBS_BLOCK_N)
        for jj in range(0, nblocks):
            col0 = (nblocks - 1 - jj) * PROBS_BLOCK_N
            ks = [tl.load(kv, (col0, c), (PROBS_BLOCK_N, w)) for c, w in PIECES]
            s = scores(qs, ks, col0, rows, diag, b, h, seqlen_q, seqlen_k, scale, softcap, slope,
                       window_left, window_right, PROBS_BLOCK_N, CAUSAL, WINDOW, SOFTCAP, ALIBI,
                       SCORE_MOD, MASK_MOD)
            m_run = tl.maximum(m_run, tl.max(s, 1))
            p = tl.exp(s - tl.where(m_run == float("-inf"), 0.0, m_run)[:, None])
            if DROPOUT:
                cols = (col0 + tl.arange(0, PROBS_BLOCK_N))[None, :]
                p = tl.where(dropout_keep(seed, rng_offset, dropout_p, b * num_heads + h,
                                          (row0 + tl.arange(0, BLOCK_M))[:, None], cols, max_q,
                                          max_k), p, -p)
            tl.store(pv, (row0, col0), p.to(DTYPE))
