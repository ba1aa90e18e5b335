"""tilec.flash_attn_func and the DSL flagship kernel: numerics on the CPU path
against a float64 reference, argument checks, compilation and its cache."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

import tilec
from tilec import compiler
from tilec import language as tl
from tilec.flash_attn import flash_fwd_kernel

from flash_reference import attention_batch

HAVE_NATIVE = compiler.available()
HAVE_CPU = HAVE_NATIVE and getattr(compiler.native(), "has_cpu_runner", False)
needs_native = pytest.mark.skipif(not HAVE_NATIVE, reason="the _tilec extension is not built")
needs_cpu = pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner "
                                                    "(tilec::runOnCPU in lib/CPU not built yet)")

# f16 inputs, f32 accumulation, P rounded to f16 before P·V, output rounded to
# f16: measured ||out-ref||/||ref|| 2.3e-4 .. 2.7e-4, lse within 1.2e-6.
REL_TOL = 1e-3
LSE_TOL = 1e-5


def reference(q, k, v, scale, causal):
    """float64 softmax(scale·QKᵀ)·V and lse, flash_attn layout (b, s, h, d);
    causal aligned bottom right (flash_attn >= 2.1): rows that see no key
    give 0 and an lse of +inf."""
    return attention_batch(q, k, v, scale, causal)


def lse_close(lse, ref_lse, tol):
    """Finite entries within tol; +inf (empty rows) exactly where expected."""
    finite = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isposinf(lse), ~finite)
    return np.abs(lse[finite] - ref_lse[finite]).max(initial=0) < tol


def rel_err(out, ref):
    return np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref)


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float16)


@needs_cpu
@pytest.mark.parametrize("head_dim", [40, 64, 96, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlens", [(77, 131), (130, 37), (1, 65)])
def test_flash_attn_func_cpu_matches_float64(head_dim, causal, seqlens):
    rng = np.random.default_rng()
    sq, sk = seqlens
    b, h = 2, 3
    q, k, v = randn(rng, b, sq, h, head_dim), randn(rng, b, sk, h, head_dim), randn(rng, b, sk, h, head_dim)
    out, lse = tilec.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    ref, ref_lse = reference(q, k, v, 1 / math.sqrt(head_dim), causal)
    assert out.shape == q.shape and out.dtype == np.float16 and lse.shape == (b, h, sq)
    assert np.isfinite(out).all()
    assert rel_err(out, ref) < REL_TOL
    assert lse_close(lse, ref_lse, LSE_TOL)


@needs_cpu
def test_flash_kernel_cpu_strided_inputs_and_poisoned_output():
    """Arbitrary strides (heads-major storage, padding between rows) reach the
    kernel; every output element is written (NaN poison overwritten)."""
    rng = np.random.default_rng()
    b, sq, sk, h, d = 2, 93, 70, 2, 64
    # (b, h, s, d+8) storage viewed as (b, s, h, d): strides are not the packed ones.
    store = lambda s: rng.standard_normal((b, h, s, d + 8)).astype(np.float16)
    q, k, v = (store(s)[..., :d].transpose(0, 2, 1, 3) for s in (sq, sk, sk))
    o = np.full((b, sq, h, d), np.nan, np.float16)
    lse = np.full((b, h, sq), np.nan, np.float32)
    scale = 0.3
    kernel = flash_fwd_kernel().specialize(DTYPE=tl.float16, HEAD_DIM=d, CAUSAL=False)
    el = lambda a: [s // a.itemsize for s in a.strides]
    sq_, sk_, sv_, so_, sl_ = el(q), el(k), el(v), el(o), el(lse)
    kernel.run_cpu(q, k, v, o, lse, sq, sk, h, b, 1,
                   sq_[0], sq_[1], sq_[2], sk_[0], sk_[1], sk_[2], sv_[0], sv_[1], sv_[2],
                   so_[0], so_[1], so_[2], sl_[0], sl_[1], scale,
                   -1, -1, 1.0, np.zeros(1, np.float32), 0, *[np.zeros(1, np.int32)] * 3, 0,
                   grid=(math.ceil(sq / 64), h, b))
    ref, ref_lse = reference(q, k, v, scale, False)
    assert np.isfinite(o).all() and np.isfinite(lse).all()
    assert rel_err(o, ref) < REL_TOL
    assert np.abs(lse - ref_lse).max() < LSE_TOL


@needs_cpu
@pytest.mark.parametrize("scale", [-1 / math.sqrt(128), -0.125, 0.0])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_func_cpu_nonpositive_scale(scale, causal):
    """The kernel declares tl.assume(scale > 0); flash_attn_func runs scale < 0
    as (-q, -scale) and scale == 0 as (q = 0, 1.0), exact rewrites, so the
    float64 reference at the caller's scale holds to the usual bounds
    (measured: out 2.5e-4, lse 1.8e-6 at -0.125, as at +0.125; the lse error
    grows with |scale|·|QKᵀ| whatever the sign)."""
    rng = np.random.default_rng()
    b, sq, sk, h, d = 2, 77, 131, 2, 128
    q, k, v = randn(rng, b, sq, h, d), randn(rng, b, sk, h, d), randn(rng, b, sk, h, d)
    q_before = q.copy()
    out, lse = tilec.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal, return_lse=True)
    ref, ref_lse = reference(q, k, v, scale, causal)
    np.testing.assert_array_equal(q, q_before)  # the caller's q is not negated in place
    assert np.isfinite(out).all()
    assert rel_err(out, ref) < REL_TOL
    assert lse_close(lse, ref_lse, LSE_TOL)


def test_flash_attn_func_rejects_nan_scale():
    with pytest.raises(ValueError, match=r"softmax_scale is NaN"):
        tilec.flash_attn_func(*_qkv(), softmax_scale=float("nan"))


@needs_cpu
@pytest.mark.parametrize("scale", [-0.5, 0.0, float("nan")])
def test_run_cpu_rejects_scale_the_kernel_assumes_positive(scale):
    """Run directly (not through flash_attn_func), the kernel refuses a scale
    its tl.assume(scale > 0) rules out instead of computing a wrong softmax."""
    kernel = flash_fwd_kernel().specialize(HEAD_DIM=64)
    q, k, v = _qkv()
    o, lse = np.empty_like(q), np.empty((1, 2, 8), np.float32)
    args = [q, k, v, o, lse, 8, 8, 2, 1, 1] + [1] * 14 + [scale, -1, -1, 1.0, np.zeros(1, np.float32), 0] + [np.zeros(1, np.int32)] * 3 + [0]
    with pytest.raises(tilec.CompilationError,
                       match=r"argument 24 \(scale\) of @flash_fwd_f16_d64 must be > 0 \(the kernel "
                             r"was compiled with tl.assume\(scale > 0\)\), got (-0.5|0|nan)"):
        kernel.run_cpu(*args, grid=(1, 2, 1))


# --- argument checks (no compiler needed) -----------------------------------


def _qkv(shape_q=(1, 8, 2, 64), shape_k=(1, 8, 2, 64), dtype=np.float16):
    return (np.zeros(shape_q, dtype), np.zeros(shape_k, dtype), np.zeros(shape_k, dtype))


@pytest.mark.parametrize("args, error, match", [
    (lambda: (np.zeros((8, 2, 64), np.float16),) + _qkv()[1:], ValueError, r"'q' must have rank 4"),
    (lambda: _qkv()[:2] + (np.zeros((1, 8, 2, 64), np.float32),), TypeError, r"'v' must be float16, got float32"),
    (lambda: _qkv(shape_k=(1, 8, 4, 64)), ValueError,
     r"query heads \(2\) must be a multiple of the number of key/value heads \(4\)"),
    (lambda: _qkv(shape_q=(1, 8, 2, 264), shape_k=(1, 8, 2, 264)), ValueError, r"head_dim 264 is not supported"),
    (lambda: (_qkv()[0], [[1]], _qkv()[2]), TypeError, r"'k' must be a numpy array"),
])
def test_flash_attn_func_argument_errors(args, error, match):
    with pytest.raises(error, match=match):
        tilec.flash_attn_func(*args())


def test_flash_attn_func_rejects_non_contiguous_last_dim():
    q, k, v = _qkv(shape_q=(1, 8, 2, 128))
    q = q[..., ::2]
    k, v = k, v
    with pytest.raises(ValueError, match=r"'q' must be contiguous in its last dimension"):
        tilec.flash_attn_func(q, k, v)


def test_run_cpu_checks_arguments():
    kernel = flash_fwd_kernel().specialize(HEAD_DIM=64)
    with pytest.raises(TypeError, match=r"takes 34 arguments"):
        kernel.run_cpu(1, 2, grid=(1,))
    args = [np.zeros(4, np.float16)] * 4 + [np.zeros(4, np.float64)] + [1] * 19 + [1.0, -1, -1, 1.0,
                                                                                 np.zeros(1, np.float32), 0]
    args += [np.zeros(1, np.int32)] * 3 + [0]
    with pytest.raises(TypeError, match=r"argument 'lse': expected a numpy array of float32, got float64"):
        kernel.run_cpu(*args, grid=(1,))


# --- compilation -------------------------------------------------------------


@needs_native
def test_compile_produces_artifacts_and_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(compiler, "_memory_cache", {})
    calls = []
    real = compiler.compile
    monkeypatch.setattr(compiler, "compile", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    kernel = flash_fwd_kernel().specialize(DTYPE=tl.bfloat16, HEAD_DIM=64, CAUSAL=True)
    art = kernel.compile("sm_80")
    manifest = art.manifest
    assert manifest["kernel"] == "flash_fwd_bf16_d64_causal"
    assert [p["name"] for p in manifest["params"]][:5] == ["q", "k", "v", "o", "lse"]
    # (row blocks, heads, batch): batch * heads may exceed one axis's 65,535.
    assert manifest["grid"] == ["cdiv(seqlen_q, 64)", "num_heads", "batch"]
    # tl.assume(scale > 0) reaches the manifest: the runtime checks every launch.
    scale = [p for p in manifest["params"] if p["name"] == "scale"]
    assert scale == [{"name": "scale", "kind": "f32", "positive": True}]
    assert ".entry flash_fwd_bf16_d64_causal" in art.ptx
    assert len(calls) == 1
    # Same IR, arch and options: memory, then disk, never the compiler again.
    kernel._compiled.clear()
    kernel.compile("sm_80")
    compiler._memory_cache.clear()
    kernel._compiled.clear()
    assert kernel.compile("sm_80").manifest_path == art.manifest_path
    assert len(calls) == 1
    # Another arch is another key.
    kernel.compile("sm_90a")
    assert len(calls) == 2


@needs_native
def test_dump_ir_env_prints_ir_after_passes(tmp_path):
    code = ("import tilec\nfrom tilec.flash_attn import flash_fwd_kernel\n"
            "flash_fwd_kernel().specialize(HEAD_DIM=64).compile('sm_80')\n")
    env = dict(os.environ, TILEC_DUMP_IR="1", TILEC_CACHE_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "IR Dump After" in proc.stderr


@needs_native
def test_compiler_diagnostics_become_compilation_errors():
    bad = "func.func @f(%a: i32) attributes {tile.kernel} {\n  %0 = tile.iota : tensor<8xi64>\n  return\n}\n"
    with pytest.raises(tilec.CompilationError, match=r"tile.iota") as info:
        compiler.compile(bad, "bad.mlir")
    assert "PassManager::run failed" not in str(info.value)
    assert info.value.filename == "bad.mlir" and info.value.lineno == 2


@needs_native
def test_prebuilt_artifacts_serve_hosts_without_compiler(tmp_path, monkeypatch):
    """scripts/build_artifacts.py output is found by IR digest when the
    compiler extension is missing (a GPU host without LLVM)."""
    kernel = flash_fwd_kernel().specialize(HEAD_DIM=64, CAUSAL=True)
    (result,) = compiler.compile(kernel.ir, kernel.source_name, arch="sm_80")
    compiler.write_artifacts(result, tmp_path, extras=False)
    compiler.write_digest(tmp_path, result["name"], kernel.ir, kernel.build_options())
    monkeypatch.setenv("TILEC_ARTIFACTS", str(tmp_path))
    monkeypatch.setattr(compiler, "available", lambda: False)
    monkeypatch.setattr(compiler, "compiler_kind", lambda: None)  # nor a tilec CLI
    kernel._compiled.clear()
    art = kernel.compile()
    assert art.manifest_path == str(tmp_path / "flash_fwd_f16_d64_causal.json")
    # A different kernel (other IR) is not served from these files.
    other = flash_fwd_kernel().specialize(HEAD_DIM=64, CAUSAL=False)
    assert compiler.find_prebuilt(kernel.name, other.ir, options=kernel.build_options()) is None
    # Nor is the same IR asked for with other compile options (a tuner
    # configuration built into the same folder must not stand in for it).
    other_mode = "chunk" if kernel.copy_bounds != "chunk" else "row"
    assert compiler.find_prebuilt(kernel.name, kernel.ir, options=compiler.build_options(
        kernel.num_warps, kernel.num_stages, kernel.smem_epilogue, other_mode)) is None
    assert compiler.find_prebuilt(kernel.name, kernel.ir, options=kernel.build_options()) is not None


class _FakeCudaTensor:
    def __init__(self, ptr, strides, itemsize=2):
        self._ptr, self._strides, self._itemsize = ptr, strides, itemsize

    def data_ptr(self):
        return self._ptr

    def element_size(self):
        return self._itemsize

    def stride(self):
        return self._strides


def test_rows_must_be_16_byte_aligned_on_the_gpu():
    """Views whose rows break 16-byte alignment are copied before launch
    (cp.async and vector loads move 16 bytes)."""
    from tilec.flash_attn import _rows_aligned

    assert _rows_aligned(_FakeCudaTensor(256, (8192, 512, 64, 1)))
    assert not _rows_aligned(_FakeCudaTensor(256, (8320, 520, 65, 1)))   # head_dim slice of 65
    assert not _rows_aligned(_FakeCudaTensor(258, (8192, 512, 64, 1)))   # odd storage offset


def test_positional_arguments_follow_flash_attn():
    """flash_attn's order is (q, k, v, dropout_p, softmax_scale, causal): the
    same positional call means the same thing here (dropout_p included)."""
    q, k, v = _qkv()
    by_name = tilec.flash_attn_func(q, k, v, softmax_scale=0.3, causal=True)
    by_position = tilec.flash_attn_func(q, k, v, 0.0, 0.3, True)
    np.testing.assert_array_equal(by_name, by_position)
    np.random.seed(1)
    dropped = tilec.flash_attn_func(q, k, v, 0.1, 0.3, True)
    np.random.seed(1)
    np.testing.assert_array_equal(dropped, tilec.flash_attn_func(q, k, v, dropout_p=0.1,
                                                                 softmax_scale=0.3, causal=True))


@pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")
def test_negative_strides_run_on_the_cpu():
    """Keys and values reversed along the sequence (negative strides) give
    the same result as reversed copies: such buffers reach below their first
    element, so the CPU runner runs them without its buffer-bounds check
    rather than refusing them."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 64, 1, 64)).astype(np.float16) for _ in range(3))
    expected = tilec.flash_attn_func(q, k[:, ::-1].copy(), v[:, ::-1].copy())
    out = tilec.flash_attn_func(q, k[:, ::-1], v[:, ::-1])
    np.testing.assert_array_equal(out, expected)
