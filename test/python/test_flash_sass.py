"""Machine code of the strategy table's flash kernels (the ones
flash_attn_func runs), read with cuobjdump: every K/V loop issues HMMA,
LDSM and LDGSTS; the head_dim-64 loops touch no local memory; the
head_dim-128 loops (ptxas's 255-register limit) only reload a few
loop-invariant ldmatrix bases (LDL, no STL) -- 3 and 5 per iteration on
2026-11-29 (bench/RESULTS.md, Session 4), bounded here so a regression
shows. The experiment carry-ring-addresses removes those reloads (and
measured 2-5% slower); its test pins that it does. test/Target/
flash-loop-spills.mlir runs the same checker on the .mlir flagship."""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tilec import compiler, strategy
from tilec import language as tl
from tilec.flash_attn import flash_fwd_kernel

pytestmark = pytest.mark.skipif(not compiler.available(), reason="the _tilec extension is not built")

CHECKER = Path(__file__).resolve().parents[1] / "Target" / "Inputs" / "loop_spills.py"
sys.path.insert(0, str(CHECKER.parent))
import loop_spills  # noqa: E402  (the lit checker's SASS parsing)


def find_cuobjdump():
    candidates = [shutil.which("cuobjdump")]
    try:
        import nvidia

        for root in nvidia.__path__:
            candidates += sorted(glob.glob(os.path.join(root, "*", "bin", "cuobjdump")))
    except ImportError:
        pass
    for path in candidates:
        if path and os.access(path, os.X_OK) and (
                os.access(os.path.join(os.path.dirname(path), "nvdisasm"), os.X_OK)
                or shutil.which("nvdisasm")):
            return path
    return None


def table_sass(head_dim, causal, extra_options=""):
    config = strategy.flash_fwd_config("sm_80", "f16", head_dim, causal)
    kernel = flash_fwd_kernel().specialize(DTYPE=tl.float16, HEAD_DIM=head_dim, CAUSAL=causal,
                                           **config.constexprs())
    [result] = compiler.compile(kernel.ir, kernel.source_name, arch="sm_80",
                                num_warps=config.num_warps, num_stages=config.num_stages,
                                smem_epilogue=config.smem_epilogue,
                                copy_bounds=config.copy_bounds,
                                lowering_options=f"{config.lowering_options} {extra_options}".strip())
    if not result["cubin"]:
        pytest.skip("ptxas (CUDA toolkit) not found: no cubin to read")
    cuobjdump = find_cuobjdump()
    if not cuobjdump:
        pytest.skip("cuobjdump/nvdisasm not found (pip install nvidia-cuda-cuobjdump "
                    "nvidia-cuda-nvdisasm): SASS not checked")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(result["cubin"])
        return subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True,
                              check=True).stdout


def loops(sass):
    """(instructions of each loop body), loops as loop_spills finds them."""
    insts = loop_spills.instructions(sass.splitlines())
    return [[t for a, t in insts if lo <= a <= hi] for lo, hi in loop_spills.loop_ranges(insts)]


@pytest.mark.parametrize("head_dim,causal", [(64, False), (64, True), (128, False), (128, True)])
def test_table_kernel_loops(head_dim, causal):
    sass = table_sass(head_dim, causal)
    bodies = loops(sass)
    assert bodies, "no loop found in the SASS"
    count = lambda body, op: sum(1 for t in body if re.search(rf"\b{op}\b", t))
    for body in bodies:
        assert count(body, r"HMMA\.16816\.F32") > 0
        assert count(body, r"LDSM\.16\.M88\.4") > 0 and count(body, r"LDGSTS\.E\.BYPASS\.128") > 0
        assert count(body, "STL") == 0, "a spill store inside a K/V loop"
        assert count(body, "LDL") <= (0 if head_dim == 64 else 5)
    checked = subprocess.run([sys.executable, str(CHECKER)], input=sass, capture_output=True,
                             text=True)
    assert (re.search(r" 0 inside loops", checked.stdout) is not None) == (head_dim == 64), \
        checked.stdout


@pytest.mark.parametrize("causal", [False, True])
def test_carried_ring_addresses_leave_no_local_memory_in_d128_loops(causal):
    sass = table_sass(128, causal, "carry-ring-addresses=true")
    checked = subprocess.run([sys.executable, str(CHECKER)], input=sass, capture_output=True,
                             text=True)
    assert checked.returncode == 0 and re.search(r" 0 inside loops", checked.stdout), \
        checked.stdout
