"""flash_attn_func's fast path in C++ (_tilec_fast.forward,
tilec.flash_attn.NATIVE_FAST_PATH) against the Python fast path it mirrors
(flash_attn._gpu_fast_path): the same launcher, scalars, strides and
buffers; None (the Python path) for what it does not take.

No GPU needed: CPU tensors pose as CUDA ones (see
test_flash_decode_native.py), the launchers are the kernels' keys and the
launches are caught at tilec.runtime.launch_on. test_torch_ops.py and the
CPU numerics tests check the Python paths; test_dsl_flash / bench/gpu.sh
the bits on a GPU.
"""

import pytest

torch = pytest.importorskip("torch")

import tilec  # noqa: E402
from tilec import flash_attn as fa, runtime  # noqa: E402

from test_flash_decode_native import _native_module, _posing_as_cuda  # noqa: E402


@pytest.fixture
def native(monkeypatch):
    module = _native_module()
    was = module.cpu_as_cuda(True)
    from tilec.jit import LaunchCache

    monkeypatch.setattr(fa, "_GPU_LAUNCHES", LaunchCache(lambda key: ("launcher",) + key))
    monkeypatch.setattr(runtime, "_raw_stream", lambda index: 7)
    monkeypatch.setattr(runtime, "launch_on", lambda *a, **kw: pytest.fail("launched: " + repr(a[1])))
    monkeypatch.setattr(fa, "_NATIVE", None)
    # The device's dummies (the Python path would make them on the GPU).
    monkeypatch.setattr(fa, "_FAST_DUMMIES", {0: (torch.zeros(4), torch.zeros(4, dtype=torch.int32))})
    yield module
    module.cpu_as_cuda(was)


CASES = [
    dict(b=2, sq=128, sk=128, h=4, hk=4, d=64),
    dict(b=1, sq=77, sk=300, h=8, hk=2, d=128, causal=True),                    # GQA, bottom-right causal
    dict(b=3, sq=1, sk=50, h=6, hk=1, d=96, causal=True),                       # one row: not causal
    dict(b=1, sq=200, sk=100, h=2, hk=2, d=256, window=(30, 10), softcap=20.0, scale=0.5),
    dict(b=2, sq=64, sk=64, h=2, hk=2, d=40, window=(-1, 0)),                   # right = 0: causal
    dict(b=2, sq=64, sk=64, h=2, hk=2, d=64, window=(8, -1), dtype=torch.float16),
    dict(b=1, sq=33, sk=33, h=3, hk=3, d=64, window=(100, 100), scale=2),       # windows past seqlen_k
    dict(b=1, sq=16, sk=48, h=4, hk=2, d=64, strided=True),                     # q a view of a wider tensor
    # ALiBi: (h,) and (b, h) slopes (a strided view); one query row stays causal with ALiBi.
    dict(b=2, sq=128, sk=200, h=4, hk=2, d=64, causal=True, alibi="heads"),
    dict(b=3, sq=1, sk=50, h=6, hk=1, d=96, causal=True, alibi="batch"),
    dict(b=2, sq=40, sk=40, h=8, hk=8, d=128, window=(16, 4), softcap=30.0, alibi="batch"),
]


def _inputs(case):
    dt = case.get("dtype", torch.bfloat16)
    b, sq, sk, h, hk, d = (case[n] for n in ("b", "sq", "sk", "h", "hk", "d"))
    if case.get("strided"):
        q = torch.randn(b, sq, h, 2 * d, dtype=dt)[..., :d]
    else:
        q = torch.randn(b, sq, h, d, dtype=dt)
    k, v = torch.randn(b, sk, hk, d, dtype=dt), torch.randn(b, sk, hk, d, dtype=dt)
    kwargs = dict(causal=case.get("causal", False), window_size=case.get("window", (-1, -1)),
                  softcap=case.get("softcap", 0.0), softmax_scale=case.get("scale"))
    if case.get("alibi"):
        kwargs["alibi_slopes"] = _slopes(case["alibi"], b, h)
    return _posing_as_cuda(q), _posing_as_cuda(k), _posing_as_cuda(v), kwargs


def _slopes(kind, batch, heads):
    """f32 ALiBi slopes posing as CUDA: (heads,), or (batch, heads) rows of a wider tensor."""
    if kind == "heads":
        return _posing_as_cuda(torch.rand(heads) * 0.5)
    return _posing_as_cuda((torch.rand(batch, 2 * heads) * 0.5)[:, :heads])


def _call(monkeypatch, native_on, q, k, v, kwargs):
    caught = []
    monkeypatch.setattr(runtime, "launch_on", lambda device, launch, args, stream, grid=None:
                        caught.append((device, launch, args, stream, grid)))
    monkeypatch.setattr(fa, "NATIVE_FAST_PATH", native_on)
    out, lse = tilec.flash_attn_func(q, k, v, return_lse=True, **kwargs)
    return out, lse, caught


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_native_forward_launches_what_the_python_fast_path_does(monkeypatch, native, case):
    q, k, v, kwargs = _inputs(case)
    calls = []
    real = fa._native_forward()
    assert real, "the native path did not load"
    monkeypatch.setattr(fa, "_NATIVE", lambda *a: calls.append(real(*a)) or calls[-1])
    out_n, lse_n, got = _call(monkeypatch, True, q, k, v, kwargs)
    assert calls and calls[-1] is not None, "the native path declined a call it takes"
    out_p, lse_p, want = _call(monkeypatch, False, q, k, v, kwargs)
    assert len(calls) == 1
    assert len(got) == len(want) == 1
    (dev_n, launch_n, args_n, stream_n, grid_n), (dev_p, launch_p, args_p, stream_p, grid_p) = got[0], want[0]
    assert (dev_n, launch_n, stream_n, grid_n) == (dev_p, launch_p, stream_p, grid_p) == (0, launch_p, 7, None)
    assert out_n.shape == out_p.shape == q.shape and out_n.dtype == q.dtype and out_n.is_contiguous()
    assert lse_n.shape == lse_p.shape and lse_n.dtype == torch.float32 and lse_n.is_contiguous()
    named = {q.data_ptr(): "q", k.data_ptr(): "k", v.data_ptr(): "v"}
    if "alibi_slopes" in kwargs:
        named[kwargs["alibi_slopes"].data_ptr()] = "alibi_slopes"
    slopes, ints = fa._FAST_DUMMIES[0]
    named.update({slopes.data_ptr(): "slopes", ints.data_ptr(): "ints"})

    def label(args, out, lse):
        row = []
        for a in args:
            a = a.data_ptr() if isinstance(a, torch.Tensor) else a
            row.append(named.get(a, {out.data_ptr(): "out", lse.data_ptr(): "lse"}.get(a, a))
                       if isinstance(a, int) else a)
        return row

    assert label(args_n, out_n, lse_n) == label(args_p, out_p, lse_p)
    assert all(not isinstance(a, int) or a < 1 << 32 for a in label(args_n, out_n, lse_n))   # every address named


def test_native_forward_returns_out_alone(monkeypatch, native):
    q, k, v, kwargs = _inputs(CASES[0])
    caught = []
    monkeypatch.setattr(runtime, "launch_on", lambda *a, **kw: caught.append(a))
    out = tilec.flash_attn_func(q, k, v, **kwargs)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape and len(caught) == 1


@pytest.mark.parametrize("what", ["requires grad", "float32", "unaligned", "window of floats", "no dummies yet",
                                  "head dim 260", "cpu", "MAX_HEAD_DIM lowered", "torch function mode",
                                  "alibi f64", "alibi wrong heads", "alibi strided heads"])
def test_native_forward_leaves_what_it_does_not_take(monkeypatch, native, what):
    q, k, v, kwargs = _inputs(CASES[0])
    _call(monkeypatch, False, q, k, v, kwargs)
    if what == "requires grad":
        q = q.clone().requires_grad_()
    elif what == "float32":
        q, k, v = (_posing_as_cuda(t.float()) for t in (q, k, v))
    elif what == "unaligned":
        q = _posing_as_cuda(torch.randn(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape))
    elif what == "window of floats":
        kwargs["window_size"] = (4.0, 0.0)
    elif what == "no dummies yet":
        monkeypatch.setattr(fa, "_FAST_DUMMIES", {})
    elif what == "head dim 260":
        q, k, v = (_posing_as_cuda(torch.randn(1, 8, 1, 264, dtype=torch.bfloat16)) for _ in range(3))
    elif what == "cpu":
        native.cpu_as_cuda(False)
    elif what == "MAX_HEAD_DIM lowered":         # read at each call, as the Python path does
        monkeypatch.setattr(fa, "MAX_HEAD_DIM", 32)
    slopes = None
    if what.startswith("alibi"):
        h = q.shape[2]
        slopes = _posing_as_cuda({"alibi f64": torch.rand(h, dtype=torch.float64),
                                  "alibi wrong heads": torch.rand(h + 1),
                                  "alibi strided heads": torch.rand(2 * h)[::2]}[what])
    call = lambda: fa._native_forward()(q, k, v, kwargs["softmax_scale"], kwargs["causal"],  # noqa: E731
                                        kwargs["window_size"], kwargs["softcap"], slopes)
    if what == "torch function mode":            # it would see the Python path's tensor calls, not C++'s
        from torch.overrides import TorchFunctionMode

        with TorchFunctionMode():
            assert call() is None
        assert call() is not None
        return
    assert call() is None


def test_native_forward_keeps_python_errors_and_laziness(monkeypatch, native):
    """What the Python path raises, a call still raises (dropout_p=None is
    not 0); what it does not read (causal with one query row), C++ does not
    read either."""
    q, k, v, kwargs = _inputs(CASES[0])
    caught = []
    monkeypatch.setattr(runtime, "launch_on", lambda *a, **kw: caught.append(a))
    with pytest.raises(Exception, match="dropout_p"):
        tilec.flash_attn_func(q, k, v, dropout_p=None)
    one = _posing_as_cuda(torch.randn(2, 1, 4, 64, dtype=torch.bfloat16))
    ambiguous = torch.tensor([1, 0])                 # bool() of it raises
    out = fa._native_forward()(one, k, v, None, ambiguous, (-1, -1), 0.0, None)
    assert out is not None and caught


def test_native_forward_refuses_wrong_arity(native):
    with pytest.raises(TypeError, match="8 arguments"):
        fa._native_forward()(1, 2)


def test_native_is_not_traced_by_torch_compile(monkeypatch):
    """torch.compile traces the custom op, not the C++ call (which it could
    not): the entry points ask _torch_compiling() before the C++ path."""
    monkeypatch.setattr(fa, "_NATIVE", lambda *a: pytest.fail("the C++ path asked while compiling"))
    monkeypatch.setattr(fa, "_NATIVE_VARLEN", lambda *a: pytest.fail("the C++ path asked while compiling"))
    monkeypatch.setattr(fa, "_torch_compiling", lambda: True)
    assert fa._try_native(True, 0.0, False, None, ()) is None
    assert fa._try_native(False, 0, False, None, ()) is None


# --- flash_attn_varlen_func: _tilec_fast.varlen against flash_attn._gpu_varlen_fast_path ---

VARLEN_CASES = [
    dict(lens_q=[5, 0, 17], lens_k=[5, 9, 30], h=4, hk=2, d=64),
    dict(lens_q=[128], lens_k=[128], h=2, hk=2, d=128, causal=True),
    dict(lens_q=[3, 40], lens_k=[60, 41], h=6, hk=3, d=96, window=(16, 0), softcap=10.0, scale=0.25),
    dict(lens_q=[1, 1, 1, 1], lens_k=[7, 100, 3, 64], h=8, hk=1, d=256, causal=True),
    dict(lens_q=[5, 0, 17], lens_k=[5, 9, 30], h=4, hk=2, d=64, causal=True, alibi="batch"),
    dict(lens_q=[1, 1], lens_k=[7, 100], h=8, hk=2, d=128, causal=True, alibi="heads"),
]


def _varlen_inputs(case):
    dt = case.get("dtype", torch.bfloat16)
    cu = lambda lens: _posing_as_cuda(torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32))  # noqa
    tq, tk = sum(case["lens_q"]), sum(case["lens_k"])
    q = _posing_as_cuda(torch.randn(tq, case["h"], case["d"], dtype=dt))
    k = _posing_as_cuda(torch.randn(tk, case["hk"], case["d"], dtype=dt))
    v = _posing_as_cuda(torch.randn(tk, case["hk"], case["d"], dtype=dt))
    kwargs = dict(causal=case.get("causal", False), window_size=case.get("window", (-1, -1)),
                  softcap=case.get("softcap", 0.0), softmax_scale=case.get("scale"))
    if case.get("alibi"):
        kwargs["alibi_slopes"] = _slopes(case["alibi"], len(case["lens_q"]), case["h"])
    return q, k, v, cu(case["lens_q"]), cu(case["lens_k"]), max(case["lens_q"]), max(case["lens_k"]), kwargs


def _varlen_call(monkeypatch, native_on, inputs):
    q, k, v, cu_q, cu_k, max_q, max_k, kwargs = inputs
    caught = []
    monkeypatch.setattr(runtime, "launch_on", lambda device, launch, args, stream, grid=None:
                        caught.append((device, launch, args, stream, grid)))
    monkeypatch.setattr(fa, "NATIVE_FAST_PATH", native_on)
    out = tilec.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, **kwargs)
    return out, caught


@pytest.fixture
def varlen_native(monkeypatch, native):
    monkeypatch.setattr(fa, "_NATIVE_VARLEN", None)
    monkeypatch.setattr(fa, "_SEQUENCE_BUFFERS", {})
    monkeypatch.setattr(fa, "_CUDA_KEYS", [])
    monkeypatch.setattr(fa, "CHECK_CUDA_VARLEN_VALUES", False)
    return native


@pytest.mark.parametrize("case", VARLEN_CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_native_varlen_launches_what_the_python_fast_path_does(monkeypatch, varlen_native, case):
    inputs = _varlen_inputs(case)
    out_p, want = _varlen_call(monkeypatch, False, inputs)     # also makes the device's error buffer
    calls = []
    real = fa._native_varlen()
    monkeypatch.setattr(fa, "_NATIVE_VARLEN", lambda *a: calls.append(real(*a)) or calls[-1])
    out_n, got = _varlen_call(monkeypatch, True, inputs)
    assert calls and calls[-1] is not None, "the native path declined a call it takes"
    assert out_n.shape == out_p.shape == inputs[0].shape and out_n.dtype == out_p.dtype
    lse_n = calls[-1][1]
    q, k, v, cu_q, cu_k = inputs[:5]
    assert lse_n.shape == (q.shape[1], q.shape[0]) and lse_n.dtype == torch.float32
    (dev_n, launch_n, args_n, stream_n, grid_n), = got
    (dev_p, launch_p, args_p, stream_p, grid_p), = want
    assert (dev_n, launch_n, stream_n, grid_n) == (dev_p, launch_p, stream_p, grid_p)
    named = {t.data_ptr(): n for n, t in [("q", q), ("k", k), ("v", v), ("cu_q", cu_q), ("cu_k", cu_k)]}
    if "alibi_slopes" in inputs[-1]:
        named[inputs[-1]["alibi_slopes"].data_ptr()] = "alibi_slopes"
    slopes, ints = fa._FAST_DUMMIES[0]
    named.update({slopes.data_ptr(): "slopes", ints.data_ptr(): "ints"})
    named[fa._SEQUENCE_BUFFERS["cuda:0"][1]] = "errors"

    def label(args, out):
        row = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
        row = [named.get(a, "out" if a == out.data_ptr() else a) if isinstance(a, int) else a for a in row]
        row[4] = "lse" if row[4] > 1 << 32 else row[4]             # a fresh buffer on each path
        return row

    assert label(args_n, out_n) == label(args_p, out_p)
    assert all(not isinstance(a, int) or a < 1 << 32 for a in label(args_n, out_n))


@pytest.mark.parametrize("what", ["flagged error", "checking values", "no buffer yet", "max_seqlen not int",
                                  "requires grad"])
def test_native_varlen_leaves_what_it_does_not_take(monkeypatch, varlen_native, what):
    inputs = list(_varlen_inputs(VARLEN_CASES[0]))
    _varlen_call(monkeypatch, False, inputs)
    if what == "flagged error":
        fa._SEQUENCE_BUFFERS["cuda:0"][3][0] = 1          # an earlier kernel found bad values
    elif what == "checking values":
        monkeypatch.setattr(fa, "CHECK_CUDA_VARLEN_VALUES", True)
    elif what == "no buffer yet":
        monkeypatch.setattr(fa, "_SEQUENCE_BUFFERS", {})
    elif what == "max_seqlen not int":
        inputs[5] = torch.tensor(inputs[5])
    elif what == "requires grad":
        inputs[0] = inputs[0].clone().requires_grad_()
    q, k, v, cu_q, cu_k, max_q, max_k, kw = inputs
    assert fa._native_varlen()(q, k, v, cu_q, cu_k, max_q, max_k, kw["softmax_scale"], kw["causal"],
                               kw["window_size"], kw["softcap"], None) is None


ON_GPU = torch.cuda.is_available()


@pytest.mark.skipif(not ON_GPU, reason="no CUDA GPU")
@pytest.mark.parametrize("causal,window,softcap,alibi", [(False, (-1, -1), 0.0, False), (True, (-1, -1), 0.0, False),
                                                         (False, (64, 8), 30.0, False), (True, (-1, -1), 0.0, True)])
def test_native_forward_and_varlen_are_the_python_paths_bit_for_bit(monkeypatch, causal, window, softcap, alibi):
    """On the GPU: _tilec_fast.forward / .varlen, the Python fast paths and
    (ALiBi) the general path give the same bits (the same kernel and
    arguments)."""
    _native_module()
    g = torch.Generator(device="cuda").manual_seed(4)
    q = torch.randn(2, 300, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(2, 300, 2, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn_like(k)
    cu = torch.tensor([0, 100, 300], dtype=torch.int32, device="cuda")
    kw = dict(causal=causal, window_size=window, softcap=softcap)
    if alibi:
        kw["alibi_slopes"] = torch.rand(2, 8, device="cuda", generator=g) * 0.3
    results = []
    for path in ("native", "python") + (("general",) if alibi else ()):
        with monkeypatch.context() as m:
            m.setattr(fa, "NATIVE_FAST_PATH", path == "native")
            if path == "general":
                m.setattr(fa, "_gpu_fast_path", lambda *a, **k: None)
                m.setattr(fa, "_gpu_varlen_fast_path", lambda *a, **k: None)
            dense = tilec.flash_attn_func(q, k, v, return_lse=True, **kw)
            packed = tilec.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 200, 200, **kw)
        results.append((*dense, packed))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)


@pytest.mark.skipif(not ON_GPU, reason="no CUDA GPU")
def test_native_leaves_tensor_subclasses_to_python():
    """A torch.Tensor subclass (a user's wrapper, DTensor) may give its
    attributes through __torch_function__: the C++ paths, which read the
    tensor underneath, leave it to the Python path."""
    _native_module()

    class Wrapped(torch.Tensor):
        pass

    q, k, v = (torch.randn(1, 64, 2, 64, device="cuda", dtype=torch.bfloat16).as_subclass(Wrapped)
               for _ in range(3))
    tilec.flash_attn_func(q.as_subclass(torch.Tensor), k.as_subclass(torch.Tensor), v.as_subclass(torch.Tensor))
    assert fa._native_forward()(q, k, v, None, False, (-1, -1), 0.0) is None
    plain = [t.as_subclass(torch.Tensor) for t in (q, k, v)]
    assert fa._native_forward()(*plain, None, False, (-1, -1), 0.0) is not None


@pytest.mark.parametrize("fn", ["qkvpacked", "kvpacked", "varlen_qkvpacked", "varlen_kvpacked"])
def test_native_takes_the_packed_variants(monkeypatch, varlen_native, fn):
    """flash_attn_qkvpacked_func & co. ask the C++ path too, after
    unpacking: the launch the Python fast path makes for the packed
    tensor's slices. (Slices of a posing tensor are plain CPU tensors,
    which only the C++ path, with cpu_as_cuda, takes for CUDA ones: the
    Python path is asked directly, on posing slices; q of the kvpacked
    calls is a plain tensor too.)"""
    dense = not fn.startswith("varlen")
    h, d = 4, 64
    cu_plain = torch.tensor([0, 30, 30, 100], dtype=torch.int32)
    cu = _posing_as_cuda(cu_plain)
    shape = (2, 50) if dense else (100,)
    qkv = torch.randn(*shape, 3, h, d, dtype=torch.bfloat16)
    q = torch.randn(*shape, h, d, dtype=torch.bfloat16)
    at = (slice(None),) * len(shape)
    slices = [qkv[at + (i,)] for i in range(3)]
    kv = qkv[at + (slice(1, None),)]
    posing = [_posing_as_cuda(t) for t in ([q] if "qkv" not in fn else []) + slices[0 if "qkv" in fn else 1:]]
    caught = []
    monkeypatch.setattr(runtime, "launch_on", lambda device, launch, args, stream, grid=None:
                        caught.append((launch, args)))
    if dense:
        want = fa._gpu_fast_path(*posing, None, True, -1, -1, 0.0)
    else:
        want = fa._gpu_varlen_fast_path(*posing, None, True, -1, -1, 0.0, cu, cu, 70, 70, None)
    calls = []
    real = fa._native_forward() if dense else fa._native_varlen()
    monkeypatch.setattr(fa, "_NATIVE" if dense else "_NATIVE_VARLEN", lambda *a: calls.append(real(*a)) or calls[-1])
    out = {"qkvpacked": lambda: tilec.flash_attn_qkvpacked_func(_posing_as_cuda(qkv), causal=True),
           "kvpacked": lambda: tilec.flash_attn_kvpacked_func(q, _posing_as_cuda(kv), causal=True),
           "varlen_qkvpacked": lambda: tilec.flash_attn_varlen_qkvpacked_func(_posing_as_cuda(qkv), cu_plain, 70,
                                                                              causal=True),
           "varlen_kvpacked": lambda: tilec.flash_attn_varlen_kvpacked_func(q, _posing_as_cuda(kv), cu_plain,
                                                                            cu_plain, 70, 70, causal=True)}[fn]()
    assert calls and calls[-1] is not None, "the native path declined a call it takes"
    named = {t.data_ptr(): n for n, t in zip("qkv", [q] + slices[1:] if "qkv" not in fn else slices)}
    named[cu.data_ptr()] = "cu"
    slopes, ints = fa._FAST_DUMMIES[0]
    named.update({slopes.data_ptr(): "slopes", ints.data_ptr(): "ints"})
    if not dense:
        named[fa._SEQUENCE_BUFFERS["cuda:0"][1]] = "errors"
    rows = []
    for (launch, args), o in zip(caught, (want[0], out)):
        row = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
        row = [named.get(a, "out" if a == o.data_ptr() else a) if isinstance(a, int) else a for a in row]
        row[4] = "lse" if row[4] > 1 << 32 else row[4]
        rows.append((launch, row))
    assert len(rows) == 2 and rows[0] == rows[1]
    assert all(not isinstance(a, int) or a < 1 << 32 for a in rows[1][1])
