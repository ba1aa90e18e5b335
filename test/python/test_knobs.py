"""Bad values of every DSL knob are refused where they enter, with a message
naming the knob (and the constexpr holding it), the value and the allowed
range; never a crash of the Python process (NUM_WARPS=0 used to be a SIGFPE
in tile-lazy-rescale), never a silent default (compile(num_warps=0) used to
compile with the kernel's own 4)."""

import time

import pytest

import _tilec
import tilec
from tilec import compiler
from tilec import language as tl
from tilec.flash_attn import flash_fwd_kernel


def _copy_kernel(**knobs):
    @tilec.jit(grid=("1", "1", "1"), **knobs)
    def copy(x: tl.ptr(tl.float32), y: tl.ptr(tl.float32), n: tl.int32):
        tl.store(tl.view(y, (n, 64), (64, 1)), (0, 0), tl.load(tl.view(x, (n, 64), (64, 1)), (0, 0), (64, 64)))
    return copy


@pytest.mark.parametrize("knobs, error, match", [
    (dict(num_warps=0), ValueError, r"copy: num_warps must be a power of two in \[1, 16\], got 0"),
    (dict(num_warps=3), ValueError, r"num_warps must be a power of two in \[1, 16\], got 3"),
    (dict(num_warps=-1), ValueError, r"got -1"),
    (dict(num_warps=32), ValueError, r"got 32"),
    (dict(num_warps=4.0), TypeError, r"num_warps must be an int, got 4.0"),
    (dict(num_warps=True), TypeError, r"num_warps must be an int, got True"),
    (dict(num_stages=0), ValueError, r"copy: num_stages must be 1 .* or 2 .*, got 0"),
    (dict(num_stages=3), ValueError, r"num_stages must be 1 .* or 2 .*, got 3"),
    (dict(smem_epilogue=2), TypeError, r"smem_epilogue must be a bool, got 2"),
])
def test_decorator_knobs_are_checked(knobs, error, match):
    with pytest.raises(error, match=match):
        _copy_kernel(**knobs)


def test_knob_naming_a_missing_constexpr():
    with pytest.raises(TypeError, match=r"copy: num_warps names the constexpr 'WARPS', which the "
                                        r"kernel does not declare"):
        _copy_kernel(num_warps="WARPS").specialize()


@pytest.mark.parametrize("constexprs, error, match", [
    (dict(NUM_WARPS=0), ValueError,
     r"flash_fwd: num_warps \(the constexpr NUM_WARPS\) must be a power of two in \[1, 16\], got 0"),
    (dict(NUM_WARPS=3), ValueError, r"\(the constexpr NUM_WARPS\) .* got 3"),
    (dict(NUM_WARPS=-1), ValueError, r"\(the constexpr NUM_WARPS\) .* got -1"),
    (dict(NUM_STAGES=0), ValueError, r"num_stages \(the constexpr NUM_STAGES\) must be 1"),
    (dict(SMEM_EPILOGUE="x"), TypeError, r"smem_epilogue \(the constexpr SMEM_EPILOGUE\) must be a bool"),
    (dict(COPY_BOUNDS="x"), ValueError, r"copy_bounds must be one of"),
    # The kernel's name function sees DTYPE first (it was a bare AttributeError).
    (dict(DTYPE=3), TypeError, r"flash_fwd: the kernel's name/variant could not be formed from the "
                               r"constexprs \(DTYPE=3\): AttributeError"),
])
def test_constexpr_knobs_are_checked(constexprs, error, match):
    with pytest.raises(error, match=match):
        flash_fwd_kernel().specialize(**constexprs)


def test_compile_argument_zero_is_refused_not_defaulted():
    kernel = _copy_kernel().specialize()
    with pytest.raises(ValueError, match=r"copy: num_warps must be a power of two in \[1, 16\], got 0"):
        kernel.compile("sm_80", num_warps=0)
    with pytest.raises(ValueError, match=r"num_stages must be 1 .*got 0"):
        kernel.compile("sm_80", num_stages=0)
    with pytest.raises(ValueError, match=r"num_warps must be a power of two"):
        compiler.compile(kernel.ir, num_warps=0)


def test_native_compile_refuses_num_warps_zero():
    """Below the Python checks: the extension (the driver's tile-to-nvvm
    pipeline) refuses too, as a diagnostic."""
    kernel = _copy_kernel().specialize()
    with pytest.raises(_tilec.Error, match=r"tile-to-nvvm: num-warps must be a power of two in \[1, 16\], got 0"):
        _tilec.compile(kernel.ir, kernel.source_name, arch="sm_80", num_warps=0, stages=2,
                       smem_epilogue=True, lowering_options="", run_tile_passes=True,
                       print_ir_after_all=False, crash_reproducer="", extra_sass=[])


@pytest.mark.parametrize("constexprs, match", [
    (dict(BLOCK_M=48), r"cannot split the 48 rows of this tile.dot over 4 warps"),
    (dict(BLOCK_M=16), r"cannot split the 16 rows"),
    (dict(BLOCK_N=24), r"needs power-of-two sizes"),
    (dict(BLOCK_N=0), r"tl.cdiv\(i32, 0\): division by zero"),
    (dict(BLOCK_N=-16), r"tl.load shape must be a tuple of positive compile-time integers"),
    (dict(HEAD_DIM=0), r"tl.next_power_of_2\(0\): the argument must be positive"),
    # Too big: refused by layout assignment in seconds (it took minutes).
    (dict(BLOCK_M=4096), r"the tile 'tensor<4096x64xf32>' takes 2048 registers per thread over "
                         r"4 warps; a thread has at most 255"),
    (dict(HEAD_DIM=1024), r"the tile 'tensor<64x1024xf32>' takes 512 registers per thread"),
])
def test_block_sizes_are_checked(constexprs, match):
    start = time.monotonic()
    with pytest.raises(tilec.CompilationError, match=match) as info:
        flash_fwd_kernel().specialize(**constexprs).compile("sm_80")
    assert info.value.filename and info.value.filename.endswith("flash_fwd.py")
    assert time.monotonic() - start < 60


@pytest.mark.parametrize("grid, match", [
    ((-1,), r"copy: grid\[0\] must be an int in \[0, 2\^31\), got -1"),
    ((2**64,), r"grid\[0\] must be an int in \[0, 2\^31\), got 18446744073709551616"),
    ((1.5,), r"grid\[0\] must be an int .*got 1.5"),
    ((1, 1, 1, 1), r"copy: grid has 4 dimensions; give 1 to 3"),
    ((), r"grid has 0 dimensions"),
])
def test_cpu_grid_is_checked(grid, match):
    import numpy as np
    x = np.zeros((64, 64), np.float32)
    with pytest.raises(ValueError, match=match):
        _copy_kernel().specialize().run_cpu(x, x.copy(), 64, grid=grid)
