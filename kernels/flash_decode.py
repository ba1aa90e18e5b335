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

Paged KV: a key block of BLOCK_N keys is NSUB = BLOCK_N / PAGE_BLOCK (≤ 8) sub-tiles
of PAGE_BLOCK rows (the largest power of two ≤ BLOCK_N dividing the page
size), each read from its own page (one block-table entry each, so pages of
16 feed 64-key blocks: every copy stays a 16-byte chunk per row, and the
copies of the whole block are in flight together). The sub-tiles' scores
share one online-softmax step (one max, one rescale per block).

EARLY_REFILL (GPU plans with flash_decode.EARLY_REFILL; off by default,
measured no faster) compiles the K/V loop with tile-insert-waits'
early-refill schedule: the next block's copies (and its page lookups) are
issued before the wait for the current block, so two blocks are in flight
through the wait. The IR is the same either way.

Bad values cannot make the kernel read outside the cache (the host checks
them only when asked, python/tilec/flash_decode.py CHECK_VALUES): lengths
are clamped to [0, capacity], left padding to [0, length], cache rows and
page numbers to [0, cache_slots).

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
          ALIBI, SOFTCAP, BATCH_IDX, LEFTPAD, QPOS, NUM_WARPS, NUM_STAGES=2, CHUNKS="length", EARLY_REFILL=False,
          FUSED=False, MERGE_SPLITS=64, MERGE_D=32, APPEND=False, **_):
    flags = "".join(f for f, on in (("_split", SPLIT), ("_causal", CAUSAL), ("_softcap", SOFTCAP), (f"_page{PAGE_SIZE}", PAGED),
                                    ("_seqlens", PER_BATCH), ("_window", WINDOW), ("_alibi", ALIBI),
                                    ("_bidx", BATCH_IDX), ("_leftpad", LEFTPAD),
                                    ("_capchunks", CHUNKS == "capacity"), ("_append", APPEND)) if on)
    stages = (f"s{NUM_STAGES}" if NUM_STAGES != 2 else "") + ("r" if EARLY_REFILL else "")
    fused = f"_fused{MERGE_SPLITS}x{MERGE_D}" if FUSED and SPLIT else ""
    return f"flash_decode_{DTYPE.name}_d{HEAD_DIM}_m{BLOCK_M}n{BLOCK_N}w{NUM_WARPS}{stages}_q{QPOS}{flags}{fused}"


def _page_tiles(k, v, block_table, bt_row, col, key_end, cache_slots, stride_kb, stride_ks, stride_kh,
                stride_vb, stride_vs, stride_vh, hk, PAGE_SIZE, PAGE_BLOCK, D, HEAD_DIM):
    """The K and V sub-tiles of PAGE_BLOCK keys from key `col` on (PAGE_BLOCK
    divides PAGE_SIZE and col, so they lie in one page). The table index is
    clamped to the split's last key, so a sub-tile past the end (the
    prefetch past a split, a block's tail) reads a table entry that exists,
    and then no keys (its view has no rows left)."""
    last = tl.maximum(key_end - 1, 0)
    page = tl.load(block_table + (bt_row + tl.minimum(col, last) // PAGE_SIZE))
    page = tl.minimum(tl.maximum(page, 0), cache_slots - 1)
    in_page = col % PAGE_SIZE
    rows_left = tl.maximum(tl.minimum(key_end - (col - in_page), PAGE_SIZE), 0)
    kpage = tl.view(k + (page * stride_kb + hk * stride_kh), (rows_left, HEAD_DIM), (stride_ks, 1))
    vpage = tl.view(v + (page * stride_vb + hk * stride_vh), (rows_left, HEAD_DIM), (stride_vs, 1))
    return tl.load(kpage, (in_page, 0), (PAGE_BLOCK, D)), tl.load(vpage, (in_page, 0), (PAGE_BLOCK, D))


def _scores(qt, kt, col, diag, slope, seqlen_k, window_left, window_right, scale, softcap,
            CAUSAL, WINDOW, ALIBI, SOFTCAP, N):
    """Masked scores of the Q tile against N keys from key `col` on."""
    s = tl.dot(qt, kt, trans_b=True) * (scale / softcap if SOFTCAP else scale)
    if SOFTCAP:
        s = softcap * tl.tanh(s)                         # softcap · tanh(scale · q·k / softcap)
    cols = (col + tl.arange(0, N))[None, :]
    if ALIBI:
        s = s - slope * tl.maximum(diag - cols, cols - diag).to(tl.float32)
    mask = cols < seqlen_k
    if CAUSAL:
        mask = mask & (cols <= diag)
    if WINDOW:
        mask = mask & (cols >= diag - window_left) & (cols <= diag + window_right)
    return tl.where(mask, s, float("-inf"))


@tilec.jit(grid=("num_splits", "cdiv(rows_q, BLOCK_M) * num_heads_k", "batch"), name=_name,
           num_warps="NUM_WARPS", num_stages="NUM_STAGES", early_refill="EARLY_REFILL",
           variant={"dtype": "DTYPE", "head_dim": "HEAD_DIM", "block_m": "BLOCK_M", "split": "SPLIT"})
def flash_decode(q: tl.ptr(DTYPE), k: tl.ptr(DTYPE), v: tl.ptr(DTYPE), o: tl.ptr(ODTYPE),
                 lse: tl.ptr(tl.float32), cache_seqlens: tl.ptr(tl.int32), block_table: tl.ptr(tl.int32),
                 cache_batch_idx: tl.ptr(tl.int32), cache_leftpad: tl.ptr(tl.int32),
                 alibi_rows: tl.ptr(tl.float32), o_final: tl.ptr(DTYPE), lse_final: tl.ptr(tl.float32),
                 counters: tl.ptr(tl.int32), k_new: tl.ptr(DTYPE), v_new: tl.ptr(DTYPE),
                 rows_q: tl.int32, seqlen_q: tl.int32, seqlen_k_all: tl.int32, num_heads_k: tl.int32,
                 batch: tl.int32, num_splits: tl.int32, window_left: tl.int32, window_right: tl.int32,
                 capacity: tl.int32, cache_slots: tl.int32, seqlen_add: tl.int32,
                 stride_qb: tl.int64, stride_qk: tl.int64, stride_qr: tl.int64,
                 stride_kb: tl.int64, stride_ks: tl.int64, stride_kh: tl.int64,
                 stride_vb: tl.int64, stride_vs: tl.int64, stride_vh: tl.int64,
                 stride_osplit: tl.int64, stride_ob: tl.int64, stride_ok: tl.int64, stride_or: tl.int64,
                 stride_lsplit: tl.int64, stride_lb: tl.int64, stride_lk: tl.int64,
                 stride_btb: tl.int64, stride_ab: tl.int64, stride_ak: tl.int64,
                 stride_fb: tl.int64, stride_fk: tl.int64, stride_fr: tl.int64,
                 stride_flb: tl.int64, stride_flk: tl.int64,
                 stride_knb: tl.int64, stride_knh: tl.int64, stride_vnb: tl.int64, stride_vnh: tl.int64,
                 scale: tl.float32, softcap: tl.float32,
                 DTYPE: tl.constexpr = tl.float16, ODTYPE: tl.constexpr = tl.float16,
                 HEAD_DIM: tl.constexpr = 128, SPLIT: tl.constexpr = False,
                 CAUSAL: tl.constexpr = False, WINDOW: tl.constexpr = False,
                 ALIBI: tl.constexpr = False, SOFTCAP: tl.constexpr = False, PAGED: tl.constexpr = False,
                 PAGE_SIZE: tl.constexpr = 64, PAGE_BLOCK: tl.constexpr = 64, PER_BATCH: tl.constexpr = False,
                 BATCH_IDX: tl.constexpr = False, LEFTPAD: tl.constexpr = False,
                 QPOS: tl.constexpr = "mod", CHUNKS: tl.constexpr = "length",
                 BLOCK_M: tl.constexpr = 64, BLOCK_N: tl.constexpr = 64,
                 NUM_WARPS: tl.constexpr = _S.num_warps, NUM_STAGES: tl.constexpr = _S.num_stages,
                 EARLY_REFILL: tl.constexpr = False, FUSED: tl.constexpr = False,
                 MERGE_SPLITS: tl.constexpr = 64, MERGE_D: tl.constexpr = 32,
                 PRIOR_WAIT: tl.constexpr = False, APPEND: tl.constexpr = False):
    tl.assume(scale > 0)
    if PRIOR_WAIT:
        _prior_wait()
    split = tl.program_id(0)
    pid_mk = tl.program_id(1)
    b = tl.program_id(2)
    pid_m, hk = pid_mk // num_heads_k, pid_mk % num_heads_k
    D = max(16, tl.next_power_of_2(HEAD_DIM))
    # This sequence's keys: cache rows [leftpad, seqlen) of cache batch bc.
    seqlen_k = seqlen_k_all
    if PER_BATCH:
        # cache_seqlens counts the keys before this call's append (seqlen_add new ones).
        seqlen_k = tl.minimum(tl.maximum(tl.load(cache_seqlens + b) + seqlen_add, 0), capacity)
    bc = b
    if BATCH_IDX:
        bc = tl.minimum(tl.maximum(tl.load(cache_batch_idx + b), 0), cache_slots - 1)
    first = 0
    if LEFTPAD:
        first = tl.minimum(tl.maximum(tl.load(cache_leftpad + b), 0), seqlen_k)
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
    slope = 0.0
    if ALIBI:
        av = tl.view(alibi_rows + (b * stride_ab + hk * stride_ak), (rows_q,), (1,))
        slope = tl.load(av, (row0,), (BLOCK_M,))[:, None]
    # This split's key blocks: the visible range [n_lo, n_hi) cut into num_splits pieces.
    n_lo = 0
    n_hi = tl.cdiv(seqlen_k, BLOCK_N)
    if WINDOW:
        n_lo = tl.maximum(seqlen_k - seqlen_q - window_left, 0) // BLOCK_N
        n_hi = tl.minimum(n_hi, tl.maximum(tl.cdiv(seqlen_k + window_right, BLOCK_N), 0))
    # CHUNKS "length": the sequence's blocks cut into num_splits equal
    # ranges; "capacity": ranges of ⌈capacity blocks / num_splits⌉ for every
    # sequence, so a short one works in fewer programs (the rest see nothing).
    if CHUNKS == "capacity" and not WINDOW:
        per_split = tl.cdiv(tl.cdiv(capacity, BLOCK_N), num_splits)
    else:
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
    if APPEND:
        _append_own_row(k, v, k_new, v_new, cache_seqlens, block_table, b, bc, hk, split, first, seqlen_k,
                        seqlen_k_all, seqlen_add, capacity, cache_slots, n_lo, n_hi, j_lo, key_end,
                        stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, stride_btb,
                        stride_knb, stride_knh, stride_vnb, stride_vnh,
                        PER_BATCH, PAGED, PAGE_SIZE, BLOCK_N, D, HEAD_DIM)
    m = tl.full((BLOCK_M,), -1e30, tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    NSUB = BLOCK_N // PAGE_BLOCK if PAGED else 1
    N = PAGE_BLOCK if PAGED else BLOCK_N
    bt_row = bc * stride_btb
    for j in range(j_lo, j_hi):
        col0 = j * BLOCK_N
        # One block: NSUB sub-tiles of N keys (one, unless pages are smaller
        # than BLOCK_N), scored, then one online-softmax step over all of them.
        if PAGED:
            k0, v0 = _page_tiles(k, v, block_table, bt_row, col0, key_end, cache_slots, stride_kb,
                                 stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, hk, PAGE_SIZE,
                                 PAGE_BLOCK, D, HEAD_DIM)
            if NSUB >= 2:
                k1, v1 = _page_tiles(k, v, block_table, bt_row, col0 + N, key_end, cache_slots, stride_kb,
                                     stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, hk, PAGE_SIZE,
                                     PAGE_BLOCK, D, HEAD_DIM)
            if NSUB >= 4:
                k2, v2 = _page_tiles(k, v, block_table, bt_row, col0 + 2 * N, key_end, cache_slots,
                                     stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, hk,
                                     PAGE_SIZE, PAGE_BLOCK, D, HEAD_DIM)
                k3, v3 = _page_tiles(k, v, block_table, bt_row, col0 + 3 * N, key_end, cache_slots,
                                     stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, hk,
                                     PAGE_SIZE, PAGE_BLOCK, D, HEAD_DIM)
            if NSUB >= 8:
                k4, v4 = _page_tiles(k, v, block_table, bt_row, col0 + 4 * N, key_end, cache_slots,
                                     stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, hk,
                                     PAGE_SIZE, PAGE_BLOCK, D, HEAD_DIM)
                k5, v5 = _page_tiles(k, v, block_table, bt_row, col0 + 5 * N, key_end, cache_slots,
                                     stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, hk,
                                     PAGE_SIZE, PAGE_BLOCK, D, HEAD_DIM)
                k6, v6 = _page_tiles(k, v, block_table, bt_row, col0 + 6 * N, key_end, cache_slots,
                                     stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, hk,
                                     PAGE_SIZE, PAGE_BLOCK, D, HEAD_DIM)
                k7, v7 = _page_tiles(k, v, block_table, bt_row, col0 + 7 * N, key_end, cache_slots,
                                     stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, hk,
                                     PAGE_SIZE, PAGE_BLOCK, D, HEAD_DIM)
        else:
            k0 = tl.load(kv, (col0, 0), (BLOCK_N, D))
            v0 = tl.load(vv, (col0, 0), (BLOCK_N, D))
        s0 = _scores(qt, k0, col0, diag, slope, seqlen_k, window_left, window_right, scale, softcap,
                     CAUSAL, WINDOW, ALIBI, SOFTCAP, N)
        m_new = tl.maximum(m, tl.max(s0, 1))
        if NSUB >= 2:
            s1 = _scores(qt, k1, col0 + N, diag, slope, seqlen_k, window_left, window_right, scale,
                         softcap, CAUSAL, WINDOW, ALIBI, SOFTCAP, N)
            m_new = tl.maximum(m_new, tl.max(s1, 1))
        if NSUB >= 4:
            s2 = _scores(qt, k2, col0 + 2 * N, diag, slope, seqlen_k, window_left, window_right, scale,
                         softcap, CAUSAL, WINDOW, ALIBI, SOFTCAP, N)
            s3 = _scores(qt, k3, col0 + 3 * N, diag, slope, seqlen_k, window_left, window_right, scale,
                         softcap, CAUSAL, WINDOW, ALIBI, SOFTCAP, N)
            m_new = tl.maximum(m_new, tl.maximum(tl.max(s2, 1), tl.max(s3, 1)))
        if NSUB >= 8:
            s4 = _scores(qt, k4, col0 + 4 * N, diag, slope, seqlen_k, window_left, window_right, scale,
                         softcap, CAUSAL, WINDOW, ALIBI, SOFTCAP, N)
            s5 = _scores(qt, k5, col0 + 5 * N, diag, slope, seqlen_k, window_left, window_right, scale,
                         softcap, CAUSAL, WINDOW, ALIBI, SOFTCAP, N)
            s6 = _scores(qt, k6, col0 + 6 * N, diag, slope, seqlen_k, window_left, window_right, scale,
                         softcap, CAUSAL, WINDOW, ALIBI, SOFTCAP, N)
            s7 = _scores(qt, k7, col0 + 7 * N, diag, slope, seqlen_k, window_left, window_right, scale,
                         softcap, CAUSAL, WINDOW, ALIBI, SOFTCAP, N)
            m_new = tl.maximum(m_new, tl.maximum(tl.maximum(tl.max(s4, 1), tl.max(s5, 1)),
                                                 tl.maximum(tl.max(s6, 1), tl.max(s7, 1))))
        alpha = tl.exp(m - m_new)
        p0 = tl.exp(s0 - m_new[:, None])
        l = l * alpha + tl.sum(p0, 1)
        acc = tl.dot(p0.to(DTYPE), v0, acc * alpha[:, None])
        if NSUB >= 2:
            p1 = tl.exp(s1 - m_new[:, None])
            l = l + tl.sum(p1, 1)
            acc = tl.dot(p1.to(DTYPE), v1, acc)
        if NSUB >= 4:
            p2 = tl.exp(s2 - m_new[:, None])
            p3 = tl.exp(s3 - m_new[:, None])
            l = l + tl.sum(p2, 1) + tl.sum(p3, 1)
            acc = tl.dot(p3.to(DTYPE), v3, tl.dot(p2.to(DTYPE), v2, acc))
        if NSUB >= 8:
            p4 = tl.exp(s4 - m_new[:, None])
            p5 = tl.exp(s5 - m_new[:, None])
            p6 = tl.exp(s6 - m_new[:, None])
            p7 = tl.exp(s7 - m_new[:, None])
            l = l + tl.sum(p4, 1) + tl.sum(p5, 1) + tl.sum(p6, 1) + tl.sum(p7, 1)
            acc = tl.dot(p5.to(DTYPE), v5, tl.dot(p4.to(DTYPE), v4, acc))
            acc = tl.dot(p7.to(DTYPE), v7, tl.dot(p6.to(DTYPE), v6, acc))
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
    if SPLIT and FUSED:
        # The combine, fused: the last of the num_splits programs of this
        # (row block, KV head, batch) to arrive merges every split's partial
        # of its rows (its own included) into o_final / lse_final. The
        # counters reset themselves (tl.arrive), so they need zeroing once.
        last = tl.arrive(counters + (b * tl.num_programs(1) + pid_mk), num_splits)
        if last:
            _merge_rows(o, lse, o_final, lse_final, row0, tl.minimum(row0 + BLOCK_M, rows_q), b, hk,
                        num_splits, stride_osplit, stride_ob, stride_ok, stride_or, stride_lsplit,
                        stride_lb, stride_lk, stride_fb, stride_fk, stride_fr, stride_flb, stride_flk,
                        DTYPE, HEAD_DIM, MERGE_SPLITS, MERGE_D, NUM_WARPS)


def _cache_row(pos, b, bc, block_table, capacity, cache_slots, stride_kb, stride_ks, stride_vb, stride_vs,
               stride_btb, PAGED, PAGE_SIZE):
    """The element offsets of sequence b's K and V cache row `pos` (clamped
    into the cache): in its page (block_table, the page clamped into the
    pool) or in cache batch row bc. The head's offset is the caller's."""
    at = tl.minimum(tl.maximum(pos, 0), capacity - 1)
    if PAGED:
        page = tl.load(block_table + (b * stride_btb + at // PAGE_SIZE))
        page = tl.minimum(tl.maximum(page, 0), cache_slots - 1)
        return page * stride_kb + (at % PAGE_SIZE) * stride_ks, page * stride_vb + (at % PAGE_SIZE) * stride_vs
    return bc * stride_kb + at * stride_ks, bc * stride_vb + at * stride_vs


def _at_least(x, lo):
    """1 where the int x >= lo, else 0 (scalars, no branch)."""
    return tl.minimum(tl.maximum(x - lo + 1, 0), 1)


def _append_own_row(k, v, k_new, v_new, cache_seqlens, block_table, b, bc, hk, split, first, seqlen_k,
                    seqlen_k_all, seqlen_add, capacity, cache_slots, n_lo, n_hi, j_lo, key_end,
                    stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, stride_btb,
                    stride_knb, stride_knh, stride_vnb, stride_vnh,
                    PER_BATCH, PAGED, PAGE_SIZE, BLOCK_N, D, HEAD_DIM):
    """APPEND (one new token; flash_attn 2's Append_KV, in the attention
    kernel instead of a kv_append launch): the new key/value row of KV head
    hk goes to cache position cache_seqlens[b], as kv_append writes it. No
    program sees another's writes, so every program whose key range
    [j_lo·BLOCK_N, key_end) holds the position writes the row itself (the
    row blocks of one KV head write the same bytes) and reads it back after
    the barrier; split 0 also writes it where no split reads it (a window
    that hides it), so the cache always gets it. A position outside the
    cache writes nothing."""
    n_old = seqlen_k_all - seqlen_add
    if PER_BATCH:
        n_old = tl.load(cache_seqlens + b)
    key = n_old - first                                  # the new key's index among the visible keys
    covered_hi = tl.minimum(n_hi * BLOCK_N, seqlen_k)
    mine = _at_least(key, j_lo * BLOCK_N) * _at_least(key_end - 1, key)
    unread = 1 - _at_least(key, n_lo * BLOCK_N) * _at_least(covered_hi - 1, key)
    orphan = (1 - tl.minimum(split, 1)) * unread
    inside = _at_least(n_old, 0) * _at_least(capacity - 1, n_old)
    rows = inside * tl.minimum(mine + orphan, 1)         # 0: the stores write nothing
    kbase, vbase = _cache_row(n_old, b, bc, block_table, capacity, cache_slots, stride_kb, stride_ks,
                              stride_vb, stride_vs, stride_btb, PAGED, PAGE_SIZE)
    kn = tl.view(k_new + (b * stride_knb + hk * stride_knh), (1, HEAD_DIM), (stride_knh, 1))
    vn = tl.view(v_new + (b * stride_vnb + hk * stride_vnh), (1, HEAD_DIM), (stride_vnh, 1))
    kd = tl.view(k + (kbase + hk * stride_kh), (rows, HEAD_DIM), (stride_kh, 1))
    vd = tl.view(v + (vbase + hk * stride_vh), (rows, HEAD_DIM), (stride_vh, 1))
    tl.store(kd, (0, 0), tl.load(kn, (0, 0), (1, D)))
    tl.store(vd, (0, 0), tl.load(vn, (0, 0), (1, D)))
    tl.barrier()                                         # the rows stored before the loop reads them


def _prior_wait():
    """Programmatic dependent launch (PRIOR_WAIT; sm_90+, nothing elsewhere):
    the kernel may start while the kernel before it on the stream (the
    append, the previous call's decode or combine, whatever the caller ran)
    finishes, so it waits before it reads or writes anything; then it lets
    the next kernel (the combine, the next call's kernels) start early too.
    A call's two or three launches then do not each pay the launch latency
    after the kernel before them has drained."""
    tl.wait_prior_kernels()
    tl.launch_dependents()


def _merge_rows(o, lse, o_final, lse_final, row_lo, row_hi, b, hk, num_splits, stride_osplit,
                stride_ob, stride_ok, stride_or, stride_lsplit, stride_lb, stride_lk, stride_fb,
                stride_fk, stride_fr, stride_flb, stride_flk, DTYPE, HEAD_DIM, MERGE_SPLITS, MERGE_D,
                NUM_WARPS):
    """kernels/flash_combine.py's merge of packed rows [row_lo, row_hi): per
    row, per MERGE_D features, the partial outputs as one (MERGE_SPLITS,
    MERGE_D) tile, each split's features contiguous (16-byte loads, a warp
    reading whole 128-byte lines; the layout keeps the splits axis, which
    the merge sums over, inside each warp and puts the warps on the
    features), and the lse beside them through a view of stride 0 along the
    features (the same layout: no conversion; every element of a split's
    row carries its lse), both loads independent: one round trip per (row,
    feature chunk) for up to MERGE_SPLITS splits, in split order
    (deterministic). Splits past num_splits read −inf (weight 0); a split
    that saw nothing has lse −inf (weight 0); a row no split saw gets out 0
    and lse +inf, as the combine kernel. (The (MERGE_D, MERGE_SPLITS) tile
    of session 10, splits along the last axis, read 4-byte elements a split
    stride apart, 64 loads a thread per row at 32 splits: H200, GQA 32/8
    batch 1 32k, the fused call 5.6 µs slower than two kernels, 20 µs at
    128k's 33 splits, which pad to 64.)"""
    if MERGE_D >= HEAD_DIM and MERGE_SPLITS * MERGE_D <= 32 * 32 * NUM_WARPS:
        # One chunk per row, tiles of at most 32 elements a thread (with the
        # next row's, 128 registers): row r + 1's tiles load before row r's
        # math and stores (loads after a store stay after it: nothing tells
        # o_final from o), so each row's round trip overlaps the math and
        # stores of the row before; the last row reloads itself (no use).
        li, oi = _merge_tiles(o, lse, row_lo, b, hk, num_splits, stride_osplit, stride_ob, stride_ok,
                              stride_or, stride_lsplit, stride_lb, stride_lk, HEAD_DIM, MERGE_SPLITS, MERGE_D)
        for r in range(row_lo, row_hi):
            li_next, oi_next = _merge_tiles(o, lse, tl.minimum(r + 1, row_hi - 1), b, hk, num_splits,
                                            stride_osplit, stride_ob, stride_ok, stride_or, stride_lsplit,
                                            stride_lb, stride_lk, HEAD_DIM, MERGE_SPLITS, MERGE_D)
            top, wi, total = _merge_weights(li)
            _store_lse(lse_final, b, hk, r, stride_flb, stride_flk, top, total)
            fin = tl.view(o_final + (b * stride_fb + hk * stride_fk + r * stride_fr), (HEAD_DIM,), (1,))
            tl.store(fin, (0,), (tl.sum(oi * wi, 0) / tl.maximum(total, 1.0)).to(DTYPE))
            li, oi = li_next, oi_next
    else:
        for r in range(row_lo, row_hi):
            # The weights depend on the row only: computed once for all its chunks.
            li = tl.load(_lse_view(lse, r, b, hk, num_splits, stride_lsplit, stride_lb, stride_lk, MERGE_D),
                         (0, 0), (MERGE_SPLITS, MERGE_D), padding="neg_inf")
            top, wi, total = _merge_weights(li)
            _store_lse(lse_final, b, hk, r, stride_flb, stride_flk, top, total)
            part = _part_view(o, r, b, hk, num_splits, stride_osplit, stride_ob, stride_ok, stride_or, HEAD_DIM)
            fin = tl.view(o_final + (b * stride_fb + hk * stride_fk + r * stride_fr), (HEAD_DIM,), (1,))
            for c in range(0, HEAD_DIM, MERGE_D):
                oi = tl.load(part, (0, c), (MERGE_SPLITS, MERGE_D))
                tl.store(fin, (c,), (tl.sum(oi * wi, 0) / tl.maximum(total, 1.0)).to(DTYPE))


def _lse_view(lse, r, b, hk, num_splits, stride_lsplit, stride_lb, stride_lk, MERGE_D):
    """Row r's split lse as a (num_splits, MERGE_D) view of stride 0 along
    the features (every feature of a split carries its lse)."""
    return tl.view(lse + (b * stride_lb + hk * stride_lk + r), (num_splits, MERGE_D), (stride_lsplit, 0))


def _part_view(o, r, b, hk, num_splits, stride_osplit, stride_ob, stride_ok, stride_or, HEAD_DIM):
    """Row r's partial outputs as a (num_splits, HEAD_DIM) view."""
    return tl.view(o + (b * stride_ob + hk * stride_ok + r * stride_or), (num_splits, HEAD_DIM), (stride_osplit, 1))


def _merge_tiles(o, lse, r, b, hk, num_splits, stride_osplit, stride_ob, stride_ok, stride_or,
                 stride_lsplit, stride_lb, stride_lk, HEAD_DIM, MERGE_SPLITS, MERGE_D):
    """Row r's (MERGE_SPLITS, MERGE_D) lse and partial-output tiles (one chunk)."""
    li = tl.load(_lse_view(lse, r, b, hk, num_splits, stride_lsplit, stride_lb, stride_lk, MERGE_D),
                 (0, 0), (MERGE_SPLITS, MERGE_D), padding="neg_inf")
    oi = tl.load(_part_view(o, r, b, hk, num_splits, stride_osplit, stride_ob, stride_ok, stride_or, HEAD_DIM),
                 (0, 0), (MERGE_SPLITS, MERGE_D))
    return li, oi


def _merge_weights(li):
    """(top, weights, total) of a row's lse tile: top the largest lse (−1e30
    when no split saw the row: weights exp(−inf) = 0), weights exp(lse −
    top), total their sum: >= 1 where a split saw the row (its top split
    weighs exp(0) = 1), 0 where none did. No selects (a tensor select in a
    loop reads as a mask to tile-split-masked-loops): out is then 0 / 1 = 0,
    and lse top + log 1 − log 0 = +inf."""
    top = tl.maximum(tl.max(li, 0), -1e30)
    wi = tl.exp(li - top[None, :])
    return top, wi, tl.sum(wi, 0)


def _store_lse(lse_final, b, hk, r, stride_flb, stride_flk, top, total):
    """Row r's lse; every feature carries it: the first element lands, the rest fall outside."""
    lfin = tl.view(lse_final + (b * stride_flb + hk * stride_flk + r), (1,), (1,))
    tl.store(lfin, (0,), top + tl.log(tl.maximum(total, 1.0)) - tl.log(tl.minimum(total, 1.0)))


def _append_name(DTYPE, HEAD_DIM, HEADS_K, PAGED, PAGE_SIZE, PER_BATCH, BATCH_IDX, **_):
    flags = "".join(f for f, on in ((f"_page{PAGE_SIZE}", PAGED), ("_seqlens", PER_BATCH),
                                    ("_bidx", BATCH_IDX)) if on)
    return f"kv_append_{DTYPE.name}_d{HEAD_DIM}_h{HEADS_K}{flags}"


@tilec.jit(grid=("seqlen_new", "batch", 1), name=_append_name, num_warps="NUM_WARPS",
           variant={"dtype": "DTYPE", "head_dim": "HEAD_DIM"})
def kv_append(k_new: tl.ptr(DTYPE), v_new: tl.ptr(DTYPE), k: tl.ptr(DTYPE), v: tl.ptr(DTYPE),
              cache_seqlens: tl.ptr(tl.int32), block_table: tl.ptr(tl.int32), cache_batch_idx: tl.ptr(tl.int32),
              seqlen_new: tl.int32, batch: tl.int32, heads_k: tl.int32, seqlen_uniform: tl.int32,
              capacity: tl.int32, cache_slots: tl.int32,
              stride_knb: tl.int64, stride_kns: tl.int64, stride_knh: tl.int64,
              stride_vnb: tl.int64, stride_vns: tl.int64, stride_vnh: tl.int64,
              stride_kb: tl.int64, stride_ks: tl.int64, stride_kh: tl.int64,
              stride_vb: tl.int64, stride_vs: tl.int64, stride_vh: tl.int64, stride_btb: tl.int64,
              DTYPE: tl.constexpr = tl.float16, HEAD_DIM: tl.constexpr = 128, HEADS_K: tl.constexpr = 8,
              PAGED: tl.constexpr = False, PAGE_SIZE: tl.constexpr = 64, PER_BATCH: tl.constexpr = False,
              BATCH_IDX: tl.constexpr = False, NUM_WARPS: tl.constexpr = _S.num_warps,
              PRIOR_WAIT: tl.constexpr = False):
    """flash_attn_with_kvcache's append: new key/value i of sequence b (every
    KV head) goes to cache position cache_seqlens[b] + i, in its page
    (block_table) or cache row (cache_batch_idx). One program per (i, b).
    A position outside the cache (a bad cache_seqlens the host did not
    check) writes nothing; rows and pages are clamped into the cache."""
    if PRIOR_WAIT:
        _prior_wait()
    i = tl.program_id(0)
    b = tl.program_id(1)
    D = max(16, tl.next_power_of_2(HEAD_DIM))
    n = seqlen_uniform
    if PER_BATCH:
        n = tl.load(cache_seqlens + b)
    pos = n + i
    inside = _at_least(pos, 0) * _at_least(capacity - 1, pos)
    rows = heads_k * inside                        # 0: the store writes nothing
    bc = b
    if BATCH_IDX and not PAGED:
        bc = tl.minimum(tl.maximum(tl.load(cache_batch_idx + b), 0), cache_slots - 1)
    kbase, vbase = _cache_row(pos, b, bc, block_table, capacity, cache_slots, stride_kb, stride_ks,
                              stride_vb, stride_vs, stride_btb, PAGED, PAGE_SIZE)
    kn = tl.view(k_new + (b * stride_knb + i * stride_kns), (heads_k, HEAD_DIM), (stride_knh, 1))
    vn = tl.view(v_new + (b * stride_vnb + i * stride_vns), (heads_k, HEAD_DIM), (stride_vnh, 1))
    kd = tl.view(k + kbase, (rows, HEAD_DIM), (stride_kh, 1))
    vd = tl.view(v + vbase, (rows, HEAD_DIM), (stride_vh, 1))
    tl.store(kd, (0, 0), tl.load(kn, (0, 0), (HEADS_K, D)))
    tl.store(vd, (0, 0), tl.load(vn, (0, 0), (HEADS_K, D)))


def _rotary_name(DTYPE, CS_DTYPE, HEAD_DIM, ROTARY_DIM, INTERLEAVED, HEADS, PER_BATCH, **_):
    flags = "_interleaved" * bool(INTERLEAVED) + "_seqlens" * bool(PER_BATCH)
    return f"rotary_{DTYPE.name}_d{HEAD_DIM}_r{ROTARY_DIM}_h{HEADS}_{CS_DTYPE.name}{flags}"


@tilec.jit(grid=("max(seqlen_q, seqlen_new)", "batch", "parts"), name=_rotary_name, num_warps="NUM_WARPS",
           variant={"dtype": "DTYPE", "head_dim": "HEAD_DIM"})
def rotary(q: tl.ptr(DTYPE), k: tl.ptr(DTYPE), q_out: tl.ptr(DTYPE), k_out: tl.ptr(DTYPE),
           cos: tl.ptr(CS_DTYPE), sin: tl.ptr(CS_DTYPE), cache_seqlens: tl.ptr(tl.int32),
           seqlen_q: tl.int32, seqlen_new: tl.int32, batch: tl.int32, parts: tl.int32, heads: tl.int32,
           heads_k: tl.int32, seqlen_uniform: tl.int32, q_step: tl.int32, seqlen_ro: tl.int32,
           stride_qb: tl.int64, stride_qs: tl.int64, stride_qh: tl.int64,
           stride_kb: tl.int64, stride_ks: tl.int64, stride_kh: tl.int64,
           stride_qob: tl.int64, stride_qos: tl.int64, stride_qoh: tl.int64,
           stride_kob: tl.int64, stride_kos: tl.int64, stride_koh: tl.int64,
           stride_cos: tl.int64, stride_sin: tl.int64,
           DTYPE: tl.constexpr = tl.float16, CS_DTYPE: tl.constexpr = tl.float32,
           HEAD_DIM: tl.constexpr = 128, ROTARY_DIM: tl.constexpr = 128,
           INTERLEAVED: tl.constexpr = True, HEADS: tl.constexpr = 32, PER_BATCH: tl.constexpr = False,
           NUM_WARPS: tl.constexpr = 4, PRIOR_WAIT: tl.constexpr = False):
    """flash_attn_with_kvcache's rotary embedding of q and the new k, before
    the append and the attention read them: feature pairs of the first
    ROTARY_DIM features of every head turn by the angle of their position,
    (x1, x2) -> (x1·cos − x2·sin, x1·sin + x2·cos) in f32, rounded to DTYPE;
    the pairs are (2j, 2j + 1) with INTERLEAVED (GPT-J), else (j, j +
    ROTARY_DIM / 2) (GPT-NeoX); the other features are copied. cos/sin are
    (seqlen_ro, ROTARY_DIM / 2) rows.

    One program per (token i, sequence b, part): part 0 rotates q's token i
    (every head) at position n + i·q_step (q_step 1 when causal or windowed,
    else 0: every query at n, as flash_attn), part 1 the new k's token i at
    n + i, where n = cache_seqlens[b] (PER_BATCH) or seqlen_uniform. Tokens
    past seqlen_q / seqlen_new write nothing; positions are clamped into
    the cos/sin table (the host checks that it is long enough)."""
    if PRIOR_WAIT:
        _prior_wait()
    i = tl.program_id(0)
    b = tl.program_id(1)
    n = seqlen_uniform
    if PER_BATCH:
        n = tl.load(cache_seqlens + b)
    if tl.program_id(2) == 0:
        pos = tl.minimum(tl.maximum(n + i * q_step, 0), seqlen_ro - 1)
        _rotate(q + (b * stride_qb + i * stride_qs), q_out + (b * stride_qob + i * stride_qos),
                heads * _at_least(seqlen_q - 1, i), stride_qh, stride_qoh, cos + pos * stride_cos,
                sin + pos * stride_sin, DTYPE, HEAD_DIM, ROTARY_DIM, INTERLEAVED, HEADS)
    else:
        pos = tl.minimum(tl.maximum(n + i, 0), seqlen_ro - 1)
        _rotate(k + (b * stride_kb + i * stride_ks), k_out + (b * stride_kob + i * stride_kos),
                heads_k * _at_least(seqlen_new - 1, i), stride_kh, stride_koh, cos + pos * stride_cos,
                sin + pos * stride_sin, DTYPE, HEAD_DIM, ROTARY_DIM, INTERLEAVED, HEADS)


def _rotate(x, out, rows, stride_xh, stride_oh, cos_row, sin_row, DTYPE, HEAD_DIM, ROTARY_DIM, INTERLEAVED,
            HEADS):
    """One token's `rows` heads (stride_xh / stride_oh apart) of x rotated
    into out by the angles at cos_row / sin_row (kernel rotary), HEADS heads
    a tile."""
    HALF = ROTARY_DIM // 2
    W = tl.next_power_of_2(HALF)
    step = 2 if INTERLEAVED else 1           # a pair's first features, a step apart
    second = 1 if INTERLEAVED else HALF      # a pair's second feature, after its first
    c = tl.load(tl.view(cos_row, (HALF,), (1,)), (0,), (W,)).to(tl.float32)[None, :]
    s = tl.load(tl.view(sin_row, (HALF,), (1,)), (0,), (W,)).to(tl.float32)[None, :]
    x1v = tl.view(x, (rows, HALF), (stride_xh, step))
    x2v = tl.view(x + second, (rows, HALF), (stride_xh, step))
    y1v = tl.view(out, (rows, HALF), (stride_oh, step))
    y2v = tl.view(out + second, (rows, HALF), (stride_oh, step))
    REST = HEAD_DIM - ROTARY_DIM
    if REST > 0:
        xrv = tl.view(x + ROTARY_DIM, (rows, REST), (stride_xh, 1))
        yrv = tl.view(out + ROTARY_DIM, (rows, REST), (stride_oh, 1))
    for j in range(0, tl.cdiv(rows, HEADS)):           # HEADS heads at a time
        h0 = j * HEADS
        x1 = tl.load(x1v, (h0, 0), (HEADS, W)).to(tl.float32)
        x2 = tl.load(x2v, (h0, 0), (HEADS, W)).to(tl.float32)
        tl.store(y1v, (h0, 0), (x1 * c - x2 * s).to(DTYPE))
        tl.store(y2v, (h0, 0), (x1 * s + x2 * c).to(DTYPE))
        if REST > 0:
            tl.store(yrv, (h0, 0), tl.load(xrv, (h0, 0), (HEADS, max(16, tl.next_power_of_2(REST)))))
