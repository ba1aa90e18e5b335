"""tl.wait_prior_kernels / tl.launch_dependents (tile.wait_prior_kernels,
tile.launch_dependents): programmatic dependent launch. A kernel that waits
is launched (sm_90+) so that its programs may start while the kernel ahead
of it on the stream still runs -- as soon as that kernel's programs have all
called tl.launch_dependents -- and wait on the SM for its writes; the launch
latency hides behind the earlier kernel's tail. On sm_80 and the CPU runner
both calls are nothing (kernels run one after another).

Checked: the sm_90a code (griddepcontrol, the manifest's
"programmatic_launch", no ld.global.nc for scalar loads that could move above
the wait) against sm_80's; the CPU runner; and on a GPU (skipped without
one) a producer that lets its consumer start at once, with fresh values each
launch, in a stream and replayed from a CUDA graph: a consumer that read
before the producer finished would see the previous launch's values.
"""

import numpy as np
import pytest

import tilec
from tilec import compiler
from tilec import language as tl

HAVE_CPU = compiler.available() and getattr(compiler.native(), "has_cpu_runner", False)


@tilec.jit(grid=("blocks", 1, 1))
def produce(dst: tl.ptr(tl.float32), scale: tl.ptr(tl.float32), value: tl.float32, blocks: tl.int32,
            N: tl.constexpr = 1024):
    tl.launch_dependents()            # the consumer may start now: it waits for these writes
    i = tl.program_id(0)
    x = tl.cast(tl.arange(0, N) + i * N, tl.float32) + value     # exact below 2^24
    tl.store(tl.view(dst + i * N, (N,), (1,)), (0,), x)
    tl.store(tl.view(scale, (1,), (1,)), (0,), tl.full((1,), value, tl.float32))


@tilec.jit(grid=("blocks", 1, 1))
def consume(src: tl.ptr(tl.float32), scale: tl.ptr(tl.float32), out: tl.ptr(tl.float32), blocks: tl.int32,
            N: tl.constexpr = 1024):
    tl.wait_prior_kernels()           # nothing of produce's is read before this
    tl.launch_dependents()
    i = tl.program_id(0)
    s = tl.load(scale)                # a scalar load: must not move above the wait
    x = tl.load(tl.view(src + i * N, (N,), (1,)), (0,), (N,))
    tl.store(tl.view(out + i * N, (N,), (1,)), (0,), x + s)


def _expected(blocks, value, n=1024):
    """Exact in float32 (no rounding, so no FMA contraction can change it)."""
    return np.arange(blocks * n, dtype=np.float32) + np.float32(2 * value)


def _check(out, blocks, value):
    got = out.cpu().numpy()
    want = _expected(blocks, value)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (f"launch with value {value}: {bad.size} elements wrong, first at {bad[0]}: "
                           f"{got[bad[0]]}, expected {want[bad[0]]}")


def test_errors_name_the_call():
    with pytest.raises(tilec.CompilationError, match=r"tl.wait_prior_kernels\(\) takes at most 0 arguments"):
        @tilec.jit(grid=(1, 1, 1))
        def bad(c: tl.ptr(tl.float32)):
            tl.wait_prior_kernels(c)
        bad.specialize().ir


def test_sm90a_waits_and_asks_for_programmatic_launch():
    art = consume.specialize().compile(arch="sm_90a")
    ptx = art.ptx
    assert "griddepcontrol.wait;" in ptx and "griddepcontrol.launch_dependents;" in ptx
    assert ptx.index("griddepcontrol.wait;") < ptx.index("ld.global")
    assert "ld.global.nc" not in ptx      # the scale read stays behind the wait
    assert art.manifest.get("programmatic_launch") is True
    # A kernel that only lets the next one start is launched in stream order.
    prod = produce.specialize().compile(arch="sm_90a")
    assert "griddepcontrol.launch_dependents;" in prod.ptx and "griddepcontrol.wait" not in prod.ptx
    assert "programmatic_launch" not in prod.manifest


def test_sm80_has_no_programmatic_launch():
    art = consume.specialize().compile(arch="sm_80")
    assert "griddepcontrol" not in art.ptx
    assert "programmatic_launch" not in art.manifest
    assert "ld.global.nc" in art.ptx      # no wait: the read-only scalar takes the non-coherent path


@pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")
def test_cpu_runs_them_as_nothing():
    blocks = 3
    buf = np.zeros(blocks * 1024, np.float32)
    scale = np.zeros(1, np.float32)
    out = np.full(blocks * 1024, np.nan, np.float32)
    produce.specialize().run_cpu(buf, scale, 3.0, blocks, grid=(blocks, 1, 1))
    consume.specialize().run_cpu(buf, scale, out, blocks, grid=(blocks, 1, 1))
    np.testing.assert_array_equal(out, _expected(blocks, 3.0))


def _gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: the programmatic launch runs on sm_90+ only")
    return torch


def test_consumer_sees_the_producers_writes_gpu():
    torch = _gpu()
    blocks = 4096                              # 16 MB: several waves, so consumers start early
    p, c = produce.specialize(), consume.specialize()
    buf = torch.zeros(blocks * 1024, device="cuda")
    scale = torch.zeros(1, device="cuda")
    outs = [torch.full((blocks * 1024,), float("nan"), device="cuda") for _ in range(40)]
    for k, out in enumerate(outs):             # back to back: no sync between launches
        p(buf, scale, float(k + 1), blocks, grid=(blocks, 1, 1))
        c(buf, scale, out, blocks, grid=(blocks, 1, 1))
    torch.cuda.synchronize()
    for k, out in enumerate(outs):
        _check(out, blocks, k + 1)


def test_consumer_in_a_cuda_graph_gpu():
    torch = _gpu()
    blocks = 2048
    p, c = produce.specialize(), consume.specialize()
    buf = torch.zeros(blocks * 1024, device="cuda")
    scale = torch.zeros(1, device="cuda")
    outs = [torch.zeros(blocks * 1024, device="cuda") for _ in range(6)]
    p(buf, scale, 1.0, blocks, grid=(blocks, 1, 1))   # compile and load outside the capture
    c(buf, scale, outs[0], blocks, grid=(blocks, 1, 1))
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for k, out in enumerate(outs):
            p(buf, scale, float(k + 2), blocks, grid=(blocks, 1, 1))
            c(buf, scale, out, blocks, grid=(blocks, 1, 1))
    for _ in range(3):
        for out in outs:
            out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        for k, out in enumerate(outs):
            _check(out, blocks, k + 2)
