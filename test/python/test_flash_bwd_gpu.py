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
