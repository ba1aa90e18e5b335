"""Scalars read from memory (tl.load(ptr + i) -> tile.load_scalar): the IR
the DSL makes, a varlen attention kernel (sequence bounds loaded from
cu_seqlens) on the CPU runner against a float64 reference, its loops still
split by tile-split-masked-loops, and its GPU code."""

import os
import re
import shutil

import numpy as np
import pytest

import tilec
from tilec import compiler
from tilec import language as tl

HAVE_NATIVE = compiler.available()
HAVE_CPU = HAVE_NATIVE and getattr(compiler.native(), "has_cpu_runner", False)
needs_native = pytest.mark.skipif(not HAVE_NATIVE, reason="the _tilec extension is not built")
needs_cpu = pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")

# f16 inputs, f32 accumulation, P rounded to f16: as test_dsl_flash's bound.
REL_TOL = 1e-3


@tilec.jit(grid=("cdiv(max_seqlen_q, BLOCK_M)", "batch * num_heads", 1))
def varlen_fwd(q: tl.ptr(tl.float16), k: tl.ptr(tl.float16), v: tl.ptr(tl.float16),
               o: tl.ptr(tl.float16), cu_seqlens_q: tl.ptr(tl.int32), cu_seqlens_k: tl.ptr(tl.int32),
               max_seqlen_q: tl.int32, num_heads: tl.int32, batch: tl.int32,
               stride_qs: tl.int64, stride_qh: tl.int64, stride_ks: tl.int64, stride_kh: tl.int64,
               stride_vs: tl.int64, stride_vh: tl.int64, stride_os: tl.int64, stride_oh: tl.int64,
               scale: tl.float32, HEAD_DIM: tl.constexpr = 32, CAUSAL: tl.constexpr = False,
               BLOCK_M: tl.constexpr = 16, BLOCK_N: tl.constexpr = 16):
    """Packed (total, heads, head_dim) q/k/v; sequence b is rows
    cu_seqlens[b] .. cu_seqlens[b+1]. Causal is top-left within a sequence."""
    tl.assume(scale > 0)
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b, h = pid_bh // num_heads, pid_bh % num_heads
    q_start = tl.load(cu_seqlens_q + b)
    seqlen_q = tl.load(cu_seqlens_q + b + 1) - q_start
    k_start = tl.load(cu_seqlens_k + b)
    seqlen_k = tl.load(cu_seqlens_k + b + 1) - k_start
    qv = tl.view(q + (q_start * stride_qs + h * stride_qh), (seqlen_q, HEAD_DIM), (stride_qs, 1))
    kv = tl.view(k + (k_start * stride_ks + h * stride_kh), (seqlen_k, HEAD_DIM), (stride_ks, 1))
    vv = tl.view(v + (k_start * stride_vs + h * stride_vh), (seqlen_k, HEAD_DIM), (stride_vs, 1))
    ov = tl.view(o + (q_start * stride_os + h * stride_oh), (seqlen_q, HEAD_DIM), (stride_os, 1))
    row0 = pid_m * BLOCK_M
    qt = tl.load(qv, (row0, 0), (BLOCK_M, HEAD_DIM))
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    rows = (row0 + tl.arange(0, BLOCK_M))[:, None]
    for j in range(0, tl.cdiv(seqlen_k, BLOCK_N)):
        col0 = j * BLOCK_N
        kt = tl.load(kv, (col0, 0), (BLOCK_N, HEAD_DIM))
        vt = tl.load(vv, (col0, 0), (BLOCK_N, HEAD_DIM))
        s = tl.dot(qt, kt, trans_b=True) * scale
        cols = (col0 + tl.arange(0, BLOCK_N))[None, :]
        mask = cols < seqlen_k
        if CAUSAL:
            mask = mask & (cols <= rows)
        s = tl.where(mask, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(tl.float16), vt, acc * alpha[:, None])
        m = m_new
    tl.store(ov, (row0, 0), (acc / l[:, None]).to(tl.float16))


def varlen_reference(q, k, v, cu_q, cu_k, scale, causal):
    out = np.zeros(q.shape, np.float64)
    for b in range(len(cu_q) - 1):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        qb, kb, vb = (x.astype(np.float64) for x in (q[qs], k[ks], v[ks]))
        s = np.einsum("qhd,khd->hqk", qb, kb) * scale
        if causal:
            sq, sk = s.shape[-2:]
            s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        out[qs] = np.einsum("hqk,khd->qhd", p / p.sum(-1, keepdims=True), vb)
    return out


def run_varlen(seqlens_q, seqlens_k, causal, heads=2, head_dim=32, run_tile_passes=True, fn=None):
    rng = np.random.default_rng()
    cu_q = np.concatenate([[0], np.cumsum(seqlens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(seqlens_k)]).astype(np.int32)
    q = rng.standard_normal((cu_q[-1], heads, head_dim)).astype(np.float16)
    k = rng.standard_normal((cu_k[-1], heads, head_dim)).astype(np.float16)
    v = rng.standard_normal((cu_k[-1], heads, head_dim)).astype(np.float16)
    o = np.full(q.shape, np.nan, np.float16)  # poisoned: unwritten rows show
    scale = 1.0 / np.sqrt(head_dim)
    kernel = (fn or varlen_fwd).specialize(HEAD_DIM=head_dim, CAUSAL=causal)
    batch, max_q = len(seqlens_q), max(seqlens_q)
    kernel.run_cpu(q, k, v, o, cu_q, cu_k, max_q, heads, batch,
                   *(s // 2 for x in (q, k, v, o) for s in x.strides[:2]), float(scale),
                   grid=(-(-max_q // 16), batch * heads, 1), run_tile_passes=run_tile_passes)
    ref = varlen_reference(q, k, v, cu_q, cu_k, scale, causal)
    return o, ref


@needs_cpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("run_tile_passes", [True, False], ids=["tile-passes", "no-tile-passes"])
def test_varlen_bounds_from_cu_seqlens_match_float64(causal, run_tile_passes):
    """Sequences shorter than a block, of one row, exactly a block and longer
    than several; key lengths differ from query lengths (causal only where
    every query row sees a key: seqlen_k >= seqlen_q)."""
    seqlens_q = [1, 7, 16, 37, 5]
    seqlens_k = [3, 7, 40, 37, 50] if causal else [9, 1, 16, 70, 33]
    o, ref = run_varlen(seqlens_q, seqlens_k, causal, run_tile_passes=run_tile_passes)
    assert not np.isnan(o).any(), "rows left unwritten"
    err = np.linalg.norm(o.astype(np.float64) - ref) / np.linalg.norm(ref)
    assert err < REL_TOL, err


@needs_native
def test_scalar_load_ir():
    """tl.load(ptr + i) is tile.addptr + tile.load_scalar of the pointee type,
    and its result feeds view sizes, pointer offsets and loop bounds."""
    ir = varlen_fwd.specialize().ir
    compiler.parse_and_verify(ir, "<varlen>")
    assert len(re.findall(r"tile.load_scalar %\w+ : !tile.ptr<i32> -> i32", ir)) == 4
    seqlen_k = re.search(r"%(\w+) = arith.subi %\w+, %k_start : i32", ir).group(1)
    assert re.search(rf"tile.view %\w+ sizes\(%{seqlen_k}, %\w+\)", ir)
    assert re.search(rf"arith.addi %{seqlen_k}, %\w+ : i32", ir)  # cdiv(seqlen_k, BLOCK_N)


@needs_native
@pytest.mark.parametrize("causal", [False, True])
def test_loaded_bounds_still_split_masked_loops(causal):
    """seqlen_k (loaded) in the key-padding mask and the loop bound is a
    loop-invariant scalar like a sequence-length parameter: the loop splits
    into unmasked and masked blocks (plus the causal diagonal)."""
    ir = compiler.run_pipeline(varlen_fwd.specialize(CAUSAL=causal).ir, "tile-optimize")
    blocks = re.findall(r'tile.blocks = #tile<blocks (\w+)>', ir)
    assert blocks.count("full") == 1 and "partial" in blocks, blocks
    assert "mask stays applied" not in ir


@needs_native
def test_scalar_load_of_f32_and_i64():
    """Any element type: an f32 (a per-head slope) and an i64 (an offset)."""
    @tilec.jit(grid=(1,))
    def k(x: tl.ptr(tl.float32), offs: tl.ptr(tl.int64), slopes: tl.ptr(tl.float32), n: tl.int32):
        off = tl.load(offs + 1)
        slope = tl.load(slopes + n)
        xv = tl.view(x + off, (n,), (1,))
        tl.store(xv, (0,), tl.full((16,), slope * 2.0, tl.float32))

    ir = k.specialize().ir
    compiler.parse_and_verify(ir, "<f32-i64>")
    assert re.search(r"tile.load_scalar %\w+ : !tile.ptr<i64> -> i64", ir)
    assert re.search(r"tile.load_scalar %\w+ : !tile.ptr<f32> -> f32", ir)


@needs_cpu
def test_scalar_load_of_f32_and_i64_on_cpu():
    @tilec.jit(grid=(1,))
    def k(x: tl.ptr(tl.float32), offs: tl.ptr(tl.int64), slopes: tl.ptr(tl.float32), n: tl.int32):
        off = tl.load(offs + 1)
        slope = tl.load(slopes + n)
        xv = tl.view(x + off, (n,), (1,))
        tl.store(xv, (0,), tl.full((16,), slope * 2.0, tl.float32))

    rng = np.random.default_rng()
    x = np.full(40, np.nan, np.float32)
    offs = np.array([0, int(rng.integers(0, 20))], np.int64)
    slopes = rng.standard_normal(8).astype(np.float32)
    n = int(rng.integers(1, 8))
    k.specialize().run_cpu(x, offs, slopes, n, grid=(1,))
    want = np.full(40, np.nan, np.float32)
    want[offs[1]:offs[1] + n] = slopes[n] * 2.0
    np.testing.assert_array_equal(x, want)


@needs_cpu
def test_scalar_load_past_the_buffer_is_reported():
    """No bounds on tile.load_scalar: on the CPU runner an element past the
    buffer is an error naming the argument, as for tiles."""
    @tilec.jit(grid=(1,))
    def k(x: tl.ptr(tl.float32), idx: tl.ptr(tl.int32), n: tl.int32):
        i = tl.load(idx + n)
        tl.store(tl.view(x, (i,), (1,)), (0,), tl.zeros((16,), tl.float32))

    x = np.zeros(16, np.float32)
    idx = np.array([4, 5], np.int32)
    with pytest.raises(tilec.CompilationError, match=r"element 2 of argument 1 \(idx\), whose buffer holds 2"):
        k.specialize().run_cpu(x, idx, 2, grid=(1,))


@needs_native
def test_scalar_load_on_pointer_arg_errors():
    @tilec.jit(grid=(1,))
    def k(x: tl.ptr(tl.float32), n: tl.int32):
        y = tl.load(x + 1, (0,), (16,))

    with pytest.raises(tilec.CompilationError, match=r"tl.load\(\) takes at most 2 arguments"):
        k.specialize()


@needs_native
def test_scalar_load_gpu_code():
    """On the GPU the loads are uniform scalar loads; cu_seqlens, which the
    kernel never writes, is read through the non-coherent path."""
    arts = compiler.compile(varlen_fwd.specialize(BLOCK_M=64, BLOCK_N=64).ir, "<varlen>", arch="sm_80")
    ptx = arts[0]["ptx"]
    assert len(re.findall(r"ld\.global\.nc\.(?:u|b|s)32", ptx)) >= 2, ptx[:2000]


# --- run-time if and early exit ---------------------------------------------


@tilec.jit(grid=("n_programs",))
def _early_exit(x: tl.ptr(tl.float32), flags: tl.ptr(tl.int32), n_programs: tl.int32):
    pid = tl.program_id(0)
    if tl.load(flags + pid) == 0:
        return
    xv = tl.view(x + pid * 16, (16,), (1,))
    tl.store(xv, (0,), tl.full((16,), pid, tl.float32) + 1.0)


@tilec.jit(grid=(4,))
def _branches(x: tl.ptr(tl.float32), y: tl.ptr(tl.float32), n: tl.int32, thr: tl.float32):
    pid = tl.program_id(0)
    v = tl.load(tl.view(x + pid * 16, (16,), (1,)), (0,), (16,))
    scale = 1.0
    if pid % 2 == 1:
        scale = thr              # a constant before, an f32 here: one f32 result
        v = v * 2.0
    else:
        w = 3                    # local to this branch
        v = v - w
    if n > 8:
        off = 1
    else:
        off = 2                  # two different constants: an i32 result
    if pid == 3:
        v = -v                   # no else: the else yields v unchanged
    tl.store(tl.view(y + pid * 16, (16,), (1,)), (0,), v * scale + off)


@needs_native
def test_runtime_if_ir():
    ir = _branches.specialize().ir
    compiler.parse_and_verify(ir, "<branches>")
    assert re.search(r"%v\w*, %scale = scf.if %\w+ -> \(tensor<16xf32>, f32\)", ir)
    assert re.search(r"%off = scf.if %\w+ -> \(i32\)", ir)
    assert ir.count("scf.if") == 3 and ir.count("} else {") == 3


@needs_native
def test_early_exit_is_an_if_around_the_rest():
    ir = _early_exit.specialize().ir
    compiler.parse_and_verify(ir, "<early-exit>")
    head, rest = ir.split("scf.if", 1)
    then, orelse = rest.split("} else {", 1)
    assert "tile.store" not in then and "tile.store" in orelse
    assert ir.count("return") == 1


@needs_cpu
def test_runtime_if_on_cpu_matches_numpy():
    rng = np.random.default_rng()
    for n in (4, 12):
        x = rng.standard_normal(64).astype(np.float32)
        y = np.full(64, np.nan, np.float32)
        thr = float(rng.standard_normal())
        _branches.specialize().run_cpu(x, y, n, thr, grid=(4,))
        want = x.astype(np.float64).reshape(4, 16).copy()
        want[1::2] *= 2.0 * thr
        want[0::2] -= 3
        want[3] = -want[3]
        want += 1 if n > 8 else 2
        np.testing.assert_allclose(y.reshape(4, 16), want, rtol=1e-6, atol=1e-6)


@needs_cpu
def test_early_exit_on_cpu_writes_only_where_flagged():
    rng = np.random.default_rng()
    flags = rng.integers(0, 2, 8).astype(np.int32)
    flags[0], flags[1] = 0, 1
    x = np.full(8 * 16, np.nan, np.float32)
    _early_exit.specialize().run_cpu(x, flags, 8, grid=(8,))
    x = x.reshape(8, 16)
    for pid, f in enumerate(flags):
        if f:
            np.testing.assert_array_equal(x[pid], pid + 1.0)
        else:
            assert np.isnan(x[pid]).all(), pid


@tilec.jit(grid=("n_programs",))
def _nested_exit(x: tl.ptr(tl.float32), flags: tl.ptr(tl.int32), n_programs: tl.int32, gate: tl.int32,
                 GUARD: tl.constexpr = True, RUNTIME: tl.constexpr = False):
    """The exit inside another `if` (a constexpr one, as flash_fwd's VARLEN
    block, or a run-time one): the stores after the outer `if` must not run
    in a program that returned."""
    pid = tl.program_id(0)
    base = pid * 16
    if RUNTIME:
        if gate > 0:
            base = pid * 16 + 0
            if tl.load(flags + pid) == 0:
                return
    elif GUARD:
        base = pid * 16 + 0
        if tl.load(flags + pid) == 0:
            return
    xv = tl.view(x + base, (16,), (1,))
    tl.store(xv, (0,), tl.full((16,), pid, tl.float32) + 1.0)


@needs_native
@pytest.mark.parametrize("runtime", [False, True], ids=["in-constexpr-if", "in-runtime-if"])
def test_nested_early_exit_wraps_the_rest(runtime):
    """The store after the enclosing `if` lands in the exit's else branch
    (it was left after an empty scf.if, so every program ran the rest)."""
    ir = _nested_exit.specialize(RUNTIME=runtime).ir
    compiler.parse_and_verify(ir, "<nested-exit>")
    assert ir.count("return") == 1
    exit_if = re.search(r"scf.if %\w+ \{\n\s*\} else \{\n", ir)
    assert exit_if, ir
    assert "tile.store" in ir[exit_if.end():]
    assert ir.count("tile.store") == (2 if runtime else 1)  # run-time: the rest in both branches


@needs_cpu
@pytest.mark.parametrize("runtime,gate", [(False, 1), (True, 1), (True, 0)],
                         ids=["constexpr", "runtime-taken", "runtime-not-taken"])
def test_nested_early_exit_on_cpu_writes_only_where_flagged(runtime, gate):
    rng = np.random.default_rng()
    flags = rng.integers(0, 2, 8).astype(np.int32)
    flags[0], flags[1] = 0, 1
    x = np.full(8 * 16, np.nan, np.float32)
    _nested_exit.specialize(RUNTIME=runtime).run_cpu(x, flags, 8, gate, grid=(8,))
    x = x.reshape(8, 16)
    for pid, f in enumerate(flags):
        if f or not gate:
            np.testing.assert_array_equal(x[pid], pid + 1.0)
        else:
            assert np.isnan(x[pid]).all(), pid


@tilec.jit(grid=("cdiv(max_seqlen_q, BLOCK_M)", "batch * num_heads", 1))
def varlen_early_exit(q: tl.ptr(tl.float16), k: tl.ptr(tl.float16), v: tl.ptr(tl.float16),
                      o: tl.ptr(tl.float16), cu_seqlens_q: tl.ptr(tl.int32), cu_seqlens_k: tl.ptr(tl.int32),
                      max_seqlen_q: tl.int32, num_heads: tl.int32, batch: tl.int32,
                      stride_qs: tl.int64, stride_qh: tl.int64, stride_ks: tl.int64, stride_kh: tl.int64,
                      stride_vs: tl.int64, stride_vh: tl.int64, stride_os: tl.int64, stride_oh: tl.int64,
                      scale: tl.float32, HEAD_DIM: tl.constexpr = 32, CAUSAL: tl.constexpr = False,
                      BLOCK_M: tl.constexpr = 16, BLOCK_N: tl.constexpr = 16):
    """varlen_fwd with the early exit of programs past a short sequence."""
    tl.assume(scale > 0)
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b, h = pid_bh // num_heads, pid_bh % num_heads
    q_start = tl.load(cu_seqlens_q + b)
    seqlen_q = tl.load(cu_seqlens_q + b + 1) - q_start
    row0 = pid_m * BLOCK_M
    if row0 >= seqlen_q:
        return
    k_start = tl.load(cu_seqlens_k + b)
    seqlen_k = tl.load(cu_seqlens_k + b + 1) - k_start
    qv = tl.view(q + (q_start * stride_qs + h * stride_qh), (seqlen_q, HEAD_DIM), (stride_qs, 1))
    kv = tl.view(k + (k_start * stride_ks + h * stride_kh), (seqlen_k, HEAD_DIM), (stride_ks, 1))
    vv = tl.view(v + (k_start * stride_vs + h * stride_vh), (seqlen_k, HEAD_DIM), (stride_vs, 1))
    ov = tl.view(o + (q_start * stride_os + h * stride_oh), (seqlen_q, HEAD_DIM), (stride_os, 1))
    qt = tl.load(qv, (row0, 0), (BLOCK_M, HEAD_DIM))
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    rows = (row0 + tl.arange(0, BLOCK_M))[:, None]
    for j in range(0, tl.cdiv(seqlen_k, BLOCK_N)):
        col0 = j * BLOCK_N
        kt = tl.load(kv, (col0, 0), (BLOCK_N, HEAD_DIM))
        vt = tl.load(vv, (col0, 0), (BLOCK_N, HEAD_DIM))
        s = tl.dot(qt, kt, trans_b=True) * scale
        cols = (col0 + tl.arange(0, BLOCK_N))[None, :]
        mask = cols < seqlen_k
        if CAUSAL:
            mask = mask & (cols <= rows)
        s = tl.where(mask, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(tl.float16), vt, acc * alpha[:, None])
        m = m_new
    tl.store(ov, (row0, 0), (acc / l[:, None]).to(tl.float16))


@needs_cpu
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_with_early_exit_matches_float64(causal):
    """Programs past a sequence's end return before loading anything; the
    rest is as varlen_fwd (max_seqlen_q 40: most programs of the short
    sequences exit)."""
    o, ref = run_varlen([1, 7, 40, 16, 3], [9, 7, 40, 70, 33], causal, fn=varlen_early_exit)
    assert not np.isnan(o).any(), "rows left unwritten"
    err = np.linalg.norm(o.astype(np.float64) - ref) / np.linalg.norm(ref)
    assert err < REL_TOL, err


@needs_native
@pytest.mark.parametrize("causal", [False, True])
def test_loops_inside_the_early_exit_still_split(causal):
    ir = compiler.run_pipeline(varlen_early_exit.specialize(CAUSAL=causal).ir, "tile-optimize")
    blocks = re.findall(r'tile.blocks = #tile<blocks (\w+)>', ir)
    assert blocks.count("full") == 1 and "partial" in blocks, blocks


@needs_native
@pytest.mark.parametrize("kernel,constexprs", [
    (varlen_early_exit, dict(BLOCK_M=64, BLOCK_N=64)),
    (varlen_early_exit, dict(BLOCK_M=64, BLOCK_N=64, CAUSAL=True)),
    (_early_exit, {}), (_branches, {})], ids=["varlen", "varlen-causal", "early-exit", "branches"])
def test_runtime_if_compiles_for_the_gpu(kernel, constexprs):
    """PTX (and, where ptxas is installed, a cubin) for kernels with run-time
    branches; the early exit is a branch around the kernel's work."""
    art = compiler.compile(kernel.specialize(**constexprs).ir, "<if>", arch="sm_80")[0]
    assert ".entry" in art["ptx"]
    if shutil.which("ptxas") or os.path.exists("/usr/local/cuda/bin/ptxas"):
        assert art["cubin"]  # ptxas assembled it (a ptxas error raises)


def _error_kernel(body):
    """A kernel whose body is `body` (source text), defined in a file so the
    DSL can read it."""
    import importlib.util
    import tempfile
    import textwrap

    src = textwrap.dedent('''
        import tilec
        from tilec import language as tl

        @tilec.jit(grid=(1,))
        def k(x: tl.ptr(tl.float32), n: tl.int32):
        ''') + textwrap.indent(textwrap.dedent(body), "    ")
    f = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
    f.write(src)
    f.close()
    spec = importlib.util.spec_from_file_location("errk", f.name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.k


@pytest.mark.parametrize("body,match", [
    ("""
     if n > 0:
         a = tl.zeros((16,), tl.float32)
     else:
         a = tl.zeros((8,), tl.float32)
     """, r"'a' has type tensor<16xf32> in the 'if' branch and tensor<8xf32> in the 'else' branch"),
    ("""
     if n > 0:
         a = 1
     b = a + 1
     """, r"'a' is assigned in only one branch of a run-time 'if'"),
    ("""
     p = x
     if n > 0:
         p = x + 1
     """, r"'p' is assigned !tile.ptr<f32> in a run-time 'if'"),
    ("""
     for i in range(n):
         if i > 2:
             return
     """, r"'return' inside a loop is not supported"),
    ("""
     return
     a = 1
     """, r"unreachable code after 'return'"),
    ("""
     if n > 0:
         return
     else:
         return
     a = 1
     """, r"unreachable code after 'return'"),
], ids=["type-mismatch", "one-branch-local", "pointer", "return-in-loop", "after-return",
        "after-both-return"])
def test_runtime_if_errors(body, match):
    with pytest.raises(tilec.CompilationError, match=match):
        _error_kernel(body).specialize()


# --- on the GPU (skipped without one) ------------------------------------------


def _cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


@pytest.mark.skipif(_cuda() is None, reason="needs torch and a CUDA GPU")
@pytest.mark.parametrize("fn", [varlen_fwd, varlen_early_exit], ids=["varlen", "early-exit"])
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_gpu_matches_float64(fn, causal):
    torch = _cuda()
    seqlens_q = [1, 7, 64, 200, 5, 0, 130]
    seqlens_k = [3, 7, 80, 200, 50, 9, 300] if causal else [9, 1, 64, 77, 333, 9, 2]
    heads, d = 3, 64
    cu_q = torch.tensor([0] + np.cumsum(seqlens_q).tolist(), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + np.cumsum(seqlens_k).tolist(), dtype=torch.int32, device="cuda")
    q = torch.randn(int(cu_q[-1]), heads, d, device="cuda", dtype=torch.float16)
    k = torch.randn(int(cu_k[-1]), heads, d, device="cuda", dtype=torch.float16)
    v = torch.randn(int(cu_k[-1]), heads, d, device="cuda", dtype=torch.float16)
    o = torch.full_like(q, float("nan"))
    scale = d ** -0.5
    kernel = fn.specialize(HEAD_DIM=d, CAUSAL=causal, BLOCK_M=64, BLOCK_N=64)
    kernel(q, k, v, o, cu_q, cu_k, max(seqlens_q), heads, len(seqlens_q),
           *(s for x in (q, k, v, o) for s in x.stride()[:2]), scale)
    torch.cuda.synchronize()
    ref = varlen_reference(*(x.cpu().numpy() for x in (q, k, v, cu_q, cu_k)), scale, causal)
    out = o.double().cpu().numpy()
    assert not np.isnan(out).any(), "rows left unwritten"
    err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    assert err < REL_TOL, err


# --- prefetch through loaded addresses (paged K/V) -----------------------------


@tilec.jit(grid=("cdiv(seqlen_q, BLOCK_M)", "batch * num_heads", 1))
def paged_fwd(q: tl.ptr(tl.float16), k_cache: tl.ptr(tl.float16), v_cache: tl.ptr(tl.float16),
              o: tl.ptr(tl.float16), block_table: tl.ptr(tl.int32), seqlens_k: tl.ptr(tl.int32),
              seqlen_q: tl.int32, num_heads: tl.int32, batch: tl.int32, max_blocks: tl.int32,
              stride_qb: tl.int64, stride_qs: tl.int64, stride_qh: tl.int64,
              stride_kp: tl.int64, stride_ks: tl.int64, stride_kh: tl.int64,
              stride_ob: tl.int64, stride_os: tl.int64, stride_oh: tl.int64, scale: tl.float32,
              HEAD_DIM: tl.constexpr = 32, BLOCK_M: tl.constexpr = 16, BLOCK_N: tl.constexpr = 16):
    """K/V in pages of BLOCK_N rows, (num_pages, BLOCK_N, heads, head_dim)
    (v_cache with k_cache's strides); sequence b's block j is page
    block_table[b, j]; its length is seqlens_k[b]."""
    tl.assume(scale > 0)
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b, h = pid_bh // num_heads, pid_bh % num_heads
    seqlen_k = tl.load(seqlens_k + b)
    qv = tl.view(q + (b * stride_qb + h * stride_qh), (seqlen_q, HEAD_DIM), (stride_qs, 1))
    ov = tl.view(o + (b * stride_ob + h * stride_oh), (seqlen_q, HEAD_DIM), (stride_os, 1))
    row0 = pid_m * BLOCK_M
    qt = tl.load(qv, (row0, 0), (BLOCK_M, HEAD_DIM))
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    for j in range(0, tl.cdiv(seqlen_k, BLOCK_N)):
        col0 = j * BLOCK_N
        page = tl.load(block_table + b * max_blocks + j)
        rows_left = seqlen_k - col0
        kt = tl.load(tl.view(k_cache + (page * stride_kp + h * stride_kh), (rows_left, HEAD_DIM),
                             (stride_ks, 1)), (0, 0), (BLOCK_N, HEAD_DIM))
        vt = tl.load(tl.view(v_cache + (page * stride_kp + h * stride_kh), (rows_left, HEAD_DIM),
                             (stride_ks, 1)), (0, 0), (BLOCK_N, HEAD_DIM))
        s = tl.dot(qt, kt, trans_b=True) * scale
        cols = (col0 + tl.arange(0, BLOCK_N))[None, :]
        s = tl.where(cols < seqlen_k, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(tl.float16), vt, acc * alpha[:, None])
        m = m_new
    tl.store(ov, (row0, 0), (acc / l[:, None]).to(tl.float16))


def paged_case(rng, seqlens_k, seqlen_q, heads, d, page):
    """Pages shuffled over a cache with spare pages; each block table row
    holds exactly the pages its sequence uses (no slack past the end, so a
    prefetch of the entry after the last one would read the next row or past
    the table)."""
    batch = len(seqlens_k)
    blocks = [-(-s // page) for s in seqlens_k]
    max_blocks = max(blocks)
    num_pages = sum(blocks) + 3
    perm = rng.permutation(num_pages).astype(np.int32)
    table = np.zeros((batch, max_blocks), np.int32)
    used = 0
    for b, n in enumerate(blocks):
        table[b, :n] = perm[used:used + n]
        used += n
    k_cache = rng.standard_normal((num_pages, page, heads, d)).astype(np.float16)
    v_cache = rng.standard_normal((num_pages, page, heads, d)).astype(np.float16)
    q = rng.standard_normal((batch, seqlen_q, heads, d)).astype(np.float16)
    ref = np.zeros(q.shape, np.float64)
    for b in range(batch):
        n = seqlens_k[b]
        kb = k_cache[table[b, :blocks[b]]].reshape(-1, heads, d)[:n].astype(np.float64)
        vb = v_cache[table[b, :blocks[b]]].reshape(-1, heads, d)[:n].astype(np.float64)
        s = np.einsum("qhd,khd->hqk", q[b].astype(np.float64), kb) / np.sqrt(d)
        p = np.exp(s - s.max(-1, keepdims=True))
        ref[b] = np.einsum("hqk,khd->qhd", p / p.sum(-1, keepdims=True), vb)
    return q, k_cache, v_cache, table, ref


@needs_native
def test_paged_kv_loads_are_prefetched():
    """tile-pipeline rotates K/V loads whose address comes from the block
    table: the next block's table entry is read at the top of the body,
    guarded by next < ub (with zero-sized views otherwise), and no load is
    left un-prefetched."""
    ir = compiler.run_pipeline(paged_fwd.specialize().ir, "tile-optimize,tile-pipeline")
    assert "not prefetched" not in ir
    for loop in re.findall(r"scf.for .*?\{tile.blocks = #tile<blocks \w+>\}", ir, re.S):
        body = loop.split("{", 1)[1]
        top = body[:body.index("tile.dot")]
        assert re.search(r"scf.if %\w+ -> \(i32\) \{\s+%\w+ = tile.load_scalar", top), top[:2000]
        assert "tile.load_scalar" in top and top.count("tile.load %") >= 2


@needs_cpu
@pytest.mark.parametrize("seqlens_k", [[40, 16, 1, 77], [16]], ids=["ragged", "one-page"])
def test_paged_kv_prefetched_matches_float64(seqlens_k):
    """On the CPU with every tile pass (tile-pipeline included): the CPU
    runner reports any read past the block table, and the last iteration's
    prefetch must not make one."""
    rng = np.random.default_rng()
    heads, d, page, sq = 2, 32, 16, 20
    q, k_cache, v_cache, table, ref = paged_case(rng, seqlens_k, sq, heads, d, page)
    o = np.full(q.shape, np.nan, np.float16)
    seqlens = np.array(seqlens_k, np.int32)
    e = 2  # bytes per f16
    paged_fwd.specialize().run_cpu(
        q, k_cache, v_cache, o, table.reshape(-1).copy(), seqlens, sq, heads, len(seqlens_k),
        table.shape[1], *(s // e for s in (q.strides[0], q.strides[1], q.strides[2])),
        *(s // e for s in (k_cache.strides[0], k_cache.strides[1], k_cache.strides[2])),
        *(s // e for s in (o.strides[0], o.strides[1], o.strides[2])), float(1 / np.sqrt(d)),
        grid=(-(-sq // 16), len(seqlens_k) * heads, 1))
    assert not np.isnan(o).any()
    err = np.linalg.norm(o.astype(np.float64) - ref) / np.linalg.norm(ref)
    assert err < REL_TOL, err


@needs_native
def test_paged_kv_compiles_for_the_gpu():
    k = paged_fwd.specialize(HEAD_DIM=64, BLOCK_M=64, BLOCK_N=64)
    art = compiler.compile(k.ir, k.source_name, arch="sm_80")[0]
    assert "cp.async" in art["ptx"] and "ld.global.nc.b32" in art["ptx"]
