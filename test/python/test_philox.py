"""tl.philox / tl.randint / tl.rand (python/tilec/language.py): Philox4x32-10
written as plain tile arithmetic, on the CPU runner, against Random123's
known-answer vectors and a numpy model of the generator; and the DSL's
integer shifts it needs."""

from __future__ import annotations  # kernel annotations may name constexprs (ON below)

import numpy as np
import pytest

import tilec
from tilec import compiler
from tilec import language as tl

HAVE_CPU = compiler.available() and getattr(compiler.native(), "has_cpu_runner", False)
pytestmark = pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")

M = 0xFFFFFFFF


def philox_ref(key, ctr, rounds=10):
    """Random123's philox4x32 in Python integers: key (k0, k1), ctr (4 words)."""
    k0, k1 = key
    c = list(ctr)
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M, (k1 + 0xBB67AE85) & M
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & M, p1 & M, ((p0 >> 32) ^ c[3] ^ k1) & M, p0 & M]
    return c


# Random123 kat_vectors (philox4x32 10 rounds): ctr, key -> output.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M, M, M, M), (M, M), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def test_reference_model_matches_random123():
    for ctr, key, want in KAT:
        assert philox_ref(key, ctr) == list(want)


@tilec.jit(grid=(1,))
def _philox_kernel(c: tl.ptr(tl.int32), out: tl.ptr(tl.int32), seed: tl.int64,
                   N: tl.constexpr = 16):
    cv = tl.view(c, (4, N), (N, 1))
    ov = tl.view(out, (4, N), (N, 1))
    c0 = tl.load(cv, (0, 0), (1, N))
    c1 = tl.load(cv, (1, 0), (1, N))
    c2 = tl.load(cv, (2, 0), (1, N))
    c3 = tl.load(cv, (3, 0), (1, N))
    r0, r1, r2, r3 = tl.philox(seed, c0, c1, c2, c3)
    tl.store(ov, (0, 0), r0)
    tl.store(ov, (1, 0), r1)
    tl.store(ov, (2, 0), r2)
    tl.store(ov, (3, 0), r3)


def _run_philox(ctrs, seed):
    n = 16
    c = np.zeros((4, n), np.uint32)
    c[:, :len(ctrs)] = np.array(ctrs, np.uint64).T.astype(np.uint32)
    out = np.zeros((4, n), np.int32)
    _philox_kernel.specialize(N=n).run_cpu(c.view(np.int32), out, seed, grid=(1,))
    return [tuple(int(x) for x in out.view(np.uint32)[:, i]) for i in range(len(ctrs))]


def test_philox_kernel_known_answers():
    """The DSL generator gives Random123's known answers (key = seed's low,
    high words)."""
    for ctr, (k0, k1), want in KAT:
        seed = k0 | (k1 << 32)
        seed = seed - (1 << 64) if seed >= 1 << 63 else seed  # an i64 parameter
        assert _run_philox([ctr], seed) == [tuple(want)]


def test_philox_kernel_matches_the_model_on_random_counters():
    rng = np.random.default_rng(1)
    ctrs = [tuple(int(x) for x in rng.integers(0, 1 << 32, 4)) for _ in range(16)]
    seed = int(rng.integers(-(1 << 63), 1 << 63))
    key = (seed & M, (seed >> 32) & M)
    assert _run_philox(ctrs, seed) == [tuple(philox_ref(key, c)) for c in ctrs]


@tilec.jit(grid=(1,))
def _rand_kernel(out: tl.ptr(tl.float32), bits: tl.ptr(tl.int32), seed: tl.int64,
                 offset: tl.int64, N: tl.constexpr = 1024):
    offs = offset + tl.arange(0, N)
    tl.store(tl.view(out, (N,), (1,)), (0,), tl.rand(seed, offs))
    tl.store(tl.view(bits, (N,), (1,)), (0,), tl.randint(seed, offs))


def test_rand_is_uniform_and_counter_based():
    """tl.rand: the top 24 bits of word 0 of philox(seed, (offset lo, hi, 0,
    0)) times 2^-24 -- in [0, 1), mean 1/2, variance 1/12, and a function of
    (seed, offset) only. Offsets past 2^32 use the high counter word."""
    n = 4096
    kernel = _rand_kernel.specialize(N=n)
    seed, offset = 0x1234_5678_9ABC, (1 << 32) - 100
    u, bits = np.zeros(n, np.float32), np.zeros(n, np.int32)
    kernel.run_cpu(u, bits, seed, offset, grid=(1,))
    key = (seed & M, seed >> 32)
    for i in (0, 99, 100, 101, n - 1):  # across the low word's wrap
        o = offset + i
        want = philox_ref(key, (o & M, o >> 32, 0, 0))[0]
        assert int(bits.view(np.uint32)[i]) == want, i
        assert u[i] == (want >> 8) * 2.0 ** -24
    assert 0 <= u.min() and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.02 and abs(u.var() - 1 / 12) < 0.005
    u2, bits2 = np.zeros(n, np.float32), np.zeros(n, np.int32)
    kernel.run_cpu(u2, bits2, seed, offset + 7, grid=(1,))
    assert np.array_equal(u2[:-7], u[7:])
    kernel.run_cpu(u2, bits2, seed + 1, offset, grid=(1,))
    assert (u2 != u).mean() > 0.99


@tilec.jit(grid=(1,))
def _shift_kernel(x: tl.ptr(tl.int32), out: tl.ptr(tl.int32), N: tl.constexpr = 8):
    xv = tl.load(tl.view(x, (N,), (1,)), (0,), (N,))
    ov = tl.view(out, (3, N), (N, 1))
    tl.store(ov, (0, 0), (xv << 3)[None, :])
    tl.store(ov, (1, 0), (xv >> 4)[None, :])
    tl.store(ov, (2, 0), ((xv.to(tl.int64) << 33) >> 35).to(tl.int32)[None, :])


def test_integer_shifts():
    """'<<' is arith.shli, '>>' arith.shrsi (arithmetic: Python's >> on signed
    integers), on tiles of i32 and i64."""
    x = np.array([1, -1, 7, -1000, 1 << 30, -(1 << 31), 123456789, 0], np.int32)
    out = np.zeros((3, 8), np.int32)
    _shift_kernel.specialize().run_cpu(x, out, grid=(1,))
    wrap = lambda v: v - (1 << 32) if v & (1 << 31) else v  # noqa: E731 (i32 bits)
    assert out[0].tolist() == [wrap((int(v) << 3) & M) for v in x]
    assert out[1].tolist() == [int(v) >> 4 for v in x]
    i64 = x.astype(np.int64)
    assert out[2].tolist() == ((i64 << 33) >> 35).astype(np.int32).tolist()  # i64 wraps


def test_shift_of_a_float_is_an_error():
    @tilec.jit(grid=(1,))
    def bad(x: tl.ptr(tl.float32)):
        v = tl.load(tl.view(x, (8,), (1,)), (0,), (8,))
        tl.store(tl.view(x, (8,), (1,)), (0,), v >> 1)

    with pytest.raises(tilec.CompilationError, match=r"'>>' needs integers"):
        bad.specialize()


def test_parameters_annotated_none_are_absent():
    """`x: T if FLAG else None`: a parameter only of the specializations
    whose annotation is a type (how the DROPOUT kernels add theirs without
    changing the others' signatures); using it where it is absent is an
    error naming it."""

    @tilec.jit(grid=(1,))
    def k(out: tl.ptr(tl.float32), extra: tl.float32 if ON else None, ON: tl.constexpr = False,
          USE: tl.constexpr = False):
        v = tl.zeros((16,), tl.float32)
        if ON or USE:
            v = v + extra
        tl.store(tl.view(out, (16,), (1,)), (0,), v)

    assert [n for n, _ in k.specialize().params] == ["out"]
    assert [n for n, _ in k.specialize(ON=True).params] == ["out", "extra"]
    out = np.zeros(16, np.float32)
    k.specialize(ON=True).run_cpu(out, 2.5, grid=(1,))
    assert (out == 2.5).all()
    with pytest.raises(tilec.CompilationError, match=r"name 'extra' is not defined"):
        k.specialize(USE=True)
