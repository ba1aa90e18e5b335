"""tl.arrive (tile.arrive), the per-program arrival count: in each group of
`expected` programs exactly one gets True — the last to arrive — it sees
every other program's writes made before their arrival, and it leaves the
counter at 0, so the next launch needs no memset. Checked on the CPU runner
and (skipped without one) on the GPU, where programs of a group run
concurrently: many launches, each program writing its value before
arriving; the last sums them and counts how often "last" fired.
"""

import numpy as np
import pytest

import tilec
from tilec import compiler
from tilec import language as tl

HAVE_CPU = compiler.available() and getattr(compiler.native(), "has_cpu_runner", False)


@tilec.jit(grid=("members", "groups", 1), name=lambda NUM_WARPS, **_: f"arrive_sum_w{NUM_WARPS}",
           num_warps="NUM_WARPS")
def arrive_sum(values: tl.ptr(tl.float32), parts: tl.ptr(tl.float32), sums: tl.ptr(tl.float32),
               fired: tl.ptr(tl.int32), counters: tl.ptr(tl.int32), members: tl.int32, groups: tl.int32,
               NUM_WARPS: tl.constexpr = 4, N: tl.constexpr = 64):
    i = tl.program_id(0)
    g = tl.program_id(1)
    # Each program writes its row of N values (a tile store by every thread).
    src = tl.view(values + (g * members + i) * N, (1, N), (N, 1))
    dst = tl.view(parts + (g * members + i) * N, (1, N), (N, 1))
    tl.store(dst, (0, 0), tl.load(src, (0, 0), (1, N)))
    last = tl.arrive(counters + g, members)
    if last:
        n = tl.load(fired + g)
        tl.store(tl.view(fired + g, (1,), (1,)), (0,), tl.full((1,), n + 1, tl.int32))
        # Every member's row at once, members along the last axis (the
        # reduction stays in a warp at any warp count); up to 64 members.
        rows = tl.view(parts + g * members * N, (N, members), (1, N))
        total = tl.sum(tl.load(rows, (0, 0), (N, 64)), 1)
        tl.store(tl.view(sums + g * N, (N,), (1,)), (0,), total)


def _inputs(rng, groups, members, n=64):
    return rng.standard_normal((groups, members, n)).astype(np.float32)


def test_errors_name_the_bad_argument():
    with pytest.raises(tilec.CompilationError, match="tl.arrive needs a pointer to int32"):
        @tilec.jit(grid=(1, 1, 1))
        def bad(c: tl.ptr(tl.float32)):
            tl.arrive(c, 2)
        bad.specialize().ir
    with pytest.raises(tilec.CompilationError, match="expected arrivals must be an integer >= 1, got constant 0"):
        @tilec.jit(grid=(1, 1, 1))
        def none(c: tl.ptr(tl.int32)):
            tl.arrive(c, 0)
        none.specialize().ir


@pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")
@pytest.mark.parametrize("members", [1, 3, 64])
def test_arrive_cpu(members):
    rng = np.random.default_rng()
    groups = 5
    x = _inputs(rng, groups, members)
    parts = np.full_like(x, np.nan)
    sums = np.full((groups, 64), np.nan, np.float32)
    fired = np.zeros(groups, np.int32)
    counters = np.zeros(groups, np.int32)
    k = arrive_sum.specialize()
    for launch in range(2):                          # the second launch finds the counters reset
        k.run_cpu(x, parts, sums, fired, counters, members, groups, grid=(members, groups, 1))
        np.testing.assert_array_equal(counters, 0)
        np.testing.assert_array_equal(fired, launch + 1)
        np.testing.assert_allclose(sums, x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)


def test_arrive_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    groups, members, launches = 64, 33, 50
    for warps in (1, 4):
        k = arrive_sum.specialize(NUM_WARPS=warps)
        x = torch.randn(groups, members, 64, device="cuda")
        parts = torch.full_like(x, float("nan"))
        sums = torch.full((groups, 64), float("nan"), device="cuda")
        fired = torch.zeros(groups, dtype=torch.int32, device="cuda")
        counters = torch.zeros(groups, dtype=torch.int32, device="cuda")
        for _ in range(launches):
            parts.fill_(float("nan"))
            k(x, parts, sums, fired, counters, members, groups, grid=(members, groups, 1))
        torch.cuda.synchronize()
        assert int(counters.abs().sum()) == 0
        assert torch.equal(fired, torch.full_like(fired, launches))       # once per group per launch
        torch.testing.assert_close(sums, x.double().sum(1).float(), rtol=1e-5, atol=1e-4)
