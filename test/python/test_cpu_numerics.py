"""CPU numerics of every kernel in kernels/ against a float64 numpy reference.

Each kernel runs in-process through tilec::runOnCPU (the `tile-to-cpu`
pipeline and MLIR's ExecutionEngine), with and without the tile-level passes
(tile-optimize: tile-minimize-nonmatmul, tile-split-masked-loops), on fresh
random f16 inputs, with outputs poisoned (NaN) before each run and a NaN
guard region after each output that must stay untouched.

Error bound, ||out - ref|| / ||ref|| over the whole output:
  O (f16 out):   <= 1e-3. O is stored as f16 (unit roundoff 2^-11 ~ 4.9e-4 per
                 element, ~2.8e-4 in norm for uniform rounding) and P is rounded
                 to f16 before P·V, as on the GPU. Measured: 2.1e-4 .. 2.7e-4
                 (0 for seqlen 1), the same with and without the passes.
  lse (f32 out): max |lse - ref| <= 1e-5 (f32 statistics; measured <= 1e-6).
"""
import os
import pathlib
import subprocess

import numpy as np
import pytest

# A hard import: a numerics suite that skips when its module is missing is a
# suite that silently does not run. scripts/build.sh all builds it into
# build/python (python/CMakeLists.txt).
import _tilec

assert _tilec.has_cpu_runner, "_tilec was built without the CPU runner (lib/CPU)"


def reachable_bytes(a):
    """Bytes from a's first element to the end of the memory it spans (a
    strided view reaches past its own nbytes)."""
    from numpy.lib.array_utils import byte_bounds
    return byte_bounds(a)[1] - a.ctypes.data


def run_cpu(source, kernel, args, grid, run_tile_passes=True, buffer_name="<python>"):
    """_tilec.run_cpu with numpy arrays for pointer parameters (written in
    place) and (kind, value) tuples for scalars. Arrays go with their sizes,
    so every run here also checks the kernel stays inside its buffers."""
    packed = [("ptr", (a.ctypes.data, reachable_bytes(a))) if isinstance(a, np.ndarray) else a
              for a in args]
    grid = tuple(grid) + (1,) * (3 - len(grid))
    _tilec.run_cpu(source, buffer_name, kernel, packed, grid, run_tile_passes)


TILEC = pathlib.Path(_tilec.__file__).resolve().parents[1] / "bin" / "tilec"

ROOT = pathlib.Path(__file__).resolve().parents[2]
KERNELS = ROOT / "kernels"

O_REL_TOL = 1e-3
LSE_ABS_TOL = 1e-5
GUARD = 1024  # poisoned elements after each output buffer

# (file, kernel, head_dim, causal)
VARIANTS = [
    ("flash_fwd.mlir", "flash_fwd", 128, False),
    ("flash_fwd_causal.mlir", "flash_fwd_causal", 128, True),
    ("flash_fwd_d64.mlir", "flash_fwd_d64", 64, False),
    ("flash_fwd_causal_d64.mlir", "flash_fwd_causal_d64", 64, True),
]
SEQLENS = [1, 17, 100, 257]


def test_every_kernel_file_is_covered():
    """A kernel added to kernels/ without a numerics test fails here."""
    files = {p.name for p in KERNELS.glob("*.mlir")}
    assert files == {v[0] for v in VARIANTS}


def reference(q, k, v, scale, causal):
    """float64 attention; q (b, sq, h, d), k/v (b, sk, h, d) -> o, lse (b, h, sq)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    sq, sk = q.shape[1], k.shape[1]
    if causal:
        keep = np.arange(sk)[None, :] <= np.arange(sq)[:, None]
        s = np.where(keep, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    o = np.einsum("bhqk,bkhd->bqhd", p / l, v)
    lse = (m + np.log(l))[..., 0]
    return o, lse


def poisoned(shape, dtype):
    """An array of `shape` (NaN) followed by GUARD NaNs in the same buffer."""
    n = int(np.prod(shape))
    full = np.full(n + GUARD, np.nan, dtype=dtype)
    return full, full[:n].reshape(shape)


def run_flash(path, kernel, q, k, v, scale, run_tile_passes):
    b, sq, h, d = q.shape
    sk = k.shape[1]
    o_full, o = poisoned((b, sq, h, d), np.float16)
    lse_full, lse = poisoned((b, h, sq), np.float32)
    args = [q, k, v, o, lse,
            ("i32", sq), ("i32", sk), ("i32", h), ("i32", b),
            ("i64", q.strides[0] // 2), ("i64", q.strides[1] // 2), ("i64", q.strides[2] // 2),
            ("i64", k.strides[0] // 2), ("i64", k.strides[1] // 2), ("i64", k.strides[2] // 2),
            ("i64", v.strides[0] // 2), ("i64", v.strides[1] // 2), ("i64", v.strides[2] // 2),
            ("i64", o.strides[0] // 2), ("i64", o.strides[1] // 2), ("i64", o.strides[2] // 2),
            ("i64", lse.strides[0] // 4), ("i64", lse.strides[1] // 4),
            ("f32", scale)]
    grid = (-(-sq // 64), b * h, 1)
    run_cpu(path.read_text(), kernel, args, grid,
                       run_tile_passes=run_tile_passes, buffer_name=str(path))
    assert np.isnan(o_full[o.size:]).all(), "a store wrote past the end of o"
    assert np.isnan(lse_full[lse.size:]).all(), "a store wrote past the end of lse"
    return o, lse


@pytest.mark.parametrize("run_tile_passes", [False, True], ids=["naive", "tile-optimize"])
@pytest.mark.parametrize("seqlen", SEQLENS)
@pytest.mark.parametrize("file,kernel,head_dim,causal", VARIANTS,
                         ids=[v[1] for v in VARIANTS])
def test_flash_fwd_matches_float64(file, kernel, head_dim, causal, seqlen, run_tile_passes):
    rng = np.random.default_rng()  # fresh inputs every run
    b, h = 2, 2
    q, k, v = (rng.standard_normal((b, seqlen, h, head_dim)).astype(np.float16)
               for _ in range(3))
    scale = 1.0 / np.sqrt(head_dim)
    o, lse = run_flash(KERNELS / file, kernel, q, k, v, scale, run_tile_passes)
    o_ref, lse_ref = reference(q, k, v, scale, causal)
    assert not np.isnan(o).any() and not np.isnan(lse).any(), "unwritten or NaN outputs"
    rel = np.linalg.norm(o.astype(np.float64) - o_ref) / np.linalg.norm(o_ref)
    assert rel <= O_REL_TOL, f"||o - ref|| / ||ref|| = {rel:.2e}"
    lse_err = np.abs(lse.astype(np.float64) - lse_ref).max()
    assert lse_err <= LSE_ABS_TOL, f"max |lse - ref| = {lse_err:.2e}"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_seqlen_q_differs_from_seqlen_k(causal):
    """Row blocks past the keys, partial last K block, non-contiguous heads."""
    file, kernel = ("flash_fwd_causal.mlir", "flash_fwd_causal") if causal else \
        ("flash_fwd.mlir", "flash_fwd")
    rng = np.random.default_rng()
    b, h, d, sq, sk = 1, 3, 128, 130, 75
    q = rng.standard_normal((b, sq, h, d)).astype(np.float16)
    # k, v: every other head of a bigger tensor, so strides are not the dense ones.
    k = rng.standard_normal((b, sk, 2 * h, d)).astype(np.float16)[:, :, ::2]
    v = rng.standard_normal((b, sk, 2 * h, d)).astype(np.float16)[:, :, ::2]
    scale = 0.125
    for run_tile_passes in (False, True):
        o, lse = run_flash(KERNELS / file, kernel, q, k, v, scale, run_tile_passes)
        o_ref, lse_ref = reference(q, k, v, scale, causal)
        rel = np.linalg.norm(o.astype(np.float64) - o_ref) / np.linalg.norm(o_ref)
        assert rel <= O_REL_TOL
        assert np.abs(lse - lse_ref).max() <= LSE_ABS_TOL


def test_negative_scale_takes_the_fallback_loop():
    """tile-minimize-nonmatmul versions the loop on scale > 0; scale < 0 must
    still be right (the original loop runs)."""
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((1, 100, 1, 128)).astype(np.float16) for _ in range(3))
    o, lse = run_flash(KERNELS / "flash_fwd_causal.mlir", "flash_fwd_causal", q, k, v, -0.09,
                       run_tile_passes=True)
    o_ref, lse_ref = reference(q, k, v, -0.09, True)
    assert np.linalg.norm(o.astype(np.float64) - o_ref) / np.linalg.norm(o_ref) <= O_REL_TOL
    assert np.abs(lse - lse_ref).max() <= LSE_ABS_TOL


LOAD_STORE = """
func.func @copy(%src: !tile.ptr<f32>, %dst: !tile.ptr<f32>, %rows: i32, %cols: i32,
                %r0: i32, %c0: i32) attributes {tile.kernel} {
  %c1 = arith.constant 1 : i64
  %stride = arith.extsi %cols : i32 to i64
  %sv = tile.view %src sizes(%rows, %cols) strides(%stride, %c1) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %dv = tile.view %dst sizes(%rows, %cols) strides(%stride, %c1) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %t = tile.load %sv[%r0, %c0] padding = PAD : !tile.view<f32, 2> -> tensor<4x8xf32>
  %one = arith.constant dense<1.0> : tensor<4x8xf32>
  %u = arith.addf %t, %one : tensor<4x8xf32>
  tile.store %u, %dv[%r0, %c0] : tensor<4x8xf32>, !tile.view<f32, 2>
  return
}
"""


@pytest.mark.parametrize("pad,pad_value", [("zero", 0.0), ("neg_inf", -np.inf)])
@pytest.mark.parametrize("r0,c0", [(0, 0), (-2, 3), (2, -5), (5, 6), (-10, 0)])
def test_load_store_bounds(pad, pad_value, r0, c0):
    """Out-of-bounds elements read the padding and are never written, for
    negative offsets and tiles hanging over either edge."""
    rows, cols = 6, 9
    src = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) + 1
    dst = np.full((rows, cols), np.nan, dtype=np.float32)
    run_cpu(LOAD_STORE.replace("PAD", pad), "copy",
                       [src, dst, ("i32", rows), ("i32", cols), ("i32", r0), ("i32", c0)], (1,))
    expect = np.full((rows, cols), np.nan, dtype=np.float32)
    for i in range(4):
        for j in range(8):
            r, c = r0 + i, c0 + j
            if 0 <= r < rows and 0 <= c < cols:
                expect[r, c] = src[r, c] + 1
    np.testing.assert_array_equal(dst, expect)
    del pad_value


def test_access_past_a_buffer_is_refused_and_reported():
    """The kernel's view says 6x9 but the destination holds 30 elements, and
    the 4x8 tile at (0, 0) reaches element 34: the runner refuses the stores
    past the buffer (none lands there) and raises an error naming the
    argument, instead of corrupting memory."""
    rows, cols = 6, 9
    src = np.arange(rows * cols, dtype=np.float32) + 1
    backing = np.full(rows * cols, -7.0, dtype=np.float32)
    dst = backing[:30]
    with pytest.raises(RuntimeError, match=r"@copy accessed element 3[0-4] of argument 1 \(#1\), "
                                           r"whose buffer holds 30 elements \(120 bytes\)"):
        run_cpu(LOAD_STORE.replace("PAD", "zero"), "copy",
                [src, dst, ("i32", rows), ("i32", cols), ("i32", 0), ("i32", 0)], (1,))
    assert (backing[30:] == -7.0).all(), "a store landed past the buffer"
    assert backing[27] == src[27] + 1, "the stores inside the buffer were made"
    # The same kernel with buffers that fit still runs.
    run_cpu(LOAD_STORE.replace("PAD", "zero"), "copy",
            [src, backing, ("i32", rows), ("i32", cols), ("i32", 0), ("i32", 0)], (1,))


def test_errors_carry_locations():
    with pytest.raises(RuntimeError, match=r"bad\.mlir:2:8: error: custom op 'tile.nope'"):
        run_cpu("func.func @k() attributes {tile.kernel} {\n  %x = tile.nope\n}",
                           "k", [], (1,), buffer_name="bad.mlir")
    with pytest.raises(RuntimeError, match=r"argument 0 \(#0\) of @copy must be ptr, got i32"):
        run_cpu(LOAD_STORE.replace("PAD", "zero"), "copy",
                           [("i32", 1)] * 6, (1,))


def test_run_cpu_main(tmp_path):
    """`tilec run-cpu` on files: ptr buffers are read before and written after."""
    rows, cols = 3, 5
    src = np.arange(rows * cols, dtype=np.float32)
    dst = np.full(rows * cols, np.nan, dtype=np.float32)
    (tmp_path / "k.mlir").write_text(LOAD_STORE.replace("PAD", "zero"))
    src.tofile(tmp_path / "src.bin")
    dst.tofile(tmp_path / "dst.bin")
    run = subprocess.run([
        str(TILEC), "run-cpu", str(tmp_path / "k.mlir"), "--kernel", "copy", "--grid", "1,1,1",
        "--arg", f"ptr:{tmp_path / 'src.bin'}", "--arg", f"ptr:{tmp_path / 'dst.bin'}",
        "--arg", f"i32:{rows}", "--arg", f"i32:{cols}", "--arg", "i32:0", "--arg", "i32:0"],
        capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    out = np.fromfile(tmp_path / "dst.bin", dtype=np.float32).reshape(rows, cols)
    np.testing.assert_array_equal(out, src.reshape(rows, cols) + 1)


WINDOW_SUMS = """
// l[r] = sum over keys c with r - W <= c <= r and c < seqlen_k of exp(x[r, c]),
// blocked 16x16: exercises every range tile-split-masked-loops makes
// (skipped, masked, unmasked, masked, skipped).
func.func @window_sums(%x: !tile.ptr<f32>, %l: !tile.ptr<f32>, %seqlen_q: i32, %seqlen_k: i32,
                       %window: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c15 = arith.constant 15 : i32
  %c16 = arith.constant 16 : i32
  %c1_i64 = arith.constant 1 : i64
  %stride = arith.extsi %seqlen_k : i32 to i64
  %xv = tile.view %x sizes(%seqlen_q, %seqlen_k) strides(%stride, %c1_i64) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %lv = tile.view %l sizes(%seqlen_q) strides(%c1_i64) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %pid = tile.program_id 0 : i32
  %row0 = arith.muli %pid, %c16 : i32
  %iota = tile.iota : tensor<16xi32>
  %row0_t = tile.splat %row0 : i32 -> tensor<16xi32>
  %rows1 = arith.addi %iota, %row0_t : tensor<16xi32>
  %rows2 = tile.expand_dims %rows1 along 1 : tensor<16xi32> -> tensor<16x1xi32>
  %rows = tile.broadcast %rows2 : tensor<16x1xi32> -> tensor<16x16xi32>
  %w = tile.splat %window : i32 -> tensor<16x16xi32>
  %lo = arith.subi %rows, %w : tensor<16x16xi32>
  %sk = tile.splat %seqlen_k : i32 -> tensor<16x16xi32>
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %zero = arith.constant dense<0.0> : tensor<16xf32>
  %hi = arith.addi %seqlen_k, %c15 : i32
  %nblocks = arith.divsi %hi, %c16 : i32
  %sum = scf.for %j = %c0 to %nblocks step %c1 iter_args(%acc = %zero) -> (tensor<16xf32>) : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %t = tile.load %xv[%row0, %col0] padding = zero : !tile.view<f32, 2> -> tensor<16x16xf32>
    %col0_t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0_t : tensor<16xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %cols = tile.broadcast %cols2 : tensor<1x16xi32> -> tensor<16x16xi32>
    %left = arith.cmpi sge, %cols, %lo : tensor<16x16xi32>
    %right = arith.cmpi sle, %cols, %rows : tensor<16x16xi32>
    %inb = arith.cmpi slt, %cols, %sk : tensor<16x16xi32>
    %k1 = arith.andi %left, %right : tensor<16x16xi1>
    %keep = arith.andi %k1, %inb : tensor<16x16xi1>
    %masked = arith.select %keep, %t, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %e = math.exp %masked : tensor<16x16xf32>
    %s = tile.reduce sum %e along 1 : tensor<16x16xf32> -> tensor<16xf32>
    %next = arith.addf %acc, %s : tensor<16xf32>
    scf.yield %next : tensor<16xf32>
  }
  tile.store %sum, %lv[%row0] : tensor<16xf32>, !tile.view<f32, 1>
  return
}
"""


@pytest.mark.parametrize("run_tile_passes", [False, True], ids=["naive", "tile-optimize"])
@pytest.mark.parametrize("sq,sk,window", [(100, 100, 0), (100, 100, 20), (70, 130, 37),
                                          (257, 200, 64), (33, 17, 100)])
def test_sliding_window_split(sq, sk, window, run_tile_passes):
    """A sliding-window + causal + seqlen_k mask, whose left edge moves the
    start of the loop (skipped blocks before the window)."""
    rng = np.random.default_rng()
    x = rng.standard_normal((sq, sk)).astype(np.float32)
    l_full, l = poisoned((sq,), np.float32)
    run_cpu(WINDOW_SUMS, "window_sums",
                       [x, l_full, ("i32", sq), ("i32", sk), ("i32", window)], (-(-sq // 16),),
                       run_tile_passes=run_tile_passes)
    r = np.arange(sq)[:, None]
    c = np.arange(sk)[None, :]
    keep = (c >= r - window) & (c <= r)
    ref = np.where(keep, np.exp(x.astype(np.float64)), 0.0).sum(axis=1)
    assert np.isnan(l_full[sq:]).all()
    np.testing.assert_allclose(l, ref, rtol=1e-5, atol=0)


LAZY_PIPELINE = "builtin.module(tile-optimize,tile-lazy-rescale{num-warps=2 min-registers=128})"


@pytest.mark.parametrize("file,kernel,causal", [("flash_fwd.mlir", "flash_fwd", False),
                                                 ("flash_fwd_causal.mlir", "flash_fwd_causal", True)],
                         ids=["full", "causal"])
def test_lazy_rescale_matches_float64(file, kernel, causal):
    """tile-lazy-rescale keeps a row's stale max until the new one is 2^8
    larger. Keys whose scores climb block by block exercise both paths: a
    ramp of +1.8 per 64 keys, so that within each group of four blocks the
    max is kept while the scores climb to e^5.4 ~ 2^7.8, and a jump of +12
    at the start of each group (a new max). The rewritten tile IR runs on
    the CPU runner against float64."""
    source = (KERNELS / file).read_text()
    rewritten = _tilec.run_pipeline(source, LAZY_PIPELINE, file)
    assert "tile.skip_unit_rescale" in rewritten, "the pass did not rewrite the loop"
    rng = np.random.default_rng()
    b, h, d, s = 1, 2, 128, 700
    scale = 1.0 / np.sqrt(d)
    block = np.arange(s) // 64
    climb = block * 1.8 + (block // 4) * 12.0            # score offset of each key (natural log)
    q = (0.25 * rng.standard_normal((b, s, h, d))).astype(np.float16)
    k = (0.25 * rng.standard_normal((b, s, h, d))).astype(np.float16)
    v = rng.standard_normal((b, s, h, d)).astype(np.float16)
    q[..., 0] = 4.0
    k[..., 0] = (climb / (4.0 * scale))[None, :, None]
    path = pathlib.Path(f"/lazy/{file}")
    o_full, o = poisoned((b, s, h, d), np.float16)
    lse_full, lse = poisoned((b, h, s), np.float32)
    args = [q, k, v, o, lse, ("i32", s), ("i32", s), ("i32", h), ("i32", b)]
    for t in (q, k, v, o):
        args += [("i64", st // 2) for st in t.strides[:3]]
    args += [("i64", lse.strides[0] // 4), ("i64", lse.strides[1] // 4), ("f32", scale)]
    run_cpu(rewritten, kernel, args, (-(-s // 64), b * h, 1), run_tile_passes=False,
            buffer_name=str(path))
    assert np.isnan(o_full[o.size:]).all() and np.isnan(lse_full[lse.size:]).all()
    o_ref, lse_ref = reference(q, k, v, scale, causal)
    assert not np.isnan(o).any() and not np.isnan(lse).any(), "unwritten or NaN outputs"
    rel = np.linalg.norm(o.astype(np.float64) - o_ref) / np.linalg.norm(o_ref)
    assert rel <= O_REL_TOL, f"||o - ref|| / ||ref|| = {rel:.2e}"
    # lse reaches ~100 here: the f32 bound scales with it.
    lse_err = np.abs(lse.astype(np.float64) - lse_ref).max()
    assert lse_err <= LSE_ABS_TOL * max(1.0, np.abs(lse_ref).max()), f"max |lse - ref| = {lse_err:.2e}"
