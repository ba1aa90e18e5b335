"""The backward of flash attention (kernels/flash_bwd.py, python/tilec/flash_bwd.py)
on the CPU runner: gradients against torch autograd of a float64 naive
attention on fresh random inputs, the autograd hook of flash_attn_func,
determinism, empty rows, GQA, scale rewrites and argument errors."""

import math

import numpy as np
import pytest

from tilec import compiler

torch = pytest.importorskip("torch")

import tilec  # noqa: E402
from tilec import language as tl  # noqa: E402
from tilec.flash_bwd import _flash_attn_backward  # noqa: E402

HAVE_CPU = compiler.available() and getattr(compiler.native(), "has_cpu_runner", False)
pytestmark = pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")

# ||grad - ref|| / ||ref|| with f16 inputs, f32 accumulation, P and dS rounded
# to the input dtype before their dots, gradients rounded to it: measured
# 2.8e-4 .. 3.3e-4 (f16), 2.3e-3 .. 2.6e-3 (bf16, 3 fewer mantissa bits).
REL_TOL = {torch.float16: 1e-3, torch.bfloat16: 8e-3}


def reference(q, k, v, dout, scale, causal, causal_offset=None):
    """out, lse, dq, dk, dv in float64 by torch autograd of naive attention
    (flash_attn layout; GQA by repeating K/V heads; causal bottom-right unless
    causal_offset is given; rows that see no key: out = 0, zero gradients)."""
    q, k, v = (x.detach().double().requires_grad_() for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    kk, vv = (x.repeat_interleave(group, dim=2) for x in (k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    sq, sk = s.shape[-2:]
    if causal:
        offset = sk - sq if causal_offset is None else causal_offset
        visible = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + offset
        s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.nan_to_num(torch.exp(s - lse[..., None]))  # all-masked rows: 0
    out = torch.einsum("bhqk,bkhd->bqhd", p, vv)
    out.backward(dout.double())
    return out.detach(), lse.detach(), q.grad, k.grad, v.grad


def rel_err(x, ref):
    return ((x.double() - ref).norm() / ref.norm()).item()


def inputs(b, sq, sk, hq, hk, d, dtype=torch.float16):
    q = torch.randn(b, sq, hq, d, dtype=dtype)
    k = torch.randn(b, sk, hk, d, dtype=dtype)
    v = torch.randn(b, sk, hk, d, dtype=dtype)
    dout = torch.randn(b, sq, hq, d, dtype=dtype)
    return q, k, v, dout


def check_grads(got, refs, dtype, what=""):
    for name, g, r in zip(("dq", "dk", "dv"), got, refs):
        assert g.dtype == dtype and g.shape == r.shape, (name, g.dtype, g.shape)
        assert torch.isfinite(g).all(), f"{what} {name} has non-finite values"
        if r.norm() == 0:  # dq with one key: softmax is constant, dq = 0 up to rounding of Delta
            assert g.abs().max() < 1e-2, f"{what} {name}: max {g.abs().max():.2e}, reference 0"
            continue
        err = rel_err(g, r)
        assert err < REL_TOL[dtype], f"{what} {name}: relative error {err:.2e}"


@pytest.mark.parametrize("head_dim", [64, 128, 160])
@pytest.mark.parametrize("causal", [False, True])
def test_backward_kernels_match_float64(head_dim, causal):
    """_flash_attn_backward from the float64 forward's out and lse, seqlens
    that are not block multiples, both orders of seqlen_q != seqlen_k, and 1.
    head_dim 160: 256-wide tiles, dK/dV split over two programs per key block
    (strategy.BWD_WIDE), the view clipping the columns past 160."""
    for sq, sk in ((100, 60), (60, 100), (1, 17), (17, 1)):
        q, k, v, dout = inputs(2, sq, sk, 2, 2, head_dim)
        scale = 1 / math.sqrt(head_dim)
        out, lse, *refs = reference(q, k, v, dout, scale, causal)
        # the pair (atomic_dq=False) and the table's deterministic form
        for form in ({"atomic_dq": False}, {}):
            got = _flash_attn_backward(dout, q, k, v, out.half(), lse.float(), None, causal, **form)
            check_grads(got, refs, torch.float16, f"d{head_dim} causal={causal} {sq}x{sk} {form}")


def test_rows_with_no_key_get_zero_gradients():
    """Bottom-right causal with seqlen_q > seqlen_k: the first sq - sk rows
    see no key (lse +inf, as flash_attn, or -inf): dq is exactly 0 there, and
    those rows add nothing to dk, dv."""
    sq, sk = 100, 60
    q, k, v, dout = inputs(1, sq, sk, 2, 2, 64)
    out, lse, *refs = reference(q, k, v, dout, 0.125, True)
    assert torch.isinf(lse[:, :, : sq - sk]).all()
    for empty in (float("inf"), float("-inf")):
        lse_in = lse.float().clone()
        lse_in[:, :, : sq - sk] = empty
        dq, dk, dv = _flash_attn_backward(dout, q, k, v, out.half(), lse_in, 0.125, True)
        assert (dq[:, : sq - sk] == 0).all()
        check_grads((dq, dk, dv), refs, torch.float16, f"lse={empty}")


def test_gqa_sums_dk_dv_over_query_heads():
    """4 query heads over 2 KV heads: dK/dV of a KV head is the sum over its
    query heads (the float64 reference repeats K/V heads; autograd sums).
    head_dim 40: tiles 64 wide, the view clips the padding columns."""
    q, k, v, dout = inputs(2, 70, 90, 4, 2, 40)
    out, lse, *refs = reference(q, k, v, dout, 0.125, True)
    got = _flash_attn_backward(dout, q, k, v, out.half(), lse.float(), 0.125, True)
    assert got[1].shape == k.shape and got[2].shape == v.shape
    check_grads(got, refs, torch.float16)


def test_backward_is_deterministic():
    """deterministic=True (the default here; d64 non-causal: the fused
    kernel's serial form): two backward runs give bitwise-equal gradients
    (on the CPU runner a smoke test: programs run one after another; the
    GPU's is test_flash_bwd_gpu.py's)."""
    q, k, v, dout = inputs(2, 130, 150, 2, 2, 64)
    out, lse, *_ = reference(q, k, v, dout, 0.125, False)
    first = _flash_attn_backward(dout, q, k, v, out.half(), lse.float(), 0.125, False)
    second = _flash_attn_backward(dout, q, k, v, out.half(), lse.float(), 0.125, False)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_func_trains_on_torch_cpu(dtype, causal):
    """flash_attn_func(q, k, v).backward() on torch CPU tensors that require
    grad: out has a grad_fn and every input's .grad matches float64 autograd
    (the forward's alignment with seqlen_q != seqlen_k is checked below)."""
    sq, sk = (77, 77) if causal else (77, 50)
    q, k, v, dout = inputs(2, sq, sk, 2, 2, 64, dtype)
    for t in (q, k, v):
        t.requires_grad_()
    out = tilec.flash_attn_func(q, k, v, causal=causal)
    assert out.requires_grad and out.grad_fn is not None and out.dtype == dtype
    out.backward(dout)
    ref_out, _, *refs = reference(q, k, v, dout, 1 / math.sqrt(64), causal)
    assert rel_err(out.detach(), ref_out) < REL_TOL[dtype]
    check_grads((q.grad, k.grad, v.grad), refs, dtype)


def test_autograd_follows_the_forwards_causal_alignment():
    """seqlen_q != seqlen_k, causal: the gradients are those of the attention
    the forward computed, whichever alignment it has (the forward is
    flash_attn's bottom-right; the alignment is read off the forward's
    output, so a forward changed without the hook
    (flash_bwd.FORWARD_CAUSAL_OFFSET) fails here)."""
    q, k, v, dout = inputs(1, 40, 90, 2, 2, 64)
    for t in (q, k, v):
        t.requires_grad_()
    out = tilec.flash_attn_func(q, k, v, causal=True)
    out.backward(dout)
    candidates = {name: reference(q, k, v, dout, 0.125, True, causal_offset=offset)
                  for name, offset in (("top-left", 0), ("bottom-right", None))}
    errors = {name: rel_err(out.detach(), ref[0]) for name, ref in candidates.items()}
    name = min(errors, key=errors.get)
    assert errors[name] < 1e-3, errors
    _, _, *refs = candidates[name]
    check_grads((q.grad, k.grad, v.grad), refs, torch.float16, f"forward is {name}")


def test_sum_backward_and_noncontiguous_inputs():
    """out.sum().backward() hands the backward an expanded dout (stride 0);
    inputs are strided views (heads-major storage, padded rows)."""
    b, sq, sk, h, d = 2, 45, 70, 2, 64
    store = lambda s: torch.randn(b, h, s, d + 8, dtype=torch.float16)[..., :d].transpose(1, 2)
    q, k, v = (store(s).requires_grad_() for s in (sq, sk, sk))
    tilec.flash_attn_func(q, k, v).sum().backward()
    _, _, *refs = reference(q, k, v, torch.ones(b, sq, h, d), 0.125, False)
    check_grads((q.grad, k.grad, v.grad), refs, torch.float16)


@pytest.mark.parametrize("scale", [-0.2, 0.0])
def test_nonpositive_scale(scale):
    """The kernels assume scale > 0; scale < 0 runs as (-q, -scale) with dq
    negated, scale = 0 as (q = 0, 1) with dq = 0 (out does not depend on q)."""
    q, k, v, dout = inputs(1, 50, 70, 2, 2, 64)
    out, lse, dq_ref, dk_ref, dv_ref = reference(q, k, v, dout, scale, False)
    dq, dk, dv = _flash_attn_backward(dout, q, k, v, out.half(), lse.float(), scale, False)
    if scale == 0:
        assert (dq == 0).all() and dk_ref.abs().max() < 1e-12 and (dk == 0).all()
        assert rel_err(dv, dv_ref) < 1e-3
    else:
        check_grads((dq, dk, dv), (dq_ref, dk_ref, dv_ref), torch.float16)


def test_numpy_inputs():
    """numpy float16 arrays run the same kernels on the CPU runner."""
    q, k, v, dout = inputs(1, 33, 65, 2, 2, 64)
    out, lse, *refs = reference(q, k, v, dout, 0.125, True)
    got = _flash_attn_backward(*(t.numpy() for t in (dout, q, k, v, out.half(), lse.float())),
                               0.125, True)
    assert all(isinstance(g, np.ndarray) and g.dtype == np.float16 for g in got)
    check_grads(tuple(torch.from_numpy(g) for g in got), refs, torch.float16)


def test_backward_argument_errors():
    q, k, v, dout = inputs(1, 8, 8, 2, 2, 64)
    lse = torch.zeros(1, 2, 8)
    with pytest.raises(ValueError, match=r"dropout_p > 0 needs rng_state = \(seed, offset\)"):
        _flash_attn_backward(dout, q, k, v, q, lse, dropout_p=0.1)
    with pytest.raises(ValueError, match=r"causal_offset is for plain causal masks only"):
        _flash_attn_backward(dout, q, k, v, q, lse, window_size=(4, 0), causal_offset=0)
    with pytest.raises(ValueError, match=r"softcap must be >= 0 \(0 turns it off\), got -1.0"):
        _flash_attn_backward(dout, q, k, v, q, lse, softcap=-1.0)
    with pytest.raises(ValueError, match=r"varlen needs cu_seqlens_q, cu_seqlens_k, max_seqlen_q"):
        _flash_attn_backward(dout[0], q[0], k[0], v[0], q[0], lse[0], cu_seqlens_q=torch.zeros(2))
    with pytest.raises(ValueError, match=r"'lse' must be float32 of shape \(1, 2, 8\)"):
        _flash_attn_backward(dout, q, k, v, q, lse[:, :1])
    with pytest.raises(ValueError, match=r"3 query heads are not a multiple of 2"):
        _flash_attn_backward(dout[:, :, :1].expand(1, 8, 3, 64), q[:, :, :1].expand(1, 8, 3, 64),
                             k, v, q[:, :, :1].expand(1, 8, 3, 64), torch.zeros(1, 3, 8))
    with pytest.raises(TypeError, match=r"'out' is float32"):
        _flash_attn_backward(dout, q, k, v, q.float(), lse)
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got 1.5"):
        tilec.flash_attn_func(q.requires_grad_(), k, v, dropout_p=1.5)
    with pytest.raises(TypeError, match=r"'v' must be a torch tensor on cpu like 'q', got ndarray"):
        tilec.flash_attn_func(q, k, v.numpy())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_no_worse_than_twice_a_same_dtype_torch_attention(dtype):
    """flash_attn's test rule: each gradient's error vs float64 is at most
    twice that of the naive attention run by torch in the input dtype
    (measured: tilec 0.5-0.7x of it)."""
    q, k, v, dout = inputs(2, 150, 110, 4, 2, 64, dtype)
    out, lse, *refs = reference(q, k, v, dout, 0.125, True)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    group = q.shape[2] // k.shape[2]
    kk, vv = (x.repeat_interleave(group, dim=2) for x in leaves[1:])
    s = torch.einsum("bqhd,bkhd->bhqk", leaves[0], kk) * 0.125
    visible = torch.arange(110)[None, :] <= torch.arange(150)[:, None] - 40
    p = torch.nan_to_num(torch.softmax(s.float().masked_fill(~visible, float("-inf")), -1)).to(dtype)
    torch.einsum("bhqk,bkhd->bqhd", p, vv).backward(dout)
    got = _flash_attn_backward(dout, q, k, v, out.to(dtype), lse.float(), 0.125, True)
    for name, g, same, r in zip(("dq", "dk", "dv"), got, (x.grad for x in leaves), refs):
        assert rel_err(g, r) <= 2 * rel_err(same, r), name


# -- tl.atomic_add (the DSL op FA2's atomic dQ needs; kernels do not use it yet)

def _accumulate_kernel():
    @tilec.jit(grid=("parts", 1, 1))
    def accumulate(x: tl.ptr(tl.float16), out: tl.ptr(tl.float32), rows: tl.int32,
                   parts: tl.int32):
        p = tl.program_id(0)
        xv = tl.view(x + p * rows * 64, (rows, 64), (64, 1))
        ov = tl.view(out, (rows, 64), (64, 1))
        t = tl.load(xv, (0, 0), (64, 64))
        tl.atomic_add(ov, (0, 0), t.to(tl.float32) * 2.0)

    return accumulate


def test_atomic_add_accumulates_every_program_on_the_cpu_runner():
    """5 programs add 2·x_p into one 50x64 buffer (a 64-row tile: rows past
    the view are not touched): out = 1 + 2·Σ_p x_p."""
    rng = np.random.default_rng()
    x = rng.standard_normal((5, 50, 64)).astype(np.float16)
    out = np.ones((50, 64), np.float32)
    _accumulate_kernel().specialize().run_cpu(x, out, 50, 5, grid=(5, 1, 1))
    np.testing.assert_allclose(out, 1 + 2 * x.astype(np.float64).sum(0), rtol=1e-6, atol=1e-5)


def test_atomic_add_lowers_to_red_global_add():
    """One red.global.add.f32 per element a thread holds (64x64 over 128
    threads: 32), no plain stores."""
    art = _accumulate_kernel().specialize().compile("sm_80")
    assert art.ptx.count("red.global.add.f32") == 32
    assert "st.global" not in art.ptx


def _blocked_kernel():
    @tilec.jit(grid=(1, 1, 1))
    def blocked(a: tl.ptr(tl.float16), b: tl.ptr(tl.float16), acc: tl.ptr(tl.float32),
                back: tl.ptr(tl.float32), rows: tl.int32):
        av = tl.view(a, (64, 32), (32, 1))
        bv = tl.view(b, (64, 32), (32, 1))
        # acc: a 64 x 64 grid of 8x8 row-major blocks (the fused backward's
        # dq_accum per query block); rows past `rows` are not touched.
        accv = tl.view(acc, (rows, 64), (512, 64), block=(8, 8))
        s = tl.dot(tl.load(av, (0, 0), (64, 32)), tl.load(bv, (0, 0), (64, 32)), trans_b=True)
        tl.atomic_add(accv, (0, 0), s)
        tl.store(tl.view(back, (64, 64), (64, 1)), (0, 0), tl.load(accv, (0, 0), (64, 64)))

    return blocked


def _unblock(buf, rows, cols, b0, b1):
    """numpy: a (rows, cols) matrix stored as a row-major grid of (b0, b1)
    row-major blocks, back to row-major."""
    return (buf.reshape(rows // b0, cols // b1, b0, b1).transpose(0, 2, 1, 3)
            .reshape(rows, cols))


def test_blocked_view_places_elements_in_8x8_blocks_on_the_cpu_runner():
    """tl.view(..., block=(8, 8)): element (i, j) at (i // 8)·512 + (j // 8)·64
    + (i % 8)·8 + j % 8; the atomic add and the load agree with that map;
    rows past the view's size (50) stay untouched (NaN)."""
    rng = np.random.default_rng()
    a, b = (rng.standard_normal((64, 32)).astype(np.float16) for _ in range(2))
    acc_init = rng.standard_normal((64, 64)).astype(np.float32)
    # stored as (i // 8, j // 8, i % 8, j % 8), written independently of _unblock
    acc = acc_init.reshape(8, 8, 8, 8).transpose(0, 2, 1, 3).reshape(-1).copy()
    where = _unblock(np.arange(64 * 64), 64, 64, 8, 8)  # where[i, j]: element (i, j)'s slot
    acc[where[50:].reshape(-1)] = np.nan
    back = np.zeros((64, 64), np.float32)
    _blocked_kernel().specialize().run_cpu(a, b, acc, back, 50, grid=(1, 1, 1))
    want = acc_init + a.astype(np.float64) @ b.astype(np.float64).T
    got = _unblock(acc, 64, 64, 8, 8)
    np.testing.assert_allclose(got[:50], want[:50], rtol=1e-5, atol=1e-4)
    assert np.isnan(got[50:]).all()
    np.testing.assert_allclose(back[:50], want[:50], rtol=1e-5, atol=1e-4)
    assert (back[50:] == 0).all()  # loads past the view's rows read the padding


def test_blocked_view_atomic_add_keeps_pairs_on_sm90():
    """Each accumulator pair is one red.global.add.v2.f32 into the blocked
    view (16 per thread for 64x64 over 4 warps), as into a row-major one."""
    art = _blocked_kernel().specialize().compile("sm_90a")
    assert art.ptx.count("red.global.add.v2.f32") == 16
    assert "red.global.add.f32 " not in art.ptx


def test_blocked_view_errors():
    @tilec.jit(grid=(1, 1, 1))
    def not_pow2(out: tl.ptr(tl.float32)):
        tl.store(tl.view(out, (64, 64), (64, 1), block=(8, 6)), (0, 0), tl.zeros((64, 64), tl.float32))

    with pytest.raises(tilec.CompilationError, match=r"block extents must be powers of two, got 6"):
        not_pow2.specialize()

    @tilec.jit(grid=(1, 1, 1))
    def wrong_rank(out: tl.ptr(tl.float32)):
        tl.store(tl.view(out, (64, 64), (64, 1), block=(8,)), (0, 0), tl.zeros((64, 64), tl.float32))

    with pytest.raises(tilec.CompilationError, match=r"block needs 2 extents"):
        wrong_rank.specialize()


def test_atomic_add_errors():
    @tilec.jit(grid=(1, 1, 1))
    def f16_view(out: tl.ptr(tl.float16)):
        tl.atomic_add(tl.view(out, (64,), (1,)), (0,), tl.zeros((64,), tl.float16))

    with pytest.raises(tilec.CompilationError, match=r"atomic adds are f32 only"):
        f16_view.specialize()


@pytest.mark.parametrize("head_dim,causal,seqlens,heads", [(64, True, (100, 60), (2, 2)),
                                                          (128, False, (60, 130), (4, 2)),
                                                          # several key blocks: the query blocks
                                                          # above the diagonal are skipped
                                                          (64, True, (200, 200), (2, 1)),
                                                          # D = 64 > head_dim: padded columns
                                                          (40, False, (50, 70), (2, 2))])
def test_atomic_dq_fused_kernel_matches_float64(head_dim, causal, seqlens, heads):
    """atomic_dq=True: FA2's single kernel (dK/dV plus dQᵀ += Kᵀ·dSᵀ added
    with tl.atomic_add into f32), Delta and lse2 computed by the caller."""
    (sq, sk), (hq, hk) = seqlens, heads
    q, k, v, dout = inputs(2, sq, sk, hq, hk, head_dim)
    out, lse, *refs = reference(q, k, v, dout, 0.1, causal)
    got = _flash_attn_backward(dout, q, k, v, out.half(), lse.float(), 0.1, causal,
                               deterministic=False, atomic_dq=True)
    check_grads(got, refs, torch.float16)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("head_dim,rows,block_m", [(64, 64, 16), (96, 96, 64), (128, 128, 64),
                                                   (192, 192, 64), (256, 256, 64),
                                                   # R > head_dim (a padded tile), 128-query blocks
                                                   (40, 64, 64), (32, 32, 128)])
def test_convert_dq_unblocks_the_accumulator(dtype, head_dim, rows, block_m):
    """flash_bwd_convert_dq: dq[b, i, h, :] = scale·dQᵀ[b, h, i // BLOCK_M][:head_dim,
    i % BLOCK_M] rounded once to dtype (bitwise against numpy's f32 product),
    where each query block's R x BLOCK_M dQᵀ is stored as 8x8 row-major
    blocks (the fused kernel's DQ_ACCUM_BLOCK); seqlen_q not a multiple of
    BLOCK_M; rows past seqlen_q and columns past head_dim of a strided dq are
    not written."""
    from tilec.flash_bwd import _dq_from_accum

    b, sq, h, scale = 2, 3 * block_m - 5, 3, 0.37
    nblk = -(-sq // block_m)
    rng = np.random.default_rng(head_dim * block_m)
    # memory order (d // 8, m // 8, d % 8, m % 8) per query block
    stored = rng.standard_normal((b, h, nblk, rows // 8, block_m // 8, 8, 8)).astype(np.float32)
    dqt = stored.transpose(0, 1, 2, 3, 5, 4, 6).reshape(b, h, nblk, rows, block_m)  # [d, m]
    acc = stored.reshape(b, h, nblk, rows, block_m)
    ref = np.empty((b, sq, h, head_dim), np.float32)
    for i in range(sq):  # query i: column i % BLOCK_M of block i // BLOCK_M
        ref[:, i] = dqt[:, :, i // block_m, :head_dim, i % block_m]
    ref = torch.from_numpy(ref * np.float32(scale)).to(dtype)
    sentinel = -7.0
    big = torch.full((b, sq + block_m, h, head_dim + 8), sentinel, dtype=dtype)
    dq = big[:, :sq, :, :head_dim]
    got = _dq_from_accum(torch.from_numpy(acc), dq, False, scale, str(dtype)[6:], False)
    assert got.data_ptr() == dq.data_ptr()
    assert torch.equal(got, ref)
    assert (big[:, sq:] == sentinel).all() and (big[..., head_dim:] == sentinel).all()


def test_deterministic_selects_the_form(monkeypatch):
    """With a table entry that prefers the fused kernel (FlashBwdConfig.fused),
    deterministic=False (flash_attn's default, through autograd too) runs it
    with atomics in no fixed order, deterministic=True its serial form
    (SERIAL_DQ), bitwise repeatable; both match float64. A variant the fused
    kernel is not timed for (a window) keeps the pair."""
    from dataclasses import replace

    from tilec import flash_bwd, strategy

    calls = []
    real = flash_bwd.flash_bwd_kernels

    def spy(*args, **kwargs):
        fused = bool(args[3] if len(args) > 3 else kwargs.get("atomic_dq", False))
        serial = bool(args[9] if len(args) > 9 else kwargs.get("serial", False))
        ordered = kwargs.get("ordered", False)
        calls.append("ordered" if ordered else "serial" if serial else fused)
        return real(*args, **kwargs)

    monkeypatch.setattr(flash_bwd, "flash_bwd_kernels", spy)
    monkeypatch.setitem(strategy.BWD_TABLE, ("sm_80", 64, True),
                        replace(strategy.BWD_DEFAULT, fused=True, serial_min_seqlen_k=0))
    q, k, v, dout = inputs(1, 140, 140, 2, 1, 64)
    out, lse, *refs = reference(q, k, v, dout, 0.125, True)
    args = (dout, q, k, v, out.half(), lse.float(), 0.125, True)
    check_grads(_flash_attn_backward(*args, deterministic=False), refs, torch.float16)
    first = _flash_attn_backward(*args, deterministic=True)
    second = _flash_attn_backward(*args, deterministic=True)
    check_grads(first, refs, torch.float16)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    _flash_attn_backward(*args, window_size=(64, 0), deterministic=False)
    assert calls == [True, "serial", "serial", False]
    # flash_attn_func's autograd: deterministic defaults to False there.
    calls.clear()
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    tilec.flash_attn_func(*leaves, softmax_scale=0.125, causal=True).backward(dout)
    tilec.flash_attn_func(*leaves, softmax_scale=0.125, causal=True,
                          deterministic=True).backward(dout)
    assert calls == [True, "serial"]
    # A table entry's fused_min_seqlen_k: fewer keys keep the pair.
    calls.clear()
    monkeypatch.setitem(strategy.BWD_TABLE, ("sm_80", 64, True),
                        replace(strategy.BWD_DEFAULT, fused=True, fused_min_seqlen_k=141))
    _flash_attn_backward(*args, deterministic=False)
    k2, v2 = (torch.cat([t, t[:, :1]], 1) for t in (k, v))   # 141 keys
    out2, lse2, *_ = reference(q, k2, v2, dout, 0.125, True)
    _flash_attn_backward(dout, q, k2, v2, out2.half(), lse2.float(), 0.125, True, deterministic=False)
    assert calls == [False, True]
    # deterministic=True: the serial form inside the entry's serial_min/max_seqlen_k
    # (140 keys), else the pair; None (entries not timed): always the pair.
    for low, high, want in ((0, None, "serial"), (141, None, False), (0, 139, False),
                            (140, 140, "serial"), (None, None, False)):
        calls.clear()
        monkeypatch.setitem(strategy.BWD_TABLE, ("sm_80", 64, True),
                            replace(strategy.BWD_DEFAULT, fused=True, serial_min_seqlen_k=low,
                                    serial_max_seqlen_k=high))
        _flash_attn_backward(*args, deterministic=True)
        assert calls == [want], (low, high)
    # atomic_dq=True with deterministic=True: the serial form whatever the serial range says.
    calls.clear()
    _flash_attn_backward(*args, deterministic=True, atomic_dq=True)
    assert calls == ["serial"]
    # The ordered form from the entry's ordered_min_seqlen_k (before the serial
    # range: a call outside it takes the ordered form, not the pair), also
    # with atomic_dq=True; deterministic_form overrides the table's ranges.
    for low, want in ((140, "ordered"), (141, False), (None, False)):
        calls.clear()
        monkeypatch.setitem(strategy.BWD_TABLE, ("sm_80", 64, True),
                            replace(strategy.BWD_DEFAULT, fused=True, serial_min_seqlen_k=None,
                                    ordered_min_seqlen_k=low))
        _flash_attn_backward(*args, deterministic=True)
        _flash_attn_backward(*args, deterministic=True, atomic_dq=True)
        assert calls == [want, "ordered" if want else "serial"], low
    calls.clear()
    _flash_attn_backward(*args, deterministic=True, atomic_dq=True, deterministic_form="ordered")
    _flash_attn_backward(*args, deterministic=True, deterministic_form="ordered")
    assert calls == ["ordered", "ordered"]


def test_bwd_table_fused_thresholds():
    """BWD_TABLE's d128 entries run the fused kernel, causal ones from 1024
    keys (H200 session 14: causal 1k 209 TFLOP/s against the pair's 193, 2k
    248 / 213, 512 157 / 164); d64 causal from 2048 keys (512 keys: the pair
    139, fused 132)."""
    from tilec import strategy

    for causal in (False, True):
        cfg = strategy.flash_bwd_config(head_dim=128, causal=causal)
        assert cfg.fused and (cfg.atomic.block_m, cfg.atomic.block_n, cfg.atomic.num_warps) == (64, 128, 8)
        assert cfg.atomic_warps_n == 4 and cfg.atomic_dq_warps_n == 2
        assert "region-barriers=true" in cfg.atomic.lowering_options
        assert cfg.fused_min_seqlen_k == (1024 if causal else 0)
    assert strategy.flash_bwd_config(head_dim=64, causal=True).fused_min_seqlen_k == 2048
    assert strategy.flash_bwd_config(head_dim=64, causal=False).fused_min_seqlen_k == 0


@pytest.mark.parametrize("splits", [1, 2, 3])
@pytest.mark.parametrize("causal", [False, True])
def test_serial_fused_launches(monkeypatch, splits, causal):
    """deterministic=True on the fused kernel (SERIAL_DQ): launches of S key
    blocks, program s adding into dq_accum slice s, the slices summed at the
    end. 200 keys are 4 key blocks of BWD_DEFAULT's 64: S = 1, 2, 3 gives 4,
    2 and 2 launches (the last with 1 key block); GQA 4/2, seqlen_q !=
    seqlen_k, head_dim 40 (padded tile). Each matches float64 and repeats
    bitwise; launches cover every key block once (a block added twice or
    skipped would show in dq and dk)."""
    from dataclasses import replace

    from tilec import flash_bwd, strategy

    monkeypatch.setitem(strategy.BWD_TABLE, ("sm_80", 64, causal),
                        replace(strategy.BWD_DEFAULT, fused=True))
    launches = []
    real = flash_bwd._launch_serial

    def spy(kernel, args, key_blocks, s, programs, split_d, on_gpu):
        launches.append((key_blocks, s))
        real(kernel, args, key_blocks, s, programs, split_d, on_gpu)
        accum = args[8]  # (S, batch, heads, query blocks, R, BLOCK_M): every slice added to
        assert accum.shape[0] == s and all(accum[i].abs().sum() > 0 for i in range(s))

    monkeypatch.setattr(flash_bwd, "_launch_serial", spy)
    monkeypatch.setattr(flash_bwd, "serial_schedule", lambda *a, **k: splits)
    q, k, v, dout = inputs(2, 90, 200, 4, 2, 40)
    out, lse, *refs = reference(q, k, v, dout, 0.125, causal)
    args = (dout, q, k, v, out.half(), lse.float(), 0.125, causal)
    first = _flash_attn_backward(*args, deterministic=True, atomic_dq=True)
    assert launches == [(4, splits)]
    check_grads(first, refs, torch.float16, f"S={splits}")
    second = _flash_attn_backward(*args, deterministic=True, atomic_dq=True)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_serial_fused_split_head_dim(monkeypatch):
    """The serial form where the fused kernel splits the head dim over two
    programs per key block (BWD_WIDE's atomic_split = 2, program_id(2): each
    adds its half of dQᵀ into the launch's slice), head_dim 160 (256-wide
    tiles), 3 key blocks at 2 per launch, GQA 2/1; matches float64."""
    from dataclasses import replace

    from tilec import flash_bwd, strategy

    monkeypatch.setitem(strategy.BWD_TABLE, ("sm_80", 256, False),
                        replace(strategy.BWD_WIDE, fused=True, serial_min_seqlen_k=0))
    monkeypatch.setattr(flash_bwd, "serial_schedule", lambda *a, **k: 2)
    q, k, v, dout = inputs(1, 40, 150, 2, 1, 160)
    out, lse, *refs = reference(q, k, v, dout, 0.125, False)
    got = _flash_attn_backward(dout, q, k, v, out.half(), lse.float(), 0.125, False)
    check_grads(got, refs, torch.float16)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk", [(90, 200), (200, 90), (130, 130), (5, 300)])
def test_ordered_fused(monkeypatch, causal, sq, sk):
    """deterministic=True on the fused kernel in one launch (ORDERED_DQ): the
    key blocks of a head add each query block's dQᵀ in turns, the last key
    block first. The CPU runner runs programs in the GPU's start order and
    reports a wait no earlier program satisfies (a hang on the GPU), so this
    also checks the kernel's turns against the query blocks each key block
    visits: causal with seqlen_q < and > seqlen_k (query blocks no key
    block sees, key blocks whose first query block is not 0), GQA 4/2,
    head_dim 40. One launch; matches float64; repeats bitwise; each counter
    ends at the number of key blocks that see its query block, counted
    here from the mask (the spare last slot takes each program's first
    pass, a query block before its first add)."""
    from dataclasses import replace

    from tilec import flash_bwd, strategy

    cfg = replace(strategy.BWD_DEFAULT, fused=True, ordered_min_seqlen_k=0)
    monkeypatch.setitem(strategy.BWD_TABLE, ("sm_80", 64, causal), cfg)
    launches, counters = [], []
    real_run, real_zeros = flash_bwd._run_cpu, flash_bwd._zeros

    def spy_run(kernel, args, grid):
        launches.append(kernel.name)
        real_run(kernel, args, grid)

    def spy_zeros(like, shape, dtype=None):
        zeros = real_zeros(like, shape, dtype)
        if dtype == "int32":  # the turn counters (dq_accum is float32)
            counters.append(zeros)
        return zeros

    monkeypatch.setattr(flash_bwd, "_run_cpu", spy_run)
    monkeypatch.setattr(flash_bwd, "_zeros", spy_zeros)
    monkeypatch.setattr(flash_bwd, "_launch_serial", None)  # not the serial form
    q, k, v, dout = inputs(2, sq, sk, 4, 2, 40)
    out, lse, *refs = reference(q, k, v, dout, 0.125, causal)
    args = (dout, q, k, v, out.half(), lse.float(), 0.125, causal)
    first = _flash_attn_backward(*args, deterministic=True)
    assert [n for n in launches if "dkdv" in n] == [n for n in launches if "_ordered" in n]
    assert len([n for n in launches if "dkdv" in n]) == 1, launches
    check_grads(first, refs, torch.float16, f"ordered {sq}x{sk}")
    second = _flash_attn_backward(*args, deterministic=True)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    bm, bn = cfg.atomic.block_m, cfg.atomic.block_n
    rows, keys = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    seen = keys <= rows + (sk - sq) if causal else torch.ones(sq, sk, dtype=torch.bool)
    visitors = [len({int(j) // bn for j in seen[i * bm:(i + 1) * bm].nonzero()[:, 1]})
                for i in range(-(-sq // bm))]
    want = torch.tensor(visitors, dtype=torch.int32).expand(1, 2 * 4, -1)
    assert torch.equal(torch.as_tensor(counters[0])[..., :-1], want)


@pytest.mark.parametrize("causal", [False, True])
def test_ordered_fused_head_dim_pieces(monkeypatch, causal):
    """The ordered form at head_dim 96 through the d128 table entry (its
    real blocks, 64 x 128): dQᵀ in two pieces (64 + 32 rows), both added in
    the block's one turn. Matches float64 and repeats bitwise."""
    from dataclasses import replace

    from tilec import strategy

    key = ("sm_80", 128, causal)
    monkeypatch.setitem(strategy.BWD_TABLE, key,
                        replace(strategy.BWD_TABLE[key], ordered_min_seqlen_k=0))
    q, k, v, dout = inputs(1, 100, 300, 2, 1, 96)
    out, lse, *refs = reference(q, k, v, dout, 0.125, causal)
    args = (dout, q, k, v, out.half(), lse.float(), 0.125, causal)
    got = _flash_attn_backward(*args, deterministic=True, deterministic_form="ordered")
    check_grads(got, refs, torch.float16)
    again = _flash_attn_backward(*args, deterministic=True, deterministic_form="ordered")
    assert all(torch.equal(a, b) for a, b in zip(got, again))


def test_ordered_fused_split_head_dim(monkeypatch):
    """The ordered form where two programs per key block (BWD_WIDE's
    atomic_split = 2, program_id(2)) each add half of dQᵀ: one counter set
    per half. head_dim 160, 3 key blocks, GQA 2/1, causal; matches
    float64 and repeats bitwise."""
    from dataclasses import replace

    from tilec import strategy

    monkeypatch.setitem(strategy.BWD_TABLE, ("sm_80", 256, True),
                        replace(strategy.BWD_WIDE, fused=True, ordered_min_seqlen_k=0))
    q, k, v, dout = inputs(1, 40, 150, 2, 1, 160)
    out, lse, *refs = reference(q, k, v, dout, 0.125, True)
    args = (dout, q, k, v, out.half(), lse.float(), 0.125, True)
    got = _flash_attn_backward(*args, deterministic=True)
    check_grads(got, refs, torch.float16)
    again = _flash_attn_backward(*args, deterministic=True)
    assert all(torch.equal(a, b) for a, b in zip(got, again))


def test_deterministic_form_is_checked():
    q, k, v, dout = inputs(1, 8, 8, 1, 1, 64)
    out, lse, *_ = reference(q, k, v, dout, 0.125, False)
    with pytest.raises(tilec.TilecValueError, match="deterministic_form must be None, 'ordered' or"):
        _flash_attn_backward(dout, q, k, v, out.half(), lse.float(), 0.125, False,
                             deterministic_form="fast")


def test_serial_schedule():
    """S, the deterministic fused backward's dq_accum slices: enough key
    blocks per launch to fill the SMs (one 8-warp program each), no more."""
    from tilec.flash_bwd import serial_schedule

    small = 1 << 20
    # 1 x 16 heads, 16k keys (128 blocks of 128): 8 per launch fill 128 of
    # 132 SMs; 16 launches, 16 waves.
    assert serial_schedule(128, 16, 132, 8, small) == 8
    # 8 x 16 heads: one key block per launch already fills the GPU.
    assert serial_schedule(16, 128, 132, 8, small) == 1
    assert serial_schedule(16, 1000, 132, 8, small) == 1
    # 40 programs: 3 blocks (120 programs) leave 12 SMs idle, 10 blocks make
    # 400 = 3.03 waves; 13 fill 520 of 4 waves' 528.
    assert serial_schedule(64, 40, 132, 8, small) in (3, 13)
    # Slices capped by memory: one slice each of 1.5 GiB.
    assert serial_schedule(128, 16, 132, 8, 3 << 29) == 1
    # 4-warp programs: two per SM.
    assert serial_schedule(128, 16, 132, 4, small) == 16
    assert serial_schedule(1, 1, 132, 8, small) == 1


def test_serial_fills():
    """A schedule the memory cap leaves much emptier than the uncapped one is
    refused (deterministic=True then takes the pair): 8 heads of 128k keys
    (1024 blocks) at S = 8 run 128 waves of 64 programs; uncapped, S = 16
    fills 128 of 132 SMs in 64 waves."""
    from tilec.flash_bwd import serial_fills

    assert not serial_fills(1024, 8, 132, 8, 8)
    assert serial_fills(1024, 8, 132, 8, 16)
    assert serial_fills(128, 16, 132, 8, 8)
    assert serial_fills(16, 128, 132, 8, 1)


def test_capped_serial_schedule_takes_the_pair(monkeypatch):
    """deterministic=True where the table picks the serial form but the
    memory cap (here 1 byte: one slice) would run it in 4 launches of 2
    programs instead of one launch: the pair runs instead, unless the
    caller forces the fused kernel (atomic_dq=True)."""
    from dataclasses import replace

    from tilec import flash_bwd, strategy

    monkeypatch.setitem(strategy.BWD_TABLE, ("sm_80", 64, False),
                        replace(strategy.BWD_DEFAULT, fused=True, serial_min_seqlen_k=0))
    forms = []
    real = flash_bwd.flash_bwd_kernels

    def spy(*args, **kwargs):
        forms.append((bool(args[3]), bool(args[9])))
        return real(*args, **kwargs)

    monkeypatch.setattr(flash_bwd, "flash_bwd_kernels", spy)
    q, k, v, dout = inputs(1, 40, 200, 2, 2, 64)
    out, lse, *refs = reference(q, k, v, dout, 0.125, False)
    args = (dout, q, k, v, out.half(), lse.float(), 0.125, False)
    check_grads(_flash_attn_backward(*args, deterministic=True), refs, torch.float16)
    monkeypatch.setattr(flash_bwd, "_SERIAL_MAX_BYTES", 1)
    check_grads(_flash_attn_backward(*args, deterministic=True), refs, torch.float16)
    _flash_attn_backward(*args, deterministic=True, atomic_dq=True)
    assert forms == [(True, True), (False, False), (True, True)]


def test_atomic_dq_errors():
    q, k, v, dout = inputs(1, 8, 8, 2, 2, 64)
    lse = torch.zeros(1, 2, 8)
    cu = torch.tensor([0, 8], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"deterministic \(serial\) form takes fixed-length"):
        _flash_attn_backward(dout[0], q[0], k[0], v[0], q[0], lse[0], atomic_dq=True,
                             cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=8, max_seqlen_k=8)
    # head_dim 16: BWD_DEFAULT's fused blocks split dQᵀ's 16 rows over 4 warps
    q, k, v, dout = inputs(1, 8, 8, 2, 2, 16)
    with pytest.raises(ValueError, match=r"atomic_dq at head_dim 16: the fused kernel's dQᵀ \(16 "
                                         r"head-dim rows per program\) does not split"):
        _flash_attn_backward(dout, q, k, v, q, lse, deterministic=False, atomic_dq=True)


def test_atomic_dq_fits():
    """Which fused configurations can place dQᵀ (D / atomic_split rows over
    num_warps / atomic_dq_warps_n rows of warps, 16 each)."""
    from dataclasses import replace

    from tilec import strategy
    from tilec.flash_bwd import atomic_dq_fits, fused_applies

    cfg = strategy.BWD_DEFAULT                        # 4 warps, split-Q
    assert [atomic_dq_fits(cfg, d) for d in (16, 32, 40, 64, 128, 256)] == \
        [False, False, True, True, True, True]
    eight = replace(cfg, atomic=strategy.FlashConfig(64, 128, 8, 2, False))
    assert not atomic_dq_fits(eight, 64) and atomic_dq_fits(eight, 128)
    assert atomic_dq_fits(replace(eight, atomic_dq_warps_n=4), 32)
    assert not atomic_dq_fits(replace(eight, atomic_dq_warps_n=2), 32)
    assert atomic_dq_fits(replace(eight, atomic_split=2), 256)
    assert not atomic_dq_fits(replace(eight, atomic_split=2), 128)
    assert fused_applies(32) and fused_applies(256) and not fused_applies(288)
    assert not fused_applies(256, softcap=1.0)


@pytest.mark.parametrize("head_dim", [32, 192, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_d32_d256_table_entries_match_float64(monkeypatch, head_dim, causal):
    """BWD_TABLE's D = 32 and D = 256 entries (bwdwide; head_dim 192 given
    D = 256's, as flash_bwd_config's lookup by tile width does): the fused
    kernel (FA2's blocks on warp grids, dQᵀ's 32 rows on a 2 x 4 grid at
    D = 32) and the pair, against float64, both orders of seqlen_q !=
    seqlen_k, GQA. The CPU runner ignores layouts: it checks the kernels'
    tiles and plumbing; tests/python/test_flash_bwd_grid.py runs the warp
    grids on a GPU."""
    from tilec import strategy

    cfg = strategy.flash_bwd_config(head_dim=strategy.tile_width(head_dim), causal=causal)
    assert cfg.fused and cfg.atomic_split == 1
    monkeypatch.setitem(strategy.BWD_TABLE, ("sm_80", head_dim, causal), cfg)
    _pair_and_fused_match_float64(head_dim, causal)


def _pair_and_fused_match_float64(head_dim, causal):
    """The pair and the fused kernel at the table's blocks against float64,
    both orders of seqlen_q != seqlen_k, GQA 2:1."""
    for sq, sk in ((70, 100), (100, 70)):
        q, k, v, dout = inputs(1, sq, sk, 2, 1, head_dim)
        out, lse, *refs = reference(q, k, v, dout, 1 / math.sqrt(head_dim), causal)
        for fused in (False, True):
            got = _flash_attn_backward(dout, q, k, v, out.half(), lse.float(), None, causal,
                                       deterministic=not fused, atomic_dq=fused)
            check_grads(got, refs, torch.float16,
                        f"d{head_dim} causal={causal} {sq}x{sk} {'fused' if fused else 'pair'}")


@pytest.mark.parametrize("head_dim", [80, 96, 160, 192, 224])
@pytest.mark.parametrize("causal", [False, True])
def test_head_dim_pieces_match_float64(head_dim, causal):
    """Head dims that are not powers of two, computed in power-of-two column
    pieces (strategy.bwd_head_dim_pieces: 80 = 64 + 16, 96 = 64 + 32,
    160 = 128 + 32, 192 = 128 + 64, 224 = 128 + 64 + 32) at the blocks the
    strategy picks (their tile width's table entries: d96 d128's, d192
    d256's): the pair and the fused kernel (one dQᵀ dot per piece into the
    blocked dq_accum, head_dim rows per query block, not the tile width's),
    both orders of seqlen_q != seqlen_k, GQA 2:1."""
    from tilec import strategy
    from tilec.flash_bwd import _atomic_pieces, _dq_accum_rows

    cfg = strategy.flash_bwd_config(head_dim=head_dim, causal=causal)
    pieces = strategy.head_dim_pieces(head_dim)
    assert len(pieces) > 1 and cfg.fused and cfg.atomic_split == 1
    assert _atomic_pieces(cfg, head_dim) == pieces and _dq_accum_rows(cfg, head_dim) == head_dim
    _pair_and_fused_match_float64(head_dim, causal)


def test_head_dim_pieces_shape_the_backward_tiles():
    """d96 = 64 + 32 in all three kernels and the preprocess: tiles 64 and 32
    wide, none 128 wide (the padded tile); per loop iteration the dq kernel
    has 6 dots (S and dP from two pieces each, dQ per piece), the dK/dV
    kernel 8 (Sᵀ, dPᵀ, dV, dK), the fused one 10 (a dQᵀ per piece, its
    32-row piece on a 2 x 4 warp grid where the 64-row one keeps the
    table's 4 x 2). Powers of two and split head dims keep one tile."""
    from tilec import strategy
    from tilec.flash_bwd import flash_bwd_kernels, preprocess_kernel

    kdq, kdkdv, _ = flash_bwd_kernels("bfloat16", 96, False)
    _, kfused, _ = flash_bwd_kernels("bfloat16", 96, False, atomic_dq=True)
    # The padded tiles: Q/dO 64 x 128 (dq, dkdv), K/V 128 x 128 (fused).
    for kernel, dots, pad in ((kdq, 6, "64x128"), (kdkdv, 8, "64x128"), (kfused, 10, "128x128")):
        ir = kernel.ir
        assert "x32xbf16>" in ir and "x64xbf16>" in ir, kernel.name
        assert f"tensor<{pad}xbf16>" not in ir, kernel.name
        loop = ir[ir.index("scf.for"):ir.index("scf.yield")]
        assert loop.count("tile.dot") == dots, kernel.name
    assert "warps_n = 4" in kfused.ir and "warps_n = 2" in kfused.ir
    pre = preprocess_kernel("bfloat16", 96).ir
    assert "64x32xbf16>" in pre and "64x128xbf16>" not in pre
    assert strategy.bwd_head_dim_pieces(96, 2) == ((0, 128),)
    assert strategy.bwd_head_dim_pieces(128) == ((0, 128),)
    # d40 = 32 + 16 at 16-query fused blocks on 4 warps: the 16-row dQᵀ
    # piece has no grid (4 warp columns of 4 queries): one 64-wide tile.
    assert strategy.bwd_head_dim_pieces(40, 1, 4, 64, 1, 16, 1) == ((0, 64),)
    assert strategy.bwd_head_dim_pieces(40, 1, 4, 64, 1, 64, 1) == ((0, 32), (32, 16))


def test_dot_warps_n():
    from tilec.strategy import dot_warps_n

    assert dot_warps_n(64, 64, 8, 2) == 2         # the table's d128 dQᵀ (4 x 2)
    assert dot_warps_n(32, 64, 8, 2) == 4         # d96's 32-row piece: 2 x 4
    assert dot_warps_n(16, 64, 8, 2) == 8         # d80's 16-row piece: 1 x 8
    assert dot_warps_n(128, 16, 8, 4) == 2        # a 16-column dK piece: 4 x 2
    with pytest.raises(ValueError, match="no warp grid"):
        dot_warps_n(16, 16, 4, 1)


@pytest.mark.parametrize("head_dim", [160, 192, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_fused_kernel_split_over_programs_adds_each_dq_once(monkeypatch, head_dim, causal):
    """The fused kernel with the head_dim split over programs (atomic_split
    2, BWD_WIDE.atomic: what atomic_dq=True runs above 128 without a table
    entry): each of the two programs of a key block adds its own half of
    dQᵀ's rows (before bwdwide both added all of them: dQ twice)."""
    from tilec import strategy

    assert strategy.BWD_WIDE.atomic_split == 2
    monkeypatch.setitem(strategy.BWD_TABLE, ("sm_80", head_dim, causal), strategy.BWD_WIDE)
    q, k, v, dout = inputs(1, 70, 90, 2, 1, head_dim)
    out, lse, *refs = reference(q, k, v, dout, 1 / math.sqrt(head_dim), causal)
    got = _flash_attn_backward(dout, q, k, v, out.half(), lse.float(), None, causal,
                               deterministic=False, atomic_dq=True)
    check_grads(got, refs, torch.float16, f"d{head_dim} causal={causal} split 2")


def _leaves(*tensors):
    return tuple(t.clone().requires_grad_() for t in tensors)


@pytest.mark.parametrize("hq, hk, sq, sk", [(4, 2, 40, 70), (3, 1, 70, 40)], ids=["gqa", "mqa"])
def test_flash_attn_func_gqa_mqa_gradients(hq, hk, sq, sk):
    """GQA/MQA through flash_attn_func with bottom-right causal and
    seqlen_q != seqlen_k both ways: dk, dv are summed over the query heads of
    each KV head (shaped like k, v)."""
    q, k, v, dout = inputs(2, sq, sk, hq, hk, 64)
    q, k, v = _leaves(q, k, v)
    out = tilec.flash_attn_func(q, k, v, causal=True, deterministic=True)
    out.backward(dout)
    ref_out, _, *refs = reference(q, k, v, dout, 0.125, True)
    assert rel_err(out.detach(), ref_out) < 1e-3
    assert k.grad.shape == k.shape and v.grad.shape == v.shape
    check_grads((q.grad, k.grad, v.grad), refs, torch.float16)


def test_packed_functions_train():
    """flash_attn_qkvpacked_func / flash_attn_kvpacked_func: the gradient of
    the packed tensor is the three (two) gradients in its slots."""
    q, k, v, dout = inputs(1, 50, 50, 2, 2, 64)
    _, _, *refs = reference(q, k, v, dout, 0.125, True)
    qkv = torch.stack([q, k, v], dim=2).requires_grad_()
    tilec.flash_attn_qkvpacked_func(qkv, causal=True).backward(dout)
    check_grads(qkv.grad.unbind(2), refs, torch.float16, "qkvpacked")
    q2, kv = q.clone().requires_grad_(), torch.stack([k, v], dim=2).requires_grad_()
    tilec.flash_attn_kvpacked_func(q2, kv, causal=True).backward(dout)
    check_grads((q2.grad, *kv.grad.unbind(2)), refs, torch.float16, "kvpacked")


def test_head_dim_not_a_multiple_of_8_trains():
    """head_dim 20: the forward zero-pads to 24, so does the backward (default
    scale 1/sqrt(20), not 1/sqrt(24))."""
    q, k, v, dout = inputs(1, 30, 45, 2, 1, 20)
    q, k, v = _leaves(q, k, v)
    tilec.flash_attn_func(q, k, v, causal=True).backward(dout)
    _, _, *refs = reference(q, k, v, dout, 1 / math.sqrt(20), True)
    check_grads((q.grad, k.grad, v.grad), refs, torch.float16)


def test_windows_that_are_causal_or_unbounded_train():
    """flash_attn's option handling: window (-1, 0) is causal, sides >=
    seqlen_k are unbounded; those have a backward."""
    q, k, v, dout = inputs(1, 30, 45, 2, 2, 64)
    for window, causal in (((-1, 0), True), ((45, 100), False)):
        leaves = _leaves(q, k, v)
        tilec.flash_attn_func(*leaves, window_size=window).backward(dout)
        _, _, *refs = reference(q, k, v, dout, 0.125, causal)
        check_grads(tuple(t.grad for t in leaves), refs, torch.float16, f"window {window}")


def test_autograd_wraps_the_forward_core(monkeypatch):
    """Inputs that require grad reach the core (and so its GPU fast path)
    only inside the autograd Function (grad mode off there); others reach it
    directly."""
    from tilec import flash_attn

    core = flash_attn._flash_attn_forward
    seen = []
    monkeypatch.setattr(flash_attn, "_flash_attn_forward",
                        lambda *a, **kw: seen.append(torch.is_grad_enabled()) or core(*a, **kw))
    q, k, v, _ = inputs(1, 16, 16, 1, 1, 64)
    assert tilec.flash_attn_func(q, k, v).grad_fn is None
    out = tilec.flash_attn_func(*_leaves(q, k, v))
    assert type(out.grad_fn).__name__ == "FlashAttnFuncBackward"
    assert seen == [True, False]


def test_torch_compile_fullgraph_trains_on_cpu():
    """torch.compile(fullgraph=True) of a function calling
    flash_attn_func(...).sum().backward(): the custom op's registered
    autograd runs the backward (tilec::flash_attn_backward); gradients vs
    float64 autograd. Also a compiled loss whose backward runs outside."""
    import torch._dynamo

    q, k, v, _ = inputs(1, 40, 70, 4, 2, 64)
    _, _, *refs = reference(q, k, v, torch.ones(1, 40, 4, 64), 0.125, True)

    def step(q, k, v):
        tilec.flash_attn_func(q, k, v, causal=True).sum().backward()

    def loss(q, k, v):
        return tilec.flash_attn_func(q, k, v, causal=True).sum()

    torch._dynamo.reset()
    leaves = _leaves(q, k, v)
    torch.compile(loss, fullgraph=True, backend="aot_eager")(*leaves).backward()
    check_grads(tuple(t.grad for t in leaves), refs, torch.float16, "compiled loss")
    if not hasattr(torch._dynamo.config, "trace_autograd_ops"):
        pytest.skip(f"torch {torch.__version__} cannot trace Tensor.backward() (no trace_autograd_ops)")
    torch._dynamo.reset()
    leaves = _leaves(q, k, v)
    # Inductor's on-disk caches key the backward graph on the forward's, not
    # on the backward op's schema: a cache written before that schema changed
    # (it gained cu_seqlens_k, max_seqlen_k, seqused_k) replays a stale call.
    import torch._inductor.config as inductor_config

    with torch._dynamo.config.patch(trace_autograd_ops=True), \
            inductor_config.patch(force_disable_caches=True):
        torch.compile(step, fullgraph=True)(*leaves)
    check_grads(tuple(t.grad for t in leaves), refs, torch.float16, "compiled step")


def test_varlen_backward_kernels_check_the_values_too(monkeypatch):
    """The backward's VARLEN kernels run the forward's in-kernel check of
    cu_seqlens (the values may be bad for a backward called directly, or
    changed since the forward): a bad sequence's programs touch nothing
    outside the tensors (the CPU runner reports any access past a buffer)
    and the error is raised by the next varlen call; the good sequence's
    gradients are right."""
    from tilec import flash_attn as fa

    for flags, *_ in fa._SEQUENCE_BUFFERS.values():
        flags[:] = 0
    lens = [5, 9]
    cu = torch.tensor([0, 5, 14], dtype=torch.int32)
    q, k, v, dout = (torch.randn(14, 2, 64, dtype=torch.float16) for _ in range(4))
    out, lse = fa._flash_attn_forward(q, k, v, None, False, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                      max_seqlen_q=9, max_seqlen_k=9)
    bad = torch.tensor([0, 5, 19], dtype=torch.int32)  # sequence 1 ends past the 14 rows
    dq, dk, dv = _flash_attn_backward(dout, q, k, v, out, lse, cu_seqlens_q=cu, cu_seqlens_k=bad,
                                      max_seqlen_q=9, max_seqlen_k=14)
    with pytest.raises(tilec.TilecValueError, match=r"flash_attn backward: an earlier varlen call "
                       r"on cpu had bad values, found by its kernel: 'cu_seqlens_k' ends sequence 1 at "
                       r"19, past the 14 tokens of 'k'"):
        _flash_attn_backward(dout, q, k, v, out, lse, cu_seqlens_q=cu, cu_seqlens_k=cu,
                             max_seqlen_q=9, max_seqlen_k=9)
    ref = [t[:5].unsqueeze(0) for t in (q, k, v, dout)]
    _, _, *refs = reference(*ref, 1 / 8, False)
    check_grads(tuple(g[:5].unsqueeze(0) for g in (dq, dk, dv)), refs, torch.float16, "sequence 0")
