"""The combine fused into the decode kernel (flash_decode.FUSED_COMBINE,
kernels/flash_decode.py FUSED: the last split program of a row block to
arrive on its counter merges the partials) on the CPU runner: against a
float64 reference and against the two-kernel path (decode + combine), for
split counts 1..many (empty splits among them), cache lengths 0, 1, page−1,
page, page+1, paged and contiguous caches, GQA ratios 1/4/8, the CPU's own
Q tile and the GPU plan's (64 rows, 4 warps: the merge's (MERGE_D,
MERGE_SPLITS) tiles of the GPU); outputs poisoned with NaN so rows the
merge misses show. Two calls in a row give the same bits and leave every
counter at 0 (the kernel resets them: no memset per call). The GPU cases
at the end skip without one.
"""

import math

import numpy as np
import pytest

import tilec
from tilec import flash_decode as fd

from test_flash_decode import check, contiguous_case, f16, needs_cpu, paged_pool, reference

pytestmark = needs_cpu


@pytest.fixture
def poisoned(monkeypatch):
    """Host outputs start as NaN (floats) or a large int, not zeros or old data."""
    def empty(self, shape, dtype):
        if self.torch:
            t = self.t.empty(shape, dtype=getattr(self.t, dtype), device=self.device)
            return t.fill_(math.nan) if t.is_floating_point() else t.fill_(1 << 20)
        return np.full(shape, np.nan if "float" in dtype else 1 << 20, dtype=dtype)

    monkeypatch.setattr(fd._Arrays, "empty", empty)


def _call(q, kc, vc, lens, table, splits, fused, monkeypatch):
    monkeypatch.setattr(fd, "FUSED_COMBINE", fused)
    launched = []
    real = fd._launch
    monkeypatch.setattr(fd, "_launch", lambda k, a, g, on_gpu: (launched.append(k.name), real(k, a, g, on_gpu)))
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table,
                                             num_splits=splits, return_softmax_lse=True)
    return np.asarray(out).copy(), np.asarray(lse).copy(), launched


def _counters_zero():
    return all(not np.asarray(buf).any() for buf in fd._COUNTERS.values())


CASES = [
    # (heads, heads_k, page, lens, capacity, splits)
    (4, 1, 0, [300], 320, 3),              # MQA-like group of 4, 3 splits
    (8, 8, 0, [0, 1, 63, 64, 65], 130, 5),  # MHA, lengths 0/1/page±1: empty splits, rows that see nothing
    (8, 1, 16, [15, 16, 17, 1], 48, 7),    # GQA 8, pages of 16: lengths page−1/page/page+1
    (32, 8, 64, [200, 129], 256, 2),       # GQA 4, pages of 64
    (4, 4, 0, [100], 128, 33),             # more splits than key blocks: 31 empty ones
    (2, 1, 0, [700], 704, 11),
]


@pytest.mark.parametrize("heads,heads_k,page,lens,cap,splits", CASES)
@pytest.mark.parametrize("gpu_tile", [False, True])
def test_fused_matches_reference_and_two_kernels(heads, heads_k, page, lens, cap, splits, gpu_tile,
                                                 poisoned, monkeypatch):
    if gpu_tile:
        monkeypatch.setattr(fd, "CPU_BLOCK_M", 64)    # the GPU plan's Q tile: 4 warps
    rng = np.random.default_rng()
    d = 64
    batch = len(lens)
    if page:
        keys = [f16(rng, n, heads_k, d) for n in lens]
        values = [f16(rng, n, heads_k, d) for n in lens]
        kc, vc, table = paged_pool(rng, keys, values, page, width=cap // page)
    else:
        q, kc, vc, keys, values = contiguous_case(rng, batch, 1, heads, heads_k, d, lens, cap)
        table = None
    q = f16(rng, batch, 1, heads, d)
    lens_t = np.array(lens, np.int32)
    ref, ref_lse = reference(q, keys, values, 1 / math.sqrt(d))

    out_f, lse_f, names_f = _call(q, kc, vc, lens_t, table, splits, True, monkeypatch)
    assert any("_fused" in n for n in names_f) and not any(n.startswith("flash_combine") for n in names_f)
    check(out_f, lse_f, ref, ref_lse)
    assert _counters_zero()
    out_u, lse_u, names_u = _call(q, kc, vc, lens_t, table, splits, False, monkeypatch)
    assert any(n.startswith("flash_combine") for n in names_u) and not any("_fused" in n for n in names_u)
    check(out_u, lse_u, ref, ref_lse)
    # The same partials merged by the same formula (one split tile, in split order).
    np.testing.assert_allclose(out_f.astype(np.float64), out_u.astype(np.float64), atol=2e-3, rtol=0)
    seen = np.isfinite(ref_lse)
    np.testing.assert_array_equal(lse_f[~seen], np.inf)
    np.testing.assert_allclose(lse_f[seen], lse_u[seen], atol=1e-5, rtol=0)
    # Again: the counters were reset by the kernel, and the merge is deterministic.
    out_2, lse_2, _ = _call(q, kc, vc, lens_t, table, splits, True, monkeypatch)
    np.testing.assert_array_equal(out_2, out_f)
    np.testing.assert_array_equal(lse_2, lse_f)
    assert _counters_zero()


@pytest.mark.parametrize("d,seqlen_q,causal", [(80, 1, False), (64, 3, True), (128, 2, False)])
def test_fused_head_dims_and_query_rows(d, seqlen_q, causal, poisoned, monkeypatch):
    """Head dims below their power of two (the merge's feature chunks end at
    head_dim), several query rows per head (packed rows group × seqlen_q,
    causal: the last rows see one more key each)."""
    rng = np.random.default_rng()
    lens = [150, 97]
    q, kc, vc, keys, values = contiguous_case(rng, 2, seqlen_q, 8, 2, d, lens, 192)
    ref, ref_lse = reference(q, keys, values, 1 / math.sqrt(d), causal=causal)
    monkeypatch.setattr(fd, "FUSED_COMBINE", True)
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=np.array(lens, np.int32), causal=causal,
                                             num_splits=4, return_softmax_lse=True)
    check(out, lse, ref, ref_lse)
    assert _counters_zero()


def _merge_path(plan, d):
    """Which of _merge_rows' loops a plan's kernel runs (its constexpr test)."""
    dp = max(16, 1 << (d - 1).bit_length())
    if plan.merge_d >= dp and plan.merge_splits * plan.merge_d <= 32 * 32 * plan.num_warps:
        return "prefetch"
    return "rows" if plan.merge_d >= dp else "chunks"


@pytest.mark.parametrize("d,splits,block_m,path", [(64, 5, 64, "prefetch"), (128, 33, 64, "rows"),
                                                   (64, 33, None, "chunks")])
def test_fused_merge_paths(d, splits, block_m, path, poisoned, monkeypatch):
    """The merge's three loops: the next row's tiles prefetched (one feature
    chunk, small tiles), row by row (one chunk, tiles too large to hold two
    rows: the 64-row tile's 33 splits padded to 64 at d128, what batch 1 at
    128k keys runs), and feature chunk by chunk (the one-warp tile at 64
    splits); four packed rows per KV head, a row no split sees (length 0)."""
    monkeypatch.setattr(fd, "CPU_BLOCK_M", block_m)
    monkeypatch.setattr(fd, "FUSED_COMBINE", True)
    rng = np.random.default_rng()
    lens = [700, 0, 3]
    q, kc, vc, keys, values = contiguous_case(rng, 3, 1, 8, 2, d, lens, 704)
    plan = fd.decode_plan(3, 1, 8, 2, d, 704, 0, splits, False, 132, True)
    assert plan.fused and _merge_path(plan, d) == path
    ref, ref_lse = reference(q, keys, values, 1 / math.sqrt(d))
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=np.array(lens, np.int32),
                                             num_splits=splits, return_softmax_lse=True)
    check(out, lse, ref, ref_lse)
    assert _counters_zero()


def test_one_split_is_unchanged(monkeypatch):
    """num_splits=1 writes the output directly: no fused kernel, no counters."""
    rng = np.random.default_rng()
    q, kc, vc, keys, values = contiguous_case(rng, 2, 1, 8, 2, 64, [50, 90], 128)
    monkeypatch.setattr(fd, "_COUNTERS", {})
    out, lse, names = _call(q, kc, vc, np.array([50, 90], np.int32), None, 1, True, monkeypatch)
    assert len(names) == 1 and "_split" not in names[0] and "_fused" not in names[0]
    assert fd._COUNTERS == {}
    check(out, lse, *reference(q, keys, values, 1 / math.sqrt(64)))


def test_stale_counter_is_what_the_reset_prevents(monkeypatch):
    """Why the kernel resets its counters: one left at 1 (what a kernel that
    did not reset would leave after an odd count) makes the group's second
    program "last", which merges before the third split has written its
    partial (poisoned here: NaN shows), and leaves the count stale again.
    The kernel's own calls leave 0 behind (checked after every call above),
    and from 0 the call is right."""
    rng = np.random.default_rng()
    q, kc, vc, keys, values = contiguous_case(rng, 1, 1, 4, 1, 64, [300], 320)
    ref, ref_lse = reference(q, keys, values, 1 / math.sqrt(64))
    monkeypatch.setattr(fd, "_COUNTERS", {})
    lens = np.array([300], np.int32)
    out, lse, _ = _call(q, kc, vc, lens, None, 3, True, monkeypatch)
    check(out, lse, ref, ref_lse)
    [buf] = fd._COUNTERS.values()
    assert not buf.any()
    buf[0] = 1
    monkeypatch.setattr(fd._Arrays, "empty", lambda self, shape, dtype: np.full(shape, np.nan, dtype))
    out, lse, _ = _call(q, kc, vc, lens, None, 3, True, monkeypatch)
    assert np.isnan(out).any()
    assert buf[0] == 1
    buf[0] = 0
    out, lse, _ = _call(q, kc, vc, lens, None, 3, True, monkeypatch)
    check(out, lse, ref, ref_lse)
    assert not buf.any()


def test_counters_grow_and_stay_zero(monkeypatch):
    """A call with more program groups than the buffer holds gets a new,
    larger zeroed buffer; the old one is not used again."""
    rng = np.random.default_rng()
    monkeypatch.setattr(fd, "_COUNTERS", {})
    small = fd._counters(lambda size: np.zeros(size, np.int32), 4, "host")
    fd._COUNTERS[("host", None)] = small[:4]       # pretend the buffer holds 4 counters
    batch = 3
    q, kc, vc, keys, values = contiguous_case(rng, batch, 1, 8, 4, 64, [100, 130, 70], 192)
    out, lse, _ = _call(q, kc, vc, np.array([100, 130, 70], np.int32), None, 2, True, monkeypatch)
    check(out, lse, *reference(q, keys, values, 1 / math.sqrt(64)))
    grown = fd._COUNTERS[("host", None)]
    assert grown.shape[0] >= batch * 4 and grown.shape[0] > 4 and not grown.any()


# --- GPU (skip without one) ---


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    return torch


@pytest.mark.parametrize("batch,heads,heads_k,cap,page,mixed", [
    (1, 32, 8, 32768, 0, False), (1, 32, 8, 32768, 16, False), (16, 32, 8, 8192, 0, True),
    (1, 32, 32, 32768, 0, False), (4, 16, 2, 4096, 256, True),
])
def test_fused_gpu_matches_two_kernels_and_replays(batch, heads, heads_k, cap, page, mixed, monkeypatch):
    """On the GPU: fused vs the two-kernel path vs float64, bitwise the same
    on repeated calls, and a CUDA graph of the call replayed three times
    (the counters reset themselves inside the graph)."""
    torch = _torch_cuda()
    g = torch.Generator(device="cuda").manual_seed(0)
    d, dt = 128, torch.bfloat16
    lens = (torch.randint(1, cap + 1, (batch,), generator=g, device="cuda") if mixed
            else torch.full((batch,), cap - 17, device="cuda")).to(torch.int32)
    q = torch.randn(batch, 1, heads, d, device="cuda", dtype=dt, generator=g)
    if page:
        width = cap // page
        kc = torch.randn(batch * width, page, heads_k, d, device="cuda", dtype=dt, generator=g)
        vc = torch.randn_like(kc)
        table = torch.randperm(batch * width, device="cuda", generator=g).view(batch, width).to(torch.int32)
    else:
        kc = torch.randn(batch, cap, heads_k, d, device="cuda", dtype=dt, generator=g)
        vc = torch.randn_like(kc)
        table = None

    def call():
        return tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table,
                                             return_softmax_lse=True)

    monkeypatch.setattr(fd, "FUSED_COMBINE", False)
    out_u, lse_u = call()
    monkeypatch.setattr(fd, "FUSED_COMBINE", True)
    out_f, lse_f = call()
    torch.cuda.synchronize()
    out_2, lse_2 = call()
    assert torch.equal(out_2, out_f) and torch.equal(lse_2, lse_f)
    assert (out_f.float() - out_u.float()).abs().max().item() < 2e-2
    assert (lse_f - lse_u).abs().max().item() < 1e-3
    # float64 reference for the first sequence
    n = int(lens[0])
    if page:
        pages = table[0, : -(-n // page)].long()
        K, V = kc[pages].reshape(-1, heads_k, d)[:n], vc[pages].reshape(-1, heads_k, d)[:n]
    else:
        K, V = kc[0, :n], vc[0, :n]
    G = heads // heads_k
    s = torch.einsum("hd,khd->hk", q[0, 0].double(), K.double().repeat_interleave(G, 1)) / math.sqrt(d)
    ref = torch.einsum("hk,khd->hd", torch.softmax(s, -1), V.double().repeat_interleave(G, 1))
    rel = (out_f[0, 0].double() - ref).norm() / ref.norm()
    assert rel.item() < 5e-3
    # A captured call, replayed: same bits each time.
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_g, lse_g = call()
    for _ in range(3):
        out_g.fill_(math.nan)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out_g, out_f) and torch.equal(lse_g, lse_f)
    assert all(int(buf.abs().sum()) == 0 for key, buf in fd._COUNTERS.items() if key[0] != "host")
