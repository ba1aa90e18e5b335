"""Dropout as flash_attn 2 does it, on the CPU runner: the mask comes from a
counter-based Philox (tl.rand) keyed by (seed, offset) drawn from torch's
generator, is regenerated in the backward (never stored), and
return_attn_probs=True returns S_dmask with dropped elements negated. Checks:
the keep rate, the forward against float64 attention with the returned
mask, the gradients against float64 autograd with that mask (flash_attn's
2x-the-same-dtype rule), the mask against a Python model of the counters,
reproducibility from the generator, variants, and errors."""

import math

import numpy as np
import pytest

from tilec import compiler

torch = pytest.importorskip("torch")

import tilec  # noqa: E402
from tilec.flash_bwd import _flash_attn_backward  # noqa: E402

from flash_reference import visible  # noqa: E402
from test_philox import philox_ref  # noqa: E402

HAVE_CPU = compiler.available() and getattr(compiler.native(), "has_cpu_runner", False)
pytestmark = pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")


def inputs(shape_q, shape_k, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(s, generator=g).to(dtype) for s in (shape_q, shape_k, shape_k, shape_q))


def keep_mask(S, sq, sk):
    """The dropout pattern of S_dmask (b, h, sq_rounded, sk_rounded): kept
    where the sign bit is clear (upstream's tests: S_dmask >= 0)."""
    assert S.shape[-2] == -(-sq // 128) * 128 and S.shape[-1] == -(-sk // 128) * 128
    return ~torch.signbit(S[..., :sq, :sk])


def ref_dropout(q, k, v, dout, keep, p, dtype=torch.float64, scale=None, causal=False,
                window=(-1, -1), softcap=0.0, slopes=None):
    """out, dq, dk, dv of softmax(S)∘Z·V, Z = keep/(1-p), by torch autograd
    in `dtype` (float64, or q's dtype with an f32 softmax for the peer);
    dense (b, s, h, d); keep (b, h, sq, sk)."""
    leaves = [x.detach().clone().to(dtype).requires_grad_() for x in (q, k, v)]
    qq, kk, vv = leaves
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    kk, vv = (x.repeat_interleave(hq // hk, dim=2) for x in (kk, vv))
    s = torch.einsum("bqhd,bkhd->bhqk", qq, kk) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        dist = (torch.arange(sq)[:, None] + (sk - sq) - torch.arange(sk)[None, :]).abs()
        s = s - slopes.to(s.dtype)[None, :, None, None] * dist.to(s.dtype)
    vis = torch.from_numpy(visible(sq, sk, causal, window, slopes is not None))
    has = vis.any(-1)[:, None]
    s = torch.where(vis & has, s, torch.where(has, float("-inf"), 0.0))
    prob = torch.softmax(s if dtype == torch.float64 else s.float(), -1) * has
    prob = (prob * keep / (1 - p)).to(dtype)
    out = torch.einsum("bhqk,bkhd->bqhd", prob, vv)
    out.backward(dout.to(dtype))
    return (out.detach(),) + tuple(x.grad for x in leaves)


def rel_err(x, ref):
    return ((x.double() - ref.double()).norm() / ref.double().norm()).item()


def check(got, q, k, v, dout, keep, p, what, **kw):
    ref = ref_dropout(q, k, v, dout, keep, p, **kw)
    peer = ref_dropout(q, k, v, dout, keep, p, q.dtype, **kw)
    floor = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[q.dtype]
    errs = {}
    for name, g, pe, r in zip(("out", "dq", "dk", "dv"), got, peer, ref):
        assert g.shape == r.shape, (what, name)
        e, e_peer = rel_err(g, r), rel_err(pe, r)
        errs[name] = e
        assert e <= max(2 * e_peer, floor), f"{what}: {name} error {e:.2e}, same-dtype torch {e_peer:.2e}"
    return errs


def train(q, k, v, dout, fn=tilec.flash_attn_func, **kw):
    """out, S_dmask, dq, dk, dv of one forward (return_attn_probs) + backward."""
    leaves = tuple(t.clone().requires_grad_() for t in (q, k, v))
    out, _lse, S = fn(*leaves, return_attn_probs=True, **kw)
    out.backward(dout)
    return out.detach(), S, *(t.grad for t in leaves)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_rate_is_one_minus_p(p):
    """The fraction of kept elements is 1 - p within 5 standard deviations;
    elements outside the seqlens are 0 in S_dmask."""
    q, k, v, _ = inputs((2, 150, 3, 32), (2, 130, 3, 32))
    _, _, S = tilec.flash_attn_func(q, k, v, dropout_p=p, return_attn_probs=True)
    keep = keep_mask(S, 150, 130)
    n = keep.numel()
    assert abs(keep.float().mean().item() - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)
    assert (S[..., 150:, :] == 0).all() and (S[..., :, 130:] == 0).all()


@pytest.mark.parametrize("dtype, causal", [(torch.float16, False), (torch.bfloat16, True)])
def test_forward_and_gradients_match_float64_with_the_returned_mask(dtype, causal):
    """out = softmax(S)∘Z·V and its gradients, Z from S_dmask's signs."""
    q, k, v, dout = inputs((2, 97, 4, 64), (2, 75, 2, 64), dtype)
    p = 0.25
    got = train(q, k, v, dout, dropout_p=p, causal=causal)
    out, S, *grads = got
    keep = keep_mask(S, 97, 75)
    check((out, *grads), q, k, v, dout, keep, p, f"dropout causal={causal}", causal=causal)
    no_drop = ref_dropout(q, k, v, dout, torch.ones_like(keep), 0.0, causal=causal)
    assert rel_err(out, no_drop[0]) > 0.1  # dropout changed the output


def scores64(q, k, scale, window=(-1, -1), causal=False):
    """float64 scores (b, h, sq, sk), -inf where masked."""
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) * scale
    vis = torch.from_numpy(visible(q.shape[1], k.shape[1], causal, window))
    return s.masked_fill(~vis, float("-inf"))


@pytest.mark.parametrize("head_dim, width", [(32, 128), (64, 64), (96, 64), (128, 32), (256, 64)])
def test_s_dmask_has_flash_attn_2s_layout(head_dim, width):
    """S_dmask is FlashAttention-2's: exp(S - m_j), m_j the row max over key
    block j and the blocks after it (FA2's loop runs backwards), blocks of
    probs_block_n(head_dim) keys (upstream's _get_block_size_n for dropout);
    so upstream's normalize_flash_attn_S -- a * exp(m_j - lse) -- recovers
    P: visible rows sum to 1, masked elements and rows with no key are 0."""
    from tilec.flash_attn import probs_block_n

    assert probs_block_n(head_dim) == width
    q, k, v, _ = inputs((1, 64, 2, head_dim), (1, 300, 2, head_dim), seed=head_dim)
    scale = 1 / math.sqrt(head_dim)
    _, lse, S = tilec.flash_attn_func(q, k, v, dropout_p=0.4, window_size=(150, 10),
                                      return_attn_probs=True)
    s = scores64(q, k, scale, (150, 10))
    block_max = torch.stack([c.amax(-1) for c in s.split(width, -1)], -1)
    suffix = torch.cummax(block_max.flip(-1), -1).values.flip(-1)
    m = suffix.repeat_interleave(width, -1)[..., :300]
    want = torch.exp(s - torch.where(m == float("-inf"), 0.0, m))
    got = S[..., :64, :300].double().abs()
    assert (got - want).abs().max() < 2e-3
    P = got * torch.exp(m - lse[..., None].double())
    P = torch.nan_to_num(P)  # -inf - inf: masked
    vis = torch.from_numpy(visible(64, 300, False, (150, 10)))
    assert torch.allclose(P.sum(-1)[..., vis.any(-1)], torch.ones((), dtype=torch.float64), atol=5e-3)
    assert (got[..., ~vis] == 0).all()


def test_mask_is_the_philox_stream_of_the_generator():
    """The kept elements are exactly those with
    rand(seed, offset + ((b·h + h)·sq + i)·sk + j) >= p, where (seed, offset)
    are the two int64 drawn from the CPU generator: the mask is a function of
    the generator's state and the element's coordinates only."""
    q, k, v, _ = inputs((2, 20, 2, 32), (2, 30, 2, 32))
    g = torch.Generator().manual_seed(1234)
    state = g.get_state()
    p = 0.3
    _, _, S = tilec.flash_attn_func(q, k, v, dropout_p=p, return_attn_probs=True, generator=g)
    keep = keep_mask(S, 20, 30)
    g2 = torch.Generator()
    g2.set_state(state)
    seed, offset = torch.randint(-(1 << 63), (1 << 63) - 1, (2,), dtype=torch.int64, generator=g2).tolist()
    key = (seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF)
    rng = np.random.default_rng(0)
    for _ in range(60):
        b, h, i, j = (int(rng.integers(0, n)) for n in (2, 2, 20, 30))
        c = (offset + ((b * 2 + h) * 20 + i) * 30 + j) & ((1 << 64) - 1)
        u = (philox_ref(key, (c & 0xFFFFFFFF, c >> 32, 0, 0))[0] >> 8) * 2.0 ** -24
        assert bool(keep[b, h, i, j]) == (u >= p), (b, h, i, j)


def test_same_generator_state_same_result():
    """torch.manual_seed (the default CPU generator) or an explicit generator
    replays the same mask bit for bit; successive calls draw new masks; the
    backward regenerates the forward's mask (same gradients twice)."""
    q, k, v, dout = inputs((1, 50, 2, 64), (1, 50, 2, 64))
    torch.manual_seed(7)
    a = train(q, k, v, dout, dropout_p=0.2)
    b = train(q, k, v, dout, dropout_p=0.2)  # the generator moved on
    torch.manual_seed(7)
    c = train(q, k, v, dout, dropout_p=0.2)
    assert not torch.equal(a[1], b[1])
    for x, y in zip(a, c):
        assert torch.equal(x, y)
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    d = train(q, k, v, dout, dropout_p=0.2, generator=g1)
    e = train(q, k, v, dout, dropout_p=0.2, generator=g2)
    for x, y in zip(d, e):
        assert torch.equal(x, y)


@pytest.mark.parametrize("kw", [dict(window_size=(10, 3), head_dim=40),
                                dict(softcap=5.0, causal=True, alibi=True), dict(head_dim=256),
                                dict(head_dim=96, causal=True), dict(head_dim=192)],
                         ids=["window-d40", "softcap-causal-alibi", "d256", "d96-causal", "d192"])
def test_dropout_with_variants(kw):
    """Dropout composes with windows, softcap, ALiBi and every head dim."""
    kw = dict(kw)
    d = kw.pop("head_dim", 64)
    q, k, v, dout = inputs((1, 66, 2, d), (1, 81, 2, d), seed=d)
    slopes = torch.rand(2) if kw.pop("alibi", False) else None
    got = train(q, k, v, dout, dropout_p=0.15, alibi_slopes=slopes, **kw)
    out, S, *grads = got
    ref_kw = dict(causal=kw.get("causal", False), window=kw.get("window_size", (-1, -1)),
                  softcap=kw.get("softcap", 0.0), slopes=slopes)
    check((out, *grads), q, k, v, dout, keep_mask(S, 66, 81), 0.15, str(kw), **ref_kw)


def test_varlen_dropout():
    """flash_attn_varlen_func with dropout: S_dmask (batch, heads, max_q
    rounded, max_k rounded) per sequence; each sequence's output and
    gradients match float64 with its mask."""
    lens_q, lens_k = [30, 0, 45], [25, 10, 52]
    cu_q = torch.tensor([0, 30, 30, 75], dtype=torch.int32)
    cu_k = torch.tensor([0, 25, 35, 87], dtype=torch.int32)
    q, k, v, dout = inputs((75, 2, 64), (87, 2, 64))
    leaves = tuple(t.clone().requires_grad_() for t in (q, k, v))
    out, _, S = tilec.flash_attn_varlen_func(*leaves, cu_q, cu_k, 45, 52, dropout_p=0.3,
                                             causal=True, return_attn_probs=True)
    assert S.shape == (3, 2, 128, 128)
    out.backward(dout)
    for b in (0, 2):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        keep = ~torch.signbit(S[b:b + 1, :, :q1 - q0, :k1 - k0])
        sl = lambda t, a, z: t[a:z][None]  # noqa: E731
        ref = ref_dropout(sl(q, q0, q1), sl(k, k0, k1), sl(v, k0, k1), sl(dout, q0, q1), keep, 0.3,
                          causal=True)
        # Gradients of one sequence: only its rows/keys (others do not touch them).
        got = (out[q0:q1][None], leaves[0].grad[q0:q1][None], leaves[1].grad[k0:k1][None],
               leaves[2].grad[k0:k1][None])
        for name, g, r in zip(("out", "dq", "dk", "dv"), got, ref):
            assert rel_err(g.detach(), r) < 2e-3, (b, name)
    assert (leaves[1].grad[25:35] == 0).all()  # sequence 1 has no query


def test_backward_core_takes_the_forwards_rng_state():
    """_flash_attn_backward(..., dropout_p, rng_state=(seed, offset)) with the
    forward's core output: same gradients as autograd; a different seed gives
    different ones (the mask is regenerated, not stored)."""
    from tilec.flash_attn import _flash_attn_forward

    q, k, v, dout = inputs((1, 40, 2, 64), (1, 56, 2, 64))
    drop = (0.3, 12345, 678)
    out, lse, S = _flash_attn_forward(q, k, v, 0.125, False, dropout=drop, return_probs=True)
    grads = _flash_attn_backward(dout, q, k, v, out, lse, 0.125, dropout_p=0.3, rng_state=(12345, 678))
    check((out, *grads), q, k, v, dout, keep_mask(S, 40, 56), 0.3, "core", scale=0.125)
    other = _flash_attn_backward(dout, q, k, v, out, lse, 0.125, dropout_p=0.3, rng_state=(1, 678))
    assert not torch.equal(other[1], grads[1])


def test_dropout_errors():
    q, k, v, dout = inputs((1, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(ValueError, match=r"flash_attn_func: dropout_p must be in \[0, 1\), got 1.0"):
        tilec.flash_attn_func(q, k, v, dropout_p=1.0)
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got -0.1"):
        tilec.flash_attn_kvpacked_func(q, torch.stack([k, v], 2), dropout_p=-0.1)
    with pytest.raises(TypeError, match=r"'generator' must be a CPU torch.Generator for CPU tensors"):
        tilec.flash_attn_func(q, k, v, dropout_p=0.1, generator=object())
    with pytest.raises(ValueError, match=r"needs rng_state = \(seed, offset\)"):
        _flash_attn_backward(dout, q, k, v, q, torch.zeros(1, 2, 8), dropout_p=0.1)


def test_numpy_inputs_take_numpy_random_state():
    q, k, v, _ = inputs((1, 16, 2, 64), (1, 16, 2, 64))
    qn, kn, vn = (t.numpy() for t in (q, k, v))
    np.random.seed(5)
    a = tilec.flash_attn_func(qn, kn, vn, dropout_p=0.5)
    np.random.seed(5)
    b = tilec.flash_attn_func(qn, kn, vn, dropout_p=0.5)
    assert np.array_equal(a, b) and not np.array_equal(a, tilec.flash_attn_func(qn, kn, vn))


def check_dropout_under_torch_compile(entry, device):
    """Under torch.compile a call with dropout runs eagerly (a graph break
    around it): the compiled model gives eager's outputs and gradients for
    the same torch.manual_seed, bitwise, a second call draws a fresh mask
    (the generator advances as eagerly), and the graph around the call is
    still compiled. With fullgraph=True dynamo refuses, naming why. (Also
    run on a GPU by test_flash_bwd_gpu.py.)"""
    import torch._dynamo

    q, k, v, dout = (t.to(device) for t in inputs((2, 24, 2, 64), (2, 40, 2, 64)))
    cu_q = torch.tensor([0, 24, 48], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 40, 80], dtype=torch.int32, device=device)

    def attention(q, k, v):
        q, k, v = q.sin(), k * 2, v + 1  # ops the graph around the call holds
        if entry == "func":
            o = tilec.flash_attn_func(q, k, v, dropout_p=0.3, causal=True)
        else:
            kv = torch.stack([k.flatten(0, 1), v.flatten(0, 1)], 1)
            o = tilec.flash_attn_varlen_kvpacked_func(q.flatten(0, 1), kv, cu_q, cu_k, 24, 40,
                                                      dropout_p=0.3, causal=True).view(q.shape)
        return o.cos()

    def run(fn, seed):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        torch.manual_seed(seed)
        out = fn(*leaves)
        out.backward(dout)
        return [out] + [t.grad for t in leaves]

    torch._dynamo.reset()
    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(attention, backend=recording)
    want = run(attention, 11)
    got = run(compiled, 11)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    assert graphs and all("flash_attn" not in str(g.graph) for g in graphs)
    assert not torch.equal(run(compiled, 12)[0], got[0])  # another seed, another mask
    torch.manual_seed(11)
    first = compiled(q, k, v)
    assert not torch.equal(compiled(q, k, v), first)  # the generator advanced between calls

    torch._dynamo.reset()
    strict = torch.compile(attention, fullgraph=True, backend="eager")
    with pytest.raises(Exception, match=r"dropout draws its seed and offset from torch's generator"):
        strict(q, k, v)


@pytest.mark.parametrize("entry", ["func", "varlen_kvpacked"])
def test_dropout_under_torch_compile_runs_eagerly(entry):
    check_dropout_under_torch_compile(entry, "cpu")
