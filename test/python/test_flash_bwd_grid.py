"""The dK/dV kernel's 2-D warp grid (tile.dot warps_n; kernels/flash_bwd.py
WARPS_N, strategy.FlashBwdConfig.dkdv_warps_n): the DSL puts warps_n on the
kernel's four dots; gradients through it match float64 on the CPU runner
(which ignores layouts: it checks the kernel and its plumbing) and, on a
CUDA GPU, for every configuration bench/tune_bwd.py's DKDV_GRID times (the
test of the grid's lowering: warp row/column blocks, A from shared memory,
Pᵀ and dSᵀ written there); ptxas keeps the spill-free ones spill-free;
errors name the value and the allowed range."""

import json
import math
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tilec import compiler

torch = pytest.importorskip("torch")

import tilec  # noqa: E402
from tilec import language as tl  # noqa: E402
from tilec import strategy  # noqa: E402
from tilec.flash_bwd import _flash_attn_backward, flash_bwd_kernels  # noqa: E402
from tilec.strategy import FlashConfig  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from test_flash_bwd import check_grads, inputs, reference  # noqa: E402
from tune_bwd import DKDV_GRID, FUSED_GRID, fused_grid  # noqa: E402

HAVE_CPU = compiler.available() and getattr(compiler.native(), "has_cpu_runner", False)
HAVE_GPU = torch.cuda.is_available()


ALU = "region-barriers=true prefetch-after-last-use=true"


def grid_config(d, causal, dkdv, warps_n):
    return replace(strategy.flash_bwd_config(head_dim=d, causal=causal), dkdv=dkdv,
                   dkdv_warps_n=warps_n)


def test_warps_n_reaches_the_four_dkdv_dots(monkeypatch):
    monkeypatch.setitem(strategy.BWD_TABLE, ("sm_80", 128, False),
                        grid_config(128, False, FlashConfig(64, 128, 8, 2, False), 4))
    kdq, kdkdv, _ = flash_bwd_kernels("bfloat16", 128, False)
    dots = re.findall(r"tile\.dot [^\n]*", kdkdv.ir)
    assert len(dots) == 4 and all("{warps_n = 4 : i64}" in d for d in dots), dots
    assert "warps_n" not in kdq.ir
    # The table's d128 dK/dV kernel runs on the 2x2 grid; d64's is split-Q
    # and its IR has no attribute (its PTX is unchanged).
    monkeypatch.undo()
    dots = re.findall(r"tile\.dot [^\n]*", flash_bwd_kernels("bfloat16", 128, False)[1].ir)
    assert len(dots) == 4 and all("{warps_n = 2 : i64}" in d for d in dots), dots
    assert "warps_n" not in flash_bwd_kernels("bfloat16", 64, False)[1].ir


@pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")
@pytest.mark.parametrize("d,causal,dkdv,warps_n", [
    (128, False, FlashConfig(64, 128, 8, 2, False), 4),
    (128, True, FlashConfig(64, 64, 4, 1, False), 2),
    (64, True, FlashConfig(64, 128, 8, 2, False), 2),
])
def test_grid_kernel_matches_float64_on_the_cpu_runner(monkeypatch, d, causal, dkdv, warps_n):
    monkeypatch.setitem(strategy.BWD_TABLE, ("sm_80", d, causal), grid_config(d, causal, dkdv, warps_n))
    for sq, sk in ((100, 150), (150, 100)):
        q, k, v, dout = inputs(1, sq, sk, 2, 1, d)
        out, lse, *refs = reference(q, k, v, dout, 1 / math.sqrt(d), causal)
        got = _flash_attn_backward(dout, q, k, v, out.half(), lse.float(), None, causal,
                                   atomic_dq=False)  # the pair, whose dK/dV grid this is
        check_grads(got, refs, torch.float16, f"d{d} causal={causal} {sq}x{sk}")


GPU_CASES = [(d, causal, FlashConfig(*c), wn) for c, wn, dims in DKDV_GRID for d in dims
             for causal in (False, True)]


@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU: the warp grid's lowering runs only there")
@pytest.mark.parametrize("d,causal,dkdv,warps_n", GPU_CASES,
                         ids=[f"d{d}-{'causal' if c else 'full'}-{k.tag}-wn{w}" for d, c, k, w in GPU_CASES])
def test_grid_kernel_matches_float64_on_the_gpu(monkeypatch, d, causal, dkdv, warps_n):
    monkeypatch.setitem(strategy.BWD_TABLE, ("sm_80", d, causal), grid_config(d, causal, dkdv, warps_n))
    torch.manual_seed(0)
    # Several key and query blocks, ragged ends, GQA.
    for sq, sk in ((300, 500), (500, 300)):
        q, k, v, dout = (x.cuda() for x in inputs(2, sq, sk, 4, 2, d))
        out, lse, *refs = reference(q.cpu(), k.cpu(), v.cpu(), dout.cpu(), 1 / math.sqrt(d), causal)
        got = _flash_attn_backward(dout, q, k, v, out.half().cuda(), lse.float().cuda(), None, causal,
                                   atomic_dq=False)  # the pair, whose dK/dV grid this is
        check_grads([g.cpu() for g in got], refs, torch.float16, f"{dkdv.tag}-wn{warps_n} {sq}x{sk}")


def fused_config(d, causal, atomic, warps_n, dq_warps_n=1):
    return replace(strategy.flash_bwd_config(head_dim=d, causal=causal), atomic=atomic,
                   atomic_warps_n=warps_n, atomic_dq_warps_n=dq_warps_n)


FUSED_CASES = [(d, causal, FlashConfig(*c), wn, dqwn) for c, wn, dims, dqwn in fused_grid()
               for d in dims for causal in (False, True)]


def _cpu_case(config, warps_n, d, causal, dq_warps_n=1):
    case = (d, causal, FlashConfig(*config), warps_n, dq_warps_n)
    assert case in FUSED_CASES, case
    return pytest.param(*case, marks=pytest.mark.skipif(not HAVE_CPU, reason="no CPU runner"))


@pytest.mark.parametrize("d,causal,atomic,warps_n,dq_warps_n", [
    _cpu_case((16, 64, 4, 2, False), 2, 128, False),
    _cpu_case((64, 64, 4, 1, False), 1, 64, True),
    # (region-barriers, a GPU-lowering option: its plumbing on the CPU)
    _cpu_case((64, 64, 4, 2, False, "row", "region-barriers=true"), 2, 64, True),
    # FA2's blocks with the dQᵀ dot on its own 4 x 2 grid
    _cpu_case((64, 128, 8, 1, False, "row", "region-barriers=true"), 4, 128, True, 2),
] + [pytest.param(*c, marks=pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU: the warp "
                                               "grid's lowering runs only there"),
                  id=f"gpu-d{c[0]}-{'causal' if c[1] else 'full'}-{c[2].tag}-wn{c[3]}"
                     + (f"-dqwn{c[4]}" if c[4] != 1 else ""))
     for c in FUSED_CASES])
def test_fused_grid_kernel_matches_float64(monkeypatch, d, causal, atomic, warps_n, dq_warps_n):
    """The fused kernel (atomic dQ) with its dK/dV dots (and its dQᵀ dot) on
    warp grids: on the CPU runner (plumbing) for four cases, on a GPU for
    every FUSED_GRID one."""
    monkeypatch.setitem(strategy.BWD_TABLE, ("sm_80", d, causal),
                        fused_config(d, causal, atomic, warps_n, dq_warps_n))
    _, kdkdv, _ = flash_bwd_kernels("float16", d, causal, atomic_dq=True)
    assert sum("{warps_n = %d : i64}" % warps_n in line for line in kdkdv.ir.splitlines()) == \
        (4 if warps_n > 1 else 0) + (1 if dq_warps_n == warps_n > 1 else 0)
    if dq_warps_n != warps_n and dq_warps_n > 1:
        assert sum("{warps_n = %d : i64}" % dq_warps_n in line for line in kdkdv.ir.splitlines()) == 1
    dev = "cuda" if HAVE_GPU else "cpu"
    torch.manual_seed(0)
    for sq, sk in ((300, 500), (500, 300)) if dev == "cuda" else ((100, 150),):
        q, k, v, dout = inputs(2, sq, sk, 4, 2, d)
        out, lse, *refs = reference(q, k, v, dout, 1 / math.sqrt(d), causal)
        q, k, v, dout = (x.to(dev) for x in (q, k, v, dout))
        got = _flash_attn_backward(dout, q, k, v, out.half().to(dev), lse.float().to(dev), None, causal,
                                   deterministic=False, atomic_dq=True)
        check_grads([g.cpu() for g in got], refs, torch.float16,
                    f"fused {atomic.tag}-wn{warps_n}-dqwn{dq_warps_n} {sq}x{sk}")


def sm90_spills(d, causal, dkdv, warps_n):
    _, kdkdv, _ = flash_bwd_kernels_for(d, causal, dkdv, warps_n)
    [result] = compiler.compile(kdkdv.ir, kdkdv.source_name, arch="sm_80",
                                num_warps=kdkdv.num_warps, num_stages=kdkdv.num_stages,
                                smem_epilogue=kdkdv.smem_epilogue,
                                lowering_options=kdkdv.strategy.lowering_options, extra_sass=("sm_90",))
    if not result["cubin"]:
        pytest.skip("ptxas (CUDA toolkit) not found: no register report")
    info = json.loads(result["manifest"])["sass"][0]["ptxas_info"]
    return info["spill_stores"] + info["spill_loads"]


def flash_bwd_kernels_for(d, causal, dkdv, warps_n):
    saved = dict(strategy.BWD_TABLE)
    strategy.BWD_TABLE[("sm_80", d, causal)] = grid_config(d, causal, dkdv, warps_n)
    try:
        return flash_bwd_kernels("bfloat16", d, causal)
    finally:
        strategy.BWD_TABLE.clear()
        strategy.BWD_TABLE.update(saved)


@pytest.mark.skipif(not compiler.available(), reason="the _tilec extension is not built")
@pytest.mark.parametrize("d,causal,dkdv,warps_n,bound", [
    # ptxas 13, 2026-12-01, sm_90 (what the H200 runs): none of these spill.
    (128, False, FlashConfig(32, 64, 4, 2, False), 2, 0),
    (128, True, FlashConfig(32, 64, 4, 2, False), 2, 0),
    # Since session 14 its dK + dV (128 registers) carry the Q/dO ring's
    # addresses (xor-ring-phases auto -> all): 44 bytes (not the table's).
    (128, False, FlashConfig(64, 128, 8, 2, False), 4, 44),
    (64, False, FlashConfig(64, 64, 4, 1, False), 2, 0),
    (64, True, FlashConfig(64, 128, 8, 2, False), 2, 0),
    # FA2's d128 blocks, Q and dO prefetched into their one buffer after
    # their last reader (tile-pipeline after-last-use; the s2 ring spills
    # 196 bytes causal).
    (128, False, FlashConfig(64, 128, 8, 1, False, lowering_options=ALU), 4, 0),
    (128, True, FlashConfig(64, 128, 8, 1, False, lowering_options=ALU), 4, 0),
])
def test_grid_kernels_do_not_spill(d, causal, dkdv, warps_n, bound):
    assert sm90_spills(d, causal, dkdv, warps_n) <= bound


def fused_ptx(d, causal, atomic, warps_n, dq_warps_n=1):
    saved = dict(strategy.BWD_TABLE)
    strategy.BWD_TABLE[("sm_80", d, causal)] = fused_config(d, causal, atomic, warps_n, dq_warps_n)
    try:
        _, kdkdv, _ = flash_bwd_kernels("bfloat16", d, causal, atomic_dq=True)
    finally:
        strategy.BWD_TABLE.clear()
        strategy.BWD_TABLE.update(saved)
    return kdkdv, kdkdv.compile("sm_80").ptx


def loop_bodies(ptx):
    """The text of each loop of a PTX kernel: from a label to the branch
    back to it."""
    lines = ptx.splitlines()
    bodies = []
    for i, line in enumerate(lines):
        m = re.match(r"\s*(?:@%p\d+\s+)?bra(?:\.uni)?\s+(\$L__BB\d+_\d+);", line)
        if m:
            start = next((j for j in range(i) if lines[j].startswith(m.group(1) + ":")), None)
            if start is not None:
                bodies.append("\n".join(lines[start:i + 1]))
    return bodies


@pytest.mark.skipif(not compiler.available(), reason="the _tilec extension is not built")
def test_fused_loop_prefetches_and_writes_ds_once():
    """The fused kernel's loop (bf16 d128, 32 x 64 over 4 warps, 2x2 grid,
    num_stages 2) prefetches Q and dO across the dQ atomics (tile-pipeline's
    ring: one cp.async wait per iteration, at its top; unprefetched, 3) and
    writes dSᵀ into shared memory once (before: twice, the second copy
    element by element, st.shared.b16): bar.sync 5 per iteration (before 8),
    3 with region-barriers."""
    cfg = FlashConfig(32, 64, 4, 2, False)
    kernel, ptx = fused_ptx(128, False, cfg, 2)
    assert kernel.strategy.lowering_options == ""
    rb_kernel, rb_ptx = fused_ptx(128, False, replace(cfg, lowering_options="region-barriers=true"), 2)
    assert "region-barriers=true" in rb_kernel.strategy.key()
    for text, barriers in ((ptx, 5), (rb_ptx, 3)):
        loops = [b for b in loop_bodies(text) if "red.global.add.f32" in b]
        assert loops, "no loop with the dQ atomics"
        for body in loops:
            # The ring: the next Q and dO issued in the body, one wait.
            assert body.count("cp.async.commit_group") == 2
            assert body.count("cp.async.wait_group") == 1
            assert body.count("bar.sync") == barriers
            # Pᵀ and dSᵀ once each: 16 + 16 bf16 pairs per thread (st.shared.b32).
            assert body.count("st.shared.b32") == 16 and "st.shared.b16" not in body


RB = "region-barriers=true"


def fused_spills(d, causal, atomic, warps_n, gpu, dq_warps_n=1):
    """ptxas's spill stores + loads (bytes) of the fused kernel's sm_80 PTX
    assembled for `gpu`."""
    kernel, _ = fused_ptx(d, causal, atomic, warps_n, dq_warps_n)
    [result] = compiler.compile(kernel.ir, kernel.source_name, arch="sm_80",
                                num_warps=kernel.num_warps, num_stages=kernel.num_stages,
                                smem_epilogue=kernel.smem_epilogue,
                                lowering_options=kernel.strategy.lowering_options,
                                extra_sass=() if gpu == "sm_80" else (gpu,))
    if not result["cubin"]:
        pytest.skip("ptxas (CUDA toolkit) not found: no register report")
    if gpu == "sm_80":
        match = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result["ptxas_log"])
        assert match, f"no spill report in ptxas's log:\n{result['ptxas_log']}"
        return int(match.group(1)) + int(match.group(2))
    info = json.loads(result["manifest"])["sass"][0]["ptxas_info"]
    return info["spill_stores"] + info["spill_loads"]


@pytest.mark.skipif(not compiler.available(), reason="the _tilec extension is not built")
@pytest.mark.parametrize("gpu", ["sm_80", "sm_90"])
@pytest.mark.parametrize("d,causal,atomic,warps_n,dq_warps_n,bound", [
    # FA2's blocks (64 queries x 128 keys, 8 warps, 2 x 4 grid): 240 + 320
    # bytes on sm_90 while Kᵀ (dQᵀ = Kᵀ·dSᵀ's A) was a register copy of K
    # held through the loop (32 registers); from K's shared tile read
    # transposed (ldmatrix.trans), 32 (56 causal) on sm_90, one LDL per
    # iteration; 48 (72) on sm_80 (ptxas 13, 2026-12-01). dq_accum's 8x8
    # blocks (tl.view's block: a mask-and-shift per scalar red address on
    # sm_80) took sm_80 causal to 96 (2026-12-03; the table's dqwn2 form is
    # the one that runs).
    (128, False, FlashConfig(64, 128, 8, 1, False, lowering_options=RB), 4, 1, 80),
    (128, True, FlashConfig(64, 128, 8, 1, False, lowering_options=RB), 4, 1, 96),
    # The dQᵀ dot on a 4 x 2 grid: no spills on sm_90 (80 bytes causal),
    # 32 on sm_80; causal sm_80 120 since session 14's carried ring
    # addresses (the table's s2 kernel is the one that runs).
    (128, False, FlashConfig(64, 128, 8, 1, False, lowering_options=RB), 4, 2, 32),
    (128, True, FlashConfig(64, 128, 8, 1, False, lowering_options=RB), 4, 2, 120),
    # 32 x 64 over 4 warps, 2 x 2 (sm_90): 44 + 80 bytes before, 12 + 20 after.
    (128, False, FlashConfig(32, 64, 4, 2, False, lowering_options=RB), 2, 1, 48),
])
def test_fused_kernels_spill_little(d, causal, atomic, warps_n, dq_warps_n, bound, gpu):
    assert fused_spills(d, causal, atomic, warps_n, gpu, dq_warps_n) <= bound


def test_atomic_dq_warps_n_is_checked():
    cfg = replace(strategy.BWD_DEFAULT, atomic=FlashConfig(64, 128, 8, 1, False))
    assert replace(cfg, atomic_dq_warps_n=2).constexprs("atomic")["DQ_WARPS_N"] == 2
    assert "DQ_WARPS_N" not in cfg.constexprs("atomic")  # (the split-Q kernel keeps its key)
    with pytest.raises(ValueError, match="atomic_dq_warps_n"):
        replace(cfg, atomic_dq_warps_n=3).constexprs("atomic")
    with pytest.raises(ValueError, match=r"atomic_dq_warps_n \(16\) must divide the atomic kernel's "
                                         r"num_warps \(8\)"):
        replace(cfg, atomic_dq_warps_n=16).constexprs("atomic")


def test_lowering_options_of_the_backward_kernels():
    cfg = replace(strategy.BWD_DEFAULT, atomic=FlashConfig(16, 64, 4, 2, False, "row", "region-barriers=true"))
    assert cfg.constexprs("atomic")["LOWERING_OPTIONS"] == "region-barriers=true"
    assert "LOWERING_OPTIONS" not in strategy.BWD_DEFAULT.constexprs("atomic")
    with pytest.raises(ValueError, match=r"lowering_options are taken by the dkdv and atomic kernels "
                                         r"only, not dq \(got 'region-barriers=true'\)"):
        replace(cfg, dq=cfg.atomic).constexprs("dq")


def test_errors():
    with pytest.raises(ValueError, match=r"dkdv_warps_n \(4\) must divide the dkdv kernel's num_warps \(2\)"):
        replace(strategy.BWD_DEFAULT, dkdv=FlashConfig(32, 64, 2, 1, False),
                dkdv_warps_n=4).constexprs("dkdv")
    with pytest.raises(ValueError, match=r"dkdv_warps_n must be a power of two in \[1, 16\], got 3"):
        replace(strategy.BWD_DEFAULT, dkdv_warps_n=3).constexprs("dkdv")

    @tilec.jit(grid=(1, 1, 1))
    def bad(p: tl.ptr(tl.float16)):
        v = tl.view(p, (64, 64), (64, 1))
        a = tl.load(v, (0, 0), (64, 64))
        tl.dot(a, a, trans_b=True, warps_n=3)

    with pytest.raises(Exception, match=r"tl.dot warps_n \(warps along N\) must be a constexpr "
                                        r"power of two >= 1, got 3"):
        bad.specialize().ir
