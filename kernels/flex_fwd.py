"""FlexAttention's forward in the tilec DSL: the flagship loop with two hooks.

    score_mod(score, b, h, q_idx, kv_idx) -> score     (scaled scores, f32)
    mask_mod(b, h, q_idx, kv_idx) -> bool              (True: the key is seen)

are plain Python functions passed as constexprs and traced into the kernel
when it is specialized (tilec.frontend inlines them): `score` is the
(BLOCK_M, BLOCK_N) tile of scale·Q·Kᵀ, `q_idx` a (BLOCK_M, 1) and `kv_idx` a
(1, BLOCK_N) index tile, `b`/`h` the batch and query-head scalars. The mask is
one select, `cols < seqlen_k & mask_mod(...)`; tile-split-masked-loops
classifies blocks from it at compile time (skipped, unmasked, masked), so
there is no run-time block mask and no recompilation per sequence length.

Differences from kernels/flash_fwd.py, each a line or two: torch's layout
(batch, heads, seqlen, head_dim) through strides; GQA (kv head = h // group,
group a run-time parameter); rows that see no key give out = 0 and
lse = -inf (FlexAttention's rule): the running max is clamped at EMPTY_MAX
so exp(-inf - m) is 0, not NaN, and the epilogue selects 0 where l = 0.
(A row whose every real score is below EMPTY_MAX = -2^20 counts as empty.)
"""

from __future__ import annotations

import tilec
from tilec import language as tl
from tilec.strategy import Strategy

_S = Strategy()  # the strategy record: its defaults are the knobs' defaults


# The running max of a row that has seen no key yet: finite, so exp(s - m) is 0
# and not NaN for its -inf scores, and far below any real score. Not -1e30:
# tile-minimize-nonmatmul's FA2 form computes alpha = exp2(fma(m_old, K,
# -m_new*K)), whose rounding residual is |m*K|*2^-24 -- about 2^76 at -1e30,
# which overflows exp2 and gives l = 0*inf = NaN; at -2^20 it is below 0.1.
EMPTY_MAX = -float(2 ** 20)


def _mod_name(fn):
    return "none" if fn is None else getattr(fn, "__qualname__", "fn")


def _name(DTYPE, HEAD_DIM, SCORE_MOD, MASK_MOD, **_):
    """A digest of each mod in the symbol: two mods never share a kernel name."""
    from tilec import frontend

    mods = "".join(f"_{frontend.static_key(f)[-17:-1]}" if f is not None else "_x"
                   for f in (SCORE_MOD, MASK_MOD))
    return f"flex_fwd_{DTYPE.name}_d{HEAD_DIM}{mods}"


def _variant(DTYPE, HEAD_DIM, SCORE_MOD, MASK_MOD, BLOCK_M, **_):
    return {"dtype": DTYPE, "head_dim": HEAD_DIM, "score_mod": _mod_name(SCORE_MOD),
            "mask_mod": _mod_name(MASK_MOD), "block_m": BLOCK_M}


@tilec.jit(grid=("cdiv(seqlen_q, BLOCK_M)", "batch * num_heads", 1), name=_name, num_warps="NUM_WARPS",
           num_stages="NUM_STAGES", smem_epilogue="SMEM_EPILOGUE", copy_bounds="COPY_BOUNDS",
           variant=_variant)
def flex_fwd(q: tl.ptr(DTYPE), k: tl.ptr(DTYPE), v: tl.ptr(DTYPE), o: tl.ptr(DTYPE),
             lse: tl.ptr(tl.float32), seqlen_q: tl.int32, seqlen_k: tl.int32,
             num_heads: tl.int32, batch: tl.int32, group: tl.int32,
             stride_qb: tl.int64, stride_qh: tl.int64, stride_qs: tl.int64,
             stride_kb: tl.int64, stride_kh: tl.int64, stride_ks: tl.int64,
             stride_vb: tl.int64, stride_vh: tl.int64, stride_vs: tl.int64,
             stride_ob: tl.int64, stride_oh: tl.int64, stride_os: tl.int64,
             stride_lseb: tl.int64, stride_lseh: tl.int64, scale: tl.float32,
             DTYPE: tl.constexpr = tl.float16, HEAD_DIM: tl.constexpr = 128,
             SCORE_MOD: tl.constexpr = None, MASK_MOD: tl.constexpr = None,
             BLOCK_M: tl.constexpr = 64, BLOCK_N: tl.constexpr = 64,
             NUM_WARPS: tl.constexpr = _S.num_warps, NUM_STAGES: tl.constexpr = _S.num_stages,
             SMEM_EPILOGUE: tl.constexpr = _S.smem_epilogue, COPY_BOUNDS: tl.constexpr = _S.copy_bounds):
    tl.assume(scale > 0)
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b, h = pid_bh // num_heads, pid_bh % num_heads
    hk = h // group                                         # GQA: the query head's KV head
    qv = tl.view(q + (b * stride_qb + h * stride_qh), (seqlen_q, HEAD_DIM), (stride_qs, 1))
    kv = tl.view(k + (b * stride_kb + hk * stride_kh), (seqlen_k, HEAD_DIM), (stride_ks, 1))
    vv = tl.view(v + (b * stride_vb + hk * stride_vh), (seqlen_k, HEAD_DIM), (stride_vs, 1))
    ov = tl.view(o + (b * stride_ob + h * stride_oh), (seqlen_q, HEAD_DIM), (stride_os, 1))
    lsev = tl.view(lse + (b * stride_lseb + h * stride_lseh), (seqlen_q,), (1,))
    D = max(16, tl.next_power_of_2(HEAD_DIM))
    row0 = pid_m * BLOCK_M
    qt = tl.load(qv, (row0, 0), (BLOCK_M, D))
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    rows = (row0 + tl.arange(0, BLOCK_M))[:, None]          # q_idx
    for j in range(0, tl.cdiv(seqlen_k, BLOCK_N)):
        col0 = j * BLOCK_N
        kt = tl.load(kv, (col0, 0), (BLOCK_N, D))
        vt = tl.load(vv, (col0, 0), (BLOCK_N, D))
        s = tl.dot(qt, kt, trans_b=True) * scale            # S = scale · Q·Kᵀ
        cols = (col0 + tl.arange(0, BLOCK_N))[None, :]      # kv_idx
        if SCORE_MOD is not None:
            s = SCORE_MOD(s, b, h, rows, cols)
        mask = cols < seqlen_k
        if MASK_MOD is not None:
            mask = mask & MASK_MOD(b, h, rows, cols)
        s = tl.where(mask, s, float("-inf"))
        m_new = tl.maximum(tl.maximum(m, tl.max(s, 1)), EMPTY_MAX)  # rows with no key yet
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(DTYPE), vt, acc * alpha[:, None])
        m = m_new
    empty = l == 0                                          # rows that saw no key: out = 0
    tl.store(ov, (row0, 0), tl.where(empty[:, None], 0.0, acc / l[:, None]).to(DTYPE))
    tl.store(lsev, (row0,), m + tl.log(l))                  # lse = m + log(0) = -inf for them
