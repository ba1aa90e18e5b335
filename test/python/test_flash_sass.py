"""Machine code of the strategy table's flash kernels (the ones
flash_attn_func runs), read with cuobjdump: every K/V loop issues HMMA,
LDSM and LDGSTS and stores nothing to local memory; the hot loop (the
unmasked blocks, where the time goes) touches no local memory at all --
both in the sm_80 cubin and in the sm_90 code an H200 runs (the same PTX
assembled for sm_90: <kernel>.sm_90.cubin in the artifacts).
At head_dim 128 (ptxas's 255-register limit) that takes
carry-ring-addresses with xor-ring-phases=trans (the defaults: auto is trans
where O alone is short of registers): with the
carry off, the hot loops reloaded 3 (non-causal) and 5 (causal)
loop-invariant ldmatrix bases per iteration on sm_80, 5 and 0 on sm_90;
with every phase XOR-derived, 0 and 0 on sm_80 but 0 and 9 on sm_90
(bench/RESULTS.md, Session 5). The masked loop (at most two iterations per
program) may reload one value. test/Target/flash-loop-spills.mlir runs the same checker
on the .mlir flagship."""
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


def table_sass(head_dim, causal, extra_options="", gpu="sm_80"):
    """SASS of the table kernel on `gpu`. The kernels are sm_80 code
    (mma.sync, ldmatrix, cp.async); for an sm_90 GPU such as the benchmark's
    H200 the same PTX is assembled for sm_90 as well (extra_sass; the
    artifacts ship it as <kernel>.sm_90.cubin, and it is what the driver's
    JIT would make of the PTX: bench/RESULTS.md, Session 5)."""
    config = strategy.flash_fwd_config("sm_80", "f16", head_dim, causal)
    kernel = flash_fwd_kernel().specialize(DTYPE=tl.float16, HEAD_DIM=head_dim, CAUSAL=causal,
                                           **config.constexprs())
    [result] = compiler.compile(kernel.ir, kernel.source_name, arch="sm_80",
                                num_warps=config.num_warps, num_stages=config.num_stages,
                                smem_epilogue=config.smem_epilogue,
                                copy_bounds=config.copy_bounds,
                                lowering_options=f"{config.lowering_options} {extra_options}".strip(),
                                extra_sass=() if gpu == "sm_80" else (gpu,))
    if not result["cubin"]:
        pytest.skip("ptxas (CUDA toolkit) not found: no cubin to read")
    image = result["cubin"] if gpu == "sm_80" else {a: b for a, _, b in result["sass"]}[gpu]
    cuobjdump = find_cuobjdump()
    if not cuobjdump:
        pytest.skip("cuobjdump/nvdisasm not found (pip install nvidia-cuda-cuobjdump "
                    "nvidia-cuda-nvdisasm): SASS not checked")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(image)
        sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True,
                              check=True).stdout
    assert f"code for {gpu}" in sass
    return sass


def loops(sass):
    """(instructions of each loop body), loops as loop_spills finds them."""
    insts = loop_spills.instructions(sass.splitlines())
    return [[t for a, t in insts if lo <= a <= hi] for lo, hi in loop_spills.loop_ranges(insts)]


def local_memory(body):
    return sum(1 for t in body if re.search(r"\b(LDL|STL)\b", t))


@pytest.mark.parametrize("gpu", ["sm_80", "sm_90"])
@pytest.mark.parametrize("head_dim,causal", [(64, False), (64, True), (128, False), (128, True)])
def test_table_kernel_loops(head_dim, causal, gpu):
    sass = table_sass(head_dim, causal, gpu=gpu)
    bodies = loops(sass)
    assert bodies, "no loop found in the SASS"
    count = lambda body, op: sum(1 for t in body if re.search(rf"\b{op}\b", t))
    for body in bodies:
        assert count(body, r"HMMA\.16816\.F32") > 0
        assert count(body, r"LDSM\.16\.M88\.4") > 0 and count(body, r"LDGSTS\.E\.BYPASS\.128") > 0
        assert count(body, "STL") == 0, "a spill store inside a K/V loop"
        # d64 fits in registers; d128's masked loop may reload one value.
        assert count(body, "LDL") <= (0 if head_dim == 64 else 1)
    # The unmasked loop is the shortest: masking only adds instructions.
    hot = min(bodies, key=len)
    assert local_memory(hot) == 0, [t for t in hot if re.search(r"\b(LDL|STL)\b", t)]
