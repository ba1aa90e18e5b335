"""Elementwise math of the tile language (tl.tanh, sigmoid, abs, sin, cos,
exp, exp2, log, log2, sqrt, erf, maximum, minimum) on tiles and on scalars,
run on the CPU runner against numpy float64 from the same f32 inputs; the
GPU lowering's instructions (lit: test/passes/convert-tile-to-nvvm-math.mlir)
and its refusal of math it has no lowering for.

Bounds: f32 tiles and scalars, |out - ref| <= 4 ulp(ref) (the CPU evaluates
with libm / LLVM's f32 intrinsics: correctly rounded to ~1 ulp), plus 2|x| ulp
for exp and sigmoid: tile-minimize-nonmatmul computes e^x as 2^(x log2 e);
the f32 product's rounding and log2 e's own (each up to |x log2 e| 2^-24
absolute) are relative errors of up to |x| 2^-24 each in the result (1 ulp
is 2^-24..2^-23 relative);
f16 tiles (the input rounded to f16 first, so the reference uses the rounded
input), |out - ref| <= 2^-10 |ref| + 2^-24 (f16 unit roundoff of the result,
plus f16 rounding of intermediates in sigmoid's 1 + e^-x).
"""

import subprocess
import zlib

import numpy as np
import pytest

import _tilec
import tilec
from tilec import compiler
from tilec import language as tl

import math_kernels as mk

assert _tilec.has_cpu_runner, "_tilec was built without the CPU runner (lib/CPU)"

TILEC = compiler.find_tile_opt().replace("tile-opt", "tilec")


def _ulp_err(out, ref):
    ref32 = np.asarray(ref, dtype=np.float32)
    ulp = np.spacing(np.abs(ref32)).astype(np.float64)
    return np.abs(np.asarray(out, np.float64) - ref) / (ulp + 1e-30)


@pytest.mark.parametrize("op", mk.UNARY)
def test_unary_f32_tile_and_scalar(op):
    rng = np.random.default_rng(zlib.crc32(op.encode()))
    x, s = mk.inputs(op, rng)
    y = np.full_like(x, np.nan)
    s_out = np.full((1, 64), np.nan, dtype=np.float32)
    mk.unary.specialize(OP=op).run_cpu(x, y, s_out, s, mk.ROWS, grid=(1,))
    ref = mk.reference(op, x)
    grows = op in ("exp", "sigmoid")
    err = _ulp_err(y, ref) - (2 * np.abs(x) if grows else 0)
    assert err.max() <= 4, f"{op}: {err.max():.1f} ulp over the bound at x={x.flat[err.argmax()]}"
    ref_s = mk.reference(op, np.float32(s))
    err_s = _ulp_err(s_out, ref_s) - (2 * abs(s) if grows else 0)
    assert err_s.max() <= 4, f"{op}({s}): got {s_out[0, 0]}, want {ref_s}"


@pytest.mark.parametrize("op", ["tanh", "sigmoid", "abs", "sin", "cos", "exp", "log", "sqrt"])
def test_unary_f16_tile(op):
    rng = np.random.default_rng(7 + zlib.crc32(op.encode()))
    x, s = mk.inputs(op, rng)
    if op == "sin" or op == "cos":
        x = x / 16  # f16 holds |x| < 8 to 2^-8; beyond, the rounded input dominates
    if op == "exp":
        x = np.clip(x, -10, 10)  # e^11 > 65504
    if op == "sigmoid":
        x = np.clip(x, -8, 8)  # below e^-9.7 the result is an f16 subnormal
    y = np.full_like(x, np.nan)
    s_out = np.full((1, 64), np.nan, dtype=np.float32)
    mk.unary.specialize(OP=op, DT=tl.float16).run_cpu(x, y, s_out, s, mk.ROWS, grid=(1,))
    ref = mk.reference(op, x.astype(np.float16))
    err = np.abs(y - ref) / (np.abs(ref) * 2.0 ** -10 + 2.0 ** -24)
    assert err.max() <= 1, f"{op}: {err.max():.2f} x bound at x={x.flat[err.argmax()]}"


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_maximum_minimum_tile_and_scalar(op):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 64)).astype(np.float32)
    b = rng.standard_normal((64, 64)).astype(np.float32)
    y = np.full_like(a, np.nan)
    s_out = np.full((1, 64), np.nan, dtype=np.float32)
    s = float(np.float32(rng.uniform(-1, 1)))
    mk.binary.specialize(OP=op).run_cpu(a, b, y, s_out, s, 64, grid=(1,))
    fn = np.maximum if op == "maximum" else np.minimum
    assert np.array_equal(y, fn(a, b))
    assert np.all(s_out == np.float32(fn(s, 0.25)))


def test_abs_of_integers():
    rng = np.random.default_rng(5)
    x = rng.integers(-2**31 + 1, 2**31 - 1, size=(64, 64), dtype=np.int32)
    y = np.zeros_like(x)
    mk.abs_int.specialize().run_cpu(x, y, 64, grid=(1,))
    assert np.array_equal(y, np.abs(x))


def test_softcap_matches_float64():
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((64, 64)) * 60).astype(np.float32)
    y = np.full_like(x, np.nan)
    cap = 30.0
    mk.softcap.specialize().run_cpu(x, y, cap, 64, grid=(1,))
    ref = cap * np.tanh(x.astype(np.float64) / cap)
    assert np.abs(y - ref).max() <= 8 * np.spacing(np.float32(cap))


def test_math_of_constants_folds_in_python():
    """tl.tanh(0.5) etc. of Python numbers are evaluated when the kernel is
    generated: no op in the IR."""
    text = mk.unary.specialize(OP="tanh").ir
    assert text.count("math.tanh") == 2  # the tile and the scalar parameter
    src = mk.softcap.specialize().ir
    assert "math.tanh" in src and "arith.divf" in src


def test_tile_ir_of_the_new_ops():
    ir = {op: mk.unary.specialize(OP=op).ir for op in ("sigmoid", "abs", "sin", "cos")}
    assert "math.exp" in ir["sigmoid"] and "fastmath<afn>" in ir["sigmoid"]
    assert "math.absf" in ir["abs"]
    assert "math.sin" in ir["sin"] and "math.cos" in ir["cos"]
    assert "math.absi" in mk.abs_int.specialize().ir


def test_erf_has_no_gpu_lowering_and_python_survives():
    """A math op without an NVPTX lowering is a CompilationError at the
    user's line (it used to be LLVM's fatal 'Cannot select', which ended the
    process); the interpreter goes on and compiles the next kernel."""
    kernel = mk.erf_kernel.specialize()
    with pytest.raises(tilec.CompilationError) as info:
        kernel.compile("sm_80")
    e = info.value
    assert e.filename.endswith("math_kernels.py")
    assert "tl.erf(t)" in str(e) and "# <- no GPU lowering" in str(e)
    assert "'math.erf'" in e.message and "no GPU (NVPTX) lowering" in e.message
    # Still alive, and the CPU runner evaluates erf.
    x = np.random.default_rng(2).uniform(-3, 3, (64, 64)).astype(np.float32)
    y = np.full_like(x, np.nan)
    kernel.run_cpu(x, y, 64, grid=(1,))
    assert _ulp_err(y, mk.reference("erf", x)).max() <= 4
    assert mk.softcap.specialize().compile("sm_80") is not None


def test_erf_in_a_child_process_exits_cleanly(tmp_path):
    """The same from a fresh interpreter: a clean exit status (not SIGABRT)."""
    code = ("import sys; sys.path.insert(0, %r)\n"
            "import math_kernels as mk, tilec\n"
            "try:\n    mk.erf_kernel.specialize().compile('sm_80')\n"
            "except tilec.CompilationError as e:\n    print('refused:', e.message); sys.exit(3)\n"
            % str(__import__('pathlib').Path(__file__).parent))
    proc = subprocess.run([__import__("sys").executable, "-c", code], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "refused: 'math.erf'" in proc.stdout


def test_math_of_python_numbers_gives_ieee_results():
    y = np.full((1, 8), 7.0, dtype=np.float32)
    mk.constant_math.specialize().run_cpu(y, grid=(1,))
    out = y[0]
    assert out[0] == np.inf and out[1] == -np.inf and np.isnan(out[2]) and np.isnan(out[3])
    assert out[4] == np.float32(np.tanh(0.5)) and out[5] == 0.0 and out[6] == 3.0
    assert out[7] == np.float32(np.cos(0.25))
    assert "math." not in mk.constant_math.specialize().ir  # all folded


def test_cdiv_by_a_constant_zero_is_a_compilation_error():
    with pytest.raises(tilec.CompilationError, match=r"tl.cdiv\(constant 64, 0\): division by zero") as info:
        mk.cdiv_by_zero.specialize()
    assert "# <- cdiv 0" in str(info.value)
