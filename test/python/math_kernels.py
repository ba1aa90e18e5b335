"""Elementwise-math kernels shared by test_math_ops.py (CPU runner) and
test_math_ops_gpu.py (CUDA): y = OP(x) on a 64x64 tile of x, and
s_out = OP(s) on the scalar parameter s (a scalar op, splat into a row)."""

import tilec
from tilec import language as tl

ROWS, COLS = 64, 64

UNARY = ("tanh", "sigmoid", "abs", "sin", "cos", "exp", "exp2", "log", "log2", "sqrt", "erf")


@tilec.jit(grid=("1", "1", "1"), name="math_{OP}_{DT}")
def unary(x: tl.ptr(tl.float32), y: tl.ptr(tl.float32), s_out: tl.ptr(tl.float32),
          s: tl.float32, n: tl.int32, OP: tl.constexpr, DT: tl.constexpr = tl.float32):
    vx = tl.view(x, (n, 64), (64, 1))
    vy = tl.view(y, (n, 64), (64, 1))
    vs = tl.view(s_out, (1, 64), (64, 1))
    t = tl.load(vx, (0, 0), (64, 64)).to(DT)
    if OP == "tanh":
        r = tl.tanh(t)
        rs = tl.tanh(s)
    elif OP == "sigmoid":
        r = tl.sigmoid(t)
        rs = tl.sigmoid(s)
    elif OP == "abs":
        r = tl.abs(t)
        rs = tl.abs(s)
    elif OP == "sin":
        r = tl.sin(t)
        rs = tl.sin(s)
    elif OP == "cos":
        r = tl.cos(t)
        rs = tl.cos(s)
    elif OP == "exp":
        r = tl.exp(t)
        rs = tl.exp(s)
    elif OP == "exp2":
        r = tl.exp2(t)
        rs = tl.exp2(s)
    elif OP == "log":
        r = tl.log(t)
        rs = tl.log(s)
    elif OP == "log2":
        r = tl.log2(t)
        rs = tl.log2(s)
    elif OP == "sqrt":
        r = tl.sqrt(t)
        rs = tl.sqrt(s)
    else:
        r = tl.erf(t)
        rs = tl.erf(s)
    tl.store(vy, (0, 0), r.to(tl.float32))
    tl.store(vs, (0, 0), tl.full((1, 64), rs, tl.float32))


@tilec.jit(grid=("1", "1", "1"), name="minmax_{OP}")
def binary(a: tl.ptr(tl.float32), b: tl.ptr(tl.float32), y: tl.ptr(tl.float32),
           s_out: tl.ptr(tl.float32), s: tl.float32, n: tl.int32, OP: tl.constexpr):
    va = tl.view(a, (n, 64), (64, 1))
    vb = tl.view(b, (n, 64), (64, 1))
    vy = tl.view(y, (n, 64), (64, 1))
    vs = tl.view(s_out, (1, 64), (64, 1))
    ta = tl.load(va, (0, 0), (64, 64))
    tb = tl.load(vb, (0, 0), (64, 64))
    if OP == "maximum":
        tl.store(vy, (0, 0), tl.maximum(ta, tb))
        tl.store(vs, (0, 0), tl.full((1, 64), tl.maximum(s, 0.25), tl.float32))
    else:
        tl.store(vy, (0, 0), tl.minimum(ta, tb))
        tl.store(vs, (0, 0), tl.full((1, 64), tl.minimum(s, 0.25), tl.float32))


@tilec.jit(grid=("1", "1", "1"))
def abs_int(x: tl.ptr(tl.int32), y: tl.ptr(tl.int32), n: tl.int32):
    vx = tl.view(x, (n, 64), (64, 1))
    vy = tl.view(y, (n, 64), (64, 1))
    tl.store(vy, (0, 0), tl.abs(tl.load(vx, (0, 0), (64, 64))))


@tilec.jit(grid=("1", "1", "1"))
def softcap(x: tl.ptr(tl.float32), y: tl.ptr(tl.float32), cap: tl.float32, n: tl.int32):
    """FlashAttention's softcap, c * tanh(s / c)."""
    vx = tl.view(x, (n, 64), (64, 1))
    vy = tl.view(y, (n, 64), (64, 1))
    tl.store(vy, (0, 0), cap * tl.tanh(tl.load(vx, (0, 0), (64, 64)) / cap))


@tilec.jit(grid=("1", "1", "1"))
def erf_kernel(x: tl.ptr(tl.float32), y: tl.ptr(tl.float32), n: tl.int32):
    vx = tl.view(x, (n, 64), (64, 1))
    vy = tl.view(y, (n, 64), (64, 1))
    t = tl.load(vx, (0, 0), (64, 64))
    tl.store(vy, (0, 0), tl.erf(t))  # <- no GPU lowering


def inputs(op, rng):
    """Fresh random inputs in the op's domain (positive for log/sqrt), the
    scalar parameter included."""
    import numpy as np

    lo, hi = {"log": (1e-3, 50.0), "log2": (1e-3, 50.0), "sqrt": (0.0, 50.0),
              "sin": (-100.0, 100.0), "cos": (-100.0, 100.0), "exp": (-20.0, 20.0),
              "exp2": (-30.0, 30.0), "tanh": (-8.0, 8.0), "sigmoid": (-30.0, 30.0)}.get(op, (-4.0, 4.0))
    x = rng.uniform(lo, hi, size=(ROWS, COLS)).astype(np.float32)
    s = float(np.float32(rng.uniform(max(lo, 1e-2) if lo >= 0 else lo, hi)))
    return x, s


def reference(op, x):
    """float64 reference of OP on x (an array or a float)."""
    import math

    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    fns = {"tanh": np.tanh, "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)), "abs": np.abs,
           "sin": np.sin, "cos": np.cos, "exp": np.exp, "exp2": np.exp2, "log": np.log,
           "log2": np.log2, "sqrt": np.sqrt, "erf": np.vectorize(math.erf)}
    return fns[op](x)


@tilec.jit(grid=("1", "1", "1"))
def constant_math(y: tl.ptr(tl.float32)):
    """Math of Python numbers, folded when the kernel is generated, with the
    kernel's IEEE results (Python's math module would raise)."""
    vy = tl.view(y, (1, 8), (8, 1))
    r = tl.where(tl.arange(0, 8)[None, :] == 0, tl.exp(1e10), 0.0)
    r = tl.where(tl.arange(0, 8)[None, :] == 1, tl.log(0.0), r)
    r = tl.where(tl.arange(0, 8)[None, :] == 2, tl.log(-1.0), r)
    r = tl.where(tl.arange(0, 8)[None, :] == 3, tl.sqrt(-4.0), r)
    r = tl.where(tl.arange(0, 8)[None, :] == 4, tl.tanh(0.5), r)
    r = tl.where(tl.arange(0, 8)[None, :] == 5, tl.sigmoid(-1e6), r)
    r = tl.where(tl.arange(0, 8)[None, :] == 6, tl.abs(-3), r)
    r = tl.where(tl.arange(0, 8)[None, :] == 7, tl.cos(0.25), r)
    tl.store(vy, (0, 0), r)


@tilec.jit(grid=("1", "1", "1"))
def cdiv_by_zero(y: tl.ptr(tl.float32), n: tl.int32):
    vy = tl.view(y, (n, 64), (64, 1))
    tl.store(vy, (0, 0), tl.zeros((64, tl.cdiv(64, 0)), tl.float32))  # <- cdiv 0
