"""FlashAttention-2 forward in the tilec DSL, written the way the math reads.

The same kernel as kernels/flash_fwd.mlir: one program computes a BLOCK_M-row
block of O = softmax(scale · Q·Kᵀ)·V for one (batch, head) with a blocked loop
over K/V and the online softmax written naively (exp, the scale as a multiply,
the rescale every iteration, the division by the row sum after the loop). The
mask is ordinary math (tl.where); making it fast is the compiler's job. One
difference from the .mlir kernel: tl.assume(scale > 0) declares the scale
positive (launches check it), so the compiler emits no fallback loop for a
negative scale.

Tensors use flash_attn's layout (batch, seqlen, heads, head_dim) with strides
in elements (last dimension contiguous); lse is (batch, heads, seqlen_q) f32.
Causal is top-left aligned: query row i sees keys 0..i.
"""

from __future__ import annotations

import tilec
from tilec import language as tl


def _name(DTYPE, HEAD_DIM, CAUSAL, **_):
    return f"flash_fwd_{DTYPE.name}_d{HEAD_DIM}" + ("_causal" if CAUSAL else "")


@tilec.jit(grid=("cdiv(seqlen_q, BLOCK_M)", "batch * num_heads", 1), name=_name, num_warps="NUM_WARPS",
           num_stages="NUM_STAGES", smem_epilogue="SMEM_EPILOGUE", copy_bounds="COPY_BOUNDS",
           variant={"dtype": "DTYPE", "head_dim": "HEAD_DIM", "causal": "CAUSAL", "block_m": "BLOCK_M"})
def flash_fwd(q: tl.ptr(DTYPE), k: tl.ptr(DTYPE), v: tl.ptr(DTYPE), o: tl.ptr(DTYPE),
              lse: tl.ptr(tl.float32), seqlen_q: tl.int32, seqlen_k: tl.int32,
              num_heads: tl.int32, batch: tl.int32,
              stride_qb: tl.int64, stride_qs: tl.int64, stride_qh: tl.int64,
              stride_kb: tl.int64, stride_ks: tl.int64, stride_kh: tl.int64,
              stride_vb: tl.int64, stride_vs: tl.int64, stride_vh: tl.int64,
              stride_ob: tl.int64, stride_os: tl.int64, stride_oh: tl.int64,
              stride_lseb: tl.int64, stride_lseh: tl.int64, scale: tl.float32,
              DTYPE: tl.constexpr = tl.float16, HEAD_DIM: tl.constexpr = 128,
              CAUSAL: tl.constexpr = False, BLOCK_M: tl.constexpr = 64, BLOCK_N: tl.constexpr = 64,
              NUM_WARPS: tl.constexpr = 4, NUM_STAGES: tl.constexpr = 2,
              SMEM_EPILOGUE: tl.constexpr = True, COPY_BOUNDS: tl.constexpr = "row"):
    tl.assume(scale > 0)  # FA2's scale folding needs it; flash_attn_func maps scale <= 0 onto it
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b, h = pid_bh // num_heads, pid_bh % num_heads
    # Views of this (batch, head)'s rows: seqlen x head_dim.
    qv = tl.view(q + (b * stride_qb + h * stride_qh), (seqlen_q, HEAD_DIM), (stride_qs, 1))
    kv = tl.view(k + (b * stride_kb + h * stride_kh), (seqlen_k, HEAD_DIM), (stride_ks, 1))
    vv = tl.view(v + (b * stride_vb + h * stride_vh), (seqlen_k, HEAD_DIM), (stride_vs, 1))
    ov = tl.view(o + (b * stride_ob + h * stride_oh), (seqlen_q, HEAD_DIM), (stride_os, 1))
    lsev = tl.view(lse + (b * stride_lseb + h * stride_lseh), (seqlen_q,), (1,))
    D = max(16, tl.next_power_of_2(HEAD_DIM))               # tile width; the views bound it
    row0 = pid_m * BLOCK_M
    qt = tl.load(qv, (row0, 0), (BLOCK_M, D))
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    if CAUSAL:
        rows = (row0 + tl.arange(0, BLOCK_M))[:, None]      # query rows, for the causal mask
    for j in range(0, tl.cdiv(seqlen_k, BLOCK_N)):
        col0 = j * BLOCK_N
        kt = tl.load(kv, (col0, 0), (BLOCK_N, D))
        vt = tl.load(vv, (col0, 0), (BLOCK_N, D))
        s = tl.dot(qt, kt, trans_b=True) * scale            # S = scale · Q·Kᵀ
        cols = (col0 + tl.arange(0, BLOCK_N))[None, :]
        mask = cols < seqlen_k                              # keys past seqlen_k do not exist
        if CAUSAL:
            mask = mask & (cols <= rows)
        s = tl.where(mask, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))                 # online softmax
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(DTYPE), vt, acc * alpha[:, None])
        m = m_new
    tl.store(ov, (row0, 0), (acc / l[:, None]).to(DTYPE))   # O = diag(l)⁻¹·acc
    tl.store(lsev, (row0,), m + tl.log(l))                  # lse = m + log(l)
