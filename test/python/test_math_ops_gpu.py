"""The GPU lowering of the tile language's elementwise math (approximate
hardware instructions) against float64 from the same f32 inputs; skipped
without a CUDA GPU. The CPU side and the refusals are test_math_ops.py.

Bounds, from the PTX ISA's stated accuracy of each instruction:
  tanh     tanh.approx.f32, max relative error 2^-10.987: |err| <= 2^-10 |ref| + 2^-22
  sin/cos  reduced to [-pi, pi] (|x| <= 100 here, reduction exact to ~1 ulp),
           sin/cos.approx abs error 2^-20.5 there: |err| <= 4e-6
  exp2     ex2.approx.ftz alone: 2 ulp from the correctly rounded result, which
           is 0.5 ulp from float64's; ulps measured at the reference, where a
           binade edge between them doubles the ulp: <= 4 ulp (relative, 2^-21;
           the results are normal for |x| <= 30 here)
  exp      ex2.approx.ftz (2 ulp) of x*log2(e) (the product's and log2(e)'s
           rounding: up to 2|x| ulp of the result): <= 4 + 2|x| ulp; sigmoid adds
           rcp.approx (1 ulp): <= 6 + 2|x| ulp
  log/log2 lg2.approx.ftz, abs error 2^-22: |err| <= 2^-21 + 4 ulp
  sqrt     sqrt.rn: <= 1 ulp;  abs: exact
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

import math_kernels as mk  # noqa: E402


def _bound(op, x, ref):
    ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    if op == "tanh":
        return 2.0 ** -10 * np.abs(ref) + 2.0 ** -22
    if op in ("sin", "cos"):
        return np.full_like(ref, 4e-6)
    if op == "exp2":
        return 4 * ulp
    if op == "exp":
        return (4 + 2 * np.abs(x)) * ulp
    if op == "sigmoid":
        return (6 + 2 * np.abs(x)) * ulp
    if op in ("log", "log2"):
        return 2.0 ** -21 + 4 * ulp
    if op == "sqrt":
        return ulp
    return np.zeros_like(ref)


@pytest.mark.parametrize("op", [op for op in mk.UNARY if op != "erf"])
def test_unary_on_gpu(op):
    rng = np.random.default_rng(100 + mk.UNARY.index(op))
    x, s = mk.inputs(op, rng)
    xt = torch.from_numpy(x).cuda()
    y = torch.full_like(xt, float("nan"))
    s_out = torch.full((1, 64), float("nan"), device="cuda")
    mk.unary.specialize(OP=op)(xt, y, s_out, s, mk.ROWS)
    torch.cuda.synchronize()
    out = y.cpu().numpy().astype(np.float64)
    ref = mk.reference(op, x)
    excess = np.abs(out - ref) - _bound(op, x.astype(np.float64), ref)
    assert excess.max() <= 0, f"{op}: over the bound by {excess.max():.3g} at x={x.flat[excess.argmax()]}"
    ref_s = mk.reference(op, np.float32(s))
    got_s = s_out.cpu().numpy().astype(np.float64)
    assert (np.abs(got_s - ref_s) - _bound(op, np.float64(s), np.asarray(ref_s))).max() <= 0


def test_softcap_on_gpu():
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((64, 64)) * 60).astype(np.float32)
    xt = torch.from_numpy(x).cuda()
    y = torch.full_like(xt, float("nan"))
    mk.softcap.specialize()(xt, y, 30.0, 64)
    ref = 30.0 * np.tanh(x.astype(np.float64) / 30.0)
    assert np.abs(y.cpu().numpy() - ref).max() <= 30.0 * 2.0 ** -10 + 1e-5
