"""tilec.flash_attn_with_kvcache and tilec.flash_attn_combine on the CPU
runner (numpy and torch CPU tensors) against float64 references written from
flash_attn's documented semantics, on fresh random inputs with poisoned
outputs; the split-KV heuristic; argument checks.

The reference never reads what the call wrote: it attends over the logical
key sequence of each batch row (the cache contents the test put there, then
the new keys), built before the call, so a paged pool is checked against
contiguous per-sequence keys and the append against the test's own copy.
"""

import math

import numpy as np
import pytest

import tilec
from tilec import compiler
from tilec.flash_decode import num_splits_heuristic, num_splits_rule, residency

HAVE_NATIVE = compiler.available()
HAVE_CPU = HAVE_NATIVE and getattr(compiler.native(), "has_cpu_runner", False)
needs_cpu = pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")

# f16 inputs, f32 accumulation, P rounded to f16 before P·V, out rounded to
# f16 (the split path combines f32 partials): measured ||out-ref||/||ref||
# 2.8e-4, lse within 4e-7, as flash_attn_func's.
REL_TOL = 1e-3
LSE_TOL = 1e-5


def rel_err(out, ref):
    return np.linalg.norm(np.asarray(out, np.float64) - ref) / np.linalg.norm(ref)


def f16(rng, *shape):
    return rng.standard_normal(shape).astype(np.float16)


def rotate64(x, cos, sin, pos, interleaved):
    """float64 rotary of x (s, h, d) at positions pos (s,), rounded to f16
    (what a cache of f16 holds)."""
    x = x.astype(np.float64)
    rd = cos.shape[1] * 2
    c, s = cos[pos].astype(np.float64)[:, None, :], sin[pos].astype(np.float64)[:, None, :]
    r = x[..., :rd].copy()
    if interleaved:
        a, b = r[..., 0::2].copy(), r[..., 1::2].copy()
        r[..., 0::2], r[..., 1::2] = a * c - b * s, a * s + b * c
    else:
        a, b = r[..., : rd // 2].copy(), r[..., rd // 2:].copy()
        r[..., : rd // 2], r[..., rd // 2:] = a * c - b * s, a * s + b * c
    x[..., :rd] = r
    return x.astype(np.float16)


def reference(q, keys, values, scale, causal=False, window=(-1, -1), alibi=None, softcap=0.0):
    """float64 attention of q (b, sq, h, d) over per-sequence keys/values
    [(n_b, hk, d)]: flash_attn's bottom-right causal and windows, ALiBi
    slopes (b, h) after the softcap (softcap·tanh(s / softcap)); lse +inf
    and out 0 where a row sees no key."""
    b, sq, h, d = q.shape
    out = np.zeros(q.shape)
    lse = np.full((b, h, sq), np.inf)
    left, right = window
    if causal:
        right = 0
    for i in range(b):
        K, V = keys[i].astype(np.float64), values[i].astype(np.float64)
        n = K.shape[0]
        g = h // K.shape[1]
        diag = np.arange(sq)[:, None] + n - sq
        j = np.arange(n)[None, :]
        visible = np.ones((sq, n), bool)
        if right >= 0:
            visible &= j <= diag + right
        if left >= 0:
            visible &= j >= diag - left
        for hh in range(h):
            s = q[i, :, hh].astype(np.float64) @ K[:, hh // g].T * scale
            if softcap:
                s = softcap * np.tanh(s / softcap)
            if alibi is not None:
                s = s - alibi[i, hh] * np.abs(diag - j)
            s = np.where(visible, s, -np.inf)
            for r in range(sq):
                if visible[r].any():
                    m = s[r].max()
                    p = np.exp(s[r] - m)
                    out[i, r, hh] = p @ V[:, hh // g] / p.sum()
                    lse[i, hh, r] = m + np.log(p.sum())
    return out, lse


def check(out, lse, ref, ref_lse, lse_tol=None):
    assert np.isfinite(np.asarray(out, np.float64)).all()
    assert rel_err(out, ref) < REL_TOL
    seen = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.asarray(lse)[~seen], np.inf)
    assert np.abs(np.asarray(lse)[seen] - ref_lse[seen]).max(initial=0) < (lse_tol or LSE_TOL)


def contiguous_case(rng, batch, seqlen_q, heads, heads_k, d, lens, capacity):
    q = f16(rng, batch, seqlen_q, heads, d)
    k_cache = f16(rng, batch, capacity, heads_k, d)
    v_cache = f16(rng, batch, capacity, heads_k, d)
    keys = [k_cache[b, :n].copy() for b, n in enumerate(lens)]
    values = [v_cache[b, :n].copy() for b, n in enumerate(lens)]
    return q, k_cache, v_cache, keys, values


# --- contiguous cache, one length for the batch (an int cache_seqlens) -------


@needs_cpu
@pytest.mark.parametrize("heads,heads_k", [(4, 4), (8, 2), (4, 1)])
@pytest.mark.parametrize("seqlen_q,causal", [(1, False), (4, True)])
@pytest.mark.parametrize("num_splits", [1, 3, 0])
def test_uniform_cache_matches_float64(heads, heads_k, seqlen_q, causal, num_splits):
    rng = np.random.default_rng()
    batch, d, n = 3, 64, 300
    q, kc, vc, keys, values = contiguous_case(rng, batch, seqlen_q, heads, heads_k, d, [n] * batch, 320)
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=n, causal=causal,
                                             num_splits=num_splits, return_softmax_lse=True)
    ref, ref_lse = reference(q, keys, values, 1 / math.sqrt(d), causal)
    assert out.shape == q.shape and out.dtype == np.float16 and lse.shape == (batch, heads, seqlen_q)
    check(out, lse, ref, ref_lse)


@needs_cpu
def test_more_splits_than_blocks_leave_empty_splits():
    """17 keys in one 64-key block over 5 splits: four splits see nothing
    (lse −inf partials) and the combine ignores them."""
    rng = np.random.default_rng()
    q, kc, vc, keys, values = contiguous_case(rng, 1, 1, 4, 2, 64, [17], 64)
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=17, num_splits=5,
                                             return_softmax_lse=True)
    check(out, lse, *reference(q, keys, values, 1 / math.sqrt(64)))


@needs_cpu
def test_causal_rows_before_the_cache_see_nothing():
    """seqlen_q 4 over a cache of 1 key, causal: query i sees keys j <= i − 3,
    so rows 0..2 see none: out 0 and lse +inf, as flash_attn."""
    rng = np.random.default_rng()
    q, kc, vc, keys, values = contiguous_case(rng, 1, 4, 2, 2, 64, [1], 16)
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=1, causal=True, num_splits=1,
                                             return_softmax_lse=True)
    ref, ref_lse = reference(q, keys, values, 1 / math.sqrt(64), causal=True)
    assert np.isinf(ref_lse[0, :, :3]).all()
    np.testing.assert_array_equal(out[0, :3], 0)
    check(out, lse, ref, ref_lse)


# --- flash_attn_combine -------------------------------------------------------


@needs_cpu
@pytest.mark.parametrize("out_dtype", [None, "float16"])
def test_combine_matches_direct_computation(out_dtype):
    """Partials of a real attention (keys cut into 3 ranges, one empty for
    some rows) merge to the attention over all keys, computed directly."""
    rng = np.random.default_rng()
    b, s, h, d, n = 2, 3, 5, 48, 90
    q, k, v = (rng.standard_normal(shape) for shape in ((b, s, h, d), (b, n, h, d), (b, n, h, d)))
    scores = np.einsum("bshd,bnhd->bshn", q, k) / math.sqrt(d)
    cuts = [(0, 30), (30, 31), (31, n)]
    o_part = np.empty((3, b, s, h, d), np.float32)
    l_part = np.empty((3, b, s, h), np.float32)
    for i, (lo, hi) in enumerate(cuts):
        sc = scores[..., lo:hi]
        m = sc.max(-1, keepdims=True)
        p = np.exp(sc - m)
        o_part[i] = np.einsum("bshn,bnhd->bshd", p / p.sum(-1, keepdims=True), v[:, lo:hi])
        l_part[i] = (m + np.log(p.sum(-1, keepdims=True)))[..., 0]
    l_part[1, 0, 1, 2] = -np.inf        # an empty split for one row
    o_part[1, 0, 1, 2] = 0
    l_part[:, 1, 2, 4] = -np.inf        # a row no split saw
    m = scores.max(-1, keepdims=True)
    p = np.exp(scores - m)
    ref = np.einsum("bshn,bnhd->bshd", p / p.sum(-1, keepdims=True), v)
    ref_lse = (m + np.log(p.sum(-1, keepdims=True)))[..., 0]
    # Row (0, 1, 2) without the middle split: the attention over the other keys.
    keep = np.r_[0:30, 31:n]
    sc = scores[0, 1, 2, keep]
    pr = np.exp(sc - sc.max())
    ref[0, 1, 2] = pr @ v[0, keep, 2] / pr.sum()
    ref_lse[0, 1, 2] = sc.max() + np.log(pr.sum())
    ref[1, 2, 4], ref_lse[1, 2, 4] = 0, np.inf
    out, lse = tilec.flash_attn_combine(o_part, l_part, out_dtype=out_dtype)
    assert out.shape == (b, s, h, d) and lse.shape == (b, s, h)
    assert out.dtype == np.dtype(out_dtype or "float32")
    tol = 1e-3 if out_dtype else 1e-6
    assert rel_err(out, ref) < tol
    np.testing.assert_array_equal(out[1, 2, 4], 0)
    assert lse[1, 2, 4] == np.inf
    fin = np.isfinite(ref_lse)
    assert np.abs(lse[fin] - ref_lse[fin]).max() < 1e-5


@needs_cpu
def test_combine_torch_cpu_into_out():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    o_part = torch.from_numpy(rng.standard_normal((2, 1, 4, 3, 32)).astype(np.float32))
    l_part = torch.from_numpy(rng.standard_normal((2, 1, 4, 3)).astype(np.float32))
    out = torch.full((1, 4, 3, 32), float("nan"))
    res, lse = tilec.flash_attn_combine(o_part, l_part, out=out)
    assert res is out and isinstance(lse, torch.Tensor)
    l64 = l_part.double()
    w = torch.softmax(l64, 0)
    ref = (w[..., None] * o_part.double()).sum(0)
    assert (out.double() - ref).abs().max() < 1e-6
    assert (lse.double() - torch.logsumexp(l64, 0)).abs().max() < 1e-6


# --- num_splits heuristic -------------------------------------------------------


def test_num_splits_heuristic_is_flash_attn_2s_rule():
    # Enough programs to fill 80% of the slots: no split.
    assert num_splits_heuristic(240, 264, 256) == 1
    # batch 1 x 32 heads on 2 x 132 slots, 256 blocks: the best eligible count is 8
    # (97% of a wave); 7 (85%) is the first within 85% of it.
    assert num_splits_heuristic(32, 264, 256) == 7
    # Never more splits than key blocks.
    assert num_splits_heuristic(1, 264, 3) <= 3
    # batch 1 x 8 KV heads (pack-GQA): 33 splits fill one wave exactly.
    s = num_splits_heuristic(8, 264, 256)
    assert 8 * s / 264 / math.ceil(8 * s / 264) >= 0.85


def test_split_rule_balances_blocks_over_the_sms():
    """num_splits_rule (what num_splits=0 uses): 64-key blocks, 132 SMs, two
    resident programs saturate an SM (the d128 GPU tile)."""
    assert residency(64, 64, 2, 128) == (2, 2)
    # batch 1 x 8 KV heads at 32k keys: 32 splits, 256 programs of 16 blocks (2 per SM),
    # where flash_attn 2's rule takes 29 (232 programs: 100 SMs run two, 32 one).
    assert num_splits_rule(8, 512, 132, 2) == 32
    assert num_splits_heuristic(8, 264, 256) == 29
    assert num_splits_rule(32, 512, 132, 2) == 8           # MHA batch 1
    assert num_splits_rule(128, 128, 132, 2) == 2          # batch 16 x 8 KV heads at 8k
    assert num_splits_rule(512, 64, 132, 2) == 1           # batch 64 x 8 at 4k: enough programs
    assert num_splits_rule(1, 3, 132, 2) == 3              # never more splits than blocks
    assert num_splits_rule(1, 1, 132, 2) == 1
    # The chosen count is no worse, in the rule's cost, than any other.
    cdiv = lambda a, b: -(-a // b)
    cost = lambda p, n, s: max(cdiv(p * cdiv(n, cdiv(n, s)), 132), 2) * (cdiv(n, s) + 2)
    for programs, n in ((8, 2048), (3, 700), (40, 100)):
        best = num_splits_rule(programs, n, 132, 2)
        assert all(cost(programs, n, best) <= cost(programs, n, s) for s in range(1, min(128, n) + 1))



def test_split_rule_with_spread_lengths_follows_the_longest():
    """Lengths per sequence (batch > 1, unknown to the host): the rule also
    weighs lengths spread over 0..capacity, where the longest sequences bound
    the time (run 25: batch 16 x 8 KV heads, lengths 1k..32k: 16 splits 30%
    faster than the equal-length choice of 2), and keeps equal lengths within
    the tolerance of their best."""
    from tilec import flash_decode as fd

    cost = lambda p, n, s: fd._uniform_cost(p, n, 132, 2, s, 2)
    for programs, n in ((128, 512), (512, 512), (128, 128), (512, 64), (8, 512), (32, 2048)):
        equal = num_splits_rule(programs, n, 132, 2)
        spread = num_splits_rule(programs, n, 132, 2, spread=True)
        assert cost(programs, n, spread) <= 1.03 * cost(programs, n, equal)
        # More splits for spread lengths, never fewer.
        assert spread >= equal
        # tolerance 1: the equal-length choice.
        assert num_splits_rule(programs, n, 132, 2, spread=True, tolerance=1.0) == equal
    assert num_splits_rule(128, 512, 132, 2) == 2
    assert num_splits_rule(128, 512, 132, 2, spread=True) >= 8      # batch 16 x 8 up to 32k
    assert num_splits_rule(512, 512, 132, 2, spread=True) >= 8      # batch 64 x 8 up to 32k
    # The plan: spread only with a lengths tensor and batch > 1.
    plan = lambda b, per_batch: fd.decode_plan(b, 1, 32, 8, 128, 32768, 0, 0, True, 132, per_batch).num_splits
    assert plan(16, False) == 2 and plan(16, True) >= 8
    assert plan(1, True) == plan(1, False) == 32


def test_split_rule_counts_the_last_wave():
    """A last wave of fewer programs than an SM holds costs nearly a full
    one (session 8 run 3, batch 16 x 8 KV heads at 8k, 64-row tile: 3
    splits = 384 programs on 264 slots, 3,201 GB/s; 2 splits 4,070, 4
    splits 3,932), so neither rule takes such a count when a full one is
    near; the 16-row tile holds 3 programs per SM, so there 3 splits fill
    its waves and 4 do not (3: 4,062, 4: 3,734)."""
    from tilec import flash_decode as fd

    wave = lambda s, r: fd._uniform_cost(128, 128, 132, 2, s, r)
    assert wave(3, 2) > 1.25 * wave(2, 2) and wave(4, 2) < 1.05 * wave(2, 2)
    for spread in (False, True):
        assert num_splits_rule(128, 128, 132, 2, spread=spread, resident=2) != 3
        assert num_splits_rule(128, 128, 132, 3, spread=spread, resident=3) != 4
    # Equal to the old cost when the waves are full.
    assert fd._uniform_cost(8, 512, 132, 2, 32, 2) == 2 * (16 + 2)


def test_small_tile_for_spread_lengths_with_few_pairs():
    """The 16-row tile also for lengths that may differ (a tensor, batch >
    1) with fewer (batch, KV head) pairs than two per SM; the 64-row tile for
    more pairs, equal (int) lengths and batch 1."""
    from tilec import flash_decode as fd

    tile = lambda batch, heads_k, per_batch, heads=32: fd.decode_plan(
        batch, 1, heads, heads_k, 128, 32768, 0, 0, True, 132, per_batch).block_m
    assert tile(16, 8, True) == 16 and tile(16, 8, False) == 64
    assert tile(64, 8, True) == 64 and tile(16, 32, True) == 64
    assert tile(1, 8, True) == 32                        # one sequence: SINGLE_SEQUENCE_TILE
    assert tile(16, 1, True) == 64                       # 32 packed rows do not fit 16


@needs_cpu
@pytest.mark.parametrize("tile,d", [(None, 40), ((64, 32), 12), ((64, 32), 72), ((16, 64), 256), ((64, 32), 4),
                                    ((16, 32), 128)])
def test_combine_kernels_and_tiles(tile, d, monkeypatch):
    """Both combine kernels (COMBINE_TILE None: flash_combine; else
    flash_combine_chunks with its (splits, features) tile), head dims below,
    across and at a multiple of the feature tile, splits past one split tile,
    empty splits and a row no split saw, against float64."""
    from tilec import flash_decode as fd

    monkeypatch.setattr(fd, "COMBINE_TILE", tile)
    rng = np.random.default_rng()
    s, b, n, h = 37, 2, 2, 3
    o_part = rng.standard_normal((s, b, n, h, d)).astype(np.float32)
    l_part = (rng.standard_normal((s, b, n, h)) * 4).astype(np.float32)
    l_part[::5, 0, 1, 1] = -np.inf
    l_part[:, 1, 0, 2] = -np.inf
    w = np.exp(l_part.astype(np.float64) - np.where(np.isfinite(l_part), l_part, -1e30).max(0))
    total = w.sum(0)
    seen = total > 0
    ref = np.einsum("sbnh,sbnhd->bnhd", w, o_part) / np.where(seen, total, 1)[..., None]
    ref_lse = np.where(seen, np.log(np.where(seen, total, 1)) + np.where(np.isfinite(l_part), l_part,
                                                                         -1e30).max(0), np.inf)
    out, lse = tilec.flash_attn_combine(o_part, l_part)
    assert rel_err(out, ref) < 1e-6
    np.testing.assert_array_equal(out[1, 0, 2], 0)
    assert lse[1, 0, 2] == np.inf
    assert np.abs(lse[seen] - ref_lse[seen]).max() < 1e-5

@needs_cpu
def test_combine_of_more_splits_than_one_lse_tile():
    """130 splits (more than two of the combine's 64-split tiles, not a
    multiple of it), some rows with empty splits."""
    rng = np.random.default_rng()
    s, b, n, h, d = 130, 1, 3, 2, 32
    o_part = rng.standard_normal((s, b, n, h, d)).astype(np.float32)
    l_part = (rng.standard_normal((s, b, n, h)) * 3).astype(np.float32)
    l_part[::7, 0, 1, 0] = -np.inf
    l_part[129, 0, 2, 1] = 40.0                   # the largest lse in the last split
    out, lse = tilec.flash_attn_combine(o_part, l_part)
    l64 = l_part.astype(np.float64)
    m = l64.max(0)
    w = np.exp(l64 - m)
    ref = (w[..., None] * o_part).sum(0) / w.sum(0)[..., None]
    assert rel_err(out, ref) < 1e-6
    assert np.abs(lse - (m + np.log(w.sum(0)))).max() < 1e-5


@needs_cpu
@pytest.mark.parametrize("paged", [False, True])
def test_unchecked_bad_values_stay_inside_the_cache(monkeypatch, paged):
    """With the value checks off (the CUDA default), lengths past the
    capacity and page numbers outside the pool are clamped in the kernel: the
    CPU runner, which fails on any access outside a buffer, runs the call,
    and the answer is attention over the clamped keys."""
    from tilec import flash_decode

    monkeypatch.setattr(flash_decode, "CHECK_VALUES", False)
    rng = np.random.default_rng()
    heads, heads_k, d, page = 4, 2, 32, 16
    lens = [40, 64]                                    # both past a 48-key capacity
    cap = 48
    q = f16(rng, 2, 1, heads, d)
    if paged:
        kp, vp = f16(rng, 7, page, heads_k, d), f16(rng, 7, page, heads_k, d)
        table = np.array([[3, 0, 5], [6, 1, 99]], np.int32)   # 99: outside the pool of 7
        lens = [40, 100]
        used = [[3, 0, 5], [6, 1, 6]]                  # 99 reads as the pool's last page
        keys = [np.concatenate([kp[p] for p in used[b]])[:min(n, cap)] for b, n in enumerate(lens)]
        values = [np.concatenate([vp[p] for p in used[b]])[:min(n, cap)] for b, n in enumerate(lens)]
        out = tilec.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=np.array(lens, np.int32),
                                            block_table=table, num_splits=2)
    else:
        kc, vc = f16(rng, 2, cap, heads_k, d), f16(rng, 2, cap, heads_k, d)
        keys = [kc[b, :min(n, cap)] for b, n in enumerate(lens)]
        values = [vc[b, :min(n, cap)] for b, n in enumerate(lens)]
        out = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=np.array(lens, np.int32),
                                            num_splits=2)
    ref, _ = reference(q, keys, values, 1 / math.sqrt(d))
    assert rel_err(out, ref) < REL_TOL


def test_value_checks_are_opt_in_on_cuda(monkeypatch):
    from tilec import flash_decode

    monkeypatch.delenv("TILEC_CHECK_VALUES", raising=False)
    assert flash_decode._check_values(on_gpu=False) and not flash_decode._check_values(on_gpu=True)
    monkeypatch.setenv("TILEC_CHECK_VALUES", "1")
    assert flash_decode._check_values(on_gpu=True)
    monkeypatch.setattr(flash_decode, "CHECK_VALUES", False)
    assert not flash_decode._check_values(on_gpu=False)


# --- argument checks ------------------------------------------------------------


def _small(batch=1, sq=1, h=2, hk=2, d=64, cap=32):
    z = lambda *s: np.zeros(s, np.float16)
    return z(batch, sq, h, d), z(batch, cap, hk, d), z(batch, cap, hk, d)


@pytest.mark.parametrize("kwargs,match,exc", [
    ({"k": np.zeros((1, 1, 2, 64), np.float16)}, "k without v", ValueError),
    ({"softcap": -1.0}, "softcap must be a finite value >= 0", ValueError),
    ({"num_splits": -1}, "num_splits must be an int >= 0", ValueError),
    ({"cache_seqlens": 33}, "exceeds the cache capacity 32", ValueError),
    ({"window_size": (-2, 0)}, "window_size values must be >= -1", ValueError),
    ({"softmax_scale": float("nan")}, "softmax_scale is NaN", ValueError),
    ({"cache_seqlens": np.array([3], np.int64)}, "'cache_seqlens' must be int32", TypeError),
    ({"cache_seqlens": np.array([3, 4], np.int32)}, "has 2 entries, the batch is 1", ValueError),
    ({"alibi_slopes": np.zeros(3, np.float32)}, "'alibi_slopes' has shape", ValueError),
])
def test_bad_arguments_are_refused_before_anything_runs(kwargs, match, exc):
    q, kc, vc = _small()
    with pytest.raises(exc, match=match) as raised:
        tilec.flash_attn_with_kvcache(q, kc, vc, **kwargs)
    assert isinstance(raised.value, tilec.TilecError)  # a RuntimeError, as flash_attn's


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("append", [False, True])
def test_paged_cache_overflow_is_a_runtime_error_naming_block_table(append, device, monkeypatch):
    # upstream's test_flash_attn_kvcache_paged_block_table_bounds: one page of
    # 256, cache_seqlens past it (or at it plus one new key) must raise a
    # RuntimeError matching "block_table"; exactly at capacity must run. On
    # CUDA with flash_decode.CHECK_PAGED_CAPACITY (opt-in: the one read-back
    # flash_attn 2.8 does on its paged path), fast path and general.
    torch = pytest.importorskip("torch")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: the CUDA paged-capacity check needs one (the CPU case runs)")
    from tilec import flash_decode

    monkeypatch.setattr(flash_decode, "CHECK_PAGED_CAPACITY", True)
    z = lambda *s: torch.randn(*s, dtype=torch.float16, device=device)
    q, kc, vc = z(1, 1, 1, 64), z(4, 256, 1, 64), z(4, 256, 1, 64)
    table = torch.zeros(1, 1, dtype=torch.int32, device=device)
    new = dict(k=z(1, 1, 1, 64), v=z(1, 1, 1, 64)) if append else {}
    lens = torch.full((1,), 256 if append else 257, dtype=torch.int32, device=device)
    with pytest.raises(RuntimeError, match="block_table"):
        tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table, **new)
    if device == "cuda":
        q2 = z(1, 2, 1, 64)  # two query tokens: the general path, not the one-token fast path
        new2 = dict(k=z(1, 2, 1, 64), v=z(1, 2, 1, 64)) if append else {}
        with pytest.raises(RuntimeError, match="block_table"):
            tilec.flash_attn_with_kvcache(q2, kc, vc, cache_seqlens=lens - 1 if append else lens,
                                          block_table=table, **new2)
        full = torch.full((1,), 256, dtype=torch.int32, device=device)
        out = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=full, block_table=table)
        assert out.shape == (1, 1, 1, 64) and not out.isnan().any()


def test_unchecked_int_cache_seqlens_past_the_capacity_is_refused(monkeypatch):
    """An int cache_seqlens is known on the host, so it is checked against
    the capacity even with the value checks off (the CUDA default)."""
    from tilec import flash_decode

    monkeypatch.setattr(flash_decode, "CHECK_VALUES", False)
    q, kc, vc = _small()
    with pytest.raises(ValueError, match=r"cache_seqlens\[0\] = 33 plus 0 new keys exceeds the cache capacity 32"):
        tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=33)
    with pytest.raises(ValueError, match=r"cache_seqlens\[0\] = -1 is negative"):
        tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=-1)


def test_gqa_heads_must_divide():
    q, kc, vc = _small(h=3, hk=2)
    with pytest.raises(ValueError, match="3 heads, not a multiple of the cache's 2 KV heads"):
        tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=4)


def test_append_needs_cache_seqlens():
    q, kc, vc = _small()
    k = np.zeros((1, 1, 2, 64), np.float16)
    with pytest.raises(ValueError, match="needs cache_seqlens"):
        tilec.flash_attn_with_kvcache(q, kc, vc, k=k, v=k)


# --- per-batch lengths, appends, paged KV, batch indices, left padding ---------


def paged_pool(rng, keys, values, page, spare=3, share=False, width=None):
    """A pool of pages holding each sequence's keys, in shuffled pages (plus
    spare ones), and its block table; with share, sequence 1 starts with
    sequence 0's first page (a shared prefix)."""
    heads_k, d = keys[0].shape[1:]
    width = width or max(-(-len(k) // page) for k in keys) + 1
    total = len(keys) * width + spare
    perm = rng.permutation(total)
    kp, vp = f16(rng, total, page, heads_k, d), f16(rng, total, page, heads_k, d)
    table = np.zeros((len(keys), width), np.int32)
    for b in range(len(keys)):
        table[b] = perm[b * width:(b + 1) * width]
    if share and len(keys) > 1 and len(keys[0]) >= page and len(keys[1]) >= page:
        table[1, 0] = table[0, 0]
        keys[1][:page], values[1][:page] = keys[0][:page], values[0][:page]
    for b, (k, v) in enumerate(zip(keys, values)):
        for i in range(0, len(k), page):
            kp[table[b, i // page], : len(k[i:i + page])] = k[i:i + page]
            vp[table[b, i // page], : len(v[i:i + page])] = v[i:i + page]
    return kp, vp, table


@needs_cpu
@pytest.mark.parametrize("heads,heads_k", [(4, 4), (8, 2), (4, 1)])
@pytest.mark.parametrize("seqlen_q,causal", [(1, False), (4, True)])
@pytest.mark.parametrize("num_splits", [1, 3, 0])
def test_per_batch_lengths(heads, heads_k, seqlen_q, causal, num_splits):
    rng = np.random.default_rng()
    lens = [1, 17, 300]
    q, kc, vc, keys, values = contiguous_case(rng, 3, seqlen_q, heads, heads_k, 64, lens, 320)
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=np.array(lens, np.int32),
                                             causal=causal, num_splits=num_splits, return_softmax_lse=True)
    check(out, lse, *reference(q, keys, values, 1 / math.sqrt(64), causal))


@needs_cpu
@pytest.mark.parametrize("page", [16, 64])
@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("seqlen_q,causal", [(1, False), (4, True)])
def test_paged_shuffled_block_table(page, num_splits, seqlen_q, causal):
    rng = np.random.default_rng()
    lens = [0, 17, 300, page - 1, page, page + 1]
    heads, heads_k, d = 8, 2, 64
    keys = [f16(rng, n, heads_k, d) for n in lens]
    values = [f16(rng, n, heads_k, d) for n in lens]
    kp, vp, table = paged_pool(rng, keys, values, page, share=True)
    q = f16(rng, len(lens), seqlen_q, heads, d)
    out, lse = tilec.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=np.array(lens, np.int32),
                                             block_table=table, causal=causal, num_splits=num_splits,
                                             return_softmax_lse=True)
    check(out, lse, *reference(q, keys, values, 1 / math.sqrt(d), causal))


@needs_cpu
@pytest.mark.parametrize("paged", [False, True])
def test_append_writes_the_new_keys_and_nothing_else(paged):
    """k/v (3 new tokens) go into the cache at cache_seqlens, in place, before
    attending; every other element of the cache is unchanged."""
    rng = np.random.default_rng()
    lens, new, heads, heads_k, d = [0, 17, 40], 3, 4, 2, 64
    old_k = [f16(rng, n, heads_k, d) for n in lens]
    old_v = [f16(rng, n, heads_k, d) for n in lens]
    kn, vn = f16(rng, 3, new, heads_k, d), f16(rng, 3, new, heads_k, d)
    q = f16(rng, 3, new, heads, d)
    if paged:
        kc, vc, table = paged_pool(rng, [k.copy() for k in old_k], [v.copy() for v in old_v], 16)
    else:
        kc, vc = f16(rng, 3, 64, heads_k, d), f16(rng, 3, 64, heads_k, d)
        for b, n in enumerate(lens):
            kc[b, :n], vc[b, :n] = old_k[b], old_v[b]
        table = None
    kc_before, vc_before = kc.copy(), vc.copy()
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=np.array(lens, np.int32),
                                             block_table=table, causal=True, num_splits=2,
                                             return_softmax_lse=True)
    keys = [np.concatenate([old_k[b], kn[b]]) for b in range(3)]
    values = [np.concatenate([old_v[b], vn[b]]) for b in range(3)]
    check(out, lse, *reference(q, keys, values, 1 / math.sqrt(d), causal=True))
    want_k, want_v = kc_before.copy(), vc_before.copy()
    for b, n in enumerate(lens):
        for i in range(new):
            p = n + i
            slot = (table[b, p // 16], p % 16) if paged else (b, p)
            want_k[slot], want_v[slot] = kn[b, i], vn[b, i]
    np.testing.assert_array_equal(kc, want_k)
    np.testing.assert_array_equal(vc, want_v)


@needs_cpu
def test_cache_batch_idx_and_leftpad():
    """Batch row b reads cache row cache_batch_idx[b], keys cache_leftpad[b] ..
    cache_seqlens[b]; the new key lands at cache_seqlens[b] of that row."""
    rng = np.random.default_rng()
    heads, heads_k, d = 4, 2, 64
    kc, vc = f16(rng, 5, 80, heads_k, d), f16(rng, 5, 80, heads_k, d)
    bidx = np.array([3, 0, 4], np.int32)
    lens = np.array([30, 5, 70], np.int32)
    pad = np.array([4, 0, 69], np.int32)
    kn, vn = f16(rng, 3, 1, heads_k, d), f16(rng, 3, 1, heads_k, d)
    q = f16(rng, 3, 1, heads, d)
    keys = [np.concatenate([kc[bidx[b], pad[b]:lens[b]], kn[b]]) for b in range(3)]
    values = [np.concatenate([vc[bidx[b], pad[b]:lens[b]], vn[b]]) for b in range(3)]
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=lens,
                                             cache_batch_idx=bidx, cache_leftpad=pad, num_splits=3,
                                             return_softmax_lse=True)
    check(out, lse, *reference(q, keys, values, 1 / math.sqrt(d)))
    np.testing.assert_array_equal(kc[bidx, lens], kn[:, 0])


# --- rotary, windows, ALiBi -----------------------------------------------------


@needs_cpu
@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("rotary_dim", [32, 64])
def test_rotary_on_q_and_the_new_keys(interleaved, causal, rotary_dim):
    """q rotated at cache_seqlens + i (causal) or cache_seqlens (not causal),
    the new k at cache_seqlens + i, as flash_attn; the cache holds rotated k."""
    rng = np.random.default_rng()
    heads, heads_k, d, new = 4, 2, 64, 2
    lens = np.array([5, 33], np.int32)
    kc, vc = f16(rng, 2, 48, heads_k, d), f16(rng, 2, 48, heads_k, d)
    kn, vn = f16(rng, 2, new, heads_k, d), f16(rng, 2, new, heads_k, d)
    q = f16(rng, 2, new, heads, d)
    angles = rng.uniform(0, 2 * np.pi, (48, rotary_dim // 2))
    cos, sin = np.cos(angles).astype(np.float16), np.sin(angles).astype(np.float16)
    keys, values, qr = [], [], np.empty_like(q)
    for b in range(2):
        pos = lens[b] + np.arange(new)
        keys.append(np.concatenate([kc[b, :lens[b]], rotate64(kn[b], cos, sin, pos, interleaved)]))
        values.append(np.concatenate([vc[b, :lens[b]], vn[b]]))
        qr[b] = rotate64(q[b], cos, sin, pos if causal else np.full(new, lens[b]), interleaved)
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, rotary_cos=cos, rotary_sin=sin,
                                             cache_seqlens=lens, causal=causal,
                                             rotary_interleaved=interleaved, return_softmax_lse=True)
    # The call rotates q and the new keys in f32 and rounds them to f16, the reference in
    # float64 before rounding: a rotated element may differ by one f16 ulp (2^-11 relative),
    # which moves a score by up to ~1e-4 (measured 1.2e-5 .. 6.6e-5 in lse over reruns).
    check(out, lse, *reference(qr, keys, values, 1 / math.sqrt(d), causal), lse_tol=5e-4)
    for b in range(2):
        rot = keys[b][lens[b]:].astype(np.float64)
        assert np.abs(kc[b, lens[b]:lens[b] + new].astype(np.float64) - rot).max() <= 2e-3 * np.abs(rot).max()


@needs_cpu
def test_rotary_table_length(monkeypatch):
    """The tables need the rows the call reads, no more (upstream's kvcache
    test gives seqlen_k rows): queries that share cache_seqlens' row need
    one, causal queries one each, the new keys one each; fewer is a clear
    error before anything is written."""
    from tilec import flash_decode as fd

    rng = np.random.default_rng()
    n, sq, new = 40, 4, 2
    kc, vc = f16(rng, 1, 64, 2, 64), f16(rng, 1, 64, 2, 64)
    q, kn, vn = f16(rng, 1, sq, 4, 64), f16(rng, 1, new, 2, 64), f16(rng, 1, new, 2, 64)
    angles = rng.uniform(0, 2 * np.pi, (64, 16))
    cos, sin = np.cos(angles).astype(np.float16), np.sin(angles).astype(np.float16)
    call = lambda rows, **kw: tilec.flash_attn_with_kvcache(  # noqa
        q, kc.copy(), vc.copy(), k=kn, v=vn, rotary_cos=cos[:rows], rotary_sin=sin[:rows], cache_seqlens=n, **kw)
    call(n + new)                                   # queries at row n, keys at n, n + 1
    call(n + sq, causal=True)                       # queries at n .. n + 3
    with pytest.raises(tilec.TilecValueError, match="rotary_cos has 43 positions, the call needs 44"):
        call(n + sq - 1, causal=True)
    with pytest.raises(tilec.TilecValueError, match="rotary_cos has 41 positions, the call needs 42"):
        call(n + new - 1)
    # Lengths not read (CUDA's default): still the one row every call reads.
    monkeypatch.setattr(fd, "CHECK_VALUES", False)
    with pytest.raises(tilec.TilecValueError, match="rotary_cos has 0 positions, the call needs 1"):
        tilec.flash_attn_with_kvcache(q, kc, vc, rotary_cos=cos[:0], rotary_sin=sin[:0],
                                      cache_seqlens=np.array([n], np.int32))
    with pytest.raises(tilec.TilecTypeError, match="'rotary_sin' must be a floating-point table"):
        tilec.flash_attn_with_kvcache(q, kc, vc, rotary_cos=cos, rotary_sin=(sin * 100).astype(np.int32),
                                      cache_seqlens=n)


@needs_cpu
def test_rotary_window_right_zero_turns_queries_as_causal():
    """window_size (-1, 0) is causal whatever the flag says (flash_attn sets
    is_causal from the window), so each query turns at its own position,
    as with causal=True; a window bounded on the left too."""
    rng = np.random.default_rng()
    lens = np.array([5, 30], np.int32)
    kc, vc = f16(rng, 2, 48, 2, 64), f16(rng, 2, 48, 2, 64)
    q = f16(rng, 2, 3, 4, 64)
    angles = rng.uniform(0, 2 * np.pi, (48, 16))
    cos, sin = np.cos(angles).astype(np.float16), np.sin(angles).astype(np.float16)
    qr = np.stack([rotate64(q[b], cos, sin, lens[b] + np.arange(3), False) for b in range(2)])
    keys = [kc[b, :lens[b]] for b in range(2)]
    values = [vc[b, :lens[b]] for b in range(2)]
    for kw, window in ((dict(window_size=(-1, 0)), (-1, 0)), (dict(causal=True), (-1, 0)),
                       (dict(window_size=(2, 0)), (2, 0))):
        out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, rotary_cos=cos, rotary_sin=sin, cache_seqlens=lens,
                                                 rotary_interleaved=False, return_softmax_lse=True, **kw)
        check(out, lse, *reference(qr, keys, values, 1 / 8, True, window), lse_tol=5e-4)


@needs_cpu
@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("head_dim,rotary_dim,heads,heads_k", [(64, 64, 4, 2), (128, 32, 6, 3), (72, 48, 40, 1)])
@pytest.mark.parametrize("per_batch,q_step,seqlen_q,seqlen_new", [(True, 1, 3, 3), (False, 0, 2, 1),
                                                                   (True, 1, 1, 4), (True, 0, 2, 0)])
def test_rotary_kernel(interleaved, head_dim, rotary_dim, heads, heads_k, per_batch, q_step, seqlen_q,
                       seqlen_new, monkeypatch):
    """kernels/flash_decode.py rotary against float64: q's token i at n + i·q_step,
    the new k's at n + i, the features past rotary_dim copied exactly, every
    output element written (outputs poisoned with NaN), the inputs untouched;
    odd head counts (a tile of 16 heads and a loop: 40 heads), head dims that
    are not powers of two, seqlen_q != seqlen_new, no new keys."""
    from tilec import flash_decode as fd

    monkeypatch.setattr(fd._Arrays, "empty", lambda self, shape, dtype: np.full(shape, np.nan, dtype))
    rng = np.random.default_rng()
    batch, table = 3, 64
    lens = np.array([0, 17, 40], np.int32)
    q, k = f16(rng, batch, seqlen_q, heads, head_dim), f16(rng, batch, seqlen_new, heads_k, head_dim)
    q0, k0 = q.copy(), k.copy()
    angles = rng.uniform(0, 2 * np.pi, (table, rotary_dim // 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    uniform = 9
    qr, kr = fd._rotary(fd._Arrays(q), False, q, k if seqlen_new else None, cos, sin,
                        lens if per_batch else None, 0 if per_batch else uniform, q_step, interleaved, "float16")
    assert np.array_equal(q, q0) and np.array_equal(k, k0)
    assert (kr is None) == (seqlen_new == 0)
    for b in range(batch):
        n = lens[b] if per_batch else uniform
        want_q = rotate64(q[b], cos, sin, n + q_step * np.arange(seqlen_q), interleaved)
        pairs = [(qr[b], want_q, q[b])]
        if seqlen_new:
            pairs.append((kr[b], rotate64(k[b], cos, sin, n + np.arange(seqlen_new), interleaved), k[b]))
        for got, want, x in pairs:
            assert not np.isnan(got).any()
            # f32 math rounded to f16 against float64 rounded to f16: one ulp apart at most
            # (plus f32's own error where x1·c and x2·s cancel).
            err = np.abs(got.astype(np.float64) - want.astype(np.float64))
            assert (err <= np.abs(want.astype(np.float64)) * 2.0 ** -10 + 1e-6).all(), err.max()
            assert np.array_equal(got[..., rotary_dim:], x[..., rotary_dim:])


@needs_cpu
def test_rotary_kernel_torch_strided_bf16_and_f64_tables():
    """Torch CPU tensors: q a strided slice (heads of a wider tensor), bf16,
    float64 tables (read as f32), NeoX order."""
    torch = pytest.importorskip("torch")
    from tilec import flash_decode as fd

    rng = np.random.default_rng()
    wide = torch.from_numpy(f16(rng, 2, 2, 10, 64)).to(torch.bfloat16)
    q = wide[:, :, 2:7]                                   # 5 heads, strides of the 10-head tensor
    k = torch.from_numpy(f16(rng, 2, 2, 1, 64)).to(torch.bfloat16)
    angles = rng.uniform(0, 2 * np.pi, (32, 16))
    cos, sin = torch.from_numpy(np.cos(angles)), torch.from_numpy(np.sin(angles))
    lens = torch.tensor([3, 11], dtype=torch.int32)
    qr, kr = fd._rotary(fd._Arrays(q), False, q, k, cos, sin, lens, 0, 1, False, "bfloat16")
    for b in range(2):
        pos = lens[b].item() + np.arange(2)
        c, s = np.cos(angles)[pos][:, None, :], np.sin(angles)[pos][:, None, :]
        for got, x in ((qr[b], q[b]), (kr[b], k[b])):
            ref = x.double().numpy().copy()
            x1, x2 = ref[..., :16].copy(), ref[..., 16:32].copy()
            ref[..., :16], ref[..., 16:32] = x1 * c - x2 * s, x1 * s + x2 * c
            err = np.abs(got.double().numpy() - ref)
            assert (err <= np.abs(ref) * 2.0 ** -8 + 1e-6).all(), err.max()   # bf16: half an ulp
            assert torch.equal(got[..., 32:], x[..., 32:])


@needs_cpu
@pytest.mark.parametrize("window,causal", [((40, -1), False), ((10, 0), True), ((30, 5), False)])
def test_windows(window, causal):
    rng = np.random.default_rng()
    lens = [1, 17, 300]
    q, kc, vc, keys, values = contiguous_case(rng, 3, 4, 4, 2, 64, lens, 320)
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=np.array(lens, np.int32),
                                             causal=causal, window_size=window, num_splits=3,
                                             return_softmax_lse=True)
    check(out, lse, *reference(q, keys, values, 1 / math.sqrt(64), causal, window))


@needs_cpu
@pytest.mark.parametrize("per_batch_slopes", [False, True])
@pytest.mark.parametrize("seqlen_q", [1, 2])
def test_alibi(per_batch_slopes, seqlen_q):
    """Slopes (heads,) or (batch, heads); one query token reads them in place
    (the (batch, heads) ones here a strided view), several through rows."""
    rng = np.random.default_rng()
    lens = [17, 300]
    heads = 4
    q, kc, vc, keys, values = contiguous_case(rng, 2, seqlen_q, heads, 2, 64, lens, 320)
    slopes = rng.uniform(0.01, 0.5, (2, heads) if per_batch_slopes else (heads,)).astype(np.float32)
    if per_batch_slopes:
        wide = np.zeros((2, 3 * heads), np.float32)
        wide[:, :heads] = slopes
        slopes = wide[:, :heads]
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=np.array(lens, np.int32),
                                             causal=True, alibi_slopes=slopes, num_splits=2,
                                             return_softmax_lse=True)
    ref = reference(q, keys, values, 1 / math.sqrt(64), True, alibi=np.broadcast_to(slopes, (2, heads)))
    check(out, lse, *ref)


@needs_cpu
def test_softcap_with_alibi():
    rng = np.random.default_rng()
    lens = [17, 300]
    q, kc, vc, keys, values = contiguous_case(rng, 2, 1, 4, 2, 64, lens, 320)
    q = (q * 4).astype(np.float16)  # scores large enough for the cap to bite
    slopes = rng.uniform(0.01, 0.1, (4,)).astype(np.float32)
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=np.array(lens, np.int32),
                                             softcap=5.0, alibi_slopes=slopes, num_splits=3,
                                             return_softmax_lse=True)
    ref = reference(q, keys, values, 1 / math.sqrt(64), alibi=np.broadcast_to(slopes, (2, 4)), softcap=5.0)
    no_cap = reference(q, keys, values, 1 / math.sqrt(64), alibi=np.broadcast_to(slopes, (2, 4)))
    assert rel_err(no_cap[0], ref[0]) > 10 * REL_TOL  # the cap changes the answer
    check(out, lse, *ref)


@needs_cpu
def test_torch_cpu_tensors_and_in_place_append():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    q, kc, vc, keys, values = contiguous_case(rng, 2, 1, 8, 2, 64, [9, 40], 48)
    kn, vn = f16(rng, 2, 1, 2, 64), f16(rng, 2, 1, 2, 64)
    t = torch.from_numpy
    tkc, tvc = t(kc.copy()), t(vc.copy())
    out, lse = tilec.flash_attn_with_kvcache(t(q), tkc, tvc, k=t(kn), v=t(vn),
                                             cache_seqlens=torch.tensor([9, 40], dtype=torch.int32),
                                             return_softmax_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float16
    keys = [np.concatenate([keys[b], kn[b]]) for b in range(2)]
    values = [np.concatenate([values[b], vn[b]]) for b in range(2)]
    check(out.numpy(), lse.numpy(), *reference(q, keys, values, 1 / math.sqrt(64)))
    assert (tkc[1, 40] == t(kn[1, 0])).all() and (tvc[0, 9] == t(vn[0, 0])).all()


@needs_cpu
@pytest.mark.parametrize("case", [
    dict(page=0, lens="tensor", splits=1),
    dict(page=0, lens="tensor", splits=3, heads=32, heads_k=1),    # two 16-row blocks store the same row
    dict(page=16, lens="tensor", splits=0),
    dict(page=16, lens="tensor", splits=5, heads=32, heads_k=1),
    dict(page=0, lens="int", splits=2),
    dict(page=0, lens="tensor", splits=3, batch_idx=True, window=(5, 0)),
    dict(page=0, lens="tensor", splits=2, leftpad=True, causal=True),
    dict(page=16, lens="tensor", splits=3, strided=True),         # new rows not contiguous: copied first
])
def test_fused_append_equals_kv_append(monkeypatch, case):
    """One new token (a decode step): the decode kernel stores its rows into
    the cache itself (FUSED_APPEND, the kernel's APPEND) where kv_append
    used to, before attending. The cache afterwards is the old one plus
    exactly the new rows at cache_seqlens (the last slot and an empty
    sequence included; page boundaries), and outputs and lse are bitwise
    those of the kv_append launch -- with splits (only the programs whose
    keys hold the position store it), several row blocks of one KV head (all
    store the same row), batch indices, left padding and windows."""
    from tilec import flash_decode as fd

    rng = np.random.default_rng()
    heads, heads_k, d = case.get("heads", 8), case.get("heads_k", 2), 64
    page = case["page"]
    lens = [0, 15, 16, 47] if case["lens"] == "tensor" else [30] * 4
    capacity = 48
    batch = len(lens)
    q = f16(rng, batch, 1, heads, d)
    kn, vn = f16(rng, batch, 1, heads_k, d), f16(rng, batch, 1, heads_k, d)
    if case.get("strided"):
        kn, vn = f16(rng, batch, 1, heads_k, 2 * d)[..., ::2], f16(rng, batch, 1, heads_k, 2 * d)[..., 1::2]
    old_k = [f16(rng, n, heads_k, d) for n in lens]
    old_v = [f16(rng, n, heads_k, d) for n in lens]
    if page:
        kc, vc, table = paged_pool(rng, [k.copy() for k in old_k], [v.copy() for v in old_v], page,
                                   width=capacity // page)
    else:
        kc, vc, table = f16(rng, batch + 1, capacity, heads_k, d), f16(rng, batch + 1, capacity, heads_k, d), None
    bidx = np.array([2, 0, 4, 1], np.int32) if case.get("batch_idx") else None
    pad = np.array([0, 3, 0, 10], np.int32) if case.get("leftpad") else None
    if not page:
        for b, n in enumerate(lens):
            row = bidx[b] if bidx is not None else b
            kc[row, :n], vc[row, :n] = old_k[b], old_v[b]
    seqlens = np.array(lens, np.int32) if case["lens"] == "tensor" else lens[0]
    kwargs = dict(k=kn, v=vn, cache_seqlens=seqlens, block_table=table, cache_batch_idx=bidx,
                  cache_leftpad=pad, num_splits=case["splits"], causal=case.get("causal", False),
                  window_size=case.get("window", (-1, -1)), return_softmax_lse=True)
    launched = []
    real = fd._launch
    monkeypatch.setattr(fd, "_launch", lambda kernel, args, grid, on_gpu: (launched.append(kernel.name),
                                                                           real(kernel, args, grid, on_gpu)))
    results = {}
    for fused in (True, False):
        monkeypatch.setattr(fd, "FUSED_APPEND", fused)
        k2, v2 = kc.copy(), vc.copy()
        launched.clear()
        out, lse = tilec.flash_attn_with_kvcache(q, k2, v2, **kwargs)
        assert any(n.startswith("kv_append") for n in launched) == (not fused), launched
        assert any("_append" in n for n in launched if n.startswith("flash_decode")) == fused, launched
        results[fused] = (out, lse, k2, v2)
    for a, b in zip(results[True], results[False]):
        np.testing.assert_array_equal(a, b)
    # The cache: the old contents plus the new row at each sequence's length.
    want_k, want_v = kc.copy(), vc.copy()
    for b, n in enumerate(lens):
        slot = (table[b, n // page], n % page) if page else (bidx[b] if bidx is not None else b, n)
        want_k[slot], want_v[slot] = kn[b, 0], vn[b, 0]
    np.testing.assert_array_equal(results[True][2], want_k)
    np.testing.assert_array_equal(results[True][3], want_v)


@needs_cpu
@pytest.mark.parametrize("paged", [False, True])
def test_gpu_tiles_on_the_cpu(monkeypatch, paged):
    """The GPU's 64-row Q tile (rows of padding past the packed ones) and
    two row blocks (MQA with 32 query heads × 4 tokens = 128 rows)."""
    from tilec import flash_decode

    monkeypatch.setattr(flash_decode, "CPU_BLOCK_M", 64)
    rng = np.random.default_rng()
    lens = [5, 130]
    heads, d = 32, 32
    keys = [f16(rng, n, 1, d) for n in lens]
    values = [f16(rng, n, 1, d) for n in lens]
    q = f16(rng, 2, 4, heads, d)
    if paged:
        kc, vc, table = paged_pool(rng, keys, values, 32)
    else:
        kc, vc, table = f16(rng, 2, 160, 1, d), f16(rng, 2, 160, 1, d), None
        for b, n in enumerate(lens):
            kc[b, :n], vc[b, :n] = keys[b], values[b]
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=np.array(lens, np.int32),
                                             block_table=table, causal=True, num_splits=2,
                                             return_softmax_lse=True)
    check(out, lse, *reference(q, keys, values, 1 / math.sqrt(d), True))


@needs_cpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_cpu_paged_append_rotary_alibi(dtype):
    """The torch code paths of the host side (rotary, paged append, ALiBi
    rows, outputs) on CPU tensors, f16 and bf16: one call with everything."""
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, dtype)
    rng = np.random.default_rng()
    heads, heads_k, d, new, page = 8, 2, 64, 2, 16
    lens = [3, 40]
    as_t = lambda a: torch.from_numpy(a).to(tdt)
    back = lambda t: t.float().numpy().astype(np.float64)
    old_k = [f16(rng, n, heads_k, d) for n in lens]
    old_v = [f16(rng, n, heads_k, d) for n in lens]
    kp, vp, table = paged_pool(rng, [k.copy() for k in old_k], [v.copy() for v in old_v], page)
    tkp, tvp = as_t(kp), as_t(vp)
    kp_before = tkp.clone()
    kn, vn, q = as_t(f16(rng, 2, new, heads_k, d)), as_t(f16(rng, 2, new, heads_k, d)), as_t(f16(rng, 2, new, heads, d))
    angles = rng.uniform(0, 2 * np.pi, (64, 16))
    cos, sin = torch.from_numpy(np.cos(angles)).to(tdt), torch.from_numpy(np.sin(angles)).to(tdt)
    slopes = torch.from_numpy(rng.uniform(0.01, 0.3, heads).astype(np.float32))
    out, lse = tilec.flash_attn_with_kvcache(
        q, tkp, tvp, k=kn, v=vn, rotary_cos=cos, rotary_sin=sin, rotary_interleaved=False,
        cache_seqlens=torch.tensor(lens, dtype=torch.int32), block_table=torch.from_numpy(table),
        causal=True, alibi_slopes=slopes, num_splits=2, return_softmax_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == tdt and lse.dtype == torch.float32
    # Reference from the values as the call saw them (bf16 inputs rounded to bf16).
    rot = lambda x, pos: torch.from_numpy(rotate64(back(x), back(cos), back(sin), pos, False)
                                          .astype(np.float64)).to(tdt)
    qr = torch.stack([rot(q[b], lens[b] + np.arange(new)) for b in range(2)])
    kr = [rot(kn[b], lens[b] + np.arange(new)) for b in range(2)]
    keys = [np.concatenate([back(as_t(old_k[b])), back(kr[b])]) for b in range(2)]
    values = [np.concatenate([back(as_t(old_v[b])), back(vn[b])]) for b in range(2)]
    ref, ref_lse = reference(back(qr), keys, values, 1 / math.sqrt(d), True,
                             alibi=np.broadcast_to(slopes.numpy(), (2, heads)))
    # bf16: P and out rounded to 8 bits, and the rotated q/k (f32 math here,
    # float64 in the reference) may round to neighbouring bf16 values.
    tol, lse_tol = (REL_TOL, 1e-4) if dtype == "float16" else (1e-2, 1e-2)
    assert rel_err(back(out), ref) < tol
    assert np.abs(lse.numpy() - ref_lse).max() < lse_tol
    changed = (tkp != kp_before).any(-1).any(-1).nonzero().tolist()
    slots = {(int(table[b, (n + i) // page]), (n + i) % page) for b, n in enumerate(lens) for i in range(new)}
    assert {tuple(c) for c in changed} <= slots


@needs_cpu
def test_unchecked_values_path(monkeypatch):
    """CHECK_VALUES off (what a serving loop on CUDA sets to save the sync):
    per-batch lengths never reach the host, and the answer is the same."""
    from tilec import flash_decode

    monkeypatch.setattr(flash_decode, "CHECK_VALUES", False)
    rng = np.random.default_rng()
    lens = [1, 17, 300]
    q, kc, vc, keys, values = contiguous_case(rng, 3, 2, 4, 2, 64, lens, 320)
    kn, vn = f16(rng, 3, 2, 2, 64), f16(rng, 3, 2, 2, 64)
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=np.array(lens, np.int32),
                                             causal=True, num_splits=0, return_softmax_lse=True)
    keys = [np.concatenate([keys[b], kn[b]]) for b in range(3)]
    values = [np.concatenate([values[b], vn[b]]) for b in range(3)]
    check(out, lse, *reference(q, keys, values, 1 / math.sqrt(64), True))


# --- GPU code (no GPU needed) ------------------------------------------------------


needs_native = pytest.mark.skipif(not HAVE_NATIVE, reason="the _tilec extension is not built")


@needs_native
@pytest.mark.parametrize("features", [{}, {"paged": True, "causal": True, "per_batch": True},
                                      {"window": True, "alibi": True, "softcap": True, "per_batch": True}])
def test_decode_and_combine_compile_for_the_gpu(features):
    """The GPU plan's kernels (64-row tile, 4 warps, split; pages of 16: the
    16-row tile, one warp) lower to PTX."""
    from tilec import flash_decode as fd

    plan = fd.decode_plan(1, 1, 32, 8, 128, 4096, 16 if features.get("paged") else 0, 0, True, 132)
    tile = (16, 1) if features.get("paged") else (32, 2)    # batch 1: SINGLE_SEQUENCE_TILE
    assert plan.num_splits > 1 and (plan.block_m, plan.num_warps) == tile
    kernel = fd.decode_kernel().specialize(**plan.constexprs("bfloat16", **features))
    assert f".entry {kernel.name}" in kernel.compile("sm_80").ptx
    combine = fd.combine_kernel().specialize(**fd.combine_constexprs("bfloat16", 128))
    assert f".entry {combine.name}" in combine.compile("sm_80").ptx
    append = fd.append_kernel("bfloat16", 128, 8, 16 if features.get("paged") else 0,
                              features.get("per_batch", False), not features.get("paged"))
    assert f".entry {append.name}" in append.compile("sm_80").ptx


@needs_native
@pytest.mark.parametrize("capacity,splits", [(32768, 32), (131072, 33)])
def test_fused_decode_compiles_for_the_gpu_with_vector_merge_loads(capacity, splits, monkeypatch):
    """The fused decode kernel the GPU plan takes at batch 1, GQA 32/8, d128
    (64-row tile, 4 warps; 32 splits: the merge's tiles 32 x 128, the next
    row prefetched; 33 padded to 64, row by row) lowers to PTX, and its merge
    reads each split's partial features in 16-byte loads (its (splits,
    features) tiles keep the summed splits axis inside the warps). Before
    session 11 the merge read (features, splits) tiles 4 bytes a split
    stride apart: no ld.global.v4 at all (the decode loop copies K/V with
    cp.async), and the fused call was slower than two kernels."""
    from tilec import flash_decode as fd

    monkeypatch.setattr(fd, "FUSED_COMBINE", True)
    monkeypatch.setattr(fd, "_FUSED_MAX_SPLITS", 64)  # the rule keeps these on two kernels
    monkeypatch.setattr(fd, "SINGLE_SEQUENCE_TILE", None)  # the 64-row tile's merge layout
    plan = fd.decode_plan(1, 1, 32, 8, 128, capacity, 0, 0, True, 132, True)
    assert (plan.num_splits, plan.block_m, plan.num_warps, plan.fused) == (splits, 64, 4, True)
    kernel = fd.decode_kernel().specialize(**plan.constexprs("bfloat16", per_batch=True))
    ptx = kernel.compile("sm_80").ptx
    # 32 x 128 f32 over 128 threads: 8 vectors a thread per row (in the
    # in-bounds version and again in the guarded one); 64 x 128: 16.
    assert ptx.count("ld.global.v4.b32") > 8 * plan.merge_splits // 32, ptx.count("ld.global.v4.b32")


def test_gpu_plans_fuse_the_combine_at_few_splits():
    """The default GPU rule (H200, session 11 run 12): split calls of at
    most _FUSED_MAX_SPLITS splits merge in the decode kernel (GQA 32/8 b16
    8k: 3 splits, MHA b1 32k: 8), GQA b1 32k (32 splits) keeps the combine
    kernel, where the fused merge measured slower; the CPU runner always
    fuses."""
    from tilec import flash_decode as fd

    def plan(batch, heads_k, kv, on_gpu=True):
        return fd.decode_plan(batch, 1, 32, heads_k, 128, kv, 0, 0, on_gpu, 132, True)
    assert fd.FUSED_COMBINE and fd._FUSED_MAX_SPLITS == 16
    assert (plan(16, 8, 8192).num_splits, plan(16, 8, 8192).fused) == (3, True)
    assert (plan(1, 32, 32768).num_splits, plan(1, 32, 32768).fused) == (8, True)
    assert (plan(1, 8, 32768).num_splits, plan(1, 8, 32768).fused) == (32, False)
    assert plan(1, 8, 32768, on_gpu=False).fused or plan(1, 8, 32768, on_gpu=False).num_splits == 1


def _sync_sequence(ptx):
    """The PTX's cp.async commits (C), waits (W<n>) and barriers (B), in order."""
    import re

    return "".join("C" if m.group(1) else "B" if m.group(2) else f"W{m.group(3)}"
                   for m in re.finditer(r"(cp\.async\.commit_group)|(bar\.sync)|cp\.async\.wait_group\s+(\d+)", ptx))


@needs_native
@pytest.mark.parametrize("features", [{}, {"paged": True, "causal": True, "per_batch": True},
                                      {"window": True, "alibi": True, "softcap": True, "per_batch": True}])
def test_gpu_plan_refills_before_it_waits(features, monkeypatch):
    """GPU plans take EARLY_REFILL: each loop iteration issues the next
    block's copies behind a barrier, commits them as one group and only then
    waits for the current block with that group in flight (C W1 B); with
    EARLY_REFILL off every loop waits for everything before its refills
    (W0 B, then one commit per tile), and the CPU plan never asks for it."""
    from tilec import flash_decode as fd

    page = 16 if features.get("paged") else 0
    schedules = {}
    for early in (True, False):
        monkeypatch.setattr(fd, "EARLY_REFILL", early)
        plan = fd.decode_plan(1, 1, 32, 8, 128, 4096, page, 0, True, 132)
        assert plan.early_refill is early
        kernel = fd.decode_kernel().specialize(**plan.constexprs("bfloat16", **features))
        assert kernel.name.endswith("r", 0, kernel.name.index("_q")) is early
        schedules[early] = _sync_sequence(kernel.compile("sm_80").ptx)
    # (LLVM may rotate a loop: its top barrier then ends the body in the text.)
    assert "CW1B" in schedules[True], schedules[True]
    assert "W1" not in schedules[False] and "W0B" + "C" * (8 if page else 2) in schedules[False], schedules[False]
    assert not fd.decode_plan(1, 1, 32, 8, 128, 4096, page, 0, False, 132).early_refill


def test_early_refill_knob_is_checked():
    """@tilec.jit(early_refill=) takes a bool or the name of a constexpr."""
    import tilec

    with pytest.raises(TypeError, match="early_refill"):
        tilec.jit(lambda: None, grid=(1, 1, 1), early_refill=3)


@needs_cpu
@pytest.mark.parametrize("num_splits", [1, 2])
def test_paged_table_exactly_as_wide_as_needed(num_splits):
    """The K/V loop prefetches one block ahead, through the block table: the
    prefetch past a sequence's last page must not read past the table (the
    CPU runner reports a read outside a buffer as an error)."""
    rng = np.random.default_rng()
    lens, page = [64, 128], 64
    keys = [f16(rng, n, 2, 64) for n in lens]
    values = [f16(rng, n, 2, 64) for n in lens]
    kp, vp, table = paged_pool(rng, keys, values, page, width=2)
    assert table.shape == (2, 2)
    q = f16(rng, 2, 1, 4, 64)
    out, lse = tilec.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=np.array(lens, np.int32),
                                             block_table=table, num_splits=num_splits,
                                             return_softmax_lse=True)
    check(out, lse, *reference(q, keys, values, 1 / math.sqrt(64)))


def test_cache_with_strided_last_dimension_is_refused_before_the_append():
    q, kc, vc = _small()
    k = np.ones((1, 1, 2, 64), np.float16)
    wide = np.zeros((1, 32, 2, 128), np.float16)
    kc_strided = wide[..., ::2]
    with pytest.raises(ValueError, match="'k_cache' must be contiguous in its last dimension"):
        tilec.flash_attn_with_kvcache(q, kc_strided, vc, k=k, v=k, cache_seqlens=3)
    assert not wide.any()      # nothing was written


@needs_cpu
def test_query_with_strided_last_dimension():
    rng = np.random.default_rng()
    q, kc, vc, keys, values = contiguous_case(rng, 2, 1, 4, 2, 64, [9, 30], 32)
    q_strided = np.repeat(q, 2, axis=-1)[..., ::2]
    out = tilec.flash_attn_with_kvcache(q_strided, kc, vc, cache_seqlens=np.array([9, 30], np.int32))
    ref, _ = reference(q, keys, values, 1 / math.sqrt(64))
    assert rel_err(out, ref) < REL_TOL


@needs_cpu
def test_strided_block_table_and_lengths():
    """A block table and cache_seqlens that are strided views (every other
    column / entry of a wider array): the kernel reads them with unit
    stride, so the call copies them."""
    rng = np.random.default_rng()
    lens, page, heads_k, d = [20, 50], 16, 2, 32
    keys = [f16(rng, n, heads_k, d) for n in lens]
    values = [f16(rng, n, heads_k, d) for n in lens]
    kp, vp, table = paged_pool(rng, keys, values, page)
    wide = np.full((2, 2 * table.shape[1]), 10**6, np.int32)
    wide[:, ::2] = table
    lens_wide = np.array([lens[0], -1, lens[1], -1], np.int32)
    q = f16(rng, 2, 1, 4, d)
    out = tilec.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens_wide[::2], block_table=wide[:, ::2],
                                        num_splits=2)
    assert rel_err(out, reference(q, keys, values, 1 / math.sqrt(d))[0]) < REL_TOL


# --- the GPU fast path (no GPU needed: tensors posing as CUDA, launches caught) ---


def _feature_cases():
    """test_flash_decode_native.py's ALiBi / batch index / left padding cases (empty without torch)."""
    try:
        from test_flash_decode_native import FEATURE_CASES
    except pytest.skip.Exception:
        return []
    return FEATURE_CASES


def _posing_as_cuda(torch):
    from test_flash_decode_native import _posing_as_cuda as posing   # one posing class for all tests

    return posing


@pytest.mark.parametrize("case", [
    dict(batch=1, heads=32, heads_k=8, cap=4096, page=0, lens="tensor"),      # GQA, splits
    dict(batch=3, heads=8, heads_k=8, cap=640, page=16, lens="tensor"),       # MHA, pages of 16
    dict(batch=64, heads=8, heads_k=1, cap=256, page=256, lens="int"),        # MQA, one split
    dict(batch=2, heads=4, heads_k=2, cap=300, page=0, lens=None, window=(40, 0), softcap=5.0,
         num_splits=3, causal=True, scale=0.3),
    dict(batch=3, heads=8, heads_k=2, cap=640, page=16, lens="tensor", new=2),   # appends (kv_append)
    dict(batch=2, heads=8, heads_k=8, cap=300, page=0, lens="int", new=1),
    # seqlen_q > 1 (speculative decoding, chunked prefill): q and out through (b, h, s, d) copies.
    dict(batch=2, heads=8, heads_k=2, cap=300, page=0, lens="tensor", seqlen_q=4, causal=True),
    dict(batch=3, heads=8, heads_k=8, cap=640, page=16, lens="tensor", seqlen_q=3, new=3, causal=True),
    dict(batch=1, heads=32, heads_k=8, cap=4096, page=0, lens="tensor", seqlen_q=2, new=1, causal=True),
    dict(batch=2, heads=4, heads_k=1, cap=300, page=0, lens="int", seqlen_q=5, window=(40, 0), num_splits=3),
    # rotary: the rotary kernel first, then the same launches on its outputs.
    dict(batch=2, heads=8, heads_k=2, cap=300, page=0, lens="tensor", new=1, rotary=(64, True)),
    dict(batch=3, heads=8, heads_k=2, cap=640, page=16, lens="int", new=2, rotary=(32, False)),
    dict(batch=2, heads=4, heads_k=4, cap=300, page=0, lens="tensor", rotary=(16, False)),
    dict(batch=2, heads=8, heads_k=2, cap=300, page=0, lens="tensor", seqlen_q=3, new=3, causal=True,
         rotary=(48, True)),
    # ALiBi (one token: the slopes in place; several: a row per packed row), batch index, left padding.
    *_feature_cases(),
])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "combine-kernel"])
def test_gpu_fast_path_launches_what_the_general_path_does(monkeypatch, case, fused):
    """The O(1) path of a serving call hands the kernels the same scalars,
    strides, grids and inputs as the general path (whose numerics the CPU
    tests check), for contiguous and paged caches, GQA/MHA/MQA, split and
    not, windows and softcap, one query token or several."""
    torch = pytest.importorskip("torch")
    import sys

    from tilec import flash_decode as fd, runtime

    jit = sys.modules["tilec.jit"]      # the module (tilec.jit is also the decorator)

    cuda = _posing_as_cuda(torch)
    b, h, hk, cap, page = case["batch"], case["heads"], case["heads_k"], case["cap"], case["page"]
    sq = case.get("seqlen_q", 1)
    q = cuda(torch.randn(b, sq, h, 64, dtype=torch.float16))
    table = None
    if page:
        width = -(-cap // page)
        k = cuda(torch.randn(b * width + 1, page, hk, 64, dtype=torch.float16))
        table = cuda(torch.randperm(b * width).view(b, width).to(torch.int32))
    else:
        k = cuda(torch.randn(b + 1, cap, hk, 64, dtype=torch.float16))
    v = cuda(torch.randn_like(k))
    lens = {"tensor": cuda(torch.full((b,), cap - 3, dtype=torch.int32)), "int": cap - 5, None: None}[case["lens"]]
    new = case.get("new", 0)
    kn = cuda(torch.randn(b, new, hk, 64, dtype=torch.float16)) if new else None
    vn = cuda(torch.randn(b, new, hk, 64, dtype=torch.float16)) if new else None
    kwargs = dict(k=kn, v=vn, cache_seqlens=lens, block_table=table, window_size=case.get("window", (-1, -1)),
                  softcap=case.get("softcap", 0.0), num_splits=case.get("num_splits", 0),
                  causal=case.get("causal", False), softmax_scale=case.get("scale"))
    if case.get("alibi"):
        kwargs["alibi_slopes"] = cuda(torch.rand(*((h,) if case["alibi"] == "heads" else (b, h))) * 0.5)
    if case.get("batch_idx"):
        kwargs["cache_batch_idx"] = cuda(torch.arange(b, 0, -1, dtype=torch.int32))
    if case.get("leftpad"):
        kwargs["cache_leftpad"] = cuda(torch.arange(b, dtype=torch.int32) * 3)
    if "rotary" in case:
        rd, interleaved = case["rotary"]
        angles = torch.rand(cap + 8, rd // 2) * 6.28
        kwargs.update(rotary_cos=cuda(angles.cos()), rotary_sin=cuda(angles.sin()), rotary_interleaved=interleaved)

    caught = []
    monkeypatch.setattr(jit.Kernel, "launcher", lambda self, arch=None, device=None: self.name)
    monkeypatch.setattr(runtime, "launch_on", lambda device, launch, args, stream, grid=None:
                        caught.append((launch, args, tuple(grid))))
    monkeypatch.setattr(runtime, "_raw_stream", lambda index: 0)
    monkeypatch.setattr(fd, "_FAST_PLANS", None)
    monkeypatch.setattr(fd, "_COUNTERS", {})
    monkeypatch.setattr(fd, "FUSED_COMBINE", fused)
    # With CHECK_PAGED_CAPACITY paged calls read max(cache_seqlens) back
    # unless a graph is being captured, which the posing tensors cannot ask CUDA.
    monkeypatch.setattr(fd, "CHECK_PAGED_CAPACITY", True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    out = tilec.flash_attn_with_kvcache(q, k, v, **kwargs)
    fast = caught[:]
    assert fast and out.shape == (b, sq, h, 64)

    general = []
    monkeypatch.setattr(fd, "_gpu_fast_path", lambda *a, **kw: None)
    monkeypatch.setattr(fd._Arrays, "empty",
                        lambda self, shape, dtype: cuda(torch.empty(shape, dtype=getattr(torch, dtype))))
    monkeypatch.setattr(fd._Arrays, "zeros", lambda self, shape, dtype: torch.zeros(shape, dtype=getattr(torch, dtype)))
    monkeypatch.setattr(fd, "_dummies", {})
    monkeypatch.setattr(fd, "_launch", lambda kernel, args, grid, on_gpu: general.append((kernel.name, args, tuple(grid))))
    tilec.flash_attn_with_kvcache(q, k, v, **kwargs)
    assert [(name, grid) for name, _, grid in fast] == [(name, grid) for name, _, grid in general]
    pointers = {"flash_decode": 15, "flash_combine": 4, "kv_append": 7, "rotary": 7}
    rotated = None
    if "rotary" in case:      # each path's q and new k from here on: its rotary launch's outputs
        assert fast[0][0].startswith("rotary")
        fa, ga = fast[0][1], general[0][1]
        for i in (0, 4, 5) + ((6,) if case["lens"] == "tensor" else ()):
            assert fa[i].data_ptr() == ga[i].data_ptr(), i       # q, cos, sin, cache_seqlens
        if new:
            assert fa[1].data_ptr() == ga[1].data_ptr() == kn.data_ptr()
        rotated = [(a[2], a[3]) for a in (fa, ga)]
    for (name, fa, _), (_, ga, _) in zip(fast, general):
        n = next(v for p, v in pointers.items() if name.startswith(p))
        assert fa[n:] == ga[n:], name                   # every scalar and stride
        if name.startswith("flash_decode"):
            for i in (1, 2) + ((5,) if case["lens"] == "tensor" else ()) + ((6,) if page else ()) \
                    + ((7,) if case.get("batch_idx") else ()) + ((8,) if case.get("leftpad") else ()):
                assert fa[i].data_ptr() == ga[i].data_ptr(), (name, i)
            if case.get("alibi") and sq == 1:     # the slopes, read in place
                assert fa[9].data_ptr() == ga[9].data_ptr() == kwargs["alibi_slopes"].data_ptr()
            elif case.get("alibi"):
                assert torch.equal(fa[9], ga[9])
            if rotated and sq == 1:
                assert (fa[0].data_ptr(), ga[0].data_ptr()) == tuple(r[0].data_ptr() for r in rotated)
            elif sq == 1:
                assert fa[0].data_ptr() == ga[0].data_ptr() == q.data_ptr()   # q's own rows
            elif rotated:             # (b, h, s, d) copies of the rotary outputs (not run here)
                assert fa[0].shape == ga[0].shape and fa[0].stride() == ga[0].stride()
            else:
                assert torch.equal(fa[0], ga[0])      # both (b, h, s, d) copies of q
            if "_fused" in name:      # the same counters (per device and stream)
                assert fa[12].data_ptr() == ga[12].data_ptr() == fd._COUNTERS[(0, 0)].data_ptr()
            if "_append" in name:     # one new token, stored by the decode kernel (APPEND)
                knew = [r[1].data_ptr() for r in rotated] if rotated else [kn.data_ptr()] * 2
                assert (fa[13].data_ptr(), fa[14].data_ptr()) == (knew[0], vn.data_ptr())
                assert (ga[13].data_ptr(), ga[14].data_ptr()) == (knew[1], vn.data_ptr())
        if name.startswith("kv_append"):
            for i in (1, 2, 3) + ((4,) if case["lens"] == "tensor" else ()) + ((5,) if page else ()) \
                    + ((6,) if case.get("batch_idx") else ()):
                assert fa[i].data_ptr() == ga[i].data_ptr(), (name, i)
            knew = [r[1].data_ptr() for r in rotated] if rotated else [kn.data_ptr()] * 2
            assert (fa[0].data_ptr(), ga[0].data_ptr()) == tuple(knew)
    # One new token is appended by the decode kernel (FUSED_APPEND), more by kv_append.
    assert any(name.startswith("kv_append") for name, _, _ in fast) == (new > 1)
    assert any("_append" in name for name, _, _ in fast if name.startswith("flash_decode")) == (new == 1)
    # Split calls merge in the decode kernel with FUSED_COMBINE (no combine
    # launch) up to _FUSED_MAX_SPLITS splits, else in the combine kernel.
    # With several query tokens the merge's round trips (packed rows x
    # feature chunks, _FUSED_MAX_TRIPS) decide too: then only one of the two.
    splits = next(g for name, _, g in fast if name.startswith("flash_decode"))[0]
    merged = any("_fused" in name for name, _, _ in fast)
    if sq == 1:
        assert merged == (fused and 1 < splits <= fd._FUSED_MAX_SPLITS)
    assert any(name.startswith("flash_combine") for name, _, _ in fast) == (splits > 1 and not merged)


# --- speculative decoding / chunked prefill: seqlen_q > 1 with every variant ----


VARIANTS = {
    "causal": dict(causal=True),
    "window": dict(window_size=(20, 3)),
    "causal_window": dict(causal=True, window_size=(12, -1)),
    "softcap": dict(causal=True, softcap=4.0),
    "alibi": dict(causal=True, alibi=True),
    "all": dict(causal=True, window_size=(30, -1), softcap=6.0, alibi=True),
}


@needs_cpu
@pytest.mark.parametrize("seqlen_q", [1, 2, 5, 8])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_speculative_tokens_appended_and_attended(seqlen_q, variant):
    """seqlen_q draft tokens appended to a paged cache (pages of 16,
    shuffled, one shared between two sequences) and attended with causal,
    windows, softcap, ALiBi and their mix, GQA 8/2, the cache lengths 0, 1,
    page − 1, page, page + 1 and 300, splits chosen by the rule."""
    rng = np.random.default_rng()
    opts = dict(VARIANTS[variant])
    heads, heads_k, d, page = 8, 2, 32, 16
    lens = [0, 1, page - 1, page, page + 1, 300]
    old_k = [f16(rng, n, heads_k, d) for n in lens]
    old_v = [f16(rng, n, heads_k, d) for n in lens]
    b = len(lens)
    kn, vn = f16(rng, b, seqlen_q, heads_k, d), f16(rng, b, seqlen_q, heads_k, d)
    keys = [np.concatenate([old_k[i], kn[i]]) for i in range(b)]
    values = [np.concatenate([old_v[i], vn[i]]) for i in range(b)]
    # The pool holds the old keys (the shared first page of sequences 3 and 4,
    # both at least a page long, is the same memory).
    kp, vp, table = paged_pool(rng, [k.copy() for k in old_k], [v.copy() for v in old_v], page,
                               width=-(-(300 + seqlen_q) // page) + 1)
    table[4, 0] = table[3, 0]
    for src, dst in ((old_k, keys), (old_v, values)):
        dst[4][:page] = src[3][:page]
    q = f16(rng, b, seqlen_q, heads, d)
    if opts.get("softcap"):
        q = (q * 3).astype(np.float16)
    slopes = rng.uniform(0.02, 0.3, heads).astype(np.float32) if opts.pop("alibi", False) else None
    out, lse = tilec.flash_attn_with_kvcache(q, kp, vp, k=kn, v=vn, cache_seqlens=np.array(lens, np.int32),
                                             block_table=table, alibi_slopes=slopes, return_softmax_lse=True,
                                             **opts)
    ref = reference(q, keys, values, 1 / math.sqrt(d), opts.get("causal", False), opts.get("window_size", (-1, -1)),
                    None if slopes is None else np.broadcast_to(slopes, (b, heads)), opts.get("softcap", 0.0))
    check(out, lse, *ref)


@needs_cpu
@pytest.mark.parametrize("heads,heads_k", [(4, 4), (8, 2), (16, 2), (32, 1)])
def test_gqa_ratios_with_draft_tokens(heads, heads_k):
    """GQA ratios 1, 4, 8 and 32 with 3 causal query tokens (32 × 3 = 96
    packed rows: two row blocks of the GPU's 64-row tile), paged, split."""
    from tilec import flash_decode

    rng = np.random.default_rng()
    d, page, lens = 32, 16, [5, 70]
    keys = [f16(rng, n, heads_k, d) for n in lens]
    values = [f16(rng, n, heads_k, d) for n in lens]
    kp, vp, table = paged_pool(rng, keys, values, page)
    q = f16(rng, 2, 3, heads, d)
    for block_m in (None, 64):
        flash_decode.CPU_BLOCK_M = block_m
        try:
            out, lse = tilec.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=np.array(lens, np.int32),
                                                     block_table=table, causal=True, num_splits=3,
                                                     return_softmax_lse=True)
        finally:
            flash_decode.CPU_BLOCK_M = None
        check(out, lse, *reference(q, keys, values, 1 / math.sqrt(d), True))




def test_paged_tile_for_small_pages():
    """PAGED_TILE (16 rows, one warp) on pages smaller than GPU_TILE's key
    block when the packed rows fit 16; GPU_TILE otherwise; the split rule
    counts its three programs per SM (48 splits for 8 KV heads at 32k)."""
    from tilec import flash_decode as fd

    plan = lambda heads, heads_k, seqlen_q, page: fd.decode_plan(1, seqlen_q, heads, heads_k, 128, 32768, page,
                                                                 0, True, 132)
    assert fd.residency(16, 64, 2, 128) == (3, 3) and fd.residency(64, 64, 2, 128) == (2, 2)
    p = plan(32, 8, 1, 16)
    assert (p.block_m, p.block_n, p.num_warps, p.page_block) == (16, 64, 1, 16)
    assert 44 <= p.num_splits <= 49                      # 3 programs per SM, not 2
    assert plan(32, 8, 1, 32).block_m == 16
    # Pages of a key block or more: GPU_TILE's choice, which batch 1 turns
    # into SINGLE_SEQUENCE_TILE (2..32 packed rows).
    assert plan(32, 8, 1, 64).block_m == 32 and plan(32, 8, 1, 256).block_m == 32 and plan(32, 8, 1, 0).block_m == 32
    assert plan(32, 1, 1, 16).block_m == 32                # 32 packed rows: not PAGED_TILE
    assert plan(32, 8, 4, 16).block_m == 16 and plan(32, 8, 5, 16).block_m == 32   # 20 rows
    assert plan(32, 8, 9, 16).block_m == 64                # 36 rows

def test_single_sequence_tile():
    """Batch 1 with 2..32 packed rows, where GPU_TILE would run: the 32-row
    tile over 2 warps, at GPU_TILE's split count (two programs per SM: the
    residency rule's third measured slower); one row (MHA), more rows, more
    sequences, small pages and wide heads keep their tiles."""
    from tilec import flash_decode as fd

    def plan(batch, heads, heads_k, seqlen_q=1, capacity=32768, page=0, d=128):
        return fd.decode_plan(batch, seqlen_q, heads, heads_k, d, capacity, page, 0, True, 132, True)
    for capacity in (2048, 32768, 131072):
        p = plan(1, 32, 8, capacity=capacity)
        assert (p.block_m, p.block_n, p.num_warps) == (32, 64, 2)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(fd, "SINGLE_SEQUENCE_TILE", None)
            assert fd.decode_plan(1, 1, 32, 8, 128, capacity, 0, 0, True, 132, True).num_splits == p.num_splits
    assert plan(1, 32, 1).block_m == 32 and plan(1, 16, 8).block_m == 32 and plan(1, 32, 8, seqlen_q=4).block_m == 32
    assert plan(1, 32, 32).block_m == 64                 # one row per KV head: GPU_TILE
    assert plan(1, 32, 8, seqlen_q=5).block_m == 32      # 20 rows
    assert plan(1, 32, 8, seqlen_q=9).block_m == 64      # 36 rows
    assert plan(2, 32, 8).block_m == 16 and plan(16, 32, 8).block_m == 16   # spread: PAGED_TILE
    assert plan(1, 32, 8, page=16).block_m == 16         # small pages: PAGED_TILE
    assert plan(1, 32, 8, d=256).block_m == 64           # wide heads: WIDE_GPU_TILE


def test_wide_tile_over_head_dim_128():
    """Head dims over 128 take WIDE_GPU_TILE (32-key blocks: the 64-key ring
    held one program per SM at d256, 2,333 GB/s at b16 GQA 8k on the H200
    against 4,095 with it), pages or not; 128 and under keep their tiles."""
    from tilec import flash_decode as fd

    def plan(d, page=0, batch=16, per_batch=False):
        return fd.decode_plan(batch, 1, 32, 8, d, 8192, page, 0, True, 132, per_batch=per_batch)
    for d in (160, 192, 256):
        for page, per_batch in ((0, False), (16, False), (0, True)):
            p = plan(d, page, per_batch=per_batch)
            assert (p.block_m, p.block_n, p.num_stages) == fd.WIDE_GPU_TILE == (64, 32, 2), (d, page)
    assert (plan(128).block_m, plan(128).block_n) == (64, 64)
    assert plan(128, 16, batch=1).block_m == 16                 # PAGED_TILE as before
    assert fd.residency(64, 32, 2, 256)[0] == 2 and fd.residency(64, 64, 2, 256)[0] == 1


@needs_cpu
@pytest.mark.parametrize("tile,page,nsub", [((64, 128, 1), 16, 8), ((16, 128, 2), 32, 4), ((32, 64, 2), 16, 4)])
def test_gpu_tiles_with_pages(monkeypatch, tile, page, nsub):
    """Other GPU tiles (bench/tune_decode.py --tiles) on pages: 128-key
    blocks of eight 16-key page sub-tiles (or four of 32), one stage or two,
    lengths at and around page and block edges, split and not."""
    from tilec import flash_decode

    monkeypatch.setattr(flash_decode, "GPU_TILE", tile)
    monkeypatch.setattr(flash_decode, "PAGED_TILE", None)
    plan = flash_decode.decode_plan(3, 1, 8, 2, 32, 512, page, 0, False, 132)
    assert (plan.block_n, plan.block_n // plan.page_block, plan.num_stages) == (tile[1], nsub, tile[2])
    rng = np.random.default_rng()
    lens = [page - 1, 129, 300]
    keys = [f16(rng, n, 2, 32) for n in lens]
    values = [f16(rng, n, 2, 32) for n in lens]
    kp, vp, table = paged_pool(rng, keys, values, page)
    q = f16(rng, 3, 1, 8, 32)
    for splits in (1, 3):
        out, lse = tilec.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=np.array(lens, np.int32),
                                                 block_table=table, num_splits=splits, return_softmax_lse=True)
        check(out, lse, *reference(q, keys, values, 1 / math.sqrt(32)))


@needs_cpu
@pytest.mark.parametrize("chunks", ["length", "capacity"])
@pytest.mark.parametrize("paged", [False, True])
def test_split_chunks_of_mixed_lengths(monkeypatch, chunks, paged):
    """SPLIT_CHUNKS: each sequence's keys cut into num_splits ranges of its
    own length, or of the capacity (short sequences in fewer programs, the
    others empty), lengths 0 .. capacity in one batch, causal draft tokens."""
    from tilec import flash_decode

    monkeypatch.setattr(flash_decode, "SPLIT_CHUNKS", chunks)
    rng = np.random.default_rng()
    lens, d = [0, 3, 64, 65, 200, 450], 32
    if chunks == "capacity":
        assert flash_decode.decode_plan(6, 2, 8, 2, d, 512, 0, 5, False, 132, True).chunks == "capacity"
    keys = [f16(rng, n, 2, d) for n in lens]
    values = [f16(rng, n, 2, d) for n in lens]
    if paged:
        kc, vc, table = paged_pool(rng, keys, values, 32, width=16)
    else:
        kc, vc, table = f16(rng, 6, 512, 2, d), f16(rng, 6, 512, 2, d), None
        for b, n in enumerate(lens):
            kc[b, :n], vc[b, :n] = keys[b], values[b]
    q = f16(rng, 6, 2, 8, d)
    for splits in (0, 5, 16):
        out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=np.array(lens, np.int32),
                                                 block_table=table, causal=True, num_splits=splits,
                                                 return_softmax_lse=True)
        check(out, lse, *reference(q, keys, values, 1 / math.sqrt(d), True))

@needs_cpu
@pytest.mark.parametrize("num_splits", [1, 2, 7, 40, 128])
def test_split_counts_one_to_many(num_splits):
    """1 … 128 splits of 300 keys (5 blocks: from 6 splits on, some see
    nothing), GQA 4/1, two causal tokens."""
    rng = np.random.default_rng()
    q, kc, vc, keys, values = contiguous_case(rng, 2, 2, 4, 1, 32, [300, 64], 320)
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=np.array([300, 64], np.int32),
                                             causal=True, num_splits=num_splits, return_softmax_lse=True)
    check(out, lse, *reference(q, keys, values, 1 / math.sqrt(32), True))


@needs_cpu
@pytest.mark.parametrize("page", [0, 16, 48])
def test_long_cache_32k_plus_17(page):
    """A cache of 32k + 17 keys (the issue's longest length), contiguous and
    in shuffled pages of 16 and 48 (16-row sub-tiles; a 64-key block's four
    straddle two pages of 48), with
    one appended token; the rule's split count and a fixed one."""
    rng = np.random.default_rng()
    n, heads, heads_k, d = 32768 + 17, 4, 1, 16
    old_k, old_v = f16(rng, n, heads_k, d), f16(rng, n, heads_k, d)
    kn, vn = f16(rng, 1, 1, heads_k, d), f16(rng, 1, 1, heads_k, d)
    keys, values = [np.concatenate([old_k, kn[0]])], [np.concatenate([old_v, vn[0]])]
    if page:
        kc, vc, table = paged_pool(rng, [old_k.copy()], [old_v.copy()], page)
    else:
        kc, vc, table = f16(rng, 1, n + 5, heads_k, d), f16(rng, 1, n + 5, heads_k, d), None
        kc[0, :n], vc[0, :n] = old_k, old_v
    q = f16(rng, 1, 1, heads, d)
    for splits in (0, 5):
        kc2, vc2 = kc.copy(), vc.copy()
        out, lse = tilec.flash_attn_with_kvcache(q, kc2, vc2, k=kn, v=vn, cache_seqlens=np.array([n], np.int32),
                                                 block_table=table, num_splits=splits, return_softmax_lse=True)
        check(out, lse, *reference(q, keys, values, 1 / math.sqrt(d)))


@needs_native
@pytest.mark.parametrize("page,nsub", [(16, 4), (32, 2), (256, 1)])
def test_paged_sub_tiles_are_prefetched_together(page, nsub):
    """The GPU plan's paged kernel: a 64-key block is `nsub` page sub-tiles;
    tile-pipeline prefetches all of their K and V tiles (no load left
    un-rotated), and the next block's block-table entries are read under one
    guard before any of its copies."""
    import re

    from tilec import flash_decode as fd

    plan = fd.decode_plan(1, 1, 32, 8, 128, 32768, page, 0, True, 132)
    assert (plan.block_n, plan.block_n // plan.page_block) == (64, nsub)
    kernel = fd.decode_kernel().specialize(**plan.constexprs("bfloat16", paged=True, per_batch=True))
    ir = compiler.run_pipeline(kernel.ir, "tile-optimize,tile-pipeline")
    assert "not prefetched" not in ir
    loops = re.findall(r"scf.for .*?\{tile.blocks = #tile<blocks \w+>\}", ir, re.S)
    assert loops
    for loop in loops:
        body = loop.split("{", 1)[1]
        top = body[:body.index("tile.dot")]
        assert top.count("tile.load %") == 2 * nsub
        first_copy = top.index("tile.load %")
        assert top[:first_copy].count("tile.load_scalar") == nsub
        if nsub > 1:
            assert re.search(r"scf.if %\w+ -> \(" + ", ".join(["i32"] * nsub) + r"\)", top[:first_copy])


@needs_cpu
@pytest.mark.parametrize("d", [4, 59, 80, 111])
@pytest.mark.parametrize("paged", [False, True])
def test_any_head_dim_appends_into_the_callers_cache(d, paged):
    """Head dims up to 256 that are not multiples of 8 (upstream's kvcache
    test uses 59, 80, 111): the new keys go into the caller's cache, the
    kernel attends over zero-padded copies, the output has d columns."""
    rng = np.random.default_rng()
    lens, new, heads, heads_k = [0, 17, 40], 2, 4, 2
    old_k = [f16(rng, n, heads_k, d) for n in lens]
    old_v = [f16(rng, n, heads_k, d) for n in lens]
    kn, vn = f16(rng, 3, new, heads_k, d), f16(rng, 3, new, heads_k, d)
    q = f16(rng, 3, new, heads, d)
    if paged:
        kc, vc, table = paged_pool(rng, [k.copy() for k in old_k], [v.copy() for v in old_v], 16)
    else:
        kc, vc, table = f16(rng, 3, 48, heads_k, d), f16(rng, 3, 48, heads_k, d), None
        for b, n in enumerate(lens):
            kc[b, :n], vc[b, :n] = old_k[b], old_v[b]
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=np.array(lens, np.int32),
                                             block_table=table, causal=True, num_splits=2,
                                             return_softmax_lse=True)
    assert out.shape == q.shape
    keys = [np.concatenate([old_k[b], kn[b]]) for b in range(3)]
    values = [np.concatenate([old_v[b], vn[b]]) for b in range(3)]
    check(out, lse, *reference(q, keys, values, 1 / math.sqrt(d), causal=True))
    for b, n in enumerate(lens):
        for i in range(new):
            slot = (table[b, (n + i) // 16], (n + i) % 16) if paged else (b, n + i)
            np.testing.assert_array_equal(kc[slot], kn[b, i])
            np.testing.assert_array_equal(vc[slot], vn[b, i])


@needs_cpu
@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("new", [2, 1], ids=["kv_append", "fused"])
def test_unchecked_append_past_the_capacity_writes_nothing(monkeypatch, paged, new):
    """With the value checks off, new keys whose position falls past the
    cache (cache_seqlens too large) are dropped by the append (kv_append,
    or with one new token the decode kernel's own); the ones inside land,
    and nothing else in the cache changes (the CPU runner would fail on a
    write outside the buffer)."""
    from tilec import flash_decode

    monkeypatch.setattr(flash_decode, "CHECK_VALUES", False)
    rng = np.random.default_rng()
    heads_k, d, page = 2, 32, 16
    kn, vn = f16(rng, 2, new, heads_k, d), f16(rng, 2, new, heads_k, d)
    q = f16(rng, 2, 1, 4, d)
    if paged:
        kc, vc = f16(rng, 4, page, heads_k, d), f16(rng, 4, page, heads_k, d)
        table = np.array([[2, 0], [3, 1]], np.int32)
    else:
        kc, vc, table = f16(rng, 2, 32, heads_k, d), f16(rng, 2, 32, heads_k, d), None
    before_k, before_v = kc.copy(), vc.copy()
    # sequence 0: position 32 is past the 32-key cache (31 + 1 with two new, 32 itself with one)
    lens = np.array([31 if new == 2 else 32, 3], np.int32)
    tilec.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=lens, block_table=table)
    want_k, want_v = before_k.copy(), before_v.copy()
    for b, n in enumerate(lens):
        for i in range(new):
            p = n + i
            if p < 32:
                slot = (table[b, p // page], p % page) if paged else (b, p)
                want_k[slot], want_v[slot] = kn[b, i], vn[b, i]
    np.testing.assert_array_equal(kc, want_k)
    np.testing.assert_array_equal(vc, want_v)
