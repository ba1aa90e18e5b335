"""Gradients of every flash_attn forward variant on the CPU runner: sliding
windows (with and without causal, both alignments, empty rows), softcap,
ALiBi, varlen (empty sequences, seqused_k), head dims up to 256, f16/bf16,
GQA, and their combinations -- each against torch autograd of a float64
reference written from flash_attn's semantics (test/python/flash_reference.py
builds the mask), with flash_attn's rule: each gradient's error no worse than
twice that of the same attention computed by torch in the input dtype."""

import math

import numpy as np
import pytest

from tilec import compiler

torch = pytest.importorskip("torch")

import tilec  # noqa: E402
from tilec.flash_bwd import _flash_attn_backward  # noqa: E402

from flash_reference import visible  # noqa: E402

HAVE_CPU = compiler.available() and getattr(compiler.native(), "has_cpu_runner", False)
pytestmark = pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")


def ref_attention(q, k, v, scale, causal=False, window=(-1, -1), softcap=0.0, slopes=None,
                  max_sq=None, max_sk=None, dtype=torch.float64):
    """One sequence, differentiable: q (sq, hq, d), k/v (sk, hk, d) -> out
    (sq, hq, d). Scores and softmax in `dtype` (float64 for the reference;
    the input dtype with f32 softmax for the same-dtype peer, as
    flash_attn's tests' attention_ref with upcast=False)."""
    sq, hq, d = q.shape
    sk, hk = k.shape[:2]
    group = hq // hk
    if sq == 0 or sk == 0:
        return q.new_zeros(q.shape) + 0 * (k.sum() + v.sum())
    kk, vv = (x.repeat_interleave(group, dim=1) for x in (k, v))
    vis = torch.from_numpy(visible(sq, sk, causal, window, slopes is not None, max_sq, max_sk))
    s = torch.einsum("qhd,khd->hqk", q.to(dtype), kk.to(dtype)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        dist = (torch.arange(sq)[:, None] + (sk - sq) - torch.arange(sk)[None, :]).abs()
        s = s - slopes.to(s.dtype)[:, None, None] * dist.to(s.dtype)
    has_key = vis.any(-1)[:, None]
    s = torch.where(vis & has_key, s, torch.where(has_key, float("-inf"), 0.0))
    p = torch.softmax(s.float() if dtype != torch.float64 else s, -1) * has_key
    p = p.to(v.dtype if dtype != torch.float64 else dtype)
    return torch.einsum("hqk,khd->qhd", p, vv.to(p.dtype))


def run_ref(q, k, v, dout, dtype, cu=None, slopes=None, seqused_k=None, **kw):
    """out, dq, dk, dv of ref_attention over a batch (dense (b, s, h, d)) or
    packed sequences (cu = (cu_q, cu_k, max_sq, max_sk))."""
    leaves = [x.detach().clone().to(torch.float64 if dtype == torch.float64 else x.dtype)
              .requires_grad_() for x in (q, k, v)]
    outs = []
    if cu is None:
        for b in range(q.shape[0]):
            sl = None if slopes is None else (slopes if slopes.ndim == 1 else slopes[b])
            outs.append(ref_attention(*(x[b] for x in leaves), slopes=sl, dtype=dtype, **kw))
        out = torch.stack(outs)
    else:
        cu_q, cu_k, max_sq, max_sk = cu
        pieces = []  # the sequences in order (cu_q starts at 0), then the rows of none
        for b in range(len(cu_q) - 1):
            q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
            if seqused_k is not None:
                k1 = k0 + int(seqused_k[b])
            sl = None if slopes is None else (slopes if slopes.ndim == 1 else slopes[b])
            pieces.append(ref_attention(leaves[0][q0:q1], leaves[1][k0:k1], leaves[2][k0:k1],
                                        slopes=sl, max_sq=max_sq, max_sk=max_sk, dtype=dtype, **kw))
        rest = leaves[0][int(cu_q[-1]):]
        pieces.append(rest.new_zeros(rest.shape))
        out = torch.cat([p.to(pieces[0].dtype) for p in pieces])
    out.backward(dout.to(out.dtype))
    return (out.detach(),) + tuple(x.grad for x in leaves)


def rel_err(x, ref):
    return ((x.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def check(got, q, k, v, dout, what, cu=None, slopes=None, seqused_k=None, **kw):
    """got = (out, dq, dk, dv) from tilec; each vs float64, no worse than
    twice the same-dtype torch attention (plus an absolute floor of a few
    dtype ulps for gradients that are ~0). Returns the errors."""
    ref = run_ref(q, k, v, dout, torch.float64, cu, slopes, seqused_k, **kw)
    peer = run_ref(q, k, v, dout, q.dtype, cu, slopes, seqused_k, **kw)
    floor = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[q.dtype]
    errs = {}
    for name, g, p, r in zip(("out", "dq", "dk", "dv"), got, peer, ref):
        assert g.shape == r.shape and g.dtype == q.dtype, (what, name, g.shape, g.dtype)
        assert torch.isfinite(g).all(), f"{what}: {name} has non-finite values"
        e, pe = rel_err(g, r), rel_err(p, r)
        errs[name] = (e, pe)
        assert e <= max(2 * pe, floor), f"{what}: {name} error {e:.2e}, same-dtype torch {pe:.2e}"
    return errs


def inputs(shape_q, shape_k, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(shape_q, generator=g).to(dtype)
    k = torch.randn(shape_k, generator=g).to(dtype)
    v = torch.randn(shape_k, generator=g).to(dtype)
    dout = torch.randn(shape_q, generator=g).to(dtype)
    return q, k, v, dout


def leaves(*ts):
    return tuple(t.clone().requires_grad_() for t in ts)


def tilec_dense(q, k, v, dout, **kw):
    lq, lk, lv = leaves(q, k, v)
    out = tilec.flash_attn_func(lq, lk, lv, **kw)
    out.backward(dout)
    return out.detach(), lq.grad, lk.grad, lv.grad


WINDOWS = [((8, 0), False), ((8, 4), False), ((0, 0), False), ((20, -1), False), ((-1, 6), False),
           ((3, 50), True), ((5, 2), True)]


@pytest.mark.parametrize("window, causal", WINDOWS, ids=[f"w{w[0]}_{w[1]}{'_c' * c}" for w, c in WINDOWS])
@pytest.mark.parametrize("sq, sk", [(70, 45), (45, 70), (33, 33)])
def test_window_gradients(window, causal, sq, sk):
    """Sliding windows, bottom-right aligned, with and without causal;
    seqlen_q > seqlen_k leaves rows with no key (zero gradients)."""
    q, k, v, dout = inputs((2, sq, 2, 64), (2, sk, 2, 64), seed=sq * 7 + sk)
    kw = dict(window_size=window, causal=causal)
    check(tilec_dense(q, k, v, dout, **kw), q, k, v, dout, f"window {window} causal {causal}",
          scale=0.125, causal=causal, window=window)


def test_window_rows_with_no_key_get_zero_gradients():
    """A window that leaves whole rows (and keys) unseen: their dq (dk, dv) are 0."""
    q, k, v, dout = inputs((1, 64, 2, 32), (1, 16, 2, 32))
    out, dq, dk, dv = tilec_dense(q, k, v, dout, window_size=(2, 0))
    vis = visible(64, 16, False, (2, 0))
    empty_rows = ~vis.any(1)
    assert empty_rows.sum() > 40
    assert (out[0, empty_rows] == 0).all() and (dq[0, empty_rows] == 0).all()
    check((out, dq, dk, dv), q, k, v, dout, "empty rows", scale=1 / math.sqrt(32),
          window=(2, 0))


@pytest.mark.parametrize("softcap", [1.0, 30.0])
@pytest.mark.parametrize("causal", [False, True])
def test_softcap_gradients(softcap, causal):
    """softcap·tanh(scale·qk/softcap): dS through the tanh (1 − tanh²). A
    softcap of 1 saturates most scores (large scale), 30 barely caps."""
    q, k, v, dout = inputs((2, 57, 2, 64), (2, 83, 2, 64))
    kw = dict(softcap=softcap, causal=causal, softmax_scale=0.5)
    check(tilec_dense(q, k, v, dout, **kw), q, k, v, dout, f"softcap {softcap}", scale=0.5,
          causal=causal, softcap=softcap)


@pytest.mark.parametrize("slopes_shape", ["heads", "batch_heads"])
@pytest.mark.parametrize("causal", [False, True])
def test_alibi_gradients(slopes_shape, causal):
    """ALiBi: the bias in the recomputed scores; no gradient for the slopes
    (as upstream: they do not require grad and get none)."""
    q, k, v, dout = inputs((2, 61, 4, 64), (2, 40, 4, 64))
    slopes = torch.rand(4) if slopes_shape == "heads" else torch.rand(2, 4)
    check(tilec_dense(q, k, v, dout, alibi_slopes=slopes, causal=causal), q, k, v, dout,
          f"alibi {slopes_shape}", scale=0.125, causal=causal, slopes=slopes)


@pytest.mark.parametrize("head_dim", [8, 40, 80, 96, 136, 160, 192, 224, 256])
def test_head_dims_with_variants(head_dim):
    """Every head dim (in power-of-two pieces as the forward, 96 = 64 + 32;
    dK/dV split over programs above 128: one padded tile there), causal
    window + softcap + ALiBi together."""
    q, k, v, dout = inputs((1, 37, 2, head_dim), (1, 52, 1, head_dim), seed=head_dim)
    slopes = torch.rand(2)
    kw = dict(window_size=(9, 3), softcap=5.0, alibi_slopes=slopes)
    check(tilec_dense(q, k, v, dout, **kw), q, k, v, dout, f"d{head_dim}",
          scale=1 / math.sqrt(head_dim), window=(9, 3), softcap=5.0, slopes=slopes)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("combo", ["window_softcap", "causal_alibi", "window_alibi_softcap"])
def test_combinations_and_dtypes(dtype, combo):
    """Combinations of the variants, f16 and bf16, GQA 4:1."""
    q, k, v, dout = inputs((2, 75, 8, 64), (2, 66, 2, 64), dtype)
    slopes = torch.rand(8)
    kw, ref = {}, {}
    if "window" in combo:
        kw["window_size"] = ref["window"] = (12, 7)
    if "causal" in combo:
        kw["causal"] = ref["causal"] = True
    if "softcap" in combo:
        kw["softcap"] = ref["softcap"] = 10.0
    if "alibi" in combo:
        kw["alibi_slopes"], ref["slopes"] = slopes, slopes
    check(tilec_dense(q, k, v, dout, **kw), q, k, v, dout, combo, scale=0.125, **ref)


def packed(lens_q, lens_k, hq, hk, d, dtype=torch.float16, seed=0):
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lens_q)]), dtype=torch.int32)
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lens_k)]), dtype=torch.int32)
    q, k, v, dout = inputs((int(cu_q[-1]) + 3, hq, d), (int(cu_k[-1]) + 5, hk, d), dtype, seed)
    return q, k, v, dout, cu_q, cu_k


def in_sequences(out, cu_q):
    """out with the rows of no sequence zeroed (the forward leaves them
    unwritten, as upstream's torch.empty_like)."""
    out = out.clone()
    out[int(cu_q[-1]):] = 0
    return out


VARLEN = [dict(), dict(causal=True), dict(window_size=(6, 2)), dict(softcap=4.0, causal=True),
          dict(alibi=True), dict(window_size=(10, 0), alibi=True, softcap=8.0)]


@pytest.mark.parametrize("kw", VARLEN, ids=["plain", "causal", "window", "softcap", "alibi", "all"])
def test_varlen_gradients(kw):
    """flash_attn_varlen_func: sequences of different lengths including empty
    ones (q or k), seqlen_q != seqlen_k per sequence, rows past the last
    sequence (zero gradients), GQA 2:1."""
    lens_q, lens_k = [17, 0, 70, 5, 33], [40, 9, 64, 0, 33]
    q, k, v, dout, cu_q, cu_k = packed(lens_q, lens_k, 4, 2, 64)
    kw = dict(kw)
    slopes = torch.rand(5, 4) if kw.pop("alibi", False) else None
    lq, lk, lv = leaves(q, k, v)
    out = tilec.flash_attn_varlen_func(lq, lk, lv, cu_q, cu_k, max(lens_q), max(lens_k),
                                       alibi_slopes=slopes, **kw)
    out.backward(dout)
    ref = dict(kw)
    if "window_size" in ref:
        ref["window"] = ref.pop("window_size")
    assert (lq.grad[int(cu_q[-1]):] == 0).all() and (lk.grad[int(cu_k[-1]):] == 0).all()
    got = (in_sequences(out.detach(), cu_q), lq.grad, lk.grad, lv.grad)
    check(got, q, k, v, dout, f"varlen {kw}", cu=(cu_q, cu_k, max(lens_q), max(lens_k)),
          slopes=slopes, scale=0.125, **ref)


def test_varlen_seqused_k_and_bf16():
    """seqused_k (keys past it are unused: zero dk, dv) through the backward
    core, bf16."""
    lens_q, lens_k = [20, 31, 8], [25, 40, 30]
    q, k, v, dout, cu_q, cu_k = packed(lens_q, lens_k, 2, 2, 64, torch.bfloat16)
    used = torch.tensor([25, 12, 0], dtype=torch.int32)
    from tilec.flash_attn import _flash_attn_forward

    out, lse = _flash_attn_forward(q, k, v, 0.125, True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                   max_seqlen_q=31, max_seqlen_k=40, seqused_k=used)
    dq, dk, dv = _flash_attn_backward(dout, q, k, v, out, lse, 0.125, True, cu_seqlens_q=cu_q,
                                      cu_seqlens_k=cu_k, max_seqlen_q=31, max_seqlen_k=40,
                                      seqused_k=used)
    assert (dk[25 + 12:65] == 0).all() and (dv[65:] == 0).all()
    check((in_sequences(out, cu_q), dq, dk, dv), q, k, v, dout, "seqused_k", cu=(cu_q, cu_k, 31, 40), seqused_k=used,
          scale=0.125, causal=True)


def test_varlen_packed_functions_train():
    """flash_attn_varlen_qkvpacked_func / kvpacked: gradients land in the
    packed tensor's slots."""
    lens = [12, 0, 30]
    q, k, v, dout, cu, _ = packed(lens, lens, 2, 2, 32)
    n = int(cu[-1])
    q, k, v, dout = q[:n], k[:n], v[:n], dout[:n]
    qkv = torch.stack([q, k, v], 1).requires_grad_()
    out = tilec.flash_attn_varlen_qkvpacked_func(qkv, cu, 30, causal=True)
    out.backward(dout)
    got = (out.detach(), *qkv.grad.unbind(1))
    check(got, q, k, v, dout, "varlen qkvpacked", cu=(cu, cu, 30, 30),
          scale=1 / math.sqrt(32), causal=True)


def test_backward_skips_blocks_the_mask_hides():
    """tile-split-masked-loops classifies the backward's masked loops as it
    does the forward's: blocks no query (key) of the program sees are
    skipped, the others split into unmasked and masked ones -- for causal,
    windows, and with softcap/ALiBi on top."""
    from tilec.flash_bwd import flash_bwd_kernels

    for kw in (dict(causal=True), dict(window=True), dict(causal=True, softcap=True, alibi=True),
               dict(window=True, varlen=True)):
        causal = kw.pop("causal", False)
        dq, dkdv, _ = flash_bwd_kernels("float16", 128, causal, **kw)
        for kernel in (dq, dkdv):
            verdict = kernel.mask_analysis()
            assert verdict["mask"] == "split", (kernel.name, verdict)


def test_varlen_atomic_dq():
    """The fused kernel (atomic_dq=True) on varlen: its dQ accumulator keeps
    the packed (total_q, heads, head_dim) layout (the dense one is blocked)."""
    lens_q, lens_k = [20, 0, 31, 8], [25, 10, 40, 30]
    q, k, v, dout, cu_q, cu_k = packed(lens_q, lens_k, 2, 1, 64)
    from tilec.flash_attn import _flash_attn_forward

    out, lse = _flash_attn_forward(q, k, v, 0.125, True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                   max_seqlen_q=31, max_seqlen_k=40)
    dq, dk, dv = _flash_attn_backward(dout, q, k, v, out, lse, 0.125, True, cu_seqlens_q=cu_q,
                                      cu_seqlens_k=cu_k, max_seqlen_q=31, max_seqlen_k=40,
                                      deterministic=False, atomic_dq=True)
    check((in_sequences(out, cu_q), dq, dk, dv), q, k, v, dout, "varlen atomic_dq",
          cu=(cu_q, cu_k, 31, 40), scale=0.125, causal=True)


@pytest.mark.parametrize("head_dim", [96, 192])
@pytest.mark.parametrize("atomic_dq", [False, True])
def test_varlen_head_dim_pieces(head_dim, atomic_dq):
    """Varlen at head dims computed in pieces (96 = 64 + 32, 192 = 128 + 64),
    the pair and the fused kernel (one dQᵀ per piece into the packed
    (total_q, heads, head_dim) accumulator), causal, GQA 2:1."""
    lens_q, lens_k = [20, 0, 31, 8], [25, 10, 40, 30]
    q, k, v, dout, cu_q, cu_k = packed(lens_q, lens_k, 2, 1, head_dim, seed=head_dim)
    from tilec.flash_attn import _flash_attn_forward

    scale = 1 / math.sqrt(head_dim)
    out, lse = _flash_attn_forward(q, k, v, scale, True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                   max_seqlen_q=31, max_seqlen_k=40)
    dq, dk, dv = _flash_attn_backward(dout, q, k, v, out, lse, scale, True, cu_seqlens_q=cu_q,
                                      cu_seqlens_k=cu_k, max_seqlen_q=31, max_seqlen_k=40,
                                      deterministic=not atomic_dq, atomic_dq=atomic_dq)
    check((in_sequences(out, cu_q), dq, dk, dv), q, k, v, dout,
          f"varlen d{head_dim} atomic_dq={atomic_dq}", cu=(cu_q, cu_k, 31, 40), scale=scale,
          causal=True)


@pytest.mark.parametrize("head_dim", [96, 192])
def test_window_softcap_head_dim_pieces(head_dim):
    """A window (non-causal) and softcap at head dims computed in pieces."""
    q, k, v, dout = inputs((2, 57, 2, head_dim), (2, 83, 1, head_dim), seed=head_dim + 1)
    for kw, ref in ((dict(window_size=(11, 4)), dict(window=(11, 4))),
                    (dict(softcap=3.0, causal=True), dict(softcap=3.0, causal=True))):
        check(tilec_dense(q, k, v, dout, **kw), q, k, v, dout, f"d{head_dim} {kw}",
              scale=1 / math.sqrt(head_dim), **ref)
