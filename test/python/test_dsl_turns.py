"""tl.wait_turn / tl.pass_turn (tile.wait_turn, tile.pass_turn): programs
that add into the same memory take turns on a counter, so the f32 adds come
in one fixed order and the sum is bitwise the sequential sum in that order
(the deterministic fused backward's dQ, kernels/flash_bwd.py ORDERED_DQ).
The order is the GPU's start order: program_id(0) from the top, so program
i of P takes turn P - 1 - i. Checked against numpy's sequential float32 sum
in that order (exact equality, with addends of mixed magnitudes so another
order would round differently) on the CPU runner, which runs programs in the
start order and reports a wait no earlier program satisfies, and (skipped
without one) on the GPU, where the programs run concurrently.
"""

import numpy as np
import pytest

import tilec
from tilec import compiler
from tilec import language as tl

HAVE_CPU = compiler.available() and getattr(compiler.native(), "has_cpu_runner", False)


@tilec.jit(grid=("programs", "groups", 1), name=lambda NUM_WARPS, **_: f"turn_sum_w{NUM_WARPS}",
           num_warps="NUM_WARPS")
def turn_sum(values: tl.ptr(tl.float32), acc: tl.ptr(tl.float32), log: tl.ptr(tl.int32),
             counters: tl.ptr(tl.int32), programs: tl.int32, groups: tl.int32,
             NUM_WARPS: tl.constexpr = 4, N: tl.constexpr = 64):
    i = tl.program_id(0)
    g = tl.program_id(1)
    seen = tl.load(counters + g, volatile=True)        # early; the wait re-reads only if behind
    x = tl.load(tl.view(values + (g * programs + i) * N, (1, N), (N, 1)), (0, 0), (1, N))
    turn = programs - 1 - i                             # the start order: program_id(0) from the top
    tl.wait_turn(counters + g, turn, seen)
    tl.atomic_add(tl.view(acc + g * N, (1, N), (N, 1)), (0, 0), x)
    tl.store(tl.view(log + g * programs + turn, (1,), (1,)), (0,), tl.full((1,), i, tl.int32))
    tl.pass_turn(counters + g)


@tilec.jit(grid=("programs", 1, 1))
def wrong_order(acc: tl.ptr(tl.float32), counters: tl.ptr(tl.int32), programs: tl.int32):
    i = tl.program_id(0)
    tl.wait_turn(counters, i)                           # program 0 first: not the start order
    tl.atomic_add(tl.view(acc, (1, 64), (64, 1)), (0, 0), tl.full((1, 64), 1.0, tl.float32))
    tl.pass_turn(counters)


def _values(rng, groups, programs, n=64):
    """Mixed magnitudes: the rounding of a float32 sum depends on its order."""
    scale = 10.0 ** rng.integers(-4, 5, size=(groups, programs, 1))
    return (rng.standard_normal((groups, programs, n)) * scale).astype(np.float32)


def _sequential(x):
    """x's float32 sum over programs in the start order (program P-1 first)."""
    total = np.zeros(x.shape[::2], np.float32)
    for i in reversed(range(x.shape[1])):
        total = (total + x[:, i]).astype(np.float32)
    return total


def test_errors_name_the_bad_argument():
    with pytest.raises(tilec.CompilationError, match="tl.wait_turn needs a pointer to int32"):
        @tilec.jit(grid=(1, 1, 1))
        def bad(c: tl.ptr(tl.float32)):
            tl.wait_turn(c, 0)
        bad.specialize().ir
    with pytest.raises(tilec.CompilationError, match="turn must be an integer >= 0, got constant -1"):
        @tilec.jit(grid=(1, 1, 1))
        def negative(c: tl.ptr(tl.int32)):
            tl.wait_turn(c, -1)
        negative.specialize().ir
    with pytest.raises(tilec.CompilationError, match="tl.pass_turn needs a pointer to int32"):
        @tilec.jit(grid=(1, 1, 1))
        def bad_pass(c: tl.ptr(tl.int64)):
            tl.pass_turn(c)
        bad_pass.specialize().ir
    with pytest.raises(tilec.CompilationError, match="volatile must be True or False"):
        @tilec.jit(grid=(1, 1, 1))
        def bad_volatile(c: tl.ptr(tl.int32)):
            tl.wait_turn(c, 0, tl.load(c, volatile=1))
        bad_volatile.specialize().ir


def test_ptx_polls_and_passes():
    """The GPU code: a volatile early read, acquire polls with sleeps (and a
    trap after too many), thread 0's release add on the counter after a
    block barrier (no acquire fence there: it would invalidate L1)."""
    ptx = turn_sum.specialize().compile(arch="sm_80").ptx
    assert "ld.volatile.global.u32" in ptx or "ld.volatile.global.b32" in ptx
    for needle in ("ld.acquire.gpu.global.b32", "nanosleep.u32", "trap;", "bar.sync",
                   "red.release.gpu.global.add.u32"):
        assert needle in ptx, needle
    assert "fence" not in ptx


@pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")
@pytest.mark.parametrize("programs", [1, 3, 40])
def test_turns_cpu(programs):
    rng = np.random.default_rng()
    groups = 3
    x = _values(rng, groups, programs)
    acc = np.zeros((groups, 64), np.float32)
    log = np.full((groups, programs), -1, np.int32)
    counters = np.zeros(groups, np.int32)
    turn_sum.specialize().run_cpu(x, acc, log, counters, programs, groups,
                                  grid=(programs, groups, 1))
    np.testing.assert_array_equal(counters, programs)  # every turn passed once
    np.testing.assert_array_equal(log, np.tile(np.arange(programs)[::-1], (groups, 1)))
    np.testing.assert_array_equal(acc, _sequential(x))


@pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")
def test_wait_no_earlier_program_passes_is_an_error():
    acc = np.zeros(64, np.float32)
    counters = np.zeros(1, np.int32)
    with pytest.raises(Exception, match=r"waits for turn 2 of the counter at argument 1 "
                                        r"\(counters\), which the programs that start before it never pass"):
        wrong_order.specialize().run_cpu(acc, counters, 3, grid=(3, 1, 1))


def test_turns_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    rng = np.random.default_rng()
    groups, programs, launches = 16, 600, 10      # more programs than an H200 holds at once
    x_np = _values(rng, groups, programs)
    expected = torch.from_numpy(_sequential(x_np)).cuda()
    x = torch.from_numpy(x_np).cuda()
    for warps in (1, 4):
        k = turn_sum.specialize(NUM_WARPS=warps)
        for _ in range(launches):
            acc = torch.zeros(groups, 64, device="cuda")
            log = torch.full((groups, programs), -1, dtype=torch.int32, device="cuda")
            counters = torch.zeros(groups, dtype=torch.int32, device="cuda")
            k(x, acc, log, counters, programs, groups, grid=(programs, groups, 1))
            torch.cuda.synchronize()
            assert torch.equal(counters.cpu(), torch.full((groups,), programs, dtype=torch.int32))
            assert torch.equal(log.cpu(), torch.arange(programs - 1, -1, -1,
                                                       dtype=torch.int32).repeat(groups, 1))
            assert torch.equal(acc, expected)     # bitwise: the adds came in the start order
