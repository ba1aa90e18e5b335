"""The strategy record (tilec.strategy.Strategy; C++ include/tilec/Strategy.h,
#tile.strategy in the IR) is one definition per language: the two agree on
the defaults, every entry point's defaults are its, its one canonical form
keys both the compile cache and prebuilt digests, and the compiled kernel's
IR and manifest carry it."""

import inspect
import json

import pytest

import _tilec
import tilec
import importlib

from tilec import compiler
from tilec import language as tl
from tilec.strategy import FlashConfig, Strategy


def _copy_kernel(**knobs):
    @tilec.jit(grid=("1", "1", "1"), **knobs)
    def copy(x: tl.ptr(tl.float32), y: tl.ptr(tl.float32), n: tl.int32):
        tl.store(tl.view(y, (n, 64), (64, 1)), (0, 0),
                 tl.load(tl.view(x, (n, 64), (64, 1)), (0, 0), (64, 64)))
    return copy


def test_python_and_cpp_defaults_agree():
    assert _tilec.default_strategy() == vars(Strategy())


def test_entry_points_take_the_records_defaults():
    # Nothing re-spells a default: a knob left out means Strategy()'s field.
    jit = importlib.import_module("tilec.jit")
    for fn in (jit.jit, jit.JITFunction, jit.Kernel.compile, compiler.compile,
               compiler.compile_cached, compiler.build_options):
        for name in ("num_warps", "num_stages", "smem_epilogue", "copy_bounds"):
            param = inspect.signature(fn).parameters.get(name)
            if param is not None:
                assert param.default is None, (fn.__name__, name)
    kernel = _copy_kernel().specialize()
    assert kernel.strategy == Strategy()
    assert FlashConfig(64, 64, 4).strategy == Strategy()


def test_one_canonical_form():
    s = Strategy(8, 1, False, "chunk", "skip-unit-rescale=true")
    assert compiler.build_options(8, 1, False, "chunk", "skip-unit-rescale=true") == s.key()
    assert FlashConfig(128, 64, 8, 1, False, "chunk", "skip-unit-rescale=true").strategy.key() == s.key()
    # Each field tells two keys apart, in the cache as in digests.
    keys = {compiler.cache_key("ir", "sm_80", t, True) for t in (
        Strategy(), Strategy(num_warps=8), Strategy(num_stages=1), Strategy(smem_epilogue=False),
        Strategy(copy_bounds="tile"), Strategy(lowering_options="lazy-rescale=false"))}
    assert len(keys) == 6
    assert compiler.cache_key("ir", "sm_80", Strategy(), True) != \
        compiler.cache_key("ir", "sm_90a", Strategy(), True)


@pytest.mark.parametrize("bad, match", [
    (Strategy(num_warps=6), r"num_warps must be a power of two in \[1, 16\], got 6"),
    (Strategy(num_stages=3), r"num_stages must be 1 .* or 2 .*, got 3"),
    (Strategy(copy_bounds="rows"), r"copy_bounds must be one of \('row', 'tile', 'chunk'\), got 'rows'"),
    (Strategy(lowering_options="copy-bounds=tile"), r"pass the copy-bounds mode as copy_bounds="),
])
def test_checked_refuses_bad_fields(bad, match):
    with pytest.raises(ValueError, match=match):
        bad.checked()


def test_ir_and_manifest_carry_the_record():
    kernel = _copy_kernel(num_warps=2, smem_epilogue=False).specialize()
    (result,) = compiler.compile(kernel.ir, kernel.source_name, num_warps=2, num_stages=1,
                                 smem_epilogue=False, copy_bounds="tile")
    assert ('tile.strategy = #tile.strategy<num_warps = 2, stages = 1, smem_epilogue = false, '
            'copy_bounds = tile, lowering_options = "">') in result["tile_ir"]
    manifest = json.loads(result["manifest"])
    assert Strategy(**manifest["strategy"]) == Strategy(2, 1, False, "tile")
    assert manifest["block"] == [64, 1, 1]


def test_driver_refuses_owned_options_in_lowering_options():
    kernel = _copy_kernel().specialize()
    with pytest.raises(_tilec.Error, match=r"lowering option 'num-warps=8' has its own setting"):
        _tilec.compile(kernel.ir, kernel.source_name, lowering_options="num-warps=8")
    with pytest.raises(_tilec.Error, match=r"copy-bounds must be row, tile or chunk, got 'rows'"):
        _tilec.compile(kernel.ir, kernel.source_name, copy_bounds="rows")


# -- the tables' lookup (strategy.table_lookup) --------------------------------

def test_tile_width_is_the_padded_power_of_two():
    from tilec.strategy import tile_width
    assert [tile_width(d) for d in (1, 8, 16, 17, 32, 40, 64, 80, 96, 128, 129, 192, 256)] == \
        [16, 16, 16, 32, 32, 64, 64, 128, 128, 128, 256, 256, 256]


def test_table_lookup_head_dim_then_tile_width_then_sm80():
    from tilec.strategy import table_lookup
    a, b, c, d = (FlashConfig(64, 64, 4), FlashConfig(128, 64, 4), FlashConfig(128, 64, 8),
                  FlashConfig(64, 32, 4))
    table = {("sm_80", 128, False): a, ("sm_80", 96, False): b, ("sm_90", 256, False): c,
             ("sm_80", 256, False): d}
    assert table_lookup(table, "sm_80", 96, False) is b          # its own entry first
    assert table_lookup(table, "sm_80", 80, False) is a          # else its tile width's
    assert table_lookup(table, "sm_80", 80, True) is None
    assert table_lookup(table, "sm_90a", 192, False) is c        # Hopper's entry on sm_90/sm_90a
    assert table_lookup(table, "sm_90", 256, False) is c
    assert table_lookup(table, "sm_80", 192, False) is d         # others take sm_80's
    assert table_lookup(table, "sm_86", 256, False) is d
    assert table_lookup(table, "sm_90a", 96, False) is b         # no sm_90 entry: sm_80's


def test_head_dims_without_an_entry_take_their_tile_widths():
    # The forward at d96 ran 201 TFLOP/s on DEFAULT's 64x64 blocks and 291 on
    # d128's entry (H200, session 12 run 1): a head dim between table entries
    # takes the entry of the width its tiles are padded to.
    from tilec import strategy
    for causal in (False, True):
        assert strategy.flash_fwd_config(head_dim=96, causal=causal) == \
            strategy.flash_fwd_config(head_dim=128, causal=causal)
        assert strategy.flash_fwd_config(head_dim=48, causal=causal) == \
            strategy.flash_fwd_config(head_dim=64, causal=causal)
        assert strategy.flash_bwd_config(head_dim=80, causal=causal) == \
            strategy.flash_bwd_config(head_dim=128, causal=causal)
    # Every entry's blocks fit sm_80's 163 KB unless the entry is Hopper's.
    for (arch, d, _), cfg in strategy.TABLE.items():
        stages = cfg.num_stages
        q = cfg.block_m * d * 2
        kv = 2 * cfg.block_n * d * 2 * stages
        if arch == "sm_80":
            assert q + kv <= 163 * 1024, (arch, d, cfg)


def test_arch_for_capability():
    # sm_90a code runs on Hopper only: Blackwell takes plain sm_90 PTX (JIT-
    # compiled forward), consumer parts and Ampere/Ada sm_80's.
    assert compiler.arch_for_capability(9, 0) == "sm_90a"
    assert compiler.arch_for_capability(10, 0) == "sm_90"
    assert compiler.arch_for_capability(12, 0) == "sm_80"
    assert compiler.arch_for_capability(8, 6) == "sm_80"
    assert compiler.arch_for_capability(8, 0) == "sm_80"


@pytest.mark.parametrize("head_dim, pieces", [
    (8, ((0, 16),)), (32, ((0, 32),)), (40, ((0, 32), (32, 16))), (59, ((0, 64),)),
    (64, ((0, 64),)), (72, ((0, 64), (64, 16))), (80, ((0, 64), (64, 16))),
    (96, ((0, 64), (64, 32))), (111, ((0, 64), (64, 32), (96, 16))), (120, ((0, 128),)),
    (128, ((0, 128),)), (160, ((0, 128), (128, 32))), (192, ((0, 128), (128, 64))),
    (224, ((0, 128), (128, 64), (192, 32))), (240, ((0, 256),)), (256, ((0, 256),)),
])
def test_head_dim_pieces(head_dim, pieces):
    from tilec.strategy import head_dim_pieces

    assert head_dim_pieces(head_dim) == pieces


def test_head_dim_pieces_cover_every_head_dim():
    """Every head dim 1..256: contiguous power-of-two pieces of at least 16
    columns, widest first, covering head_dim with less than 16 columns of
    padding, at most HEAD_DIM_PIECES_MAX of them, or else one padded tile
    (next_power_of_2, today's width)."""
    from tilec import strategy

    for d in range(1, 257):
        pieces = strategy.head_dim_pieces(d)
        widths = [w for _, w in pieces]
        assert [c for c, _ in pieces] == [sum(widths[:i]) for i in range(len(widths))], d
        assert all(w >= 16 and w & (w - 1) == 0 for w in widths), d
        assert widths == sorted(widths, reverse=True), d
        if len(pieces) == 1:
            assert widths[0] == max(16, 1 << (d - 1).bit_length()), d
        else:
            assert len(pieces) <= strategy.HEAD_DIM_PIECES_MAX and 0 <= sum(widths) - d < 16, d
    with pytest.raises(ValueError):
        strategy.head_dim_pieces(0)
