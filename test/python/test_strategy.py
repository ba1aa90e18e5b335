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
