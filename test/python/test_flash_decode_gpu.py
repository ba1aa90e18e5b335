"""tilec.flash_attn_with_kvcache on CUDA torch tensors; without a GPU, two of
its cases on CPU torch tensors through the CPU runner with the GPU's plan
(64-row Q tile over 4 warps, num_splits from the heuristic for 132 SMs), so
that CI runs this file's own checks (the rest skip: GPU only, for time).

Needs a compiler on the GPU host: the _tilec extension or the tilec CLI
bundle (scripts/bundle.sh), since the kernels are specialized per call.
Reference: float64 attention over each sequence's logical keys, built before
the call. Bounds as test_dsl_gpu.py: 1e-3 (f16) / 5e-3 (bf16) relative, lse
within 1e-3; rows that see no key (lse +inf) compared for equality.
"""

import math

import pytest

torch = pytest.importorskip("torch")

import tilec  # noqa: E402
from tilec import compiler  # noqa: E402
from tilec import flash_decode  # noqa: E402

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
if ON_GPU and compiler.compiler_kind() is None:
    pytest.skip("no compiler on this GPU host (neither the _tilec extension nor the tilec CLI "
                "bundle): the decode kernels are specialized per call", allow_module_level=True)
if not ON_GPU and not (compiler.available() and getattr(compiler.native(), "has_cpu_runner", False)):
    pytest.skip("no CUDA GPU, and no _tilec extension with a CPU runner to run the GPU cases on",
                allow_module_level=True)

# The cases the CPU also runs (dtype, heads, heads_k, page, seqlen_q, num_splits):
# rows with no key, splits given and chosen, paged and contiguous, GQA and MQA.
CPU_CASES = {("float16", 32, 8, 16, 4, 3), ("bfloat16", 8, 1, 0, 4, 0)}

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
@pytest.mark.parametrize("page", [0, 16, 32, 256])
@pytest.mark.parametrize("seqlen_q,num_splits", [(1, 0), (1, 1), (4, 3), (4, 0)])
def test_decode_gpu(dtype, heads, heads_k, page, seqlen_q, num_splits, monkeypatch):
    if not ON_GPU:
        if (str(dtype).split(".")[-1], heads, heads_k, page, seqlen_q, num_splits) not in CPU_CASES:
            pytest.skip("no CUDA GPU: the CPU runner runs only this test's CPU_CASES (time)")
        monkeypatch.setattr(flash_decode, "CPU_BLOCK_M", 64)  # the GPU's Q tile
    g = torch.Generator(device=DEVICE).manual_seed(0)
    lens = [1, 17, 1000, 5000]
    d, new = 128, 1
    batch = len(lens)
    cap = max(lens) + new
    keys = [torch.randn(n, heads_k, d, device=DEVICE, dtype=dtype, generator=g) for n in lens]
    values = [torch.randn(n, heads_k, d, device=DEVICE, dtype=dtype, generator=g) for n in lens]
    kn = torch.randn(batch, new, heads_k, d, device=DEVICE, dtype=dtype, generator=g)
    vn = torch.randn_like(kn)
    q = torch.randn(batch, seqlen_q, heads, d, device=DEVICE, dtype=dtype, generator=g)
    table = None
    if page:
        width = -(-cap // page)
        perm = torch.randperm(batch * width, device=DEVICE)
        table = perm.view(batch, width).to(torch.int32)
        kc = torch.randn(batch * width, page, heads_k, d, device=DEVICE, dtype=dtype)
        vc = torch.randn_like(kc)
        for b, n in enumerate(lens):
            for i in range(0, n, page):
                kc[table[b, i // page], :min(page, n - i)] = keys[b][i:i + page]
                vc[table[b, i // page], :min(page, n - i)] = values[b][i:i + page]
    else:
        kc = torch.randn(batch, cap, heads_k, d, device=DEVICE, dtype=dtype)
        vc = torch.randn_like(kc)
        for b, n in enumerate(lens):
            kc[b, :n], vc[b, :n] = keys[b], values[b]
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn,
                                             cache_seqlens=torch.tensor(lens, dtype=torch.int32, device=DEVICE),
                                             block_table=table, causal=True, num_splits=num_splits,
                                             return_softmax_lse=True)
    for b, n in enumerate(lens):            # the new token is in the cache, in place
        slot = (table[b, n // page], n % page) if page else (b, n)
        assert torch.equal(kc[slot], kn[b, 0]) and torch.equal(vc[slot], vn[b, 0])
    keys = [torch.cat([keys[b], kn[b]]) for b in range(batch)]
    values = [torch.cat([values[b], vn[b]]) for b in range(batch)]
    ref, ref_lse = reference(q, keys, values, d ** -0.5, True)
    assert torch.isfinite(out).all()
    assert ((out.double() - ref).norm() / ref.norm()).item() < TOL[dtype]
    # Rows that see no key (batch 0 has 2 keys, so with seqlen_q = 4 rows 0
    # and 1 see none) have lse +inf in both: compared for equality, since
    # inf - inf is NaN.
    seen = torch.isfinite(ref_lse)
    assert (~seen).any() == (seqlen_q > 1)
    assert (lse[~seen] == math.inf).all()
    assert (lse.double()[seen] - ref_lse[seen]).abs().max().item() < 1e-3


@pytest.mark.parametrize("heads,heads_k", [(32, 8), (32, 1), (16, 8)])
@pytest.mark.parametrize("n", [1, 100, 40000])
@pytest.mark.parametrize("page", [0, 256])
def test_single_sequence_tile_gpu(heads, heads_k, n, page, monkeypatch):
    """Batch 1 with 2..32 packed rows runs SINGLE_SEQUENCE_TILE (32 rows, 2
    warps) at GPU_TILE's split count: the plan, and the output, lse and
    appended cache against float64. Without a GPU, one case on the CPU
    runner with the 32-row tile."""
    if not ON_GPU:
        if (heads, heads_k, n, page) != (32, 8, 100, 0):
            pytest.skip("no CUDA GPU: the CPU runner runs one case (time)")
        monkeypatch.setattr(flash_decode, "CPU_BLOCK_M", 32)
    dt, d = torch.bfloat16, 128
    g = torch.Generator(device=DEVICE).manual_seed(3)
    if ON_GPU:
        plan = flash_decode.decode_plan(1, 1, heads, heads_k, d, n + 1 if not page else -(-(n + 1) // page) * page,
                                        page, 0, True, torch.cuda.get_device_properties(0).multi_processor_count,
                                        True)
        assert (plan.block_m, plan.num_warps) == (32, 2)
    keys = torch.randn(n, heads_k, d, device=DEVICE, dtype=dt, generator=g)
    values = torch.randn(n, heads_k, d, device=DEVICE, dtype=dt, generator=g)
    kn = torch.randn(1, 1, heads_k, d, device=DEVICE, dtype=dt, generator=g)
    vn = torch.randn_like(kn)
    q = torch.randn(1, 1, heads, d, device=DEVICE, dtype=dt, generator=g)
    table = None
    if page:
        width = -(-(n + 1) // page)
        table = torch.randperm(width + 2, device=DEVICE)[:width].view(1, width).to(torch.int32)
        kc = torch.randn(width + 2, page, heads_k, d, device=DEVICE, dtype=dt, generator=g)
        vc = torch.randn_like(kc)
        for i in range(0, n, page):
            kc[table[0, i // page], :min(page, n - i)] = keys[i:i + page]
            vc[table[0, i // page], :min(page, n - i)] = values[i:i + page]
    else:
        kc = torch.randn(1, n + 1, heads_k, d, device=DEVICE, dtype=dt, generator=g)
        vc = torch.randn_like(kc)
        kc[0, :n], vc[0, :n] = keys, values
    lens = torch.tensor([n], dtype=torch.int32, device=DEVICE)
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=lens, block_table=table,
                                             return_softmax_lse=True)
    slot = (table[0, n // page], n % page) if page else (0, n)
    assert torch.equal(kc[slot], kn[0, 0]) and torch.equal(vc[slot], vn[0, 0])
    ref, ref_lse = reference(q, [torch.cat([keys, kn[0]])], [torch.cat([values, vn[0]])], d ** -0.5, False)
    assert ((out.double() - ref).norm() / ref.norm()).item() < TOL[dt]
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3


@pytest.mark.skipif(not ON_GPU, reason="no CUDA GPU")
@pytest.mark.parametrize("page", [0, 16])
@pytest.mark.parametrize("fused_append", [True, False])
def test_decode_steps_append_gpu(page, fused_append, monkeypatch):
    """A serving loop: 96 decode steps back to back (no sync), each
    appending its token and attending over the cache with it. With
    FUSED_APPEND the decode kernel stores the token and reads it back in the
    same launch (barrier, then cp.async), the next step's kernel may start
    early (programmatic launch): afterwards the cache holds exactly every
    token at its slot, and each checked step's output is the float64
    attention over the keys up to it."""
    monkeypatch.setattr(flash_decode, "FUSED_APPEND", fused_append)
    g = torch.Generator(device="cuda").manual_seed(2)
    batch, heads, heads_k, d, steps = 4, 32, 8, 128, 96
    base = [0, 15, 700, 3000]
    cap = max(base) + steps
    dt = torch.bfloat16
    if page:
        width = -(-cap // page)
        kc = torch.randn(batch * width, page, heads_k, d, device="cuda", dtype=dt, generator=g)
        table = torch.randperm(batch * width, device="cuda").view(batch, width).to(torch.int32)
    else:
        kc = torch.randn(batch, cap, heads_k, d, device="cuda", dtype=dt, generator=g)
        table = None
    vc = torch.randn_like(kc)
    qs = torch.randn(steps, batch, 1, heads, d, device="cuda", dtype=dt, generator=g)
    kns = torch.randn(steps, batch, 1, heads_k, d, device="cuda", dtype=dt, generator=g)
    vns = torch.randn_like(kns)
    lens0 = torch.tensor(base, dtype=torch.int32, device="cuda")
    outs = [tilec.flash_attn_with_kvcache(qs[t], kc, vc, k=kns[t], v=vns[t], cache_seqlens=lens0 + t,
                                          block_table=table) for t in range(steps)]
    torch.cuda.synchronize()

    def rows(b, n):   # the cache's first n keys/values of sequence b
        if not page:
            return kc[b, :n], vc[b, :n]
        idx = torch.arange(n, device="cuda")
        return kc[table[b, idx // page].long(), idx % page], vc[table[b, idx // page].long(), idx % page]

    for b, n in enumerate(base):
        k_all, v_all = rows(b, n + steps)
        assert torch.equal(k_all[n:], kns[:, b, 0]) and torch.equal(v_all[n:], vns[:, b, 0])
    for t in (0, 1, steps // 2, steps - 1):
        keys, values = zip(*(rows(b, n + t + 1) for b, n in enumerate(base)))
        ref, _ = reference(qs[t], keys, values, d ** -0.5, False)
        assert ((outs[t].double() - ref).norm() / ref.norm()).item() < TOL[dt], t


def _serving_case(g, batch, seqlen_q, heads, heads_k, d, cap, page):
    """q and a bf16 cache of `cap` rows per sequence, contiguous or in pages
    of `page` behind a shuffled block table: (q, k_cache, v_cache, table)."""
    q = torch.randn(batch, seqlen_q, heads, d, device="cuda", dtype=torch.bfloat16, generator=g)
    table = None
    if page:
        width = -(-cap // page)
        kc = torch.randn(batch * width, page, heads_k, d, device="cuda", dtype=torch.bfloat16, generator=g)
        table = torch.randperm(batch * width, device="cuda").view(batch, width).to(torch.int32)
    else:
        kc = torch.randn(batch, cap, heads_k, d, device="cuda", dtype=torch.bfloat16, generator=g)
    return q, kc, torch.randn_like(kc), table


@pytest.mark.skipif(not ON_GPU, reason="no CUDA GPU")
@pytest.mark.parametrize("page,heads_k", [(0, 8), (16, 8), (256, 32), (32, 1)])
@pytest.mark.parametrize("seqlen_q", [1, 3])
def test_fast_path_is_the_general_path_bit_for_bit(page, heads_k, seqlen_q, monkeypatch):
    """The serving call's O(1) path and the general path give the same bits
    (same kernels, same arguments), split and not, one query token or three
    (causal: speculative decoding)."""
    g = torch.Generator(device="cuda").manual_seed(1)
    cap = 3000
    q, kc, vc, table = _serving_case(g, 3, seqlen_q, 32, heads_k, 128, cap, page)
    lens = torch.tensor([1, 1700, cap], dtype=torch.int32, device="cuda")
    causal = seqlen_q > 1
    for splits in (0, 1):
        fast = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table, causal=causal,
                                              num_splits=splits, return_softmax_lse=True)
        with monkeypatch.context() as m:
            m.setattr(flash_decode, "_gpu_fast_path", lambda *a, **k: None)
            general = tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table,
                                                     causal=causal, num_splits=splits, return_softmax_lse=True)
        assert torch.equal(fast[0], general[0]) and torch.equal(fast[1], general[1])


@pytest.mark.skipif(not ON_GPU, reason="no CUDA GPU")
@pytest.mark.parametrize("page,new,seqlen_q", [(0, 0, 1), (16, 1, 1), (256, 0, 1), (0, 3, 3), (16, 4, 4)])
def test_native_fast_path_is_the_python_fast_path_bit_for_bit(page, new, seqlen_q, monkeypatch):
    """_tilec_fast.decode (C++) and the Python fast path give the same out,
    lse and appended cache, bit for bit: one token, an append of one (fused)
    or several (kv_append), speculative decoding."""
    if not flash_decode._native_fast_path():
        pytest.skip("_tilec_fast is not built for this torch: the fast path runs in Python")
    g = torch.Generator(device="cuda").manual_seed(3)
    batch, heads_k, d, cap = 3, 8, 128, 3000
    q, kc, vc, table = _serving_case(g, batch, seqlen_q, 32, heads_k, d, cap, page)
    kn = torch.randn(batch, new, heads_k, d, device="cuda", dtype=torch.bfloat16, generator=g) if new else None
    vn = torch.randn_like(kn) if new else None
    lens = torch.tensor([0, 1700, cap - new], dtype=torch.int32, device="cuda")
    results = []
    for native in (True, False):
        k_cache, v_cache = kc.clone(), vc.clone()
        monkeypatch.setattr(flash_decode, "NATIVE_FAST_PATH", native)
        out, lse = tilec.flash_attn_with_kvcache(q, k_cache, v_cache, k=kn, v=vn, cache_seqlens=lens,
                                                 block_table=table, causal=seqlen_q > 1, return_softmax_lse=True)
        results.append((out, lse, k_cache, v_cache))
    for a, b in zip(*results):
        assert torch.equal(a, b)


@pytest.mark.skipif(not ON_GPU, reason="no CUDA GPU")
@pytest.mark.parametrize("d", [59, 80, 111, 256])
@pytest.mark.parametrize("page", [0, 16])
def test_decode_gpu_head_dims(d, page):
    """Head dims upstream's kvcache test uses (59 and 111: not multiples of 8,
    attended over padded copies), with an append, causal, GQA 32/8."""
    g = torch.Generator(device="cuda").manual_seed(2)
    lens, heads, heads_k, sq = [3, 900], 32, 8, 2
    batch, cap = len(lens), max(lens) + sq
    dt = torch.bfloat16
    keys = [torch.randn(n, heads_k, d, device="cuda", dtype=dt, generator=g) for n in lens]
    values = [torch.randn(n, heads_k, d, device="cuda", dtype=dt, generator=g) for n in lens]
    kn = torch.randn(batch, sq, heads_k, d, device="cuda", dtype=dt, generator=g)
    vn = torch.randn_like(kn)
    q = torch.randn(batch, sq, heads, d, device="cuda", dtype=dt, generator=g)
    table = None
    if page:
        width = -(-cap // page)
        table = torch.randperm(batch * width, device="cuda").view(batch, width).to(torch.int32)
        kc = torch.zeros(batch * width, page, heads_k, d, device="cuda", dtype=dt)
        vc = torch.zeros_like(kc)
        for b, n in enumerate(lens):
            for i in range(0, n, page):
                kc[table[b, i // page], :min(page, n - i)] = keys[b][i:i + page]
                vc[table[b, i // page], :min(page, n - i)] = values[b][i:i + page]
    else:
        kc = torch.zeros(batch, cap, heads_k, d, device="cuda", dtype=dt)
        vc = torch.zeros_like(kc)
        for b, n in enumerate(lens):
            kc[b, :n], vc[b, :n] = keys[b], values[b]
    out, lse = tilec.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, block_table=table, causal=True,
                                             cache_seqlens=torch.tensor(lens, dtype=torch.int32, device="cuda"),
                                             return_softmax_lse=True)
    keys = [torch.cat([keys[b], kn[b]]) for b in range(batch)]
    values = [torch.cat([values[b], vn[b]]) for b in range(batch)]
    ref, ref_lse = reference(q, keys, values, d ** -0.5, True)
    assert out.shape == q.shape
    assert ((out.double() - ref).norm() / ref.norm()).item() < TOL[dt]
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3


def _three_paths_bit_for_bit(monkeypatch, kc, vc, call):
    """call(k_cache, v_cache) -> (out, lse) through the C++ fast path, the
    Python fast path and the general path, each on its own copy of the
    cache: asserts the three give the same out, lse and cache, bit for bit;
    returns the C++ path's (out, lse, k_cache, v_cache)."""
    results = {}
    for path in ("native", "python", "general"):
        k_cache, v_cache = kc.clone(), vc.clone()
        with monkeypatch.context() as m:
            m.setattr(flash_decode, "NATIVE_FAST_PATH", path == "native")
            if path == "general":
                m.setattr(flash_decode, "_gpu_fast_path", lambda *a, **k: None)
            results[path] = (*call(k_cache, v_cache), k_cache, v_cache)
    for path in ("python", "general"):
        for a, b in zip(results["native"], results[path]):
            assert torch.equal(a, b), path
    return results["native"]


def _rotate(x, cos, sin, pos, interleaved):
    """float64 rotary of x (s, h, d) at positions pos (s,) (tables f64)."""
    x = x.double().clone()
    half = cos.shape[1]
    c, s = cos[pos][:, None, :], sin[pos][:, None, :]
    if interleaved:
        a, b = x[..., 0:2 * half:2].clone(), x[..., 1:2 * half:2].clone()
        x[..., 0:2 * half:2], x[..., 1:2 * half:2] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., :half].clone(), x[..., half:2 * half].clone()
        x[..., :half], x[..., half:2 * half] = a * c - b * s, a * s + b * c
    return x


@pytest.mark.skipif(not ON_GPU, reason="no CUDA GPU")
@pytest.mark.parametrize("d,rotary_dim", [(128, 128), (128, 64), (59, 32)])
@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("page,new,seqlen_q", [(0, 1, 1), (16, 1, 1), (0, 0, 1), (256, 3, 3)])
def test_rotary_gpu(d, rotary_dim, interleaved, page, new, seqlen_q, monkeypatch):
    """Rotary of q and the new k on CUDA (the rotary kernel, then the append
    and the attention on its outputs) against float64: out, lse and the
    appended cache rows; the C++ fast path, the Python fast path and the
    general path bit for bit (d 59: the general path, rows padded)."""
    g = torch.Generator(device="cuda").manual_seed(4)
    batch, heads, heads_k, cap = 3, 32, 8, 1200
    dt = torch.bfloat16
    lens = torch.tensor([0 if new else 1, 700, cap - max(new, seqlen_q)], dtype=torch.int32, device="cuda")
    q = torch.randn(batch, seqlen_q, heads, d, device="cuda", dtype=dt, generator=g)
    keys = [torch.randn(int(n), heads_k, d, device="cuda", dtype=dt, generator=g) for n in lens]
    values = [torch.randn(int(n), heads_k, d, device="cuda", dtype=dt, generator=g) for n in lens]
    kn = torch.randn(batch, new, heads_k, d, device="cuda", dtype=dt, generator=g) if new else None
    vn = torch.randn_like(kn) if new else None
    angles = torch.rand(cap, rotary_dim // 2, device="cuda", dtype=torch.float64, generator=g) * 2 * math.pi
    cos, sin = angles.cos(), angles.sin()
    table = None
    width = -(-cap // page) if page else 0
    if page:
        table = torch.randperm(batch * width, device="cuda").view(batch, width).to(torch.int32)
        kc = torch.zeros(batch * width, page, heads_k, d, device="cuda", dtype=dt)
    else:
        kc = torch.zeros(batch, cap, heads_k, d, device="cuda", dtype=dt)
    vc = torch.zeros_like(kc)
    for b, n in enumerate(lens.tolist()):
        for i in range(0, n, page or n or 1):
            step = min(page or n, n - i)
            dest = (table[b, i // page], slice(0, step)) if page else (b, slice(i, i + step))
            kc[dest] = keys[b][i:i + step]
            vc[dest] = values[b][i:i + step]
    causal = seqlen_q > 1
    out, lse, k_cache, _ = _three_paths_bit_for_bit(monkeypatch, kc, vc, lambda k_cache, v_cache: (
        tilec.flash_attn_with_kvcache(q, k_cache, v_cache, k=kn, v=vn, rotary_cos=cos.float(),
                                      rotary_sin=sin.float(), cache_seqlens=lens, block_table=table, causal=causal,
                                      rotary_interleaved=interleaved, return_softmax_lse=True)))
    q_pos = lambda n: n + torch.arange(seqlen_q, device="cuda") * causal  # noqa: E731 (all at n unless causal)
    ref_keys, ref_values, qr = [], [], torch.empty(q.shape, dtype=torch.float64, device="cuda")
    for b, n in enumerate(lens.tolist()):
        qr[b] = _rotate(q[b], cos, sin, q_pos(n), interleaved).to(dt).double()
        k_new = _rotate(kn[b], cos, sin, n + torch.arange(new, device="cuda"), interleaved) if new else None
        ref_keys.append(torch.cat([keys[b].double(), k_new.to(dt).double()]) if new else keys[b].double())
        ref_values.append(torch.cat([values[b], vn[b]]).double() if new else values[b].double())
        if new:   # the cache holds the rotated keys (bf16: within half an ulp of float64)
            rows = torch.stack([k_cache[table[b, (n + i) // page], (n + i) % page] if page else k_cache[b, n + i]
                                for i in range(new)]).double()
            assert ((rows - k_new).abs() <= k_new.abs() * 2.0 ** -8 + 1e-6).all()
    ref, ref_lse = reference(qr, ref_keys, ref_values, d ** -0.5, causal)
    assert ((out.double() - ref).norm() / ref.norm()).item() < TOL[dt]
    seen = torch.isfinite(ref_lse)
    assert torch.equal(seen, torch.isfinite(lse))
    assert (lse.double()[seen] - ref_lse[seen]).abs().max().item() < 1e-2


@pytest.mark.skipif(not ON_GPU, reason="no CUDA GPU")
@pytest.mark.parametrize("features", ["alibi", "alibi batch", "batch_idx", "leftpad", "batch_idx leftpad alibi"])
@pytest.mark.parametrize("new,seqlen_q", [(0, 1), (1, 1), (3, 3)])
def test_fast_paths_take_alibi_batch_index_left_padding(features, new, seqlen_q, monkeypatch):
    """ALiBi slopes, cache_batch_idx and cache_leftpad through the C++ fast
    path, the Python fast path and the general path: the same out, lse and
    cache, bit for bit (the general path's numerics: test_flash_decode.py on
    the CPU runner)."""
    g = torch.Generator(device="cuda").manual_seed(5)
    batch, heads, heads_k, d, cap = 3, 32, 8, 128, 2000
    q, kc, vc, _ = _serving_case(g, batch + 1, seqlen_q, heads, heads_k, d, cap, 0)
    q = q[:batch]
    kn = torch.randn(batch, new, heads_k, d, device="cuda", dtype=torch.bfloat16, generator=g) if new else None
    vn = torch.randn_like(kn) if new else None
    lens = torch.tensor([5, 1300, cap - 3], dtype=torch.int32, device="cuda")
    kwargs = {}
    if "alibi" in features:
        shape = (batch, heads) if features == "alibi batch" else (heads,)
        kwargs["alibi_slopes"] = torch.rand(*shape, device="cuda", generator=g) * 0.3
    if "batch_idx" in features:
        kwargs["cache_batch_idx"] = torch.tensor([3, 0, 2], dtype=torch.int32, device="cuda")
    if "leftpad" in features:
        kwargs["cache_leftpad"] = torch.tensor([2, 700, 0], dtype=torch.int32, device="cuda")
    _three_paths_bit_for_bit(monkeypatch, kc, vc, lambda k_cache, v_cache: tilec.flash_attn_with_kvcache(
        q, k_cache, v_cache, k=kn, v=vn, cache_seqlens=lens, causal=seqlen_q > 1, return_softmax_lse=True,
        **kwargs))
