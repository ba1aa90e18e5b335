"""Register pressure of the flagship kernel at the strategy table's
configurations, read from ptxas: the head_dim-64 kernels (128-row blocks,
4 warps) and the causal head_dim-128 kernel (128x128 blocks, 8 warps) fit
in 255 registers without spilling. (d64 spilled with one buffer per tile
before the ring and the tree-shaped row reductions; see docs/DESIGN.md,
"tile-pipeline". The non-causal d128 kernel, 128x64 over 4 warps, still
spills: issue 6.)"""

import re

import pytest

from tilec import compiler, strategy
from tilec import language as tl
from tilec.flash_attn import flash_fwd_kernel

pytestmark = pytest.mark.skipif(not compiler.available(), reason="the _tilec extension is not built")


def spill_bytes(head_dim, causal, stages):
    config = strategy.flash_fwd_config("sm_80", "f16", head_dim, causal)
    constexprs = dict(config.constexprs(), NUM_STAGES=stages)
    kernel = flash_fwd_kernel().specialize(DTYPE=tl.float16, HEAD_DIM=head_dim, CAUSAL=causal,
                                           **constexprs)
    [result] = compiler.compile(kernel.ir, kernel.source_name, arch="sm_80",
                                num_warps=config.num_warps, num_stages=stages,
                                smem_epilogue=config.smem_epilogue,
                                copy_bounds=config.copy_bounds)
    if not result["cubin"]:
        pytest.skip("ptxas (CUDA toolkit) not found: no register report")
    log = result["ptxas_log"]
    match = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert match, f"no spill report in ptxas's log:\n{log}"
    return int(match.group(1)) + int(match.group(2))


@pytest.mark.parametrize("causal", [False, True])
def test_d64_production_config_does_not_spill(causal):
    assert strategy.flash_fwd_config("sm_80", "f16", 64, causal).num_stages == 2
    assert spill_bytes(64, causal, stages=2) == 0


def test_d128_causal_production_config_does_not_spill():
    config = strategy.flash_fwd_config("sm_80", "f16", 128, True)
    assert (config.block_m, config.block_n, config.num_warps) == (128, 128, 8)
    assert spill_bytes(128, True, stages=config.num_stages) == 0
