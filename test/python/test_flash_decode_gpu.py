"""tilec.flash_attn_with_kvcache on CUDA torch tensors (skipped without a GPU).

Needs a compiler on the GPU host: the _tilec extension or the tilec CLI
bundle (scripts/bundle.sh), since the kernels are specialized per call.
Reference: float64 attention on the GPU over each sequence's logical keys,
built before the call. Bounds as test_dsl_gpu.py: 1e-3 (f16) / 5e-3 (bf16)
relative, lse within 1e-3.
"""

import math

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

import tilec  # noqa: E402
from tilec import compiler  # noqa: E402

if compiler.compiler_kind() is None:
    pytest.skip("no compiler on this GPU host (neither the _tilec extension nor the tilec CLI "
                "bundle): the decode kernels are specialized per call", allow_module_level=True)

TOL = {torch.float16: 1e-3, torch.bfloat16: 5e-3}


def reference(q, keys, values, scale, causal):
    b, sq, h, d = q.shape
    out = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    lse = torch.full((b, h, sq), math.inf, dtype=torch.float64, device=q.device)
    for i in range(b):
        K, V = keys[i].double(), values[i].double()
        n, hk = K.shape[0], K.shape[1]
        K, V = K.repeat_interleave(h // hk, 1), V.repeat_interleave(h // hk, 1)
        s = torch.einsum("qhd,khd->hqk", q[i].double(), K) * scale
        if causal:
            vis = torch.arange(n, device=q.device)[None] <= torch.arange(sq, device=q.device)[:, None] + n - sq
            s = s.masked_fill(~vis, -math.inf)
        m = s.amax(-1, keepdim=True)
        ok = torch.isfinite(m)
        p = torch.where(ok, torch.exp(s - torch.where(ok, m, 0)), 0)
        l = p.sum(-1, keepdim=True)
        o = torch.einsum("hqk,khd->qhd", p / torch.where(l > 0, l, 1), V)
        out[i] = o
        lse[i] = torch.where(l[..., 0] > 0, (m + torch.log(l))[..., 0], math.inf)
    return out, lse


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("heads,heads_k", [(32, 32), (32, 8), (8, 1)])
@pytest.mark.parametrize("page", [0, 16, 256])
@pytest.mark.parametrize("seqlen_q,num_splits", [(1, 0), (1, 1), (4, 3)])
def test_decode_gpu(dtype, heads, heads_k, page, seqlen_q, num_splits):
    g = torch.Generator(device="cuda").manual_seed(0)
    lens = [1, 17, 1000, 5000]
    d, new = 128, 1
    batch = len(lens)
    cap = max(lens) + new
    keys = [torch.randn(n, heads_k, d, device="cuda", dtype=dtype, generator=g) for n in lens]
    values = [torch.randn(n, heads_k, d, device="cuda", dtype=dtype, generator=g) for n in lens]
    kn = torch.randn(batch, new, heads_k, d, device="cuda", dtype=dtype, generator=g)
    vn = torch.randn_like(kn)
    q = torch.randn(batch, seqlen_q, heads, d, device="cuda", dtype=dtype, generator=g)
    table = None
    if page:
        width = -(-cap // page)
        perm = torch.randperm(batch * width, device="cuda")
        table = perm.view(batch, width).to(torch.int32)
        kc = torch.randn(batch * width, page, heads_k, d, device="cuda", dtype=dtype)
        vc = torch.randn_like(kc)
        for b, n in enumerate(lens):
            for i in range(0, n, page):
                kc[table[b, i // page], :min(page, n - i)] = keys[b][i:i + page]
                vc[table[b, i // page], :min(page, n - i)] = values[b][i:i + page]
    else:
        kc = torch.randn(batch, cap, heads_k, d, device="cuda", dtype=dtype)
        vc = torch.randn_like(kc)
        for b, n in enumerate(lens):
            kc[b, :n], vc[b, :n] = keys[b], values[b]
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn,
                                             cache_seqlens=torch.tensor(lens, dtype=torch.int32, device="cuda"),
                                             block_table=table, causal=True, num_splits=num_splits,
                                             return_softmax_lse=True)
    keys = [torch.cat([keys[b], kn[b]]) for b in range(batch)]
    values = [torch.cat([values[b], vn[b]]) for b in range(batch)]
    ref, ref_lse = reference(q, keys, values, d ** -0.5, True)
    assert torch.isfinite(out).all()
    assert ((out.double() - ref).norm() / ref.norm()).item() < TOL[dtype]
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3
