"""Ring attention (tilec.distributed) on the CPU runner: two gloo processes,
each holding its shard of one sequence, against the single-process
full-sequence tilec result (flash_attn_func with autograd) and a float64
reference, for outputs and the gradients of q, k, v: plain and zigzag
shards, causal and not, GQA, f16 and bf16, shard lengths that are not
multiples of any block size, a head_dim that is not a multiple of 8, and
softcap (gradients once tilec's backward has softcap). One spawn runs every case, so each process compiles each
kernel once; the processes record errors and the tests below judge them."""

import json
import math
import os
import tempfile
import traceback

import pytest

from tilec import compiler

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import tilec  # noqa: E402
import tilec.distributed as td  # noqa: E402

HAVE_CPU = compiler.available() and getattr(compiler.native(), "has_cpu_runner", False)
pytestmark = [pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner"),
              pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                 reason="torch.distributed with gloo is not available")]

# TILEC_RING_WORLD=3 (or 4) runs the same cases over more ranks: dK/dV then pass
# through ranks that do not own them (not in CI: more processes, more time).
WORLD = int(os.environ.get("TILEC_RING_WORLD", "2"))
# ||x - ref|| / ||ref||: inputs rounded to the dtype, f32 accumulation, P and
# dS rounded to the dtype before their dots, results rounded to it (as
# test_flash_bwd); the ring adds one f32 merge per block and per-block
# rounding of dK/dV. Against the single-process tilec result the bound is
# the same: both are that far from the exact value.
REL_TOL = {"float16": 1e-3, "bfloat16": 8e-3}

# name: (layout, causal, dtype, batch, seqlen_total, heads, kv_heads, head_dim, softcap)
CASES = {
    "ring_noncausal_gqa_bf16": ("ring", False, "bfloat16", 2, WORLD * 37, 4, 2, 32, 0.0),
    "ring_causal_gqa_bf16": ("ring", True, "bfloat16", 2, WORLD * 37, 4, 2, 32, 0.0),
    "ring_causal_f16": ("ring", True, "float16", 1, WORLD * 45, 2, 2, 32, 0.0),
    "zigzag_causal_gqa_bf16": ("zigzag", True, "bfloat16", 2, 2 * WORLD * 19, 4, 2, 32, 0.0),
    "zigzag_noncausal_bf16": ("zigzag", False, "bfloat16", 1, 2 * WORLD * 19, 4, 1, 32, 0.0),
    "zigzag_causal_f16_d20": ("zigzag", True, "float16", 1, 2 * WORLD * 21, 2, 1, 20, 0.0),
    "ring_causal_softcap": ("ring", True, "float16", 1, WORLD * 37, 2, 1, 32, 5.0),
}


def reference(q, k, v, dout, scale, causal, softcap):
    """out, dq, dk, dv in float64 by autograd of naive attention over the
    full sequence (GQA by repeating K/V heads; causal top-left = bottom-right
    for sq == sk; softcap c·tanh(s/c))."""
    q, k, v = (x.detach().double().requires_grad_() for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    kk, vv = (x.repeat_interleave(group, dim=2) for x in (k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.arange(n)[None, :] > torch.arange(n)[:, None], float("-inf"))
    out = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), vv)
    out.backward(dout.double())
    return out.detach(), q.grad, k.grad, v.grad


def _rel(x, ref):
    x, ref = x.detach().cpu().double(), ref.detach().cpu().double()
    return ((x - ref).norm() / ref.norm()).item()


def _run_case(rank, name, device):
    layout, causal, dtype, b, n, h, hk, d, softcap = CASES[name]
    dtype_t = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(1234 + sum(map(ord, name)))  # same inputs on every rank
    q, k, v, dout = (torch.randn(b, n, heads, d, generator=gen).to(dtype_t).to(device)
                     for heads in (h, hk, hk, h))
    scale = 1 / math.sqrt(d)
    shard = (lambda x: td.zigzag_shard(x, rank, WORLD)) if layout == "zigzag" else \
        (lambda x: td.ring_shard(x, rank, WORLD).contiguous())
    fn = td.zigzag_ring_flash_attn_func if layout == "zigzag" else td.ring_flash_attn_func

    # The single-process full-sequence tilec result. Gradients are compared
    # where tilec's backward has them (softcap's may not be there yet).
    fq, fk, fv = (x.clone().requires_grad_() for x in (q, k, v))
    full = tilec.flash_attn_func(fq, fk, fv, causal=causal, softcap=softcap)
    try:
        full.backward(dout)
        grad = True
    except NotImplementedError:
        if not softcap:
            raise
        grad = False
    ref = reference(q, k, v, dout, scale, causal, softcap)

    lq, lk, lv = (shard(x).requires_grad_(grad) for x in (q, k, v))
    out, lse = fn(lq, lk, lv, causal=causal, softcap=softcap, return_lse=True)
    errors = {"out_vs_tilec": _rel(out, shard(full.detach())),
              "grads_compared": float(grad),
              "out_vs_f64": _rel(out, shard(ref[0]))}
    assert out.dtype == dtype_t and out.shape == lq.shape, (out.dtype, out.shape)
    assert lse.shape == (b, h, lq.shape[1]) and lse.dtype == torch.float32
    if grad:
        out.backward(shard(dout))
        for gname, got, tl_grad, r in (("dq", lq.grad, fq.grad, ref[1]), ("dk", lk.grad, fk.grad, ref[2]),
                                       ("dv", lv.grad, fv.grad, ref[3])):
            assert got.dtype == dtype_t and got.shape == tl_grad.shape[:1] + got.shape[1:]
            errors[f"{gname}_vs_tilec"] = _rel(got, shard(tl_grad))
            errors[f"{gname}_vs_f64"] = _rel(got, shard(r))
    # The lse of the full sequence, sharded like the output (dim 2).
    sl = torch.logsumexp(_scores(q.cpu(), k.cpu(), scale, causal, softcap), -1)
    lse_ref = td.zigzag_shard(sl, rank, WORLD, dim=2) if layout == "zigzag" else \
        td.ring_shard(sl, rank, WORLD, dim=2)
    errors["lse_max_abs"] = (lse.cpu().double() - lse_ref).abs().max().item()
    return errors


def _scores(q, k, scale, causal, softcap):
    group = q.shape[2] // k.shape[2]
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double().repeat_interleave(group, 2)) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.arange(n)[None, :] > torch.arange(n)[:, None], float("-inf"))
    return s


def _worker(rank, store, outdir, device="cpu"):
    torch.set_num_threads(1)
    if device == "cuda":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    dist.init_process_group("nccl" if device != "cpu" else "gloo", init_method=f"file://{store}",
                            rank=rank, world_size=WORLD)
    results = {}
    try:
        for name in CASES:
            try:
                results[name] = _run_case(rank, name, device)
            except Exception:  # recorded; the test for this case fails with it
                results[name] = {"error": traceback.format_exc()}
            dist.barrier()
    finally:
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
            json.dump(results, f)
        dist.destroy_process_group()


def _spawn(device):
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="tilec-ring.") as tmp:
        mp.spawn(_worker, args=(os.path.join(tmp, "store"), tmp, device), nprocs=WORLD, join=True)
        out = []
        for r in range(WORLD):
            with open(os.path.join(tmp, f"rank{r}.json")) as f:
                out.append(json.load(f))
    return out


@pytest.fixture(scope="module")
def ring_results():
    return _spawn("cpu")


@pytest.fixture(scope="module")
def ring_results_gpu():
    if not torch.cuda.is_available() or torch.cuda.device_count() < WORLD:
        pytest.skip(f"needs {WORLD} CUDA GPUs (NCCL), found "
                    f"{torch.cuda.device_count() if torch.cuda.is_available() else 0}")
    if not dist.is_nccl_available():
        pytest.skip("torch.distributed has no NCCL")
    return _spawn("cuda")


def _judge(all_results, name):
    dtype = CASES[name][2]
    for rank, results in enumerate(all_results):
        errors = results[name]
        assert "error" not in errors, f"rank {rank}: {errors.get('error')}"
        for what, err in errors.items():
            if what == "grads_compared":
                continue
            if what == "lse_max_abs":
                assert err < 1e-3, f"rank {rank} {name}: lse off by {err:.2e}"
            else:
                assert err < REL_TOL[dtype], f"rank {rank} {name}: {what} relative error {err:.2e}"


@pytest.mark.parametrize("name", list(CASES))
def test_ring_matches_full_sequence(ring_results, name):
    _judge(ring_results, name)


@pytest.mark.parametrize("name", list(CASES))
def test_ring_gpu_nccl_matches_full_sequence(ring_results_gpu, name):
    """The same cases on WORLD GPUs with NCCL (skipped on fewer GPUs)."""
    _judge(ring_results_gpu, name)


# -- one process: no process group, the pieces ---------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("causal", [False, True])
def test_world_of_one_is_flash_attn(causal, device):
    """Without an initialised process group the ring is one block: the same
    kernels as flash_attn_func and a merge that is exact for one block, so
    bitwise equal to it, gradients too."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    q, k, v, dout = (torch.randn(1, 70, h, 32, dtype=torch.bfloat16, device=device)
                     for h in (4, 2, 2, 4))
    ref = [x.clone().requires_grad_() for x in (q, k, v)]
    want = tilec.flash_attn_func(*ref, causal=causal)
    want.backward(dout)
    got_in = [x.clone().requires_grad_() for x in (q, k, v)]
    got = td.zigzag_ring_flash_attn_func(*got_in, causal=causal)
    got.backward(dout)
    assert torch.equal(got, want)
    for g, r in zip(got_in, ref):
        assert torch.equal(g.grad, r.grad)


def test_softcap_backward_follows_flash_attn():
    """softcap's backward: whatever flash_attn_func's does (today it raises
    NotImplementedError; once tilec's backward has softcap, the ring's
    gradients must equal flash_attn_func's)."""
    q, k, v, dout = (torch.randn(1, 40, h, 32, dtype=torch.float16) for h in (2, 1, 1, 2))
    outcomes = []
    for fn in (tilec.flash_attn_func, td.ring_flash_attn_func):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        out = fn(*leaves, causal=True, softcap=4.0)
        try:
            out.backward(dout)
            outcomes.append([x.grad for x in leaves])
        except NotImplementedError as e:
            assert "softcap" in str(e)
            outcomes.append(None)
    if outcomes[0] is None or outcomes[1] is None:
        assert outcomes == [None, None]
    else:
        for g, r in zip(*outcomes[::-1]):
            assert torch.equal(g, r)


def test_merge_is_flash_attn_combine():
    """_merge of two partials equals flash_attn_combine's kernel on them,
    including rows one partial did not see (lse +inf from the kernels) and
    rows neither saw."""
    b, s, h, d = 2, 9, 3, 16
    parts = torch.randn(2, b, s, h, d)
    lse = torch.randn(2, b, s, h) * 3
    lse[1, 0, 2] = float("-inf")
    lse[:, 1, 4] = float("-inf")
    want_out, want_lse = tilec.flash_attn_combine(parts, lse)
    out = parts[0].clone()
    run = lse[0].transpose(1, 2).contiguous()  # (b, h, s), as the kernels' lse
    block_lse = lse[1].transpose(1, 2).clone()
    block_lse[block_lse == float("-inf")] = float("inf")  # the kernels' "no key"
    td._merge(out, run, parts[1], block_lse)
    seen = torch.isfinite(want_lse)
    assert torch.allclose(out, want_out, rtol=1e-5, atol=1e-6)
    assert torch.allclose(run.transpose(1, 2)[seen], want_lse[seen], rtol=1e-5, atol=1e-6)
    assert (run.transpose(1, 2)[~seen] == float("-inf")).all() and (out[1, 4] == 0).all()


def test_zigzag_shards_round_trip():
    x = torch.arange(2 * 24).view(2, 24)
    world = 3
    shards = [td.zigzag_shard(x, r, world) for r in range(world)]
    assert torch.equal(td.zigzag_unshard(shards), x)
    for r in range(world):
        assert torch.equal(td.zigzag_positions(24, r, world), shards[r][0])
        assert torch.equal(td.ring_positions(24, r, world), td.ring_shard(x, r, world)[0])
    assert shards[1][0].tolist() == [4, 5, 6, 7, 16, 17, 18, 19]


def test_errors_name_the_problem():
    q = torch.randn(1, 7, 2, 32, dtype=torch.float16)
    with pytest.raises(ValueError, match="seqlen_local must be even, got 7"):
        td.zigzag_ring_flash_attn_func(q, q, q, causal=True)
    with pytest.raises(ValueError, match="multiple of 2 · world size"):
        td.zigzag_shard(torch.zeros(1, 10), 0, 3)
    with pytest.raises(ValueError, match="'q' has 7 tokens, 'k' 6"):
        td.ring_flash_attn_func(q, q[:, :6], q[:, :6])
    with pytest.raises(ValueError, match="softcap must be >= 0"):
        td.ring_flash_attn_func(q, q, q, softcap=-1.0)
    with pytest.raises(NotImplementedError, match="dropout"):
        td.ring_flash_attn_func(q, q, q, dropout_p=0.1)
    with pytest.raises(TypeError, match="zigzag_ring_flash_attn_func: 'q' must be float16 or bfloat16"):
        td.zigzag_ring_flash_attn_func(q[:, :6].float(), q[:, :6].float(), q[:, :6].float())


def test_torch_compile_breaks_once_around_the_ring():
    """Under torch.compile the ring runs eagerly (torch.compiler.disable):
    one graph break, and the same out and gradients as eager."""
    import torch._dynamo

    def f(q, k, v):
        # traced ops on both sides of the ring, exact in any order (powers of 2)
        return td.zigzag_ring_flash_attn_func(q * 2.0, k, v, causal=True).float() * 0.5

    q, k, v = (torch.randn(1, 64, h, 32, dtype=torch.bfloat16) for h in (2, 1, 1))
    dout = torch.randn(1, 64, 2, 32)
    explained = torch._dynamo.explain(f)(q, k, v)
    assert explained.graph_break_count == 1, [str(b.reason) for b in explained.break_reasons]
    eager = [x.clone().requires_grad_() for x in (q, k, v)]
    compiled = [x.clone().requires_grad_() for x in (q, k, v)]
    want = f(*eager)
    want.backward(dout)
    got = torch.compile(f)(*compiled)
    got.backward(dout)
    assert torch.equal(got, want)
    for a, b in zip(compiled, eager):
        assert torch.equal(a.grad, b.grad)
