"""copy_bounds: how the GPU lowering's global->shared copies respect the
view's bounds (convert-tile-to-nvvm's copy-bounds option), reached from the
DSL (a jit knob, per strategy-table entry) and from compiler.compile.
lit's test/passes/convert-tile-to-nvvm-options/copy-bounds.mlir pins the IR of each mode; these tests
check the plumbing and the PTX each mode leads to."""

import re

import pytest

import tilec
from tilec import compiler, strategy
from tilec import language as tl
from tilec.flash_attn import flash_fwd_kernel

needs_compiler = pytest.mark.skipif(not compiler.available(), reason="the _tilec extension is not built")


@pytest.fixture
def flash_ptx(tmp_path, monkeypatch):
    """PTX of the d64 flagship kernel compiled the way flash_attn_func does
    (Kernel.compile -> compile_cached), with the given copy_bounds, in a
    private cache."""
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))

    def build(copy_bounds):
        config = strategy.FlashConfig(128, 64, 4, 2, True, copy_bounds=copy_bounds)
        kernel = flash_fwd_kernel().specialize(DTYPE=tl.float16, HEAD_DIM=64, CAUSAL=False,
                                               **config.constexprs())
        assert kernel.copy_bounds == copy_bounds  # the COPY_BOUNDS constexpr reached the kernel
        return kernel.compile(arch="sm_80").ptx

    return build


def cp_async_sizes(ptx):
    """The src-size operand of every 16-byte cp.async: an immediate or a register."""
    return re.findall(r"cp\.async\.cg\.shared\.global \[[^\]]*\], \[[^\]]*\], 16, (\S+);", ptx)


def chained_pointers(ptx):
    """Pass pointers hidden from LLVM (the unchecked and row copies chain
    them through an inline-asm mov.b64)."""
    return len(re.findall(r"// begin inline asm\s+mov\.b64", ptx))


@needs_compiler
def test_row_mode_sizes_copies_by_row_from_chained_pointers(flash_ptx):
    ptx = flash_ptx("row")
    sizes = cp_async_sizes(ptx)
    assert sizes and all(s.startswith("%r") for s in sizes), sizes
    assert chained_pointers(ptx) > 0


@needs_compiler
def test_tile_mode_has_unchecked_copies_beside_checked_ones(flash_ptx):
    ptx = flash_ptx("tile")
    sizes = cp_async_sizes(ptx)
    assert "16" in sizes, "no full-size (unchecked) copy"
    assert any(s.startswith("%r") for s in sizes), "no checked copy for the tile at the view's edge"
    assert chained_pointers(ptx) > 0


@needs_compiler
def test_chunk_mode_checks_every_copy_from_its_own_address(flash_ptx):
    ptx = flash_ptx("chunk")
    sizes = cp_async_sizes(ptx)
    assert sizes and all(s.startswith("%r") for s in sizes), sizes
    assert chained_pointers(ptx) == 0


@needs_compiler
def test_modes_are_cached_apart(flash_ptx):
    assert len({flash_ptx(mode) for mode in compiler.COPY_BOUNDS}) == len(compiler.COPY_BOUNDS)


def test_bad_values_are_refused_where_they_are_given():
    with pytest.raises(ValueError, match="copy_bounds"):
        strategy.FlashConfig(128, 64, 4, copy_bounds="never")
    if compiler.available():
        with pytest.raises(ValueError, match="copy_bounds must be one of"):
            compiler.compile("module {}", copy_bounds="never")
        # Not through the experiments' back door either, where the last
        # value would silently win.
        with pytest.raises(ValueError, match="copy_bounds="):
            compiler.compile("module {}", lowering_options="copy-bounds=chunk")

    @tilec.jit(grid=(1,), copy_bounds="MODE")
    def noop(x: tl.ptr(tl.float32), MODE: tl.constexpr = "row"):
        pass

    assert noop.specialize(MODE="tile").copy_bounds == "tile"
    with pytest.raises(ValueError, match="copy_bounds must be one of"):
        noop.specialize(MODE="sometimes")

    @tilec.jit(grid=(1,), copy_bounds="NOT_A_CONSTEXPR")
    def other(x: tl.ptr(tl.float32)):
        pass

    with pytest.raises(TypeError, match="name a constexpr"):
        other.specialize()


def test_strategy_table_names_a_mode_for_every_entry():
    for key, config in strategy.TABLE.items():
        assert config.copy_bounds in compiler.COPY_BOUNDS, key
