"""store-transpose (a lowering option, on by default): the O accumulator stored
straight from registers leaves as 16-byte chunks after lane shuffles
instead of 4-byte stores. The shuffle network itself is pinned by lit
(test/passes/convert-tile-to-nvvm-options/store-transpose.mlir); its numerics need a GPU (bench/tune.sh
checks every candidate configuration before timing it)."""

import re

import pytest

from tilec import compiler, strategy
from tilec import language as tl
from tilec.flash_attn import flash_fwd_kernel

pytestmark = pytest.mark.skipif(not compiler.available(), reason="the _tilec extension is not built")


def flash_d128_ptx(lowering_options):
    config = strategy.FlashConfig(128, 64, 4, 2, False, copy_bounds="chunk")
    kernel = flash_fwd_kernel().specialize(DTYPE=tl.float16, HEAD_DIM=128, CAUSAL=False,
                                           **config.constexprs())
    [result] = compiler.compile(kernel.ir, kernel.source_name, arch="sm_80", num_warps=4,
                                smem_epilogue=False, copy_bounds="chunk",
                                lowering_options=lowering_options)
    return result


def test_o_leaves_in_16_byte_stores_after_64_shuffles():
    # Lazy rescale off in both: its branch moves ptxas's spills on its own.
    plain = flash_d128_ptx("store-transpose=false lazy-rescale=false")
    wide = flash_d128_ptx("lazy-rescale=false")
    # O: 128x128 f16 over 128 threads = 256 bytes per thread.
    assert len(re.findall(r"st\.global\.v4\.b32", wide["ptx"])) == 16
    assert len(re.findall(r"st\.global\.v4\.b32", plain["ptx"])) == 0
    # 64 words per thread, two swaps of 32 pairs; the loops' row reductions
    # shuffle as before.
    shuffles = lambda r: len(re.findall(r"shfl\.sync\.bfly", r["ptx"]))
    assert shuffles(wide) - shuffles(plain) == 64
    if wide["cubin"]:  # ptxas ran: the epilogue adds no spills to the kernel
        spills = lambda r: re.search(r"(\d+) bytes spill stores", r["ptxas_log"]).group(1)
        assert int(spills(wide)) <= int(spills(plain))
