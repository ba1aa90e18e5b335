"""Split-KV decode attention (flash-decoding) in the tilec DSL.

One program per (split, Q row block × KV head, batch). The query heads that
share a KV head are packed into the Q tile's rows (pack-GQA): row r of the
tile is query head hk·G + r // seqlen_q at query position r % seqlen_q, so a
K/V tile loaded once serves all G = heads / kv_heads query heads. q arrives
packed as (batch, heads, seqlen_q, d) with rows of one KV head's group
adjacent (stride_qr apart), which python/tilec/flash_decode.py arranges.

Each split covers a contiguous range of key blocks of its sequence and
writes either the final output (SPLIT=False: O in DTYPE, lse with +inf for
rows that saw no key) or a partial (SPLIT=True: O in f32 and lse in f32, −inf
for an empty split), merged by kernels/flash_combine.py.

Key visibility, flash_attn's semantics with seqlen_k the sequence's cache
length: query s sees key j when j < seqlen_k and, with CAUSAL, j ≤ s +
seqlen_k − seqlen_q (bottom-right alignment); a window (left, right) limits j
to [s + seqlen_k − seqlen_q − left, s + seqlen_k − seqlen_q + right]. With
SOFTCAP scores are softcap·tanh(scale·q·k / softcap); ALiBi then adds
−slope·|s + seqlen_k − seqlen_q − j| (slopes per packed row). The formulas
are kernels/flash_fwd.py's.

The running max starts at −1e30, not −inf: a row that sees no key of a block
(causal rows near a split's end, windows) then keeps exp(−inf − m) = 0
instead of exp(−inf + inf) = NaN, and l = 0 marks a row that saw nothing.
"""

from __future__ import annotations

import tilec
from tilec import language as tl
from tilec.strategy import Strategy

_S = Strategy()  # the strategy record: its defaults are the knobs' defaults


def _name(DTYPE, HEAD_DIM, SPLIT, CAUSAL, PAGED, PAGE_SIZE, PER_BATCH, BLOCK_M, BLOCK_N, WINDOW,
          ALIBI, SOFTCAP, BATCH_IDX, LEFTPAD, QPOS, NUM_WARPS, **_):
    flags = "".join(f for f, on in (("_split", SPLIT), ("_causal", CAUSAL), ("_softcap", SOFTCAP), (f"_page{PAGE_SIZE}", PAGED),
                                    ("_seqlens", PER_BATCH), ("_window", WINDOW), ("_alibi", ALIBI),
                                    ("_bidx", BATCH_IDX), ("_leftpad", LEFTPAD)) if on)
    return f"flash_decode_{DTYPE.name}_d{HEAD_DIM}_m{BLOCK_M}n{BLOCK_N}w{NUM_WARPS}_q{QPOS}{flags}"


@tilec.jit(grid=("num_splits", "cdiv(rows_q, BLOCK_M) * num_heads_k", "batch"), name=_name,
           num_warps="NUM_WARPS", num_stages="NUM_STAGES",
           variant={"dtype": "DTYPE", "head_dim": "HEAD_DIM", "block_m": "BLOCK_M", "split": "SPLIT"})
def flash_decode(q: tl.ptr(DTYPE), k: tl.ptr(DTYPE), v: tl.ptr(DTYPE), o: tl.ptr(ODTYPE),
                 lse: tl.ptr(tl.float32), cache_seqlens: tl.ptr(tl.int32), block_table: tl.ptr(tl.int32),
                 cache_batch_idx: tl.ptr(tl.int32), cache_leftpad: tl.ptr(tl.int32),
                 alibi_rows: tl.ptr(tl.float32),
                 rows_q: tl.int32, seqlen_q: tl.int32, seqlen_k_all: tl.int32, num_heads_k: tl.int32,
                 batch: tl.int32, num_splits: tl.int32, window_left: tl.int32, window_right: tl.int32,
                 stride_qb: tl.int64, stride_qk: tl.int64, stride_qr: tl.int64,
                 stride_kb: tl.int64, stride_ks: tl.int64, stride_kh: tl.int64,
                 stride_vb: tl.int64, stride_vs: tl.int64, stride_vh: tl.int64,
                 stride_osplit: tl.int64, stride_ob: tl.int64, stride_ok: tl.int64, stride_or: tl.int64,
                 stride_lsplit: tl.int64, stride_lb: tl.int64, stride_lk: tl.int64,
                 stride_btb: tl.int64, stride_ab: tl.int64, stride_ak: tl.int64,
                 scale: tl.float32, softcap: tl.float32,
                 DTYPE: tl.constexpr = tl.float16, ODTYPE: tl.constexpr = tl.float16,
                 HEAD_DIM: tl.constexpr = 128, SPLIT: tl.constexpr = False,
                 CAUSAL: tl.constexpr = False, WINDOW: tl.constexpr = False,
                 ALIBI: tl.constexpr = False, SOFTCAP: tl.constexpr = False, PAGED: tl.constexpr = False,
                 PAGE_SIZE: tl.constexpr = 64, PER_BATCH: tl.constexpr = False,
                 BATCH_IDX: tl.constexpr = False, LEFTPAD: tl.constexpr = False,
                 QPOS: tl.constexpr = "mod",
                 BLOCK_M: tl.constexpr = 64, BLOCK_N: tl.constexpr = 64,
                 NUM_WARPS: tl.constexpr = _S.num_warps, NUM_STAGES: tl.constexpr = _S.num_stages):
    tl.assume(scale > 0)
    split = tl.program_id(0)
    pid_mk = tl.program_id(1)
    b = tl.program_id(2)
    pid_m, hk = pid_mk // num_heads_k, pid_mk % num_heads_k
    D = max(16, tl.next_power_of_2(HEAD_DIM))
    # This sequence's keys: cache rows [leftpad, seqlen) of cache batch bc.
    seqlen_k = seqlen_k_all
    if PER_BATCH:
        seqlen_k = tl.load(cache_seqlens + b)
    bc = b
    if BATCH_IDX:
        bc = tl.load(cache_batch_idx + b)
    first = 0
    if LEFTPAD:
        first = tl.load(cache_leftpad + b)
    seqlen_k = seqlen_k - first
    qv = tl.view(q + (b * stride_qb + hk * stride_qk), (rows_q, HEAD_DIM), (stride_qr, 1))
    row0 = pid_m * BLOCK_M
    qt = tl.load(qv, (row0, 0), (BLOCK_M, D))
    # The diagonal key of each packed row: its query position r % seqlen_q
    # (QPOS "mod") plus seqlen_k − seqlen_q. With one query head per KV head
    # (QPOS "row") the position is r itself (rows past rows_q are never
    # stored), with one query token (QPOS "one") it is 0: both keep the mask
    # affine, so tile-split-masked-loops can leave full blocks unmasked.
    if QPOS == "mod":
        diag = ((row0 + tl.arange(0, BLOCK_M)) % seqlen_q + (seqlen_k - seqlen_q))[:, None]
    elif QPOS == "row":
        diag = (row0 + tl.arange(0, BLOCK_M) + (seqlen_k - seqlen_q))[:, None]
    else:
        diag = (tl.zeros((BLOCK_M,), tl.int32) + (seqlen_k - seqlen_q))[:, None]
    if ALIBI:
        av = tl.view(alibi_rows + (b * stride_ab + hk * stride_ak), (rows_q,), (1,))
        slope = tl.load(av, (row0,), (BLOCK_M,))[:, None]
    # This split's key blocks: the visible range [n_lo, n_hi) cut into num_splits pieces.
    n_lo = 0
    n_hi = tl.cdiv(seqlen_k, BLOCK_N)
    if WINDOW:
        n_lo = tl.maximum(seqlen_k - seqlen_q - window_left, 0) // BLOCK_N
        n_hi = tl.minimum(n_hi, tl.maximum(tl.cdiv(seqlen_k + window_right, BLOCK_N), 0))
    per_split = tl.cdiv(tl.maximum(n_hi - n_lo, 0), num_splits)
    j_lo = n_lo + split * per_split
    j_hi = tl.minimum(j_lo + per_split, n_hi)
    # The views end with the split: the prefetch of block j_hi (tile-pipeline
    # loads one block ahead) then reads nothing instead of the next split's keys.
    key_end = tl.minimum(seqlen_k, j_hi * BLOCK_N)
    if not PAGED:
        kv = tl.view(k + (bc * stride_kb + first * stride_ks + hk * stride_kh), (key_end, HEAD_DIM),
                     (stride_ks, 1))
        vv = tl.view(v + (bc * stride_vb + first * stride_vs + hk * stride_vh), (key_end, HEAD_DIM),
                     (stride_vs, 1))
    m = tl.full((BLOCK_M,), -1e30, tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for j in range(j_lo, j_hi):
        col0 = j * BLOCK_N
        if PAGED:
            # BLOCK_N divides PAGE_SIZE: a key block lies in one page. The
            # index is clamped to the split's last page, so the prefetch past
            # the end reads a table entry that exists (and then no keys).
            last = tl.maximum(key_end - 1, 0)
            page = tl.load(block_table + (bc * stride_btb + tl.minimum(col0, last) // PAGE_SIZE))
            in_page = col0 % PAGE_SIZE
            rows_left = tl.maximum(tl.minimum(key_end - (col0 - in_page), PAGE_SIZE), 0)
            kpage = tl.view(k + (page * stride_kb + hk * stride_kh), (rows_left, HEAD_DIM), (stride_ks, 1))
            vpage = tl.view(v + (page * stride_vb + hk * stride_vh), (rows_left, HEAD_DIM), (stride_vs, 1))
            kt = tl.load(kpage, (in_page, 0), (BLOCK_N, D))
            vt = tl.load(vpage, (in_page, 0), (BLOCK_N, D))
        else:
            kt = tl.load(kv, (col0, 0), (BLOCK_N, D))
            vt = tl.load(vv, (col0, 0), (BLOCK_N, D))
        s = tl.dot(qt, kt, trans_b=True) * (scale / softcap if SOFTCAP else scale)
        if SOFTCAP:
            s = softcap * tl.tanh(s)                         # softcap · tanh(scale · q·k / softcap)
        cols = (col0 + tl.arange(0, BLOCK_N))[None, :]
        if ALIBI:
            s = s - slope * tl.maximum(diag - cols, cols - diag).to(tl.float32)
        mask = cols < seqlen_k
        if CAUSAL:
            mask = mask & (cols <= diag)
        if WINDOW:
            mask = mask & (cols >= diag - window_left) & (cols <= diag + window_right)
        s = tl.where(mask, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(DTYPE), vt, acc * alpha[:, None])
        m = m_new
    seen = l > 0.0
    ov = tl.view(o + (split * stride_osplit + b * stride_ob + hk * stride_ok), (rows_q, HEAD_DIM),
                 (stride_or, 1))
    lv = tl.view(lse + (split * stride_lsplit + b * stride_lb + hk * stride_lk), (rows_q,), (1,))
    tl.store(ov, (row0, 0), (acc / tl.where(seen, l, 1.0)[:, None]).to(ODTYPE))
    if SPLIT:
        tl.store(lv, (row0,), m + tl.log(l))                 # −inf where the split saw nothing
    else:
        tl.store(lv, (row0,), tl.where(seen, m + tl.log(l), float("inf")))
