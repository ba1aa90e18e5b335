"""tilec.flex_attention on CUDA tensors (skipped without a GPU): the same
mods as test_flex.py, launched through the GPU kernel, against a float64
reference computed on the GPU from the same f16/bf16 inputs with the mods
evaluated on torch index tensors. Bounds: ||o - ref|| / ||ref|| <= 1e-3
(f16) / 8e-3 (bf16); max |lse - ref| <= 1e-4 over rows that see a key;
rows that see no key give 0 and lse -inf; outputs are fresh each call
(torch.empty), so unwritten rows would show as garbage, not as zeros.
"""

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

import tilec  # noqa: E402
from tilec import language as tl  # noqa: E402

TOL = {torch.float16: 1e-3, torch.bfloat16: 8e-3}


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < 100) | (q_idx >= kv_idx)


def chunked(b, h, q_idx, kv_idx):
    return q_idx // 96 == kv_idx // 96


def softcap(score, b, h, q_idx, kv_idx):
    return 20.0 * tl.tanh(score / 20.0)


def alibi(score, b, h, q_idx, kv_idx):
    return score - (h + 1) * 0.0625 * tl.abs(q_idx - kv_idx)


def reference(q, k, v, scale, score_mod, mask_mod):
    B, H, SQ, _ = q.shape
    HK, SK = k.shape[1], k.shape[2]
    qd, kd, vd = (t.double() for t in (q, k, v))
    kd, vd = (t.repeat_interleave(H // HK, dim=1) for t in (kd, vd))
    s = torch.einsum("bhqd,bhkd->bhqk", qd, kd) * scale
    qi = torch.arange(SQ, device=q.device)[:, None]
    ki = torch.arange(SK, device=q.device)[None, :]
    bi = torch.arange(B, device=q.device)[:, None, None, None]
    hi = torch.arange(H, device=q.device)[None, :, None, None]
    if score_mod is not None:
        s = score_mod(s, bi, hi, qi, ki)
    if mask_mod is not None:
        s = torch.where(mask_mod(bi, hi, qi, ki), s, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    o = (p @ vd) / torch.where(l > 0, l, torch.ones_like(l))
    return o, (torch.log(l) + m)[..., 0]


CASES = [
    (causal, None, 1000, 1000), (causal, softcap, 777, 1300), (prefix_lm, alibi, 1000, 1000),
    (chunked, None, 513, 513), (None, softcap, 333, 1000),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("mask_mod,score_mod,sq,sk", CASES)
def test_flex_gpu(mask_mod, score_mod, sq, sk, dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 4, sq, 128, device="cuda", dtype=dtype, generator=g)
    k, v = (torch.randn(2, 2, sk, 128, device="cuda", dtype=dtype, generator=g) for _ in range(2))
    o, lse = tilec.flex_attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, enable_gqa=True,
                                  return_lse=True)
    ro, rl = reference(q, k, v, 128 ** -0.5, score_mod, mask_mod)
    empty = torch.isneginf(rl)
    assert (o[empty] == 0).all() and torch.isneginf(lse[empty]).all()
    assert ((o.double() - ro).norm() / ro.norm()).item() <= TOL[dtype]
    assert (lse[~empty].double() - rl[~empty]).abs().max().item() <= 1e-4


def test_document_ids_on_the_gpu():
    g = torch.Generator(device="cuda").manual_seed(1)
    lengths = torch.tensor([300, 17, 900, 783], device="cuda")
    ids = torch.repeat_interleave(torch.arange(4, device="cuda", dtype=torch.int32), lengths)

    def document_causal(b, h, q_idx, kv_idx):
        return (ids[q_idx] == ids[kv_idx]) & (q_idx >= kv_idx)

    q, k, v = (torch.randn(1, 2, 2000, 64, device="cuda", dtype=torch.float16, generator=g)
               for _ in range(3))
    o = tilec.flex_attention(q, k, v, mask_mod=document_causal)
    ro, _ = reference(q, k, v, 0.125, None, document_causal)
    assert ((o.double() - ro).norm() / ro.norm()).item() <= 1e-3
