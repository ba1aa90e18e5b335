"""kernels/flash_fwd.py's longest_first: the causal kernels' renumbering of
their programs (every head's heaviest block first, in sections of heads that
fit SECTION_L2_BYTES). On the CPU runner: it must be a permutation of the
grid for any shape (a lost or doubled program is a wrong gradient), start
each section's heaviest blocks first, and keep a section within its heads."""

import numpy as np
import pytest

import tilec
from tilec import compiler, kernel_files
from tilec import language as tl

HAVE_CPU = compiler.available() and getattr(compiler.native(), "has_cpu_runner", False)
pytestmark = pytest.mark.skipif(not HAVE_CPU, reason="the _tilec extension has no CPU runner")

_fwd = kernel_files.load("flash_fwd")
longest_first = _fwd.longest_first


@tilec.jit(grid=("blocks", "programs", 1))
def renumber(hits: tl.ptr(tl.float32), block_at: tl.ptr(tl.float32), head_at: tl.ptr(tl.float32),
             blocks: tl.int32, programs: tl.int32, seqlen: tl.int32,
             HEAVY_LAST: tl.constexpr = False, HEAD_DIM: tl.constexpr = 128):
    """hits[(block, head)] += 1 for the pair this program gets; block_at and
    head_at[start] = that pair, `start` the program's place in the NVVM start
    order (program_id(0) counts down there)."""
    pid_block = tl.program_id(0)
    pid_bh = tl.program_id(1)
    block, head = longest_first(pid_block, pid_bh, blocks, programs, HEAVY_LAST, seqlen, HEAD_DIM)
    start = pid_bh * blocks + (blocks - 1 - pid_block)
    n = blocks * programs * 16
    one = tl.full((16,), 1.0, tl.float32)
    tl.atomic_add(tl.view(hits, (n,), (1,)), ((block * programs + head) * 16,), one)
    tl.store(tl.view(block_at, (n,), (1,)), (start * 16,), one * block)
    tl.store(tl.view(head_at, (n,), (1,)), (start * 16,), one * head)


def section_of(seqlen, head_dim, programs):
    return min(max((_fwd.SECTION_L2_BYTES // (4 * head_dim)) // max(seqlen, 1), 1), programs)


@pytest.mark.parametrize("heavy_last", [False, True])
@pytest.mark.parametrize("blocks,programs,seqlen,head_dim", [
    (1, 1, 64, 128),          # one program
    (7, 5, 1 << 20, 128),     # sections of one head (1M keys)
    (16, 256, 2048, 64),      # 256 heads in sections of 32 (d64, 2k keys)
    (13, 37, 16384, 128),     # sections of 2 heads, the last one short
    (5, 3, 0, 64),            # an empty sequence: no division by zero
    (8193, 65, 1, 8),         # one key: section x blocks would wrap int32 to 2^19 (< the grid)
])
def test_longest_first_is_a_permutation_heaviest_first(blocks, programs, seqlen, head_dim, heavy_last):
    n = blocks * programs * 16
    hits = np.zeros(n, np.float32)
    block_at = np.full(n, -1.0, np.float32)
    head_at = np.full(n, -1.0, np.float32)
    renumber.specialize(HEAVY_LAST=heavy_last, HEAD_DIM=head_dim).run_cpu(
        hits, block_at, head_at, blocks, programs, seqlen, grid=(blocks, programs, 1))
    assert (hits.reshape(-1, 16) == 1).all(), "not a permutation of the grid"
    blk = block_at.reshape(-1, 16)[:, 0].astype(int)
    head = head_at.reshape(-1, 16)[:, 0].astype(int)
    s = section_of(seqlen, head_dim, programs)
    heavy = blk if not heavy_last else blocks - 1 - blk    # 0 = the heaviest block
    for first in range(0, programs, s):
        span = slice(first * blocks, min(first + s, programs) * blocks)
        assert set(head[span]) == set(range(first, min(first + s, programs)))
        assert (np.diff(heavy[span]) >= 0).all(), "a lighter block starts before a heavier one"
