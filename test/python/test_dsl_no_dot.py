"""Kernels without a tile.dot: a row softmax and the combine of split-KV
partial results (lse = log Σ exp(lse_i), out = Σ exp(lse_i − lse)·out_i).
Their tiles get the coalesced layout with warps on rows (tile-partition-warps'
default); row vectors that meet a second tile's layout move through shared
memory. Numerics on the CPU runner against float64; GPU code compiles and
assembles."""

import os
import re
import shutil

import numpy as np
import pytest

import tilec
from tilec import compiler
from tilec import language as tl

HAVE_NATIVE = compiler.available()
HAVE_CPU = HAVE_NATIVE and getattr(compiler.native(), "has_cpu_runner", False)
HAVE_PTXAS = bool(shutil.which("ptxas") or os.path.exists("/usr/local/cuda/bin/ptxas"))
needs_native = pytest.mark.skipif(not HAVE_NATIVE, reason="the _tilec extension is not built")
needs_cpu = pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")


@tilec.jit(grid=("cdiv(n_rows, BLOCK_M)",))
def softmax(x: tl.ptr(tl.float32), y: tl.ptr(tl.float32), n_rows: tl.int32, n_cols: tl.int32,
            stride: tl.int64, BLOCK_M: tl.constexpr = 16, BLOCK_N: tl.constexpr = 128):
    row0 = tl.program_id(0) * BLOCK_M
    xv = tl.view(x, (n_rows, n_cols), (stride, 1))
    t = tl.load(xv, (row0, 0), (BLOCK_M, BLOCK_N), padding="neg_inf")
    p = tl.exp(t - tl.max(t, 1)[:, None])
    tl.store(tl.view(y, (n_rows, n_cols), (stride, 1)), (row0, 0), p / tl.sum(p, 1)[:, None])


@tilec.jit(grid=("cdiv(n_rows, BLOCK_M)",))
def combine(o_part: tl.ptr(tl.float32), lse_part: tl.ptr(tl.float32), o: tl.ptr(tl.float32),
            lse: tl.ptr(tl.float32), n_rows: tl.int32,
            BLOCK_M: tl.constexpr = 16, D: tl.constexpr = 64, SPLITS: tl.constexpr = 4):
    """o_part (rows, SPLITS, D) and lse_part (rows, SPLITS): per-split results."""
    row0 = tl.program_id(0) * BLOCK_M
    lp = tl.load(tl.view(lse_part, (n_rows, SPLITS), (SPLITS, 1)), (row0, 0), (BLOCK_M, SPLITS),
                 padding="neg_inf")
    mx = tl.max(lp, 1)
    lse_row = mx + tl.log(tl.sum(tl.exp(lp - mx[:, None]), 1))
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for s in range(0, SPLITS):
        ot = tl.load(tl.view(o_part + s * D, (n_rows, D), (SPLITS * D, 1)), (row0, 0), (BLOCK_M, D))
        ls = tl.load(tl.view(lse_part + s, (n_rows,), (SPLITS,)), (row0,), (BLOCK_M,))
        acc = acc + tl.exp(ls - lse_row)[:, None] * ot
    tl.store(tl.view(o, (n_rows, D), (D, 1)), (row0, 0), acc)
    tl.store(tl.view(lse, (n_rows,), (1,)), (row0,), lse_row)


@needs_cpu
@pytest.mark.parametrize("n_rows,n_cols,block_n", [(37, 128, 128), (16, 100, 128), (5, 1000, 1024)])
def test_softmax_matches_float64(n_rows, n_cols, block_n):
    rng = np.random.default_rng()
    x = (rng.standard_normal((n_rows, n_cols)) * 4).astype(np.float32)
    y = np.full_like(x, np.nan)
    softmax.specialize(BLOCK_N=block_n).run_cpu(x, y, n_rows, n_cols, n_cols,
                                                grid=(-(-n_rows // 16),))
    x64 = x.astype(np.float64)
    ref = np.exp(x64 - x64.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=1e-7)


@needs_cpu
def test_combine_matches_float64():
    rng = np.random.default_rng()
    n_rows, splits, d = 41, 4, 64
    o_part = rng.standard_normal((n_rows, splits, d)).astype(np.float32)
    lse_part = (rng.standard_normal((n_rows, splits)) * 3).astype(np.float32)
    o = np.full((n_rows, d), np.nan, np.float32)
    lse = np.full(n_rows, np.nan, np.float32)
    combine.specialize().run_cpu(o_part, lse_part, o, lse, n_rows, grid=(-(-n_rows // 16),))
    l64 = lse_part.astype(np.float64)
    ref_lse = np.log(np.exp(l64).sum(1))
    ref_o = (np.exp(l64 - ref_lse[:, None])[:, :, None] * o_part).sum(1)
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(o, ref_o, rtol=1e-5, atol=1e-5)


@needs_native
@pytest.mark.parametrize("kernel,constexprs", [
    (softmax, {}), (softmax, dict(BLOCK_M=4, BLOCK_N=1024)), (softmax, dict(BLOCK_M=64, BLOCK_N=64)),
    (combine, {}), (combine, dict(BLOCK_M=64, D=128, SPLITS=8))],
    ids=["softmax", "softmax-4x1024", "softmax-64x64", "combine", "combine-64x128x8"])
def test_no_dot_kernels_compile_for_the_gpu(kernel, constexprs):
    """The softmax's row reductions stay inside a warp (shuffles, no shared
    memory); the combine's lse rows (SPLITS wide) are in-thread and meet O's
    layout through shared memory. ptxas assembles the PTX."""
    k = kernel.specialize(**constexprs)
    art = compiler.compile(k.ir, k.source_name, arch="sm_80")[0]
    ptx = art["ptx"]
    if kernel is softmax:
        assert "shfl.sync.bfly" in ptx
        assert "st.shared" not in ptx and "bar.sync" not in ptx
    else:
        assert "st.shared" in ptx and "bar.sync" in ptx
    if HAVE_PTXAS:
        assert art["cubin"]


# --- on the GPU (skipped without one) ------------------------------------------


def _cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


needs_gpu = pytest.mark.skipif(_cuda() is None, reason="needs torch and a CUDA GPU")


@needs_gpu
@pytest.mark.parametrize("n_rows,n_cols,constexprs", [(37, 128, {}), (5, 1000, dict(BLOCK_M=4, BLOCK_N=1024)),
                                                      (200, 64, dict(BLOCK_M=64, BLOCK_N=64))])
def test_softmax_gpu_matches_float64(n_rows, n_cols, constexprs):
    torch = _cuda()
    x = torch.randn(n_rows, n_cols, device="cuda") * 4
    y = torch.full_like(x, float("nan"))
    softmax.specialize(**constexprs)(x, y, n_rows, n_cols, n_cols)
    torch.cuda.synchronize()
    ref = torch.softmax(x.double(), 1)
    assert (y.double() - ref).abs().max().item() < 1e-5


@needs_gpu
@pytest.mark.parametrize("constexprs", [{}, dict(BLOCK_M=64, D=128, SPLITS=8)], ids=["16x64x4", "64x128x8"])
def test_combine_gpu_matches_float64(constexprs):
    torch = _cuda()
    splits, d, n_rows = constexprs.get("SPLITS", 4), constexprs.get("D", 64), 141
    o_part = torch.randn(n_rows, splits, d, device="cuda")
    lse_part = torch.randn(n_rows, splits, device="cuda") * 3
    o = torch.full((n_rows, d), float("nan"), device="cuda")
    lse = torch.full((n_rows,), float("nan"), device="cuda")
    combine.specialize(**constexprs)(o_part, lse_part, o, lse, n_rows)
    torch.cuda.synchronize()
    ref_lse = torch.logsumexp(lse_part.double(), 1)
    ref_o = (torch.exp(lse_part.double() - ref_lse[:, None])[:, :, None] * o_part.double()).sum(1)
    assert (lse.double() - ref_lse).abs().max().item() < 1e-5
    assert (o.double() - ref_o).abs().max().item() < 1e-4
