"""Scalars read from memory (tl.load(ptr + i) -> tile.load_scalar): the IR
the DSL makes, a varlen attention kernel (sequence bounds loaded from
cu_seqlens) on the CPU runner against a float64 reference, its loops still
split by tile-split-masked-loops, and its GPU code."""

import re

import numpy as np
import pytest

import tilec
from tilec import compiler
from tilec import language as tl

HAVE_NATIVE = compiler.available()
HAVE_CPU = HAVE_NATIVE and getattr(compiler.native(), "has_cpu_runner", False)
needs_native = pytest.mark.skipif(not HAVE_NATIVE, reason="the _tilec extension is not built")
needs_cpu = pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")

# f16 inputs, f32 accumulation, P rounded to f16: as test_dsl_flash's bound.
REL_TOL = 1e-3


@tilec.jit(grid=("cdiv(max_seqlen_q, BLOCK_M)", "batch * num_heads", 1))
def varlen_fwd(q: tl.ptr(tl.float16), k: tl.ptr(tl.float16), v: tl.ptr(tl.float16),
               o: tl.ptr(tl.float16), cu_seqlens_q: tl.ptr(tl.int32), cu_seqlens_k: tl.ptr(tl.int32),
               max_seqlen_q: tl.int32, num_heads: tl.int32, batch: tl.int32,
               stride_qs: tl.int64, stride_qh: tl.int64, stride_ks: tl.int64, stride_kh: tl.int64,
               stride_vs: tl.int64, stride_vh: tl.int64, stride_os: tl.int64, stride_oh: tl.int64,
               scale: tl.float32, HEAD_DIM: tl.constexpr = 32, CAUSAL: tl.constexpr = False,
               BLOCK_M: tl.constexpr = 16, BLOCK_N: tl.constexpr = 16):
    """Packed (total, heads, head_dim) q/k/v; sequence b is rows
    cu_seqlens[b] .. cu_seqlens[b+1]. Causal is top-left within a sequence."""
    tl.assume(scale > 0)
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b, h = pid_bh // num_heads, pid_bh % num_heads
    q_start = tl.load(cu_seqlens_q + b)
    seqlen_q = tl.load(cu_seqlens_q + b + 1) - q_start
    k_start = tl.load(cu_seqlens_k + b)
    seqlen_k = tl.load(cu_seqlens_k + b + 1) - k_start
    qv = tl.view(q + (q_start * stride_qs + h * stride_qh), (seqlen_q, HEAD_DIM), (stride_qs, 1))
    kv = tl.view(k + (k_start * stride_ks + h * stride_kh), (seqlen_k, HEAD_DIM), (stride_ks, 1))
    vv = tl.view(v + (k_start * stride_vs + h * stride_vh), (seqlen_k, HEAD_DIM), (stride_vs, 1))
    ov = tl.view(o + (q_start * stride_os + h * stride_oh), (seqlen_q, HEAD_DIM), (stride_os, 1))
    row0 = pid_m * BLOCK_M
    qt = tl.load(qv, (row0, 0), (BLOCK_M, HEAD_DIM))
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    rows = (row0 + tl.arange(0, BLOCK_M))[:, None]
    for j in range(0, tl.cdiv(seqlen_k, BLOCK_N)):
        col0 = j * BLOCK_N
        kt = tl.load(kv, (col0, 0), (BLOCK_N, HEAD_DIM))
        vt = tl.load(vv, (col0, 0), (BLOCK_N, HEAD_DIM))
        s = tl.dot(qt, kt, trans_b=True) * scale
        cols = (col0 + tl.arange(0, BLOCK_N))[None, :]
        mask = cols < seqlen_k
        if CAUSAL:
            mask = mask & (cols <= rows)
        s = tl.where(mask, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(tl.float16), vt, acc * alpha[:, None])
        m = m_new
    tl.store(ov, (row0, 0), (acc / l[:, None]).to(tl.float16))


def varlen_reference(q, k, v, cu_q, cu_k, scale, causal):
    out = np.zeros(q.shape, np.float64)
    for b in range(len(cu_q) - 1):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        qb, kb, vb = (x.astype(np.float64) for x in (q[qs], k[ks], v[ks]))
        s = np.einsum("qhd,khd->hqk", qb, kb) * scale
        if causal:
            sq, sk = s.shape[-2:]
            s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        out[qs] = np.einsum("hqk,khd->qhd", p / p.sum(-1, keepdims=True), vb)
    return out


def run_varlen(seqlens_q, seqlens_k, causal, heads=2, head_dim=32, run_tile_passes=True):
    rng = np.random.default_rng()
    cu_q = np.concatenate([[0], np.cumsum(seqlens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(seqlens_k)]).astype(np.int32)
    q = rng.standard_normal((cu_q[-1], heads, head_dim)).astype(np.float16)
    k = rng.standard_normal((cu_k[-1], heads, head_dim)).astype(np.float16)
    v = rng.standard_normal((cu_k[-1], heads, head_dim)).astype(np.float16)
    o = np.full(q.shape, np.nan, np.float16)  # poisoned: unwritten rows show
    scale = 1.0 / np.sqrt(head_dim)
    kernel = varlen_fwd.specialize(HEAD_DIM=head_dim, CAUSAL=causal)
    batch, max_q = len(seqlens_q), max(seqlens_q)
    kernel.run_cpu(q, k, v, o, cu_q, cu_k, max_q, heads, batch,
                   *(s // 2 for x in (q, k, v, o) for s in x.strides[:2]), float(scale),
                   grid=(-(-max_q // 16), batch * heads, 1), run_tile_passes=run_tile_passes)
    ref = varlen_reference(q, k, v, cu_q, cu_k, scale, causal)
    return o, ref


@needs_cpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("run_tile_passes", [True, False], ids=["tile-passes", "no-tile-passes"])
def test_varlen_bounds_from_cu_seqlens_match_float64(causal, run_tile_passes):
    """Sequences shorter than a block, of one row, exactly a block and longer
    than several; key lengths differ from query lengths (causal only where
    every query row sees a key: seqlen_k >= seqlen_q)."""
    seqlens_q = [1, 7, 16, 37, 5]
    seqlens_k = [3, 7, 40, 37, 50] if causal else [9, 1, 16, 70, 33]
    o, ref = run_varlen(seqlens_q, seqlens_k, causal, run_tile_passes=run_tile_passes)
    assert not np.isnan(o).any(), "rows left unwritten"
    err = np.linalg.norm(o.astype(np.float64) - ref) / np.linalg.norm(ref)
    assert err < REL_TOL, err


@needs_native
def test_scalar_load_ir():
    """tl.load(ptr + i) is tile.addptr + tile.load_scalar of the pointee type,
    and its result feeds view sizes, pointer offsets and loop bounds."""
    ir = varlen_fwd.specialize().ir
    compiler.parse_and_verify(ir, "<varlen>")
    assert len(re.findall(r"tile.load_scalar %\w+ : !tile.ptr<i32> -> i32", ir)) == 4
    seqlen_k = re.search(r"%(\w+) = arith.subi %\w+, %k_start : i32", ir).group(1)
    assert re.search(rf"tile.view %\w+ sizes\(%{seqlen_k}, %\w+\)", ir)
    assert re.search(rf"arith.addi %{seqlen_k}, %\w+ : i32", ir)  # cdiv(seqlen_k, BLOCK_N)


@needs_native
@pytest.mark.parametrize("causal", [False, True])
def test_loaded_bounds_still_split_masked_loops(causal):
    """seqlen_k (loaded) in the key-padding mask and the loop bound is a
    loop-invariant scalar like a sequence-length parameter: the loop splits
    into unmasked and masked blocks (plus the causal diagonal)."""
    ir = compiler.run_pipeline(varlen_fwd.specialize(CAUSAL=causal).ir, "tile-optimize")
    blocks = re.findall(r'tile.blocks = "(\w+)"', ir)
    assert blocks.count("full") == 1 and "partial" in blocks, blocks
    assert "mask stays applied" not in ir


@needs_native
def test_scalar_load_of_f32_and_i64():
    """Any element type: an f32 (a per-head slope) and an i64 (an offset)."""
    @tilec.jit(grid=(1,))
    def k(x: tl.ptr(tl.float32), offs: tl.ptr(tl.int64), slopes: tl.ptr(tl.float32), n: tl.int32):
        off = tl.load(offs + 1)
        slope = tl.load(slopes + n)
        xv = tl.view(x + off, (n,), (1,))
        tl.store(xv, (0,), tl.full((16,), slope * 2.0, tl.float32))

    ir = k.specialize().ir
    compiler.parse_and_verify(ir, "<f32-i64>")
    assert re.search(r"tile.load_scalar %\w+ : !tile.ptr<i64> -> i64", ir)
    assert re.search(r"tile.load_scalar %\w+ : !tile.ptr<f32> -> f32", ir)


@needs_cpu
def test_scalar_load_of_f32_and_i64_on_cpu():
    @tilec.jit(grid=(1,))
    def k(x: tl.ptr(tl.float32), offs: tl.ptr(tl.int64), slopes: tl.ptr(tl.float32), n: tl.int32):
        off = tl.load(offs + 1)
        slope = tl.load(slopes + n)
        xv = tl.view(x + off, (n,), (1,))
        tl.store(xv, (0,), tl.full((16,), slope * 2.0, tl.float32))

    rng = np.random.default_rng()
    x = np.full(40, np.nan, np.float32)
    offs = np.array([0, int(rng.integers(0, 20))], np.int64)
    slopes = rng.standard_normal(8).astype(np.float32)
    n = int(rng.integers(1, 8))
    k.specialize().run_cpu(x, offs, slopes, n, grid=(1,))
    want = np.full(40, np.nan, np.float32)
    want[offs[1]:offs[1] + n] = slopes[n] * 2.0
    np.testing.assert_array_equal(x, want)


@needs_cpu
def test_scalar_load_past_the_buffer_is_reported():
    """No bounds on tile.load_scalar: on the CPU runner an element past the
    buffer is an error naming the argument, as for tiles."""
    @tilec.jit(grid=(1,))
    def k(x: tl.ptr(tl.float32), idx: tl.ptr(tl.int32), n: tl.int32):
        i = tl.load(idx + n)
        tl.store(tl.view(x, (i,), (1,)), (0,), tl.zeros((16,), tl.float32))

    x = np.zeros(16, np.float32)
    idx = np.array([4, 5], np.int32)
    with pytest.raises(tilec.CompilationError, match=r"element 2 of argument 1 \(idx\), whose buffer holds 2"):
        k.specialize().run_cpu(x, idx, 2, grid=(1,))


@needs_native
def test_scalar_load_on_pointer_arg_errors():
    @tilec.jit(grid=(1,))
    def k(x: tl.ptr(tl.float32), n: tl.int32):
        y = tl.load(x + 1, (0,), (16,))

    with pytest.raises(tilec.CompilationError, match=r"tl.load\(\) takes at most 1 arguments"):
        k.specialize()


@needs_native
def test_scalar_load_gpu_code():
    """On the GPU the loads are uniform scalar loads; cu_seqlens, which the
    kernel never writes, is read through the non-coherent path."""
    arts = compiler.compile(varlen_fwd.specialize(BLOCK_M=64, BLOCK_N=64).ir, "<varlen>", arch="sm_80")
    ptx = arts[0]["ptx"]
    assert len(re.findall(r"ld\.global\.nc\.(?:u|b|s)32", ptx)) >= 2, ptx[:2000]
