"""tilec.flash_attn_func on CUDA torch tensors (skipped without a GPU).

On a GPU host without LLVM the kernels come from scripts/build_artifacts.py
output ($TILEC_ARTIFACTS or build/artifacts), matched by IR digest.
Reference: float64 attention on the GPU from the same f16/bf16 inputs.
Bound: ||out - ref|| / ||ref|| <= 1e-3 (f16) / 5e-3 (bf16: 8 mantissa bits,
P and O both rounded); max |lse - ref| <= 1e-4. Measured on an H200 with the
sm_80 artifacts (PTX JIT): f16 2.3e-4 .. 2.9e-4, bf16 1.9e-3 .. 2.3e-3 for
seqlens 77..4096, head_dim 64/128, causal or not.
"""

import math

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

import tilec  # noqa: E402
from tilec import compiler  # noqa: E402
from tilec import language as tl  # noqa: E402
from tilec import strategy  # noqa: E402
from tilec.flash_attn import flash_fwd_kernel  # noqa: E402

TOL = {torch.float16: 1e-3, torch.bfloat16: 5e-3}


def _flash_kernel(dtype, head_dim, causal):
    """The specialization flash_attn_func launches (the strategy table's)."""
    config = strategy.flash_fwd_config(head_dim=head_dim, causal=causal)
    return flash_fwd_kernel().specialize(DTYPE=tl.float16 if dtype == torch.float16 else tl.bfloat16,
                                         HEAD_DIM=head_dim, CAUSAL=causal, **config.constexprs())


def _have_kernel(dtype, head_dim, causal):
    if compiler.available():
        return True
    k = _flash_kernel(dtype, head_dim, causal)
    return compiler.find_prebuilt(k.name, k.ir, options=k.build_options()) is not None


def reference(q, k, v, scale, causal):
    """float64 attention; causal aligned to the bottom right as flash_attn >=
    2.1 (query i sees key j <= i + sk - sq). Rows that see no key (sq > sk,
    causal): out 0, lse +inf."""
    q, k, v = (x.double() for x in (q, k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if causal:
        sq, sk = s.shape[-2:]
        keep = torch.arange(sk, device=s.device)[None, :] <= torch.arange(sq, device=s.device)[:, None] + sk - sq
        s = s.masked_fill(~keep, -math.inf)
    seen = torch.isfinite(s).any(-1)
    p = torch.softmax(torch.where(seen[..., None], s, 0.0), -1) * seen[..., None]
    lse = torch.where(seen, torch.logsumexp(torch.where(seen[..., None], s, 0.0), -1), math.inf)
    return torch.einsum("bhqk,bkhd->bqhd", p, v), lse


def check_lse(lse, ref_lse, tol=1e-4):
    """+inf exactly where the reference is (rows that see no key: inf - inf
    would be NaN), within `tol` elsewhere."""
    seen = torch.isfinite(ref_lse)
    assert (lse[~seen] == math.inf).all()
    assert (lse.double()[seen] - ref_lse[seen]).abs().max().item() <= tol


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlens", [(77, 131), (1000, 333), (129, 1)])
def test_flash_attn_func_gpu(dtype, head_dim, causal, seqlens):
    if not _have_kernel(dtype, head_dim, causal):
        pytest.skip("no compiler and no prebuilt artifact for this variant")
    sq, sk = seqlens
    b, h = 2, 3
    q = torch.randn(b, sq, h, head_dim, device="cuda", dtype=dtype)
    k = torch.randn(b, sk, h, head_dim, device="cuda", dtype=dtype)
    v = torch.randn(b, sk, h, head_dim, device="cuda", dtype=dtype)
    out, lse = tilec.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    torch.cuda.synchronize()
    ref, ref_lse = reference(q, k, v, 1 / math.sqrt(head_dim), causal)
    assert out.shape == q.shape and out.dtype == dtype and lse.shape == (b, h, sq)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= TOL[dtype], err
    check_lse(lse, ref_lse)
    if causal and sq > sk:  # rows 0 .. sq - sk - 1 see no key
        assert (out[:, :sq - sk] == 0).all() and (lse[..., :sq - sk] == math.inf).all()


def test_flash_attn_func_gpu_strided_inputs():
    """Heads-major storage viewed as (b, s, h, d): non-packed strides."""
    if not _have_kernel(torch.float16, 64, False):
        pytest.skip("no compiler and no prebuilt artifact")
    b, s, h, d = 2, 300, 4, 64
    qkv = torch.randn(3, b, h, s, d, device="cuda", dtype=torch.float16)
    q, k, v = (t.transpose(1, 2) for t in qkv)
    out = tilec.flash_attn_func(q, k, v, softmax_scale=0.2)
    ref, _ = reference(q, k, v, 0.2, False)
    assert ((out.double() - ref).norm() / ref.norm()).item() <= TOL[torch.float16]


def test_flash_attn_func_gpu_argument_errors():
    q = torch.randn(1, 8, 2, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match=r"flash_attn_func: 'k' is on cpu, 'q' on cuda"):
        tilec.flash_attn_func(q, q.cpu(), q)
    with pytest.raises(TypeError, match=r"'v' must be float16 or bfloat16, got float32"):
        tilec.flash_attn_func(q, q, q.float())
    with pytest.raises(ValueError, match=r"'q' must have rank 4"):
        tilec.flash_attn_func(q[0], q, q)


@pytest.mark.parametrize("scale", [-0.125, 0.0])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_func_gpu_nonpositive_scale(scale, causal):
    """The kernel declares tl.assume(scale > 0); flash_attn_func runs scale < 0
    as (-q, -scale) and scale == 0 as (q = 0, 1.0), exactly."""
    if not _have_kernel(torch.float16, 128, causal):
        pytest.skip("no compiler and no prebuilt artifact for this variant")
    b, sq, sk, h, d = 2, 200, 333, 3, 128
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.float16) for s in (sq, sk, sk))
    q_before = q.clone()
    out, lse = tilec.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal, return_lse=True)
    torch.cuda.synchronize()
    ref, ref_lse = reference(q, k, v, scale, causal)
    assert torch.equal(q, q_before)
    assert ((out.double() - ref).norm() / ref.norm()).item() <= TOL[torch.float16]
    check_lse(lse, ref_lse)


def _args_by_name(kernel, **given):
    """The kernel's launch arguments in parameter order, given by name; every
    parameter must be named (a changed signature fails here, by name)."""
    names = [n for n, _ in kernel.params]
    assert sorted(given) == sorted(names), set(given) ^ set(names)
    return [given[n] for n in names]


def test_flash_kernel_gpu_launch_rejects_scale_it_assumes_positive():
    """Launched directly, the kernel refuses the scales its tl.assume rules out."""
    if not _have_kernel(torch.float16, 64, False):
        pytest.skip("no compiler and no prebuilt artifact for this variant")
    kernel = _flash_kernel(torch.float16, 64, False)
    q = torch.randn(1, 64, 1, 64, device="cuda", dtype=torch.float16)
    o = torch.full_like(q, float("nan"))
    lse = torch.empty(1, 1, 64, device="cuda", dtype=torch.float32)
    i32 = torch.zeros(2, device="cuda", dtype=torch.int32)

    def args(scale):
        strides = {f"stride_{t}{a}": st for t in "qkvo" for a, st in zip("bsh", q.stride()[:3])}
        return _args_by_name(kernel, q=q, k=q, v=q, o=o, lse=lse, seqlen_q=64, seqlen_k=64, num_heads=1,
                             batch=1, kv_group=1, **strides, stride_lseb=lse.stride(0),
                             stride_lseh=lse.stride(1), scale=scale, window_left=-1, window_right=-1,
                             softcap=1.0, alibi=torch.zeros(1, device="cuda"), stride_alibi_b=0,
                             cu_seqlens_q=i32, cu_seqlens_k=i32, seqused_k=i32, use_seqused_k=0)

    index = [n for n, _ in kernel.params].index("scale")
    for scale in (-0.5, 0.0, float("nan")):
        with pytest.raises(ValueError, match=rf"argument 'scale' \(param {index}, f32\): must be > 0 \(the kernel "
                                             r"was compiled with tl.assume\(scale > 0\)\), got (-0.5|0|nan)"):
            kernel(*args(scale))
    torch.cuda.synchronize()
    assert o.isnan().all()  # nothing ran
    kernel(*args(0.125))
    torch.cuda.synchronize()
    assert not o.isnan().any()


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_func_gpu_batch_heads_over_65535(causal):
    """batch · heads = 70,400 (a large-batch decode shape): the grid is (row
    blocks, heads, batch), so no axis exceeds CUDA's 65,535; every (b, h)
    slice is checked against SDPA in float64 on a sample of batches."""
    if not _have_kernel(torch.float16, 64, causal):
        pytest.skip("no compiler and no prebuilt artifact for this variant")
    b, h, sq, sk, d = 2200, 32, 3, 70, 64
    q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.float16)
    k = torch.randn(b, sk, h, d, device="cuda", dtype=torch.float16)
    v = torch.randn(b, sk, h, d, device="cuda", dtype=torch.float16)
    out = torch.full_like(q, float("nan"))
    out.copy_(tilec.flash_attn_func(q, k, v, causal=causal))
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    for idx in (torch.arange(0, b, 97).tolist() + [b - 1]):
        ref, _ = reference(q[idx:idx + 1], k[idx:idx + 1], v[idx:idx + 1], d ** -0.5, causal)
        err = ((out[idx:idx + 1].double() - ref).norm() / ref.norm()).item()
        assert err <= TOL[torch.float16], (idx, err)
