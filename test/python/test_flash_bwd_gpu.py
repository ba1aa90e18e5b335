"""The backward's variants and dropout on a CUDA GPU (skipped without one,
saying so): gradients vs float64 for a window/softcap/ALiBi combination and
varlen, dropout's CUDA-generator semantics (seed and Philox offset of the
default or a given CUDA generator, advanced per call; torch.manual_seed
replays), and its refusal under CUDA-graph capture. bench/check_bwd.py runs
the wider matrix."""

import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU: the backward's GPU tests need one (the CPU runner's are in "
                "test_flash_bwd_variants.py and test_flash_dropout.py)", allow_module_level=True)

import tilec  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import check_bwd  # noqa: E402


def _grads(fn, q, k, v, dout, *args, **kw):
    return check_bwd.tilec_grads(fn, q, k, v, dout, *args, **kw)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_window_softcap_alibi_gradients(dtype):
    q, k, v, dout = (torch.randn(2, n, h, 128, device="cuda", dtype=dtype)
                     for n, h in ((300, 8), (700, 2), (700, 2), (300, 8)))
    slopes = torch.rand(8, device="cuda")
    kw = dict(window_size=(64, 16), softcap=10.0, alibi_slopes=slopes)
    _, got = _grads(tilec.flash_attn_func, q, k, v, dout, **kw)
    rk = dict(scale=1 / math.sqrt(128), window=(64, 16), softcap=10.0, slopes=slopes)
    _, ref = check_bwd.ref_grads(q, k, v, dout, torch.float64, **rk)
    _, same = check_bwd.ref_grads(q, k, v, dout, dtype, **rk)
    assert not check_bwd.check("gpu", got, ref, same, dtype)


def test_dropout_follows_the_cuda_generator():
    q, k, v, dout = (torch.randn(1, 256, 4, 64, device="cuda", dtype=torch.float16) for _ in range(4))
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    torch.manual_seed(3)
    offset = gen.get_offset()
    a = tilec.flash_attn_func(q, k, v, dropout_p=0.2)
    assert gen.get_offset() == offset + 4 * 256 * 256 * 4  # 4 per counter used (_cuda_philox_quads)
    b = tilec.flash_attn_func(q, k, v, dropout_p=0.2)
    torch.manual_seed(3)
    assert torch.equal(tilec.flash_attn_func(q, k, v, dropout_p=0.2), a)
    assert not torch.equal(a, b)
    g1 = torch.Generator(device="cuda").manual_seed(9)
    g2 = torch.Generator(device="cuda").manual_seed(9)
    assert torch.equal(tilec.flash_attn_func(q, k, v, dropout_p=0.2, generator=g1),
                       tilec.flash_attn_func(q, k, v, dropout_p=0.2, generator=g2))
    with pytest.raises(TypeError, match=r"'generator' must be a CUDA torch.Generator"):
        tilec.flash_attn_func(q, k, v, dropout_p=0.2, generator=torch.Generator())


@pytest.mark.parametrize("entry", ["func", "varlen_kvpacked"])
def test_dropout_under_torch_compile_runs_eagerly(entry):
    from test_flash_dropout import check_dropout_under_torch_compile

    check_dropout_under_torch_compile(entry, "cuda")


def test_dropout_under_graph_capture_is_refused():
    q, k, v, _ = (torch.randn(1, 64, 2, 64, device="cuda", dtype=torch.float16) for _ in range(4))
    tilec.flash_attn_func(q, k, v)  # load the module before capturing
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(NotImplementedError, match=r"dropout while a CUDA graph is being captured"):
        with torch.cuda.graph(graph):
            tilec.flash_attn_func(q, k, v, dropout_p=0.1)


def _repeatable_and_close(form, b, sq, sk, h, d, causal, seed):
    """deterministic=True on the fused kernel in `form` (deterministic_form):
    five calls give the same bits, and agree with the atomic form (float64
    checks: bench/check_bwd.py)."""
    from tilec.flash_bwd import _flash_attn_backward

    torch.manual_seed(seed)
    q, dout = (torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(b, sk, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    scale = d ** -0.5
    out, lse = tilec.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal, return_lse=True)
    runs = [_flash_attn_backward(dout, q, k, v, out, lse, scale, causal, deterministic=True,
                                 atomic_dq=True, deterministic_form=form) for _ in range(5)]
    assert all(torch.equal(x, y) for run in runs[1:] for x, y in zip(run, runs[0]))
    atomic = _flash_attn_backward(dout, q, k, v, out, lse, scale, causal, deterministic=False,
                                  atomic_dq=True)
    for name, x, y in zip(("dq", "dk", "dv"), runs[0], atomic):
        err = ((x.float() - y.float()).norm() / y.float().norm()).item()
        assert err < 1e-2, f"{name}: {form} vs atomic relative difference {err:.2e}"


@pytest.mark.parametrize("shape", [(2, 4096, 4096, 2), (8, 2048, 2048, 16), (3, 3000, 4500, 5),
                                   (3, 4500, 3000, 5)])
@pytest.mark.parametrize("d,causal", [(128, False), (128, True), (64, False), (64, True)])
def test_ordered_fused_is_bitwise_repeatable(d, causal, shape):
    """deterministic_form="ordered" (ORDERED_DQ: one launch, the key blocks
    of a head adding dQ in turns): several waves of programs (8 x 16
    heads), and seqlen_q != seqlen_k both ways (causal: key blocks starting
    at later query blocks, query blocks no key sees). A wrong turn would
    hang (and trap after tens of seconds), not pass."""
    _repeatable_and_close("ordered", *shape[:3], shape[3], d, causal, seed=2)


@pytest.mark.parametrize("splits", [None, 5])
@pytest.mark.parametrize("d,causal", [(128, False), (128, True), (64, False)])
def test_deterministic_fused_is_bitwise_repeatable(monkeypatch, d, causal, splits):
    """The fused kernel's serial form (deterministic_form="serial": launches
    over dq_accum slices). 2 x 2 heads and 4096 keys: 32 key blocks of 128
    over 4 (batch, head)s; S as serial_schedule picks it (32: one launch, 32
    slices) or 5 (7 launches, n_base > 0, the last with 2 key blocks)."""
    from tilec import flash_bwd

    if splits:
        monkeypatch.setattr(flash_bwd, "serial_schedule", lambda *a, **k: splits)
    _repeatable_and_close("serial", 2, 4096, 4096, 2, d, causal, seed=1)
