"""The stand-in flash_attn package (bench/upstream/flash_attn) that runs
flash-attention's own tests/test_flash_attn.py against tilec: upstream's
private layer -- the raw entry points flash_attn_gpu.fwd/varlen_fwd/bwd/
varlen_bwd and the _flash_attn_*_forward/_backward wrappers, which upstream's
newest tests call -- gives float64 autograd's results on torch CPU tensors
(the CPU runner), and refuses what upstream refuses with a RuntimeError."""
import math
import os
import sys

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "upstream"))
from flash_attn import flash_attn_interface as fai  # noqa: E402

# Kept as `fai` only: no later import in this session finds the stand-in.
sys.path.pop(0)
for _name in [m for m in sys.modules if m == "flash_attn" or m.startswith("flash_attn.")]:
    del sys.modules[_name]

from test_flash_bwd import HAVE_CPU, REL_TOL, check_grads, inputs, reference, rel_err  # noqa: E402

pytestmark = pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")


def test_raw_fwd_and_bwd_match_float64():
    q, k, v, dout = inputs(1, 33, 47, 2, 1, 40)  # GQA, head dim not a multiple of 8
    scale = 1 / math.sqrt(40)
    out, lse, s_dmask, rng_state = fai.flash_attn_gpu.fwd(q, k, v, None, None, 0.0, scale, True,
                                                          -1, -1, 0.0, False, None)
    ref_out, ref_lse, *refs = reference(q, k, v, dout, scale, True)
    assert rel_err(out, ref_out) < REL_TOL[torch.float16]
    finite = torch.isfinite(ref_lse)
    assert torch.allclose(lse.double()[finite], ref_lse[finite], atol=1e-3)
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    got = fai.flash_attn_gpu.bwd(dout, q, k, v, out, lse, dq, dk, dv, None, 0.0, scale, True,
                                 -1, -1, 0.0, False, None, rng_state)
    assert got[0] is dq and got[1] is dk and got[2] is dv  # written into the given tensors
    check_grads((dq, dk, dv), refs, torch.float16, "raw bwd")
    delta = (dout.double() * out.double()).sum(-1).transpose(1, 2)
    assert torch.allclose(got[3].double(), delta, rtol=1e-3, atol=1e-3)


def test_varlen_forward_over_pages_matches_dense():
    # upstream's test_flash_attn_varlen_paged_kv_num_splits on a small pool:
    # keys in pages of 16 named by block_table, lengths in seqused_k.
    torch.manual_seed(0)
    page, lens = 16, [20, 37]
    q = torch.randn(2, 2, 32, dtype=torch.float16)
    pool_k, pool_v = (torch.randn(6, page, 1, 32, dtype=torch.float16) for _ in range(2))
    table = torch.tensor([[4, 1, 0], [2, 5, 3]], dtype=torch.int32)
    used = torch.tensor(lens, dtype=torch.int32)
    cu_k = torch.nn.functional.pad(used.cumsum(0), (1, 0)).to(torch.int32)
    cu_q = torch.arange(3, dtype=torch.int32)
    kw = dict(block_table=table, seqused_k=used, window_size_left=-1, window_size_right=0)
    out = fai._flash_attn_varlen_forward(q, pool_k, pool_v, cu_q, cu_k, 1, max(lens), 0.0, None,
                                         False, **kw)[0]
    assert torch.equal(out, fai._flash_attn_varlen_forward(q, pool_k, pool_v, cu_q, cu_k, 1,
                                                           max(lens), 0.0, None, False, **kw,
                                                           num_splits=0)[0])
    for b, n in enumerate(lens):
        k = pool_k[table[b].long()].reshape(-1, 1, 32)[:n][None]
        v = pool_v[table[b].long()].reshape(-1, 1, 32)[:n][None]
        ref = reference(q[b][None, None], k, v, torch.zeros(1, 1, 2, 32), 1 / math.sqrt(32),
                        False)[0]
        assert rel_err(out[b][None, None], ref) < REL_TOL[torch.float16], b
    with pytest.raises(RuntimeError, match="num_splits > 1 is not supported"):
        fai._flash_attn_varlen_forward(q, pool_k, pool_v, cu_q, cu_k, 1, max(lens), 0.0, None,
                                       False, **kw, num_splits=2)


def test_a_generator_is_refused_as_upstream():
    q = torch.zeros(1, 1, 2, 8, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"generator` argument is no longer supported"):
        fai.flash_attn_gpu.fwd(q, q, q, None, None, 0.0, 1.0, True, -1, -1, 0.0, False,
                               torch.empty(1))
