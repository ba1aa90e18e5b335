"""flash_attn 2.8's forward API on the CPU runner, variant by variant: GQA/MQA,
bottom-right causal, sliding windows, softcap, ALiBi, varlen, odd head dims,
against the float64 reference in flash_reference.py (written from the
semantics, not from tilec), on fresh random inputs, with every output buffer
tilec allocates poisoned with NaN first. Then bad input (a clear error before
any launch) and the launch grid.

Bounds: f16 in, f32 accumulation, P rounded to f16 before P·V, out rounded
to f16: measured ||out-ref||/||ref|| 2.2e-4..2.8e-4 and lse within 1.1e-6
(softcap and ALiBi alike); bf16 2e-3. The asserted bounds leave a margin."""

import math
import re

import numpy as np
import pytest

import tilec
from tilec import compiler
from tilec import flash_attn as fa

from flash_reference import attention_batch, attention_varlen

HAVE_CPU = compiler.available() and getattr(compiler.native(), "has_cpu_runner", False)
needs_cpu = pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")

REL_TOL = {"float16": 1e-3, "bfloat16": 8e-3}
LSE_TOL = 1e-5


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    """Every array the API allocates starts as NaN, so unwritten elements show."""
    real = fa._empty

    def poisoned(like, shape, dtype):
        out = real(like, shape, dtype)
        out[...] = float("nan")
        return out

    monkeypatch.setattr(fa, "_empty", poisoned)


def rel_err(out, ref):
    return np.linalg.norm(np.asarray(out, np.float64) - ref) / max(np.linalg.norm(ref), 1e-300)


def check(out, lse, ref, ref_lse, dtype="float16"):
    out, lse = np.asarray(out, np.float64), np.asarray(lse, np.float64)
    assert out.shape == ref.shape and lse.shape == ref_lse.shape
    assert np.isfinite(out).all(), "NaN/inf in out"
    finite = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isposinf(lse), ~finite)  # empty rows: lse = +inf
    # Empty rows are 0: lse (heads, total) or (batch, heads, seqlen) against
    # out (total, heads, d) or (batch, seqlen, heads, d).
    empty = ~finite.T if lse.ndim == 2 else ~finite.transpose(0, 2, 1)
    assert (out[np.broadcast_to(empty[..., None], out.shape)] == 0).all()
    if np.linalg.norm(ref):
        assert rel_err(out, ref) < REL_TOL[dtype]
    assert np.abs(lse[finite] - ref_lse[finite]).max(initial=0) < LSE_TOL * max(1, np.abs(ref_lse[finite]).max(initial=0))


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float16)


# (batch, seqlen_q, seqlen_k, heads_q, heads_k, head_dim, options)
DENSE = [
    (2, 17, 100, 4, 2, 64, {}),
    (1, 100, 900, 2, 1, 32, dict(causal=True)),
    (1, 900, 100, 2, 1, 32, dict(causal=True)),                 # rows 0..799 see no key
    (3, 1, 1, 8, 1, 64, dict(causal=True)),
    (1, 1, 77, 8, 8, 64, dict(causal=True)),                    # seqlen_q 1: every key
    (2, 65, 64, 8, 1, 64, dict(causal=True)),                   # MQA, one empty row
    (1, 130, 150, 4, 1, 64, dict(window_size=(20, 5))),
    (1, 100, 900, 2, 2, 32, dict(window_size=(50, 0), causal=True)),
    (1, 900, 100, 2, 1, 32, dict(window_size=(10, 7))),
    # 128-row blocks whose first rows see no key while later rows reach a
    # second key block: the empty rows' clamped max goes through two blocks.
    (1, 900, 100, 2, 1, 64, dict(window_size=(10, 7))),
    (1, 900, 300, 2, 1, 64, dict(window_size=(0, 70))),
    (1, 70, 100, 2, 1, 64, dict(window_size=(1000, 1000))),     # wider than the sequence
    (1, 70, 100, 2, 1, 64, dict(window_size=(300, 2))),
    (1, 70, 100, 2, 1, 64, dict(window_size=(-1, 10))),
    (1, 170, 60, 2, 1, 64, dict(window_size=(10, -1))),
    (1, 100, 100, 2, 1, 64, dict(window_size=(0, 0))),          # the diagonal only
    # Windows wider than a block's span (128 rows + 64 keys): unmasked blocks
    # between the edges, the left edge's blocks testing only the left bound.
    (1, 600, 600, 2, 1, 64, dict(window_size=(300, 0), causal=True)),
    (1, 500, 700, 2, 1, 64, dict(window_size=(250, 90))),
    (1, 500, 650, 2, 1, 64, dict(window_size=(60, 400), alibi="h")),
    (2, 77, 131, 4, 4, 80, dict(softcap=5.0)),
    (1, 100, 100, 2, 1, 128, dict(softcap=30.0, causal=True)),
    (2, 60, 90, 4, 2, 64, dict(alibi="h")),
    (2, 90, 60, 4, 2, 64, dict(alibi="bh", causal=True)),
    # Causal ALiBi runs its key blocks from the diagonal down: rows that see no
    # key in a row block's first (diagonal) blocks, and rows that see none.
    (1, 300, 400, 2, 1, 64, dict(alibi="h", causal=True)),
    (1, 500, 300, 2, 1, 64, dict(alibi="bh", causal=True)),
    (2, 90, 120, 4, 1, 64, dict(alibi="bh", window_size=(30, 8), softcap=8.0)),
    (1, 50, 70, 8, 8, 64, dict(causal=True, window_size=(16, 3), softcap=3.0, alibi="h")),
    (1, 40, 70, 2, 1, 59, dict(causal=True)),
    (1, 40, 70, 2, 2, 96, {}),
    (1, 40, 70, 2, 1, 111, dict(window_size=(9, 9))),
    (1, 40, 70, 4, 1, 160, {}),
    (1, 40, 70, 2, 1, 192, dict(causal=True)),
    (1, 20, 30, 2, 1, 224, {}),
    (1, 20, 30, 2, 1, 256, dict(causal=True)),
    (2, 50, 80, 4, 2, 64, dict(softmax_scale=-0.1, softcap=4.0, alibi="h")),   # scale < 0: (-q, 0.1)
    (1, 50, 80, 2, 1, 64, dict(softmax_scale=0.0, causal=True)),              # every score 0
]
# Head dims computed in power-of-two column pieces (strategy.head_dim_pieces:
# 80 = 64 + 16, 96 = 64 + 32, 160 = 128 + 32, 192 = 128 + 64, 224 = 128 + 64
# + 32; 40 = 32 + 16 and 72 = 64 + 16 with the last piece past head_dim),
# each variant over more than one key block and row block, GQA and MQA.
SPLIT = [
    (2, 77, 131, 4, 2, 80, {}),
    (1, 150, 140, 4, 1, 80, dict(causal=True)),
    (1, 130, 150, 2, 1, 80, dict(window_size=(20, 5))),
    (2, 70, 90, 4, 4, 80, dict(alibi="bh", softcap=6.0)),
    (2, 140, 131, 4, 2, 96, {}),
    (1, 150, 200, 4, 1, 96, dict(causal=True)),
    (1, 300, 200, 2, 1, 96, dict(window_size=(40, 10))),
    (1, 90, 120, 4, 4, 96, dict(softcap=6.0)),
    (2, 60, 90, 4, 2, 96, dict(alibi="h", causal=True)),
    (1, 70, 150, 4, 1, 160, dict(window_size=(20, 0), causal=True)),
    (2, 50, 80, 4, 2, 160, dict(alibi="bh")),
    (1, 140, 150, 4, 2, 160, dict(softcap=3.0)),
    (1, 140, 150, 4, 2, 192, {}),
    (1, 130, 70, 2, 1, 192, dict(softcap=5.0, causal=True)),
    (1, 60, 90, 2, 1, 192, dict(window_size=(30, 30), alibi="h")),
    (1, 70, 140, 4, 2, 224, dict(causal=True)),
    (1, 40, 70, 2, 1, 224, dict(alibi="h", softcap=4.0)),
    (1, 50, 90, 2, 1, 40, dict(causal=True)),
    (1, 50, 90, 2, 1, 72, dict(window_size=(10, 10))),
]


def slopes_for(rng, kind, batch, heads):
    if kind == "h":
        return rng.uniform(0.05, 1.0, heads).astype(np.float32)
    return rng.uniform(0.05, 1.0, (batch, heads)).astype(np.float32)


def case_id(case):
    b, sq, sk, hq, hk, d, opts = case
    return f"b{b}-q{sq}-k{sk}-h{hq}/{hk}-d{d}-" + "-".join(f"{k}{v}" for k, v in opts.items())


@needs_cpu
@pytest.mark.parametrize("case", DENSE + SPLIT, ids=case_id)
def test_flash_attn_func_variants(case):
    b, sq, sk, hq, hk, d, opts = case
    rng = np.random.default_rng()
    opts = dict(opts)
    alibi = opts.pop("alibi", None)
    slopes = slopes_for(rng, alibi, b, hq) if alibi else None
    q, k, v = randn(rng, b, sq, hq, d), randn(rng, b, sk, hk, d), randn(rng, b, sk, hk, d)
    out, lse, s_dmask = tilec.flash_attn_func(q, k, v, alibi_slopes=slopes, return_attn_probs=True,
                                              **opts)
    ref, ref_lse = attention_batch(q, k, v, opts.get("softmax_scale", d ** -0.5),
                                   opts.get("causal", False), opts.get("window_size", (-1, -1)),
                                   opts.get("softcap", 0.0), slopes)
    assert out.dtype == np.float16 and lse.dtype == np.float32 and s_dmask.size == 0
    check(out, lse, ref, ref_lse)


@needs_cpu
def test_no_keys_and_no_queries():
    """seqlen_k = 0: every row is empty (out 0, lse +inf); seqlen_q = 0: empty outputs."""
    q, k, v = small((2, 5, 4, 64), (2, 0, 2, 64))
    out, lse, _ = tilec.flash_attn_func(q, k, v, return_attn_probs=True)
    assert (out == 0).all() and np.isposinf(lse).all() and lse.shape == (2, 4, 5)
    q, k, v = small((2, 0, 4, 64), (2, 7, 2, 64))
    out, lse, _ = tilec.flash_attn_func(q, k, v, return_attn_probs=True)
    assert out.shape == (2, 0, 4, 64) and lse.shape == (2, 4, 0)


@needs_cpu
def test_torch_inputs_that_require_grad():
    torch = pytest.importorskip("torch")
    q = torch.randn(1, 20, 2, 64, dtype=torch.float16, requires_grad=True)
    out = tilec.flash_attn_func(q, q.detach(), q.detach(), causal=True)
    ref, _ = attention_batch(*(q.detach().float().numpy(),) * 3, 0.125, True)
    # out is differentiable (tilec.flash_bwd's autograd Function; test_flash_bwd)
    assert out.requires_grad and out.grad_fn is not None
    assert rel_err(out.detach().float().numpy(), ref) < REL_TOL["float16"]


@needs_cpu
def test_packed_forms_match_flash_attn_func():
    rng = np.random.default_rng()
    qkv = randn(rng, 2, 70, 3, 4, 64)
    q, k, v = (qkv[:, :, i] for i in range(3))
    ref, ref_lse = attention_batch(q, k, v, 0.2, True)
    out = tilec.flash_attn_qkvpacked_func(qkv, softmax_scale=0.2, causal=True)
    check(out, tilec.flash_attn_func(q, k, v, softmax_scale=0.2, causal=True, return_lse=True)[1],
          ref, ref_lse)
    kv = randn(rng, 2, 90, 2, 2, 64)
    q = randn(rng, 2, 50, 4, 64)
    out, lse, _ = tilec.flash_attn_kvpacked_func(q, kv, window_size=(7, 3), return_attn_probs=True)
    check(out, lse, *attention_batch(q, kv[:, :, 0], kv[:, :, 1], 0.125, window=(7, 3)))


@needs_cpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_cpu_tensors(dtype):
    torch = pytest.importorskip("torch")
    dt = getattr(torch, dtype)
    q, k, v = torch.randn(2, 33, 4, 40, dtype=dt), torch.randn(2, 50, 2, 40, dtype=dt), \
        torch.randn(2, 50, 2, 40, dtype=dt)
    slopes = torch.rand(4, dtype=torch.float32)
    out, lse, s_dmask = tilec.flash_attn_func(q, k, v, causal=True, softcap=4.0, alibi_slopes=slopes,
                                              return_attn_probs=True)
    assert out.dtype == dt and out.shape == q.shape and lse.dtype == torch.float32
    assert isinstance(s_dmask, torch.Tensor) and s_dmask.numel() == 0
    ref, ref_lse = attention_batch(*(t.float().numpy() for t in (q, k, v)), 40 ** -0.5, True,
                                   softcap=4.0, slopes=slopes.numpy())
    check(out.float().numpy(), lse.numpy(), ref, ref_lse, dtype)


def varlen_inputs(rng, lens_q, lens_k, hq, hk, d):
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q = randn(rng, int(cu_q[-1]), hq, d)
    k, v = randn(rng, int(cu_k[-1]), hk, d), randn(rng, int(cu_k[-1]), hk, d)
    return q, k, v, cu_q, cu_k


# (lengths of q, lengths of k, heads_q, heads_k, head_dim, options)
VARLEN = [
    ([5, 0, 70, 130], [9, 3, 0, 200], 4, 2, 32, {}),
    ([5, 0, 70, 130], [9, 3, 0, 200], 4, 2, 32, dict(causal=True)),
    ([1, 17, 100], [100, 17, 1], 2, 1, 64, dict(causal=True, alibi="bh")),
    ([40, 80], [90, 30], 2, 2, 48, dict(window_size=(12, 4), softcap=6.0)),
    ([30, 0, 64], [30, 5, 64], 4, 1, 64, dict(window_size=(-1, 0), alibi="h")),
    ([7, 20], [0, 33], 2, 1, 59, dict(causal=True)),                   # no keys; head_dim padded
    # max_seqlen 300 (3 row blocks of 128): the programs past the 1-, 0- and
    # 129-token sequences exit early (and must not skip the long one's rows).
    ([1, 300, 0, 129], [50, 300, 7, 200], 4, 2, 64, dict(causal=True)),
    ([1, 300, 0, 129], [50, 300, 7, 200], 4, 1, 64, dict(window_size=(30, 0))),
    # head dims in pieces (64 + 32, 64 + 16, 128 + 64, 128 + 32)
    ([5, 0, 70, 130], [9, 3, 0, 200], 4, 2, 96, dict(causal=True)),
    ([40, 80], [90, 30], 2, 2, 80, dict(window_size=(12, 4), softcap=6.0)),
    ([1, 17, 100], [100, 17, 1], 2, 1, 192, dict(causal=True, alibi="bh")),
    ([30, 0, 140], [30, 5, 64], 4, 1, 160, {}),
]


@needs_cpu
@pytest.mark.parametrize("case", VARLEN, ids=lambda c: f"{c[0]}-{c[1]}-" + "-".join(c[5]))
def test_flash_attn_varlen_func(case):
    lens_q, lens_k, hq, hk, d, opts = case
    rng = np.random.default_rng()
    opts = dict(opts)
    alibi = opts.pop("alibi", None)
    slopes = slopes_for(rng, alibi, len(lens_q), hq) if alibi else None
    q, k, v, cu_q, cu_k = varlen_inputs(rng, lens_q, lens_k, hq, hk, d)
    out, lse, _ = tilec.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k),
                                               alibi_slopes=slopes, return_attn_probs=True, **opts)
    ref, ref_lse = attention_varlen(q, k, v, cu_q, cu_k, d ** -0.5, opts.get("causal", False),
                                    opts.get("window_size", (-1, -1)), opts.get("softcap", 0.0),
                                    slopes, max_sq=max(lens_q), max_sk=max(lens_k))
    assert lse.shape == (hq, q.shape[0])  # flash_attn's varlen layout
    check(out, lse, ref, ref_lse)


@needs_cpu
def test_varlen_packed_forms_and_seqused_k():
    rng = np.random.default_rng()
    lens = [3, 50, 0, 80]
    q, k, v, cu, _ = varlen_inputs(rng, lens, lens, 2, 2, 64)
    qkv = np.stack([q, k, v], axis=1)
    out = tilec.flash_attn_varlen_qkvpacked_func(qkv, cu, max(lens), causal=True)
    ref, ref_lse = attention_varlen(q, k, v, cu, cu, 0.125, True)
    assert rel_err(out, ref) < REL_TOL["float16"]
    out, lse, _ = tilec.flash_attn_varlen_kvpacked_func(q, np.stack([k, v], axis=1), cu, cu, 80, 80,
                                                        window_size=(5, 5), return_attn_probs=True)
    check(out, lse, *attention_varlen(q, k, v, cu, cu, 0.125, window=(5, 5)))
    # seqused_k: only the first keys of each sequence take part.
    used = np.array([3, 20, 0, 1], np.int32)
    out, lse = fa._flash_attn_forward(q, k, v, None, False, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                      max_seqlen_q=80, max_seqlen_k=80, seqused_k=used)
    check(out, lse, *attention_varlen(q, k, v, cu, cu, 0.125, seqused_k=used, max_sq=80, max_sk=80))


def paged(rng, k, v, cu_k, page):
    """k, v packed (total_k, hk, d) -> a shuffled page pool with spare pages
    and a block table naming each sequence's pages in order."""
    lens = np.diff(cu_k)
    need = [-(-int(n) // page) for n in lens]
    width = max(max(need), 1) + 1
    pool = len(lens) * width + 3
    order = rng.permutation(pool).astype(np.int32)
    table = order[:len(lens) * width].reshape(len(lens), width)
    kp, vp = randn(rng, pool, page, *k.shape[1:]), randn(rng, pool, page, *k.shape[1:])
    for b, n in enumerate(lens):
        for j in range(int(n)):
            kp[table[b, j // page], j % page] = k[cu_k[b] + j]
            vp[table[b, j // page], j % page] = v[cu_k[b] + j]
    return kp, vp, table


@needs_cpu
@pytest.mark.parametrize("page, opts", [(16, dict(causal=True)), (32, {}),
                                        (16, dict(window_size=(20, 3), softcap=5.0))])
def test_varlen_paged_kv(page, opts):
    """upstream's flash_attn_varlen_func(..., block_table=): k, v a page pool."""
    rng = np.random.default_rng()
    lens_q, lens_k = [5, 0, 40, 17], [33, 4, 0, 70]
    q, k, v, cu_q, cu_k = varlen_inputs(rng, lens_q, lens_k, 4, 2, 64)
    kp, vp, table = paged(rng, k, v, cu_k, page)
    out, lse, _ = tilec.flash_attn_varlen_func(q, kp, vp, cu_q, cu_k, max(lens_q), max(lens_k),
                                               block_table=table, return_attn_probs=True, **opts)
    ref, ref_lse = attention_varlen(q, k, v, cu_q, cu_k, 0.125, opts.get("causal", False),
                                    opts.get("window_size", (-1, -1)), opts.get("softcap", 0.0),
                                    max_sq=max(lens_q), max_sk=max(lens_k))
    check(out, lse, ref, ref_lse)


@needs_cpu
def test_varlen_paged_kv_torch_gradients_reach_the_pool():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    lens = [9, 30]
    q, k, v, cu, _ = varlen_inputs(rng, lens, lens, 2, 1, 32)
    kp, vp, table = paged(rng, k, v, cu, 16)
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, kp, vp))
    out = tilec.flash_attn_varlen_func(tq, tk, tv, torch.tensor(cu), torch.tensor(cu), 30, 30,
                                       causal=True, block_table=torch.tensor(table))
    ref, _ = attention_varlen(q, k, v, cu, cu, 32 ** -0.5, True)
    assert rel_err(out.detach().numpy(), ref) < REL_TOL["float16"]
    out.float().sum().backward()
    used = np.zeros(kp.shape[:2], bool)
    for b, n in enumerate(lens):
        for j in range(n):
            used[table[b, j // 16], j % 16] = True
    g = tk.grad.float().abs().sum(dim=(2, 3)).numpy()
    assert (g[~used] == 0).all() and (g[used] > 0).all()


# --- bad input: a clear error before any launch ------------------------------


def small(shape_q=(1, 8, 4, 64), shape_k=(1, 8, 2, 64)):
    return np.zeros(shape_q, np.float16), np.zeros(shape_k, np.float16), np.zeros(shape_k, np.float16)


def small_varlen():
    q = np.zeros((10, 2, 64), np.float16)
    return q, q.copy(), q.copy()


CU = np.array([0, 4, 10], np.int32)

ERRORS = [
    (lambda: tilec.flash_attn_func(*small(), window_size=(-2, 0)), ValueError,
     r"window_size left is -2; it must be >= 0, or -1 for unbounded"),
    (lambda: tilec.flash_attn_func(*small(), window_size=(3, -5)), ValueError,
     r"window_size right is -5"),
    (lambda: tilec.flash_attn_func(*small(), window_size=4), ValueError, r"window_size must be a pair"),
    (lambda: tilec.flash_attn_func(*small(), softcap=-1.0), ValueError, r"softcap must be >= 0.*got -1.0"),
    (lambda: tilec.flash_attn_func(*small(), alibi_slopes=np.zeros(3, np.float32)), ValueError,
     r"'alibi_slopes' must have shape \(4,\) or \(1, 4\).*got \(3,\)"),
    (lambda: tilec.flash_attn_func(*small(), alibi_slopes=np.zeros((2, 4), np.float32)), ValueError,
     r"'alibi_slopes' must have shape"),
    (lambda: tilec.flash_attn_func(*small(), alibi_slopes=np.zeros(4, np.float16)), TypeError,
     r"'alibi_slopes' must be float32, got float16"),
    (lambda: tilec.flash_attn_func(*small(shape_k=(1, 8, 3, 64))), ValueError,
     r"query heads \(4\) must be a multiple of the number of key/value heads \(3\)"),
    (lambda: tilec.flash_attn_func(*small((1, 8, 4, 264), (1, 8, 2, 264))), ValueError,
     r"head_dim 264 is not supported \(1 to 256\)"),
    (lambda: tilec.flash_attn_func(*small(), dropout_p=1.0), ValueError,
     r"flash_attn_func: dropout_p must be in \[0, 1\), got 1.0"),
    (lambda: tilec.flash_attn_varlen_func(*small_varlen(), CU.astype(np.int64), CU, 6, 6), TypeError,
     r"'cu_seqlens_q' must be int32, got int64"),
    (lambda: tilec.flash_attn_varlen_func(*small_varlen(), CU, CU[:2], 6, 6), ValueError,
     r"'cu_seqlens_k' must be of shape \(3,\) \(batch \+ 1\), got shape \(2,\)"),
    (lambda: tilec.flash_attn_varlen_func(*small_varlen(), CU, np.array([0, 7, 5], np.int32), 6, 7),
     ValueError, r"'cu_seqlens_k' must be non-decreasing, but cu_seqlens_k\[2\] = 5 < cu_seqlens_k\[1\] = 7"),
    (lambda: tilec.flash_attn_varlen_func(*small_varlen(), CU, CU, 5, 6), ValueError,
     r"sequence 1 has 6 tokens in 'q', more than max_seqlen_q = 5"),
    (lambda: tilec.flash_attn_varlen_func(*small_varlen(), CU, np.array([0, 4, 11], np.int32), 6, 7),
     ValueError, r"'cu_seqlens_k' ends at 11, past the 10 tokens of 'k'"),
    (lambda: tilec.flash_attn_varlen_func(*small_varlen(), CU, np.array([1, 4, 10], np.int32), 6, 6),
     ValueError, r"'cu_seqlens_k' must start at 0"),
    (lambda: tilec.flash_attn_varlen_func(*small_varlen(), [0, 4, 10], CU, 6, 6), TypeError,
     r"'cu_seqlens_q' must be a numpy array like 'q'"),
    (lambda: tilec.flash_attn_varlen_func(*small_varlen(), CU, CU, 6, 6, block_table=CU),
     ValueError, r"with block_table, k and v must be \(num_pages, page_size, nheads_k, headdim\)"),
    (lambda: tilec.flash_attn_varlen_func(small_varlen()[0], *small((4, 16, 2, 64), (4, 16, 2, 64))[1:],
                                          CU, CU, 6, 6, block_table=np.zeros((2, 1), np.int64)),
     TypeError, r"'block_table' must be 2-D int32"),
    (lambda: tilec.flash_attn_varlen_func(small_varlen()[0], *small((4, 16, 2, 64), (4, 16, 2, 64))[1:],
                                          CU, CU, 6, 40, block_table=np.zeros((2, 2), np.int32)),
     ValueError, r"'block_table' has 2 pages per sequence, max_seqlen_k 40 needs 3 pages of 16"),
    (lambda: tilec.flash_attn_varlen_func(small_varlen()[0], *small((4, 16, 2, 64), (4, 16, 2, 64))[1:],
                                          CU, CU, 6, 6, block_table=np.array([[0], [4]], np.int32)),
     ValueError, r"block_table\[1, 0\] = 4 is outside the pool 0..3"),
    (lambda: fa._flash_attn_forward(*small_varlen(), None, False, cu_seqlens_q=CU, cu_seqlens_k=CU,
                                    max_seqlen_q=6, max_seqlen_k=6,
                                    seqused_k=np.array([4, 7], np.int32)),
     ValueError, r"seqused_k\[1\] = 7 is outside 0..6"),
]


@pytest.mark.parametrize("call, error, match", ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_bad_input_is_refused_before_launch(call, error, match, monkeypatch):
    def no_launch(*args, **kwargs):
        raise AssertionError("launched despite bad input")

    monkeypatch.setattr(fa, "_launch", no_launch)
    with pytest.raises(error, match=match) as raised:
        call()
    # Also a RuntimeError, the class flash_attn's C++ checks (TORCH_CHECK)
    # raise: code written against flash_attn catches that.
    assert isinstance(raised.value, RuntimeError) and isinstance(raised.value, tilec.TilecError)


# --- bad cu_seqlens values found by the kernel (CUDA tensors' values are not
# read on the host): the CPU runner runs the same in-kernel check -------------

KERNEL_CHECKS = [  # (cu_seqlens_q, cu_seqlens_k, seqused_k, max_q, max_k, bad sequence, message)
    ([0, 4, 9, 10], [0, 5, 9, 12], None, 6, 6, 2,
     r"'cu_seqlens_k' ends sequence 2 at 12, past the 10 tokens of 'k'"),
    ([0, 4, 10, 6], [0, 4, 6, 10], None, 6, 6, 2,
     r"'cu_seqlens_q' must be non-decreasing, but cu_seqlens_q\[3\] = 6 < cu_seqlens_q\[2\] = 10"),
    ([0, 4, 6, 9], [0, 4, 6, 10], None, 3, 6, 0, r"sequence 0 has 4 tokens in 'q', more than "
     r"max_seqlen_q = 3"),
    ([0, 4, 6, 10], [0, 4, 6, 10], [4, 3, 4], 6, 6, 1,
     r"seqused_k\[1\] = 3 is outside 0..2 \(the keys of sequence 1\)"),
    ([0, 4, 6, 10], [-2, 4, 6, 10], None, 6, 6, 0, r"cu_seqlens_k\[0\] = -2 is negative"),
]


@pytest.mark.parametrize("cu_q, cu_k, used, max_q, max_k, bad, match", KERNEL_CHECKS,
                         ids=[m[6][:30] for m in KERNEL_CHECKS])
def test_bad_values_are_caught_by_the_kernel(cu_q, cu_k, used, max_q, max_k, bad, match,
                                             monkeypatch):
    """With the host's value check off (as for CUDA tensors without
    CHECK_CUDA_VARLEN_VALUES), the VARLEN kernel finds the bad sequence: its
    programs touch nothing outside q/k/out (the CPU runner would report an
    access past a buffer), the other sequences come out right, and the error
    -- naming the values -- is raised by tilec.check_errors() or the next
    varlen call, once."""
    monkeypatch.setattr(fa, "_check_varlen_values", lambda *args: None)
    for flags, *_ in fa._SEQUENCE_BUFFERS.values():  # nothing left by an earlier test
        flags[:] = 0
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((10, 2, 64)).astype(np.float16) for _ in range(3))
    cu_q, cu_k = np.array(cu_q, np.int32), np.array(cu_k, np.int32)
    used = None if used is None else np.array(used, np.int32)

    def call():
        return fa._flash_attn_forward(q, k, v, None, False, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                      max_seqlen_q=max_q, max_seqlen_k=max_k, seqused_k=used)[0]

    out = call()  # no error yet: on the GPU the values are only known once the kernel ran
    for b in range(len(cu_q) - 1):
        if b != bad:
            rows = slice(cu_q[b], cu_q[b + 1])
            ref, _ = attention_varlen(q[rows], k, v, np.array([0, cu_q[b + 1] - cu_q[b]]),
                                      cu_k[b:b + 2], 1 / math.sqrt(64),
                                      seqused_k=None if used is None else used[b:b + 1])
            np.testing.assert_allclose(out[rows].astype(np.float64), ref, atol=2e-3, rtol=2e-3)
    with pytest.raises(tilec.TilecValueError, match=match):
        tilec.check_errors()
    tilec.check_errors()  # reported once
    call()
    good = np.array([0, 4, 6, 10], np.int32)
    with pytest.raises(RuntimeError, match=r"flash_attn_varlen_func: an earlier varlen call on "
                                           r"numpy had bad values, found by its kernel: " + match):
        tilec.flash_attn_varlen_func(q, k, v, good, good, 6, 6)
    tilec.flash_attn_varlen_func(q, k, v, good, good, 6, 6)
    tilec.check_errors()


def test_an_outgrown_error_buffer_is_kept_and_still_checked(monkeypatch):
    """A batch past the buffer's capacity gets a new buffer; the old one stays
    alive (a kernel in flight or a captured CUDA graph may still write it)
    and its flag is still looked at."""
    monkeypatch.setattr(fa, "_SEQUENCE_BUFFERS", {})
    monkeypatch.setattr(fa, "_RETIRED_BUFFERS", [])
    q = np.zeros((70, 2, 64), np.float16)
    for batch in (2, 70):
        cu = np.arange(batch + 1, dtype=np.int32)
        tilec.flash_attn_varlen_func(q[:batch], q[:batch], q[:batch], cu, cu, 1, 1)
    (key, old), = fa._RETIRED_BUFFERS
    assert key == "numpy" and old[2] == 64 and fa._SEQUENCE_BUFFERS["numpy"][2] == 128
    old[0][4 + 4:4 + 8] = (3, 9, 1, 1)  # sequence 1's record, as a late kernel would write it
    old[0][:4] = 1
    with pytest.raises(RuntimeError, match=r"sequence 1 has 9 tokens in 'q', more than "
                                           r"max_seqlen_q = 1"):
        tilec.flash_attn_varlen_func(q[:2], q[:2], q[:2], cu[:3], cu[:3], 1, 1)
    tilec.check_errors()


def test_cu_seqlens_on_another_device_is_refused(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(fa, "_launch", lambda *a, **k: pytest.fail("launched"))
    q = torch.zeros(10, 2, 64, dtype=torch.float16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    # A 'meta' tensor stands in for another device on a machine without a GPU.
    with pytest.raises(ValueError, match=r"'cu_seqlens_k' is on meta, 'q' on cpu"):
        tilec.flash_attn_varlen_func(q, q, q, cu, cu.to("meta"), 6, 6)
    with pytest.raises(ValueError, match=r"'alibi_slopes' is on meta, 'q' on cpu"):
        tilec.flash_attn_varlen_func(q, q, q, cu, cu, 6, 6,
                                     alibi_slopes=torch.zeros(2, dtype=torch.float32, device="meta"))


# --- the launch grid --------------------------------------------------------


def test_grid_puts_heads_and_batch_on_their_own_axes():
    """(row blocks, heads, batch): batch * heads > 65,535 still launches (y
    and z are 65,535 each), so a batch of 8192 with 16 heads is one grid."""
    kernel, config = fa._select("float16", 64, True, False, False, False)
    assert 'tile.grid = ["cdiv(seqlen_q, 128)", "num_heads", "batch"]' in kernel.ir
    g = fa.grid(config, seqlen_q=300, heads=16, batch=8192)
    assert g == (3, 16, 8192) and max(g[1:]) <= 65535 and g[1] * g[2] > 65535
    try:
        import _tilec_runtime
    except ImportError:
        pytest.skip("the runtime module is not built")
    exprs = ["cdiv(seqlen_q, 128)", "num_heads", "batch"]
    assert _tilec_runtime.eval_grid(exprs, {"seqlen_q": 300, "num_heads": 16, "batch": 8192}) == g


def test_kernel_selection_is_one_dict_lookup():
    first = fa._select("float16", 64, False, True, True, False)
    assert fa._select("float16", 64, False, True, True, False) is first
    assert first[0].name == "flash_fwd_f16_d64_window_softcap"


@needs_cpu
@pytest.mark.parametrize("opts", [dict(causal=True), dict(window_size=(0, 70)), dict(causal=True, alibi=True)],
                         ids=["causal", "window", "causal-alibi"])
def test_gpu_only_lazy_rescale_keeps_empty_rows(opts, monkeypatch):
    """tile-lazy-rescale runs only in the GPU lowering (where O holds >= 128
    registers per thread); here it runs on the CPU over the same kernels:
    bottom-right causal with seqlen_q > seqlen_k (rows that see no key) is
    rewritten and stays exact; so is the window kernel, whose running max is
    clamped from below (the pass matches max(max(m, r), c))."""
    real = compiler.run_cpu
    rewritten = []

    def lazy(text, source, name, args, types, grid, run_tile_passes=True):
        text = compiler.run_pipeline(
            text, "builtin.module(tile-optimize,tile-lazy-rescale{num-warps=2 min-registers=128})")
        rewritten.append("tile.skip_unit_rescale" in text)
        return real(text, source, name, args, types, grid, False)

    monkeypatch.setattr(compiler, "run_cpu", lazy)
    rng = np.random.default_rng()
    q, k, v = randn(rng, 1, 900, 2, 128) * 2, randn(rng, 1, 300, 1, 128), randn(rng, 1, 300, 1, 128)
    opts = dict(opts)
    slopes = slopes_for(rng, "h", 1, 2) if opts.pop("alibi", False) else None
    out, lse = tilec.flash_attn_func(q, k, v, return_lse=True, alibi_slopes=slopes, **opts)
    assert rewritten == [True]
    check(out, lse, *attention_batch(q, k, v, 128 ** -0.5, opts.get("causal", False),
                                     opts.get("window_size", (-1, -1)), 0.0, slopes))


def test_varlen_programs_past_their_sequence_skip_the_loop():
    """The varlen kernel's early exit (row0 >= seqlen_q) wraps the K/V loop
    and the stores: it was dropped (an empty scf.if before them), so the
    programs past a short sequence ran its whole key loop -- half the work of
    64 documents of 100..4000 tokens (bench/probe_varlen.py)."""
    kernel, _ = fa._select("float16", 64, True, False, False, False, varlen=True)
    exit_if = re.search(r"scf.if %\w+ \{\n\s*\} else \{\n", kernel.ir)
    assert exit_if, "no early exit with the kernel's work in its else branch"
    after = kernel.ir[exit_if.end():]
    assert "scf.for" in after and after.count("tile.store") == 2
    assert "scf.for" not in kernel.ir[:exit_if.start()]


@pytest.mark.skipif(not compiler.available(), reason="the _tilec extension is not built")
@pytest.mark.parametrize("causal,softcap", [(True, False), (False, False), (True, True)],
                         ids=["causal", "noncausal", "causal-softcap"])
def test_alibi_keeps_fa2_softmax_form(causal, softcap, monkeypatch):
    """ALiBi's bias goes in before the scores' last factor (the scale, or the
    softcap), so that factor still moves into exp2's one FMA per score and
    the lazy rescale still applies: the d128 kernel's PTX has as many
    multiplies by log2(e) and f32 subtractions as the same kernel without
    ALiBi, and is marked for the lazy rescale. Written after the factor
    (session 7) it had one multiply and one subtraction per score more and
    no lazy rescale."""
    monkeypatch.setenv("TILEC_PTXAS", "")  # the PTX is what counts

    def ptx(alibi):
        kernel, config = fa._select("bfloat16", 128, causal, False, softcap, alibi)
        [res] = compiler.compile(kernel.ir, kernel.source_name, arch="sm_80", strategy=config.strategy)
        return res

    with_alibi, without = ptx(True), ptx(False)
    count = lambda res, pattern: len(re.findall(pattern, res["ptx"]))
    for pattern in (r"mul\.rn\.f32\s+%r\d+, %r\d+, 0f3FB8AA3B", r"sub\.rn\.f32"):
        assert count(with_alibi, pattern) == count(without, pattern), pattern
    assert count(with_alibi, r"ex2\.approx") == count(without, r"ex2\.approx")
    for alibi in (True, False):  # the GPU pipeline's lazy rescale (as in the test above)
        kernel, _ = fa._select("bfloat16", 128, causal, False, softcap, alibi)
        text = compiler.run_pipeline(
            kernel.ir, "builtin.module(tile-optimize,tile-lazy-rescale{num-warps=4 min-registers=128})")
        assert "tile.skip_unit_rescale" in text, f"alibi={alibi}: no lazy rescale"


@pytest.mark.skipif(not compiler.available(), reason="the _tilec extension is not built")
def test_a_causal_window_runs_the_causal_window_kernel():
    """A window (w, 0) is causal with a left bound: it runs CAUSAL + WINDOW,
    whose mask tests neither the right bound (causal's) nor kq < seqlen_q
    (implied for every row that is stored): two comparisons per score where
    the WINDOW kernel has three (numerics: the (w, 0) cases above)."""
    assert fa._mask_mode(False, 100, 0, 500, 500, None) == (True, True, 100, 0)
    assert fa._mask_mode(True, 100, 7, 500, 500, None) == (True, True, 100, 0)
    assert fa._mask_mode(True, -1, -1, 500, 500, None) == (True, False, 0, 0)
    assert fa._mask_mode(False, 100, 3, 500, 500, None) == (False, True, 100, 3)

    def comparisons(causal, window):  # the tile comparisons whose result is used
        ir = fa._select("float16", 64, causal, window, False, False)[0].ir
        names = re.findall(r"(%[\w.]+) = arith\.cmpi \w+, .*: tensor<", ir)
        return sum(1 for n in names if re.search(re.escape(n) + r"\b(?! =)", ir.replace(n + " =", "")))

    assert (comparisons(True, True), comparisons(False, True)) == (2, 3)
