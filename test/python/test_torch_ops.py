"""torch integration: flash_attn_func on torch CPU tensors (the CPU runner),
the custom op tilec::flash_attn_forward (opcheck), torch.compile with
fullgraph=True tracing it, and on a GPU: CUDA-graph capture and replay
bitwise equal to eager, the current stream respected."""

import numpy as np
import pytest

from tilec import compiler

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it)")

import tilec  # noqa: E402
from tilec.jit import LaunchCache  # noqa: E402

HAVE_CPU = compiler.available() and getattr(compiler.native(), "has_cpu_runner", False)
needs_cpu = pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension with its CPU runner is not built")
HAVE_GPU = torch.cuda.is_available() and tilec.gpu_status()[0]
needs_gpu = pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU: CUDA-graph and stream tests need one")

# f16: measured 2.3e-4 (as test_dsl_flash); bf16 (8-bit mantissa): 1.8e-3..2.2e-3.
REL_TOL = {torch.float16: 1e-3, torch.bfloat16: 8e-3}


def reference(q, k, v, scale, causal):
    """float64 (out, lse) in the flash_attn layout."""
    q, k, v = (t.double().transpose(1, 2) for t in (q, k, v))
    s = q @ k.transpose(-1, -2) * scale
    if causal:
        sq, sk = s.shape[-2:]
        s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, -1)
    return (s.softmax(-1) @ v).transpose(1, 2), lse


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def qkv(dtype, b=2, sq=70, sk=70, h=3, d=64, device="cpu"):
    gen = torch.Generator().manual_seed(int(np.random.default_rng().integers(1 << 31)))
    return tuple(torch.randn(b, s, h, d, generator=gen).to(device=device, dtype=dtype)
                 for s in (sq, sk, sk))


# -- torch CPU tensors through the CPU runner -------------------------------------


@needs_cpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_torch_cpu_tensors_match_float64(dtype, causal):
    q, k, v = qkv(dtype, sq=77, sk=77 if causal else 131, d=64)
    out, lse = tilec.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    ref, ref_lse = reference(q, k, v, 64 ** -0.5, causal)
    assert out.dtype == dtype and out.device.type == "cpu" and out.shape == q.shape
    assert lse.dtype == torch.float32 and lse.shape == (2, 3, 77)
    assert rel_err(out, ref) < REL_TOL[dtype]
    assert (lse.double() - ref_lse).abs().max().item() < 1e-4


@needs_cpu
def test_torch_cpu_bf16_negative_scale():
    # scale < 0 runs as (-q, -scale): for bf16 the CPU path negates bit
    # patterns held as uint16, by the sign bit (not integer negation).
    q, k, v = qkv(torch.bfloat16, sq=40, sk=50, d=32)
    out = tilec.flash_attn_func(q, k, v, softmax_scale=-0.3)
    assert rel_err(out, reference(q, k, v, -0.3, False)[0]) < REL_TOL[torch.bfloat16]


@needs_cpu
def test_torch_cpu_strided_views():
    # (b, h, s, d) tensors transposed to (b, s, h, d): what transformers passes.
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in qkv(torch.float16, d=32))
    assert not q.is_contiguous()
    out = tilec.flash_attn_func(q, k, v, causal=True)
    assert rel_err(out, reference(q, k, v, 32 ** -0.5, True)[0]) < REL_TOL[torch.float16]


def test_torch_mixed_devices_refused():
    q, k, v = qkv(torch.float16, d=32)
    meta = torch.empty(k.shape, dtype=k.dtype, device="meta")
    with pytest.raises(ValueError, match=r"'k' is on meta, 'q' on cpu"):
        tilec.flash_attn_func(q, meta, v)


# -- the custom op ------------------------------------------------------------------


@needs_cpu
def test_custom_op_opcheck():
    from tilec import ops  # noqa: F401  (registers the op)

    q, k, v = qkv(torch.float16, b=1, sq=33, sk=47, h=2, d=32)
    rest = (-1, -1, 0.0, None, None, None, None, None, None, "flash_attn_func")
    torch.library.opcheck(torch.ops.tilec.flash_attn_forward.default, (q, k, v, None, True) + rest)
    out, lse = torch.ops.tilec.flash_attn_forward(q, k, v, 0.25, False, *rest)
    ref, ref_lse = reference(q, k, v, 0.25, False)
    assert rel_err(out, ref) < REL_TOL[torch.float16]
    assert (lse.double() - ref_lse).abs().max().item() < 1e-4


@needs_cpu
def test_custom_op_fake_matches_real_layout():
    from tilec import ops

    from torch._subclasses.fake_tensor import FakeTensorMode

    rest = (-1, -1, 0.0, None, None, None, None, None, None, "flash_attn_func")
    for d in (16, 20):  # 20: padded to 24 by the core, out a view of the padded rows
        q, k, v = qkv(torch.bfloat16, b=2, sq=20, sk=9, h=3, d=d)
        q = q.transpose(1, 2).contiguous().transpose(1, 2)  # strided input
        real = ops.flash_attn_forward(q, k, v, None, False, *rest)
        with FakeTensorMode() as mode:
            fake = ops.flash_attn_forward(*(mode.from_tensor(t) for t in (q, k, v)), None, False, *rest)
        for r, f in zip(real, fake):
            assert (r.shape, r.dtype, r.stride()) == (f.shape, f.dtype, f.stride())
    # varlen: two sequences packed, head_dim 20 (padded rows) and 16.
    for d in (16, 20):
        q, k, v = (t[0] for t in qkv(torch.float16, b=1, sq=30, sk=30, h=2, d=d))
        cu = torch.tensor([0, 12, 30], dtype=torch.int32)
        args = (None, True, -1, -1, 0.0, None, cu, cu, 18, 18, None, "flash_attn_varlen_func")
        real = ops.flash_attn_forward(q, k, v, *args)
        with FakeTensorMode() as mode:
            fake = ops.flash_attn_forward(*(mode.from_tensor(t) for t in (q, k, v)), None, True,
                                          -1, -1, 0.0, None, mode.from_tensor(cu), mode.from_tensor(cu),
                                          18, 18, None, "flash_attn_varlen_func")
        for r, f in zip(real, fake):
            assert (r.shape, r.dtype, r.stride()) == (f.shape, f.dtype, f.stride())


class Block(torch.nn.Module):
    """A pre-norm attention block calling tilec.flash_attn_func as users do."""

    def __init__(self, dim=64, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.out = torch.nn.Linear(dim, dim, bias=False)

    def forward(self, x, causal=True):
        b, s, dim = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, dim // self.heads).unbind(2)
        o = tilec.flash_attn_func(q, k, v, causal=causal)
        return x + self.out(o.reshape(b, s, dim))


@needs_cpu
@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_torch_compile_fullgraph_cpu(backend):
    torch.manual_seed(int(np.random.default_rng().integers(1 << 31)))
    block = Block().to(torch.bfloat16)
    x = torch.randn(2, 45, 64, dtype=torch.bfloat16)
    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        return gm.forward if backend == "aot_eager" else torch._inductor.compile(gm, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True, backend=recording if backend == "aot_eager" else backend)
    with torch.no_grad():
        got = compiled(x)
        want = block(x)
    # One graph (fullgraph=True raises on a graph break), the op in it, and
    # the numbers of eager: bitwise where the graph runs eager's ops
    # (aot_eager); inductor may fuse the residual add differently (an ulp).
    if backend == "aot_eager":
        assert len(graphs) == 1
        assert "tilec.flash_attn_forward" in str(graphs[0].graph)
        assert torch.equal(got, want)
    else:
        assert rel_err(got, want.double()) < 1e-2


def test_torch_compile_bad_call_fails_while_tracing_with_the_eager_error():
    def fn(q, k, v):
        return tilec.flash_attn_func(q, k, v)

    q, k, v = qkv(torch.float16, d=32)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"'v' must be float16 or bfloat16, got float32"):
        torch.compile(fn, fullgraph=True, backend="aot_eager")(q, k, v.float())


def test_launch_cache_builds_once_per_key():
    built = []
    cache = LaunchCache(lambda key: built.append(key) or f"launcher {key}")
    assert cache[("f16", 64)] == "launcher ('f16', 64)"
    assert cache[("f16", 64)] == "launcher ('f16', 64)"
    assert cache[("bf16", 64)] == "launcher ('bf16', 64)"
    assert built == [("f16", 64), ("bf16", 64)]


# -- a GPU ----------------------------------------------------------------------------


@needs_gpu
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_graph_replay_is_bitwise_eager(causal):
    block = Block(dim=128, heads=2).cuda().half()
    x = torch.randn(2, 300, 128, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        eager = block(x, causal)
        static_x = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the default stream, as torch's docs do
            for _ in range(2):
                block(static_x, causal)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # captures on a side stream: the launch must use it
            static_out = block(static_x, causal)
        static_x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        fresh = block(static_x, causal)
        assert torch.equal(static_out, fresh)
        static_x.copy_(x)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_out, eager)


@needs_gpu
def test_torch_compile_fullgraph_cuda_and_reduce_overhead():
    block = Block(dim=128, heads=2).cuda().to(torch.bfloat16)
    x = torch.randn(3, 257, 128, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        want = block(x)
        torch._dynamo.reset()
        compiled = torch.compile(block, fullgraph=True)(x)
        assert rel_err(compiled, want.double()) < 1e-2  # inductor's fusions may move an ulp
        torch._dynamo.reset()
        graphed = torch.compile(block, fullgraph=True, mode="reduce-overhead")
        for _ in range(3):  # warm-up, record, replay
            got = graphed(x)
        # CUDA graphs of the same compiled code: bitwise what it computes unreplayed.
        assert torch.equal(got.clone(), compiled)


@needs_gpu
def test_current_stream_is_used():
    # A launch on a side stream, ordered after a long matmul on that stream:
    # the result is right only if the kernel ran on the side stream.
    q, k, v = qkv(torch.float16, b=4, sq=512, sk=512, h=8, d=64, device="cuda")
    want = tilec.flash_attn_func(q, k, v)
    side = torch.cuda.Stream()
    big = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    q2 = torch.zeros_like(q)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        for _ in range(8):
            big = big @ big * 1e-3
        q2.copy_(q)
        got = tilec.flash_attn_func(q2, k, v)
    side.synchronize()
    assert torch.equal(got, want)


# -- the fast path launches what the general path launches ---------------------------


def _posing_as_cuda(monkeypatch):
    """CPU tensors posing as CUDA (bench/host_overhead.py's mock) and every
    launch caught instead of made: [(key, args, stream)]."""
    import importlib.util
    from pathlib import Path

    from tilec import flash_attn, runtime

    spec = importlib.util.spec_from_file_location(
        "host_overhead", Path(__file__).resolve().parents[2] / "bench" / "host_overhead.py")
    mock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mock)
    for name in ("empty", "zeros"):
        make = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *shape, device=None, make=make, **kw: make(*shape, **kw))
    monkeypatch.setattr(runtime, "raw_stream", lambda index: 0)
    monkeypatch.setattr(flash_attn, "_GPU_LAUNCHES", LaunchCache(lambda key: key))
    for cache in ("_DUMMIES", "_FAST_DUMMIES", "_SEQUENCE_BUFFERS"):  # per-device buffers made here stay here
        if hasattr(flash_attn, cache):
            monkeypatch.setattr(flash_attn, cache, {})
    caught = []
    monkeypatch.setattr(runtime, "launch_on", lambda device, launch, args, stream, grid=None:
                        caught.append((launch, args, stream)))
    return mock.mock_cuda, caught


def _launch_signature(args):
    """A launch's arguments with arrays as (shape, strides in elements, dtype
    name) (the mock's copies of misaligned inputs are plain CPU tensors, and a
    core may then pick numpy buffers for them)."""
    def sig(a):
        if isinstance(a, torch.Tensor):
            return tuple(a.shape), a.stride(), str(a.dtype).replace("torch.", "")
        if isinstance(a, np.ndarray):
            return a.shape, tuple(s // a.itemsize for s in a.strides), str(a.dtype)
        return a
    return tuple(sig(a) for a in args)


@pytest.mark.parametrize("dtype, causal, scale, shape_q, shape_k", [
    (torch.float16, False, None, (2, 70, 3, 64), (2, 70, 3, 64)),
    (torch.bfloat16, True, 0.3, (1, 33, 4, 128), (1, 33, 4, 128)),
    (torch.float16, True, None, (3, 1, 2, 32), (3, 1, 2, 32)),
])
def test_gpu_fast_path_launches_what_the_general_path_does(monkeypatch, dtype, causal, scale, shape_q, shape_k):
    from tilec import flash_attn

    cuda, caught = _posing_as_cuda(monkeypatch)
    used_fast = []
    fast = flash_attn._gpu_fast_path
    monkeypatch.setattr(flash_attn, "_gpu_fast_path",
                        lambda *a, **kw: used_fast.append(fast(*a, **kw) is not None) or None)
    tensors = [torch.randn(s).to(dtype) for s in (shape_q, shape_k, shape_k)]

    def misaligned(t):  # the same values one element into a buffer: rows not 16-byte aligned
        buf = torch.empty(t.numel() + 1, dtype=t.dtype)
        view = buf[1:].view(t.shape)
        view.copy_(t)
        return view

    # The fast path taken for aligned inputs (recorded, then its result dropped
    # so the general path runs too, on the same call), not for misaligned ones.
    tilec.flash_attn_func(*(cuda(t) for t in tensors), softmax_scale=scale, causal=causal)
    tilec.flash_attn_func(*(cuda(misaligned(t)) for t in tensors), softmax_scale=scale, causal=causal)
    assert used_fast == [True, False]
    assert len(caught) == 3  # fast, general (same call), general (misaligned)
    (key_fast, args_fast, _), (key_general, args_general, _), (key_copy, args_copy, _) = caught
    # (The misaligned inputs' copies are plain CPU tensors here, device -1.)
    assert key_fast == key_general and key_fast[:-1] == key_copy[:-1] and key_fast[-1] == 0
    assert _launch_signature(args_fast) == _launch_signature(args_general) == _launch_signature(args_copy)


@needs_gpu
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_fast_path_bitwise_general_path(causal):
    # Aligned inputs take the fast path; the same values one element into a
    # buffer (rows not 16-byte aligned) take the general path, which copies
    # them: same kernel, same arguments, the same bits.
    q, k, v = qkv(torch.bfloat16, b=2, sq=300, sk=300, h=4, d=64, device="cuda")

    def misaligned(t):
        buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
        view = buf[1:].view(t.shape)
        view.copy_(t)
        return view

    fast, fast_lse = tilec.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    slow, slow_lse = tilec.flash_attn_func(*(misaligned(t) for t in (q, k, v)), causal=causal,
                                           return_lse=True)
    assert torch.equal(fast, slow) and torch.equal(fast_lse, slow_lse)
    ref, _ = reference(q.cpu(), k.cpu(), v.cpu(), 64 ** -0.5, causal)
    assert rel_err(fast.cpu(), ref) < REL_TOL[torch.bfloat16]


@pytest.mark.parametrize("shape_q, shape_k, kw", [
    ((2, 40, 4, 64), (2, 90, 2, 64), dict(causal=True)),                      # GQA, bottom-right causal
    ((1, 50, 2, 64), (1, 50, 1, 64), dict(window_size=(16, 0))),              # MQA, sliding window
    ((2, 33, 2, 32), (2, 33, 2, 32), dict(softcap=30.0, causal=True)),        # softcap
    ((2, 40, 4, 64), (2, 90, 2, 64), dict(causal=True, alibi=(4,))),          # ALiBi (heads,)
    ((2, 1, 4, 64), (2, 90, 2, 64), dict(causal=True, alibi=(2, 4))),         # (batch, heads), one row
])
def test_gpu_fast_path_variants_launch_like_the_general_path(monkeypatch, shape_q, shape_k, kw):
    from tilec import flash_attn

    cuda, caught = _posing_as_cuda(monkeypatch)
    used_fast = []
    fast = flash_attn._gpu_fast_path
    monkeypatch.setattr(flash_attn, "_gpu_fast_path",
                        lambda *a, **k: used_fast.append(fast(*a, **k) is not None) or None)
    tensors = [torch.randn(s).half() for s in (shape_q, shape_k, shape_k)]
    kw = dict(kw)
    if "alibi" in kw:
        kw["alibi_slopes"] = cuda(torch.rand(kw.pop("alibi")))
    tilec.flash_attn_func(*(cuda(t) for t in tensors), **kw)
    assert used_fast == [True] and len(caught) == 2
    (key_fast, args_fast, _), (key_general, args_general, _) = caught
    assert key_fast == key_general and key_fast[5] == ("alibi_slopes" in kw)
    assert _launch_signature(args_fast) == _launch_signature(args_general)
    if "alibi_slopes" in kw:
        assert args_fast[28] is args_general[28] is kw["alibi_slopes"]


def test_varlen_launches_the_varlen_kernel(monkeypatch):
    """The launch cache's key carries VARLEN: a varlen call must not be
    served the dense kernel of the same head dim and switches."""
    cuda, caught = _posing_as_cuda(monkeypatch)
    q = cuda(torch.randn(30, 4, 64).half())
    k = cuda(torch.randn(40, 2, 64).half())
    cu_q = cuda(torch.tensor([0, 10, 30], dtype=torch.int32))
    cu_k = cuda(torch.tensor([0, 25, 40], dtype=torch.int32))
    tilec.flash_attn_varlen_func(q, k, k, cu_q, cu_k, 20, 25, causal=True)
    qd, kd = cuda(torch.randn(1, 30, 4, 64).half()), cuda(torch.randn(1, 40, 2, 64).half())
    tilec.flash_attn_func(qd, kd, kd, causal=True)
    assert len(caught) == 2
    (key_varlen, args_varlen, _), (key_dense, _, _) = caught
    assert key_varlen[:-1] == ("float16", 64, True, False, False, False, True)
    assert key_dense[:-1] == ("float16", 64, True, False, False, False, False)
    assert args_varlen[30] is cu_q and args_varlen[31] is cu_k and args_varlen[33] == 0


@pytest.mark.parametrize("lens_q, lens_k, hq, hk, d, kw", [
    ([10, 0, 130], [10, 0, 130], 4, 4, 64, dict(causal=True)),
    ([5, 70], [90, 30], 4, 2, 128, dict(window_size=(12, 4), softcap=6.0)),     # GQA, window, softcap
    ([33], [47], 2, 1, 32, dict(seqused_k=True)),                                # MQA, seqused_k
    ([5, 70], [90, 30], 4, 2, 64, dict(causal=True, alibi=(2, 4))),             # ALiBi (batch, heads)
])
def test_gpu_varlen_fast_path_launches_what_the_general_path_does(monkeypatch, lens_q, lens_k, hq, hk, d,
                                                                  kw):
    """The varlen fast path (no read of cu_seqlens) launches the general
    path's kernel with its arguments; the general path runs on the same
    call (the fast path's result dropped), with the values check on."""
    from tilec import flash_attn

    cuda, caught = _posing_as_cuda(monkeypatch)
    used_fast = []
    fast = flash_attn._gpu_varlen_fast_path
    monkeypatch.setattr(flash_attn, "_gpu_varlen_fast_path",
                        lambda *a, **k: used_fast.append(fast(*a, **k) is not None) or None)
    kw = dict(kw)
    cu_q = cuda(torch.tensor(np.cumsum([0] + lens_q), dtype=torch.int32))
    cu_k = cuda(torch.tensor(np.cumsum([0] + lens_k), dtype=torch.int32))
    used = cuda(torch.tensor([min(3, n) for n in lens_k], dtype=torch.int32)) if kw.pop("seqused_k", 0) \
        else None
    q = cuda(torch.randn(sum(lens_q), hq, d).half())
    k, v = (cuda(torch.randn(sum(lens_k), hk, d).half()) for _ in range(2))
    if "alibi" in kw:
        kw["alibi_slopes"] = cuda(torch.rand(kw.pop("alibi")))
    flash_attn._flash_attn_forward(q, k, v, None, kw.pop("causal", False), *kw.pop("window_size", (-1, -1)),
                                   cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max(lens_q),
                                   max_seqlen_k=max(lens_k), seqused_k=used, **kw)
    assert used_fast == [True] and len(caught) == 2
    (key_fast, args_fast, _), (key_general, args_general, _) = caught
    assert key_fast == key_general and key_fast[6] is True and key_fast[5] == ("alibi_slopes" in kw)
    assert _launch_signature(args_fast) == _launch_signature(args_general)
    if "alibi_slopes" in kw:
        assert args_fast[28] is args_general[28] is kw["alibi_slopes"]
    assert args_fast[30] is cu_q and args_fast[31] is cu_k and (used is None or args_fast[32] is used)


def test_gpu_varlen_reads_no_cu_seqlens_unless_asked(monkeypatch):
    """On CUDA the values of cu_seqlens are not read back (a device sync per
    call) on the fast path or the general one (head_dim 20: padded);
    CHECK_CUDA_VARLEN_VALUES = True reads and checks them."""
    from tilec import flash_attn

    cuda, caught = _posing_as_cuda(monkeypatch)
    reads = []
    host_ints = flash_attn._host_ints
    monkeypatch.setattr(flash_attn, "_host_ints", lambda t: reads.append(t) or host_ints(t))
    bad = cuda(torch.tensor([0, 7, 5], dtype=torch.int32))  # not non-decreasing
    for d in (64, 20):
        q = cuda(torch.randn(10, 2, d).half())
        tilec.flash_attn_varlen_func(q, q, q, bad, bad, 7, 7)
    assert len(caught) == 2 and not reads
    monkeypatch.setattr(flash_attn, "CHECK_CUDA_VARLEN_VALUES", True)
    with pytest.raises(ValueError, match=r"'cu_seqlens_q' must be non-decreasing"):
        tilec.flash_attn_varlen_func(q, q, q, bad, bad, 7, 7)
    assert reads and len(caught) == 2


def test_gpu_varlen_raises_what_an_earlier_kernel_found(monkeypatch):
    """The VARLEN kernel's in-kernel check (its values are never read on the
    host for CUDA tensors) leaves a record in the device's pinned error
    buffer; the fast path's next call looks at its flag (no sync) and raises
    it before launching, naming the values; the buffer is then clear. Both
    paths pass the same buffer."""
    from tilec import flash_attn

    cuda, caught = _posing_as_cuda(monkeypatch)
    cu = cuda(torch.tensor([0, 4, 10], dtype=torch.int32))
    q = cuda(torch.randn(10, 2, 64).half())
    tilec.flash_attn_varlen_func(q, q, q, cu, cu, 6, 6)
    flash_attn._flash_attn_forward(q, q, q, None, False, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                   max_seqlen_q=6, max_seqlen_k=6, alibi_slopes=cuda(torch.ones(2)))
    assert len(caught) == 2 and caught[0][1][34] == caught[1][1][34]  # the error buffer
    flags, address = flash_attn._SEQUENCE_BUFFERS["cuda:0"][:2]
    assert caught[0][1][34] == address and caught[0][1][35:37] == (10, 10)  # total_q, total_k
    flags[4 + 4 * 1:4 + 4 * 2] = (5, 11, 10, 1)  # what sequence 1's programs write ...
    flags[:4] = 1                                # ... and the flag
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)  # nothing runs: no driver
    with pytest.raises(RuntimeError, match=r"flash_attn_varlen_func: an earlier varlen call on "
                       r"cuda:0 had bad values, found by its kernel: 'cu_seqlens_k' ends sequence 1 "
                       r"at 11, past the 10 tokens of 'k'"):
        tilec.flash_attn_varlen_func(q, q, q, cu, cu, 6, 6)
    assert len(caught) == 2 and not flags.any()
    tilec.flash_attn_varlen_func(q, q, q, cu, cu, 6, 6)
    tilec.check_errors()
    assert len(caught) == 3


@pytest.mark.parametrize("dropout_p", [0.0, 0.2])
def test_gpu_varlen_backward_passes_the_error_buffer_by_address(monkeypatch, dropout_p):
    """The backward's VARLEN kernels get the pinned error buffer's address
    (run 6: the checked kernel call refused the int: "argument 'err':
    expected a torch CUDA tensor of i32, got int"); every other argument is
    still checked, and the launch gets the forward's buffer."""
    import sys

    import tilec.jit  # noqa: F401 (tilec.jit is also the decorator's name)
    from tilec import flash_attn
    from tilec.flash_bwd import _flash_attn_backward

    cuda, caught = _posing_as_cuda(monkeypatch)
    kernel_class = sys.modules["tilec.jit"].Kernel
    checked = []
    monkeypatch.setattr(kernel_class, "launcher", lambda self, arch, device: self.name)
    monkeypatch.setattr(kernel_class, "check_args", lambda self, args: checked.append(args) or 0)
    cu = cuda(torch.tensor([0, 4, 10], dtype=torch.int32))
    q, k, v, out, dout = (cuda(torch.randn(10, 2, 64).half()) for _ in range(5))
    lse = cuda(torch.zeros(2, 10))
    _flash_attn_backward(dout, q, k, v, out, lse, cu_seqlens_q=cu, cu_seqlens_k=cu,
                         max_seqlen_q=6, max_seqlen_k=6, dropout_p=dropout_p,
                         rng_state=(1, 2) if dropout_p else None)
    (address,) = [entry[1] for entry in flash_attn._SEQUENCE_BUFFERS.values()]
    assert [name.split("_")[2] for name, _, _ in caught] == ["dq", "dkdv"]
    for (_, args, _), checked_args in zip(caught, checked):
        at = [i for i, a in enumerate(args) if a is cu][1] + 3  # after cu_seqlens_k, seqused_k, its flag
        assert args[at] is address and args[at + 1:at + 3] == (10, 10)
        placeholder = checked_args[at]  # flash_attn._dummy(q, "int32"): on a GPU an int32 CUDA tensor
        assert hasattr(placeholder, "shape") and str(placeholder.dtype).endswith("int32")
        assert all(a is b for i, (a, b) in enumerate(zip(args, checked_args)) if i != at)


def check_varlen_against_float64(monkeypatch, device, dtype, causal, window, seqused):
    """flash_attn's varlen forward on sequences of 0, 1, 17, 130 and 300
    tokens (programs past the short ones exit early), GQA 4/2, outputs
    poisoned, against float64. Returns whether the GPU fast path ran."""
    import flash_reference
    from tilec import flash_attn

    used_fast = []
    fast = flash_attn._gpu_varlen_fast_path
    monkeypatch.setattr(flash_attn, "_gpu_varlen_fast_path",
                        lambda *a, **k: (lambda r: used_fast.append(r is not None) or r)(fast(*a, **k)))
    for name in ("empty_like", "empty"):
        make = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *a, make=make, **k: make(*a, **k).fill_(float("nan")))
    new_empty = torch.Tensor.new_empty
    monkeypatch.setattr(torch.Tensor, "new_empty", lambda t, *a, **k: new_empty(t, *a, **k).fill_(float("nan")))
    lens_q, lens_k = [0, 1, 17, 130, 300], [5, 1, 40, 130, 300]
    cu_q = torch.tensor(np.cumsum([0] + lens_q), dtype=torch.int32, device=device)
    cu_k = torch.tensor(np.cumsum([0] + lens_k), dtype=torch.int32, device=device)
    used = torch.tensor([3, 1, 0, 77, 300], dtype=torch.int32, device=device) if seqused else None
    gen = torch.Generator().manual_seed(int(np.random.default_rng().integers(1 << 31)))
    q = torch.randn(sum(lens_q), 4, 128, generator=gen).to(device, dtype)
    k, v = (torch.randn(sum(lens_k), 2, 128, generator=gen).to(device, dtype) for _ in range(2))
    out, lse = flash_attn._flash_attn_forward(q, k, v, None, causal, *window, cu_seqlens_q=cu_q,
                                              cu_seqlens_k=cu_k, max_seqlen_q=300, max_seqlen_k=300,
                                              seqused_k=used)
    ref, ref_lse = flash_reference.attention_varlen(
        *(t.float().cpu().numpy() for t in (q, k, v)), cu_q.cpu().numpy(), cu_k.cpu().numpy(), 128 ** -0.5,
        causal, window, seqused_k=None if used is None else used.cpu().numpy(), max_sq=300, max_sk=300)
    out, lse = out.double().cpu(), lse.double().cpu()
    assert torch.isfinite(out).all(), "NaN/inf in out (rows left unwritten?)"
    finite = torch.from_numpy(np.isfinite(ref_lse))
    assert torch.equal(torch.isposinf(lse), ~finite)
    assert rel_err(out, torch.from_numpy(ref)) < REL_TOL[dtype]
    assert (lse[finite] - torch.from_numpy(ref_lse)[finite]).abs().max().item() < 1e-3
    return used_fast


VARLEN_MASKS = [(True, (-1, -1), False), (False, (40, 0), False), (True, (-1, -1), True)]


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal, window, seqused", VARLEN_MASKS, ids=["causal", "window", "seqused_k"])
def test_gpu_varlen_fast_path_matches_float64(monkeypatch, dtype, causal, window, seqused):
    assert check_varlen_against_float64(monkeypatch, "cuda", dtype, causal, window, seqused) == [True]


@needs_cpu
@pytest.mark.parametrize("causal, window, seqused", VARLEN_MASKS[1:], ids=["window", "seqused_k"])
def test_cpu_varlen_torch_tensors_match_float64(monkeypatch, causal, window, seqused):
    """The same check on the CPU runner (torch CPU tensors: no fast path)."""
    assert check_varlen_against_float64(monkeypatch, "cpu", torch.bfloat16, causal, window, seqused) == []


@needs_cpu
def test_custom_op_opcheck_with_grad():
    """The op's registered autograd (tilec::flash_attn_backward) passes
    opcheck's autograd-registration and fake checks; GQA, causal."""
    from tilec import ops  # noqa: F401  (registers the ops)

    q, k, v = qkv(torch.float16, b=1, sq=33, sk=47, h=2, d=32)
    k, v = k[:, :, :1].contiguous(), v[:, :, :1].contiguous()
    rest = (-1, -1, 0.0, None, None, None, None, None, None, "flash_attn_func")
    args = tuple(t.requires_grad_() for t in (q, k, v)) + (None, True) + rest
    torch.library.opcheck(torch.ops.tilec.flash_attn_forward.default, args)
    out, lse = torch.ops.tilec.flash_attn_forward(*args)
    with torch.no_grad():
        back = (torch.ones_like(out), q, k, v, out, lse, None, True, -1, -1, 0.0, None, None, None,
                None, None, None, "flash_attn_func", True)
    torch.library.opcheck(torch.ops.tilec.flash_attn_backward.default,
                          tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in back))


def test_gpu_fast_path_does_not_bypass_autograd(monkeypatch):
    """CUDA inputs that require grad launch (through the core's fast path)
    inside the autograd Function: out has its grad_fn; without grad they
    take the fast path directly."""
    cuda, caught = _posing_as_cuda(monkeypatch)
    q, k, v = (cuda(torch.randn(1, 64, 2, 64).half()) for _ in range(3))
    assert tilec.flash_attn_func(q, k, v).grad_fn is None and len(caught) == 1
    out = tilec.flash_attn_func(q.requires_grad_(), k, v)
    assert type(out.grad_fn).__name__ == "FlashAttnFuncBackward" and len(caught) == 2


@needs_gpu
def test_gpu_kernel_reports_bad_cu_seqlens_after_the_call():
    """On a real GPU the VARLEN kernel writes its error record into the pinned
    host buffer by its (UVA) address: the call itself raises nothing (no sync),
    tilec.check_errors() then names the bad value, the good sequence's output
    is right, and a later good call is clean. Written in session 9 when no GPU
    run was left to check it (the CPU runner covers the same path with numpy)."""
    import math

    tilec.check_errors()  # nothing left by an earlier test
    q, k, v = (torch.randn(10, 2, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    good = torch.tensor([0, 4, 10], dtype=torch.int32, device="cuda")
    bad_k = torch.tensor([0, 4, 11], dtype=torch.int32, device="cuda")  # sequence 1 ends past k's 10 rows
    out = tilec.flash_attn_varlen_func(q, k, v, good, bad_k, 6, 8)
    with pytest.raises(tilec.TilecValueError,
                       match=r"'cu_seqlens_k' ends sequence 1 at 11, past the 10 tokens of 'k'"):
        tilec.check_errors()
    tilec.check_errors()  # reported once
    q0, k0, v0 = (t[:4].double().cpu() for t in (q, k, v))
    scores = torch.einsum("qhd,khd->hqk", q0, k0) / math.sqrt(64)
    ref = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v0)
    assert (out[:4].double().cpu() - ref).abs().max().item() < 2e-3
    tilec.flash_attn_varlen_func(q, k, v, good, good, 6, 6)
    tilec.check_errors()
