"""The decode fast path in C++ (_tilec_fast, tilec.flash_decode.NATIVE_FAST_PATH)
against the Python fast path it mirrors: the same kernels, grids, scalars,
strides and buffers, launch by launch, for the calls it takes; None (the
Python path) for the ones it leaves.

No GPU needed: CPU tensors pose as CUDA ones (the Python path reads their
device from `is_cuda`/`get_device`, the C++ path from cpu_as_cuda), the
launchers are the kernels' names and the launches are caught at
tilec.runtime.launch_on. test_flash_decode.py checks the Python fast path
against the general path (whose numerics the CPU runner checks);
test_flash_decode_gpu.py checks the bits on a GPU.
"""
import math
import os
import sys

import pytest

torch = pytest.importorskip("torch")

from tilec import flash_decode as fd, runtime  # noqa: E402
from tilec.jit import LaunchCache  # noqa: E402


def _native_module():
    try:
        import _tilec_fast
    except ImportError as e:
        why = f"_tilec_fast is not built ({e}): the build makes it where the Python it builds for imports torch"
        if os.environ.get("TILEC_REQUIRE_ALL") == "1":
            pytest.fail(why + " (TILEC_REQUIRE_ALL=1: a failure here)")
        pytest.skip(why)
    if _tilec_fast.TORCH_VERSION != torch.__version__:
        pytest.skip(f"_tilec_fast was built for torch {_tilec_fast.TORCH_VERSION}, this is {torch.__version__}")
    return _tilec_fast


@pytest.fixture
def native(monkeypatch):
    module = _native_module()
    was = module.cpu_as_cuda(True)
    jit = sys.modules["tilec.jit"]
    monkeypatch.setattr(jit.Kernel, "launcher", lambda self, arch=None, device=None: self.name)
    monkeypatch.setattr(runtime, "_raw_stream", lambda index: 0)
    monkeypatch.setattr(fd, "_FAST_PLANS", None)
    # The device's dummies (the Python path's first call would make them on the GPU).
    monkeypatch.setattr(fd, "_FAST_DUMMIES", {0: (torch.zeros(1, dtype=torch.int32), torch.zeros(1))})
    monkeypatch.setattr(fd, "_COUNTERS", {})
    monkeypatch.setattr(fd, "_NATIVE", None)
    monkeypatch.setattr(runtime, "launch_on", lambda *a, **kw: pytest.fail("launched: " + repr(a[1])))
    yield module
    module.cpu_as_cuda(was)


class _Cuda(torch.Tensor):
    """A CPU tensor posing as one on CUDA device 0 (to the Python path)."""
    __torch_function__ = torch._C._disabled_torch_function_impl
    __module__ = "torch.posing"
    is_cuda = property(lambda self: True)
    device = property(lambda self: torch.device("cuda", 0))

    def get_device(self):
        return 0


def _posing_as_cuda(t):
    return t.as_subclass(_Cuda)


# ALiBi ((heads,) and (batch, heads) slopes; one token reads them in place, several a copy),
# cache_batch_idx (with the fused append and kv_append) and cache_leftpad (test_flash_decode.py's
# fast-vs-general test takes them too).
FEATURE_CASES = [
    dict(batch=3, heads=8, heads_k=2, cap=640, page=16, lens="tensor", alibi="heads"),
    dict(batch=2, heads=8, heads_k=8, cap=300, page=0, lens="int", alibi="batch", num_splits=3, causal=True),
    dict(batch=2, heads=8, heads_k=2, cap=300, page=0, lens="tensor", seqlen_q=3, new=3, causal=True,
         alibi="batch"),
    dict(batch=2, heads=8, heads_k=2, cap=300, page=0, lens="tensor", new=1, batch_idx=True),
    dict(batch=3, heads=4, heads_k=4, cap=300, page=0, lens="int", new=2, batch_idx=True, leftpad=True),
]

CASES = [
    dict(batch=1, heads=32, heads_k=8, cap=4096, page=0, lens="tensor"),                   # GQA, splits
    dict(batch=3, heads=8, heads_k=8, cap=640, page=16, lens="tensor"),                    # MHA, pages of 16
    dict(batch=64, heads=8, heads_k=1, cap=256, page=256, lens="int"),                     # MQA, one split
    dict(batch=2, heads=4, heads_k=2, cap=300, page=0, lens=None, window=(40, 0), softcap=5.0, num_splits=3,
         causal=True, scale=0.3),
    dict(batch=2, heads=8, heads_k=8, cap=300, page=0, lens="int", new=1),                 # fused append
    dict(batch=3, heads=8, heads_k=2, cap=640, page=16, lens="tensor", new=1, d=128),      # fused append, paged
    dict(batch=2, heads=8, heads_k=2, cap=300, page=0, lens="tensor", seqlen_q=4, causal=True),
    dict(batch=1, heads=32, heads_k=8, cap=4096, page=0, lens="tensor", seqlen_q=2, new=1, causal=True),
    dict(batch=2, heads=4, heads_k=1, cap=300, page=0, lens="int", seqlen_q=5, window=(40, 0), num_splits=3),
    dict(batch=1, heads=16, heads_k=16, cap=2048, page=0, lens="tensor", window=(-1, 0), num_splits=40),
    dict(batch=3, heads=8, heads_k=2, cap=640, page=16, lens="tensor", new=2),            # kv_append, paged
    dict(batch=2, heads=8, heads_k=2, cap=300, page=0, lens="int", seqlen_q=3, new=3, causal=True),
    dict(batch=2, heads=8, heads_k=8, cap=300, page=0, lens="int", new=1, fused_append=False),
    dict(batch=4, heads=6, heads_k=3, cap=512, page=32, lens="tensor", d=96, softcap=30.0, scale=2),
    # rotary (a rotary launch first): GPT-J and NeoX, f32/bf16/f16 tables, part of the head dim,
    # with and without new keys, the fused append and kv_append, several query tokens.
    dict(batch=2, heads=8, heads_k=2, cap=300, page=0, lens="tensor", new=1, rotary=(64, True, "float32")),
    dict(batch=3, heads=8, heads_k=2, cap=640, page=16, lens="int", new=2, rotary=(32, False, "bfloat16")),
    dict(batch=2, heads=4, heads_k=4, cap=300, page=0, lens="tensor", rotary=(16, False, "float32", "wide sin")),
    dict(batch=2, heads=8, heads_k=2, cap=300, page=0, lens="tensor", seqlen_q=3, new=3, causal=True,
         rotary=(48, True, "bfloat16")),
    dict(batch=1, heads=6, heads_k=3, cap=512, page=0, lens="int", seqlen_q=2, window=(-1, 0),
         rotary=(96, False, "float32"), d=96),
    *FEATURE_CASES,
    dict(batch=1, heads=32, heads_k=8, cap=4096, page=0, lens="tensor", leftpad=True, alibi="heads",
         rotary=(64, False, "float32")),
]


def _inputs(case):
    b, h, hk, cap, page = case["batch"], case["heads"], case["heads_k"], case["cap"], case["page"]
    d, sq, new = case.get("d", 64), case.get("seqlen_q", 1), case.get("new", 0)
    cuda = _posing_as_cuda
    q = cuda(torch.randn(b, sq, h, d, dtype=torch.bfloat16))
    table = None
    if page:
        width = -(-cap // page)
        k = cuda(torch.randn(b * width + 1, page, hk, d, dtype=torch.bfloat16))
        table = cuda(torch.randperm(b * width).view(b, width).to(torch.int32))
    else:
        k = cuda(torch.randn(b + 1, cap, hk, d, dtype=torch.bfloat16))
    v = cuda(torch.randn_like(k))
    lens = {"tensor": cuda(torch.full((b,), cap - 3, dtype=torch.int32)), "int": cap - 5, None: None}[case["lens"]]
    kn = cuda(torch.randn(b, new, hk, d, dtype=torch.bfloat16)) if new else None
    vn = cuda(torch.randn(b, new, hk, d, dtype=torch.bfloat16)) if new else None
    kwargs = dict(k=kn, v=vn, cache_seqlens=lens, block_table=table, window_size=case.get("window", (-1, -1)),
                  softcap=case.get("softcap", 0.0), num_splits=case.get("num_splits", 0),
                  causal=case.get("causal", False), softmax_scale=case.get("scale"))
    if case.get("alibi"):
        shape = (h,) if case["alibi"] == "heads" else (b, h)
        kwargs["alibi_slopes"] = cuda(torch.rand(*shape) * 0.5)
    if case.get("batch_idx"):      # sequence i in cache row b - 1 - i (the cache has b + 1 rows)
        kwargs["cache_batch_idx"] = cuda(torch.arange(b, 0, -1, dtype=torch.int32))
    if case.get("leftpad"):
        kwargs["cache_leftpad"] = cuda(torch.arange(b, dtype=torch.int32) * 3)
    if "rotary" in case:
        rd, interleaved, tdt, *wide = case["rotary"]
        angles = torch.rand(cap + 8, rd // 2) * 6.28
        sin = angles.sin().to(getattr(torch, tdt))
        if wide:     # rows of sin a different stride apart than cos's
            sin = torch.cat([sin, sin], 1)[:, :rd // 2]
        kwargs.update(rotary_cos=cuda(angles.cos().to(getattr(torch, tdt))), rotary_sin=cuda(sin),
                      rotary_interleaved=interleaved)
    return q, k, v, kwargs


def _call(monkeypatch, native_on, q, k, v, kwargs, return_lse=True):
    caught = []
    monkeypatch.setattr(runtime, "launch_on", lambda device, launch, args, stream, grid=None:
                        caught.append((device, launch, args, stream, tuple(grid))))
    monkeypatch.setattr(fd, "NATIVE_FAST_PATH", native_on)
    result = fd.flash_attn_with_kvcache(q, k, v, return_softmax_lse=return_lse, **kwargs)
    return result, caught


def _labels(caught, known, out, lse):
    """Each launch's arguments with addresses named: a known tensor's
    name, 'out', an offset in the f32 scratch lse is a view of, or the
    order in which another buffer (a copy) first appears."""
    scratch = lse.untyped_storage()
    low, high = scratch.data_ptr(), scratch.data_ptr() + scratch.nbytes()
    fresh = {}
    labelled = []
    for device, name, args, stream, grid in caught:
        row = []
        for a in args:
            if isinstance(a, torch.Tensor):
                a = a.data_ptr()
            if isinstance(a, int) and a in known:
                a = known[a]
            elif isinstance(a, int) and out is not None and a == out.data_ptr():
                a = "out"
            elif isinstance(a, int) and low <= a < high:
                a = ("scratch", a - low)
            elif isinstance(a, int) and a > 1 << 32:       # an address: the strides and sizes are small
                a = fresh.setdefault(a, ("buffer", len(fresh)))
            row.append(a)
        labelled.append((device, name, tuple(row), stream, grid))
    return labelled


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_native_launches_what_the_python_fast_path_does(monkeypatch, native, case):
    q, k, v, kwargs = _inputs(case)
    monkeypatch.setattr(fd, "FUSED_APPEND", case.get("fused_append", True))
    monkeypatch.setattr(fd, "_FAST_APPENDS", LaunchCache(fd._build_fast_append))
    calls = []
    real = fd._native_fast_path()
    assert real, "the native path did not load"
    monkeypatch.setattr(fd, "_NATIVE", lambda *a: calls.append(real(*a)) or calls[-1])

    (out_n, lse_n), native_launches = _call(monkeypatch, True, q, k, v, kwargs)
    assert calls and calls[-1] is not None, "the native path declined a call it takes"
    (out_p, lse_p), python_launches = _call(monkeypatch, False, q, k, v, kwargs)
    assert len(calls) == 1                          # NATIVE_FAST_PATH off: not asked

    assert out_n.shape == out_p.shape and out_n.dtype == out_p.dtype and out_n.is_contiguous()
    assert lse_n.shape == lse_p.shape and lse_n.dtype == lse_p.dtype == torch.float32
    assert lse_n.stride() == lse_p.stride()
    assert len(fd._FAST_PLANS) == 1                 # both built the same key: one plan
    ints, floats = fd._FAST_DUMMIES[0]
    known = {t.data_ptr(): name for name, t in [("ints", ints), ("floats", floats), ("k_cache", k),
                                                  ("v_cache", v), ("q", q)]}
    for name in ("cache_seqlens", "block_table", "k", "v", "rotary_cos", "rotary_sin", "cache_batch_idx",
                 "cache_leftpad", "alibi_slopes"):
        t = kwargs.get(name)
        if isinstance(t, torch.Tensor):
            known[t.data_ptr()] = name
    for key, counters in fd._COUNTERS.items():
        known[counters.data_ptr()] = ("counters", key)
    sq = q.shape[1]                                 # several tokens: out is a copy of the kernel's
    got = _labels(native_launches, known, out_n if sq == 1 else None, lse_n)
    want = _labels(python_launches, known, out_p if sq == 1 else None, lse_p)
    assert [c[1] for c in got] == [c[1] for c in want]
    assert got[0][1].startswith("rotary") == ("rotary" in case)
    for g, w in zip(got, want):
        assert g[0] == w[0] and g[3] == w[3] and g[4] == w[4], g[1]     # device, stream, grid
        assert len(g[2]) == len(w[2]), g[1]
        for i, (a, b) in enumerate(zip(g[2], w[2])):
            assert type(a) is type(b) and a == b, (g[1], i, a, b)


def test_native_returns_out_alone_without_lse(monkeypatch, native):
    q, k, v, kwargs = _inputs(CASES[0])
    out, caught = _call(monkeypatch, True, q, k, v, kwargs, return_lse=False)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape and caught


@pytest.mark.parametrize("what", ["paged capacity check", "no dummies yet", "float32",
                                  "unaligned", "bool lens", "window of floats", "rotary f64 table",
                                  "rotary tables of two dtypes", "rotary table too short", "rotary dim 24",
                                  "rotary wider than the head", "rotary without lengths", "rotary cos alone",
                                  "rotary empty table",
                                  "batch index with pages", "left padding with pages", "batch index short",
                                  "alibi f64", "alibi wrong heads"])
def test_native_leaves_what_it_does_not_take(monkeypatch, native, what):
    """The calls the C++ path does not take return None there and run (or
    fail) in the Python path."""
    case = dict(batch=2, heads=8, heads_k=2, cap=640, page=16, lens="tensor")
    q, k, v, kwargs = _inputs(case)
    if what == "paged capacity check":
        monkeypatch.setattr(fd, "CHECK_PAGED_CAPACITY", True)
    elif what == "no dummies yet":              # the Python path's first call on a device makes them
        monkeypatch.setattr(fd, "_FAST_DUMMIES", {})
    elif what == "float32":
        q = _posing_as_cuda(q.float())
    elif what == "unaligned":
        q = _posing_as_cuda(torch.randn(q.numel() + 1, dtype=torch.bfloat16)[1:].view(q.shape))
    elif what == "bool lens":
        kwargs["cache_seqlens"] = True
    elif what == "window of floats":
        kwargs["window_size"] = (4.0, 0.0)
    if what == "batch index short":      # a contiguous cache (pages refuse the index anyway)
        q, k, v, kwargs = _inputs(dict(case, page=0))
    cos = sin = bidx = pad = slopes = None
    if what.startswith("batch index") or what.startswith("left padding"):
        t = _posing_as_cuda(torch.zeros(1 if what == "batch index short" else 2, dtype=torch.int32))
        bidx, pad = (t, None) if what.startswith("batch index") else (None, t)
    elif what.startswith("alibi"):
        slopes = _posing_as_cuda(torch.rand(8 if "wrong heads" not in what else 4,
                                            dtype=torch.float64 if "f64" in what else torch.float32))
    if what.startswith("rotary"):
        half = {"rotary dim 24": 12, "rotary wider than the head": 40}.get(what, 16)
        rows = {"rotary table too short": 8, "rotary empty table": 0}.get(what, 700)
        cos = _posing_as_cuda(torch.rand(rows, half, dtype=torch.float64 if "f64" in what else torch.float32))
        sin = _posing_as_cuda(torch.rand(rows, half, dtype=torch.bfloat16 if "two" in what else cos.dtype))
        if what == "rotary table too short":
            kwargs["cache_seqlens"] = 600
        elif what == "rotary without lengths":
            kwargs["cache_seqlens"] = None
        elif what == "rotary cos alone":
            sin = None
    real = fd._native_fast_path()
    args = (q, k, v, kwargs["cache_seqlens"], kwargs["block_table"], kwargs["softmax_scale"], kwargs["causal"],
            kwargs["window_size"], kwargs["softcap"], kwargs["num_splits"], True, kwargs["k"], kwargs["v"],
            cos, sin, True, bidx, pad, slopes)
    assert real(*args) is None


def test_native_refuses_wrong_arity(native):
    with pytest.raises(TypeError, match="19 arguments"):
        fd._native_fast_path()(1, 2, 3)


def test_native_sees_changed_settings(monkeypatch, native):
    """A setting in the plan's key (_FAST_KNOBS) changed between calls
    makes a new plan, as on the Python path."""
    q, k, v, kwargs = _inputs(CASES[0])
    _call(monkeypatch, True, q, k, v, kwargs)
    assert len(fd._FAST_PLANS) == 1
    monkeypatch.setattr(fd, "FUSED_COMBINE", not fd.FUSED_COMBINE)
    _call(monkeypatch, True, q, k, v, kwargs)
    assert len(fd._FAST_PLANS) == 2


def test_fast_knobs_name_module_settings():
    for name in fd._FAST_KNOBS:
        assert hasattr(fd, name), name
    assert not math.isnan(len(fd._FAST_KNOB_VALUES(vars(fd))))
