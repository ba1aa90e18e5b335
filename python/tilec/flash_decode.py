"""``flash_attn_with_kvcache`` (flash_attn 2.8's signature and semantics) and
``flash_attn_combine`` (FA3's), on the DSL kernels kernels/flash_decode.py
(split-KV with pack-GQA) and kernels/flash_combine.py.

CUDA torch tensors launch on the GPU; numpy float16 arrays and torch CPU
float16 tensors run on the CPU runner (same kernels, same IR), the in-place
cache append included, so CI checks the numerics.

How a call runs:
1. checks (shapes, dtypes, capacities) before anything is written;
2. rotary embedding of q and the new k (the rotary kernel, f32 math, into
   new buffers);
3. the new k/v written into the cache in place at cache_seqlens (the
   kv_append kernel, or the decode kernel itself for one token; host-side
   indexing for head dims that are not a multiple of 8);
4. the decode kernel: grid (num_splits, row blocks × KV heads, batch); the G
   query heads of a KV head are the Q tile's rows (pack-GQA); with one split
   it writes the output, else partials that
5. the combine kernel merges.
"""

from __future__ import annotations

import functools
import math
import operator
import os
import sys
from dataclasses import dataclass

from . import kernel_files, runtime_support
from .errors import TilecTypeError, TilecValueError
from . import language as tl
from .jit import LaunchCache
from .strategy import tile_width
from .flash_attn import _dtype_name, _fast_alibi, _is_torch, _pad_head_dim, _rows_aligned, _strides

_MAX_SPLITS = 128
# A window side of -1 (unbounded) reaches the kernel as this many keys.
_UNBOUNDED = 1 << 30

# With lengths per sequence (batch > 1): how the decode kernel cuts a
# sequence's keys into the splits (its CHUNKS): "length", each sequence's own
# blocks in num_splits equal ranges; "capacity", ranges of ⌈capacity /
# num_splits⌉ blocks for every sequence (short ones in fewer programs). A
# module setting so that bench/tune_decode.py --chunks can compare them.
SPLIT_CHUNKS = "length"

# The GPU plan's tile: (BLOCK_M, BLOCK_N, NUM_STAGES); warps = BLOCK_M / 16.
# A module setting so that bench/bench_decode.py --tile can sweep it.
GPU_TILE = (64, 64, 2)
# The tile for caches in pages smaller than a key block (a block of page
# sub-tiles) when the packed rows fit its 16: one warp, three programs per SM
# (session 8 run 2, GQA 32/8 pages of 16: 2,832 GB/s at batch 1, 3,814 for
# batch 16 of mixed lengths, against 1,850-2,330 for 64-row tiles: each
# block's page lookups and sub-tile address math run after the wait for the
# block before, and a third program's copies keep the SM's bytes in flight
# meanwhile). None: GPU_TILE.
PAGED_TILE = (16, 64, 2)
# The tile for one sequence (batch 1) whose packed rows are 2..32 (GQA
# decode) where GPU_TILE would run: 32 rows over 2 warps, the split count
# GPU_TILE's (two programs per SM). Half the 64-row tile's MMAs go to padding
# rows there, and with few (batch, KV head) pairs the programs are short (32
# splits of 16 blocks at 32k keys), so the per-block latency shows. H200,
# session 17 runs 6-7, bf16 d128 GQA 32/8, GB/s, 64-row / this tile at 32
# splits: kv 32k 3,215 / 3,353 and 3,233 / 3,341 (the residency rule's 47
# splits for the 32-row tile: 3,234); kv 128k 4,176 / 4,244. MHA (one row) and
# batches > 1 measured no gain (b1 MHA 32k 4,302 / 4,317; b2/b4 GQA take
# PAGED_TILE's 16 rows through the spread rule). None: GPU_TILE.
SINGLE_SEQUENCE_TILE = (32, 64, 2)
# The tile for head dims over 128 (tile width 256), pages or not (pages of
# 16 / 256 at d256: 0.92-0.99x contiguous, session 12 run 5): GPU_TILE's
# 64x64 two-buffer ring takes 160 KB of shared memory there, one program per
# SM, and PAGED_TILE's 16 rows keep the same ring (139 KB). 32-key blocks
# halve the ring: H200, session 12 runs 3-4, bf16 d256, one token, GB/s of
# K+V (GPU_TILE+PAGED_TILE / this / 64x64 one buffer): b1 32/32 kv 32k 4,174
# / 4,316 / 4,332; b1 GQA 32/8 kv 32k 3,477 / 3,599 / 3,551; b16 GQA kv 8k
# 2,333 / 4,095 / 4,342 (FA2 4,389, cuDNN 3,437); b16 GQA mixed 1k..32k 2,207 /
# 3,949 / 3,573. None: GPU_TILE / PAGED_TILE as for the narrower head dims.
WIDE_GPU_TILE = (64, 32, 2)

# Whether the GPU kernels' K/V ring refills before it waits (tile-insert-waits
# early-refill; the kernel's EARLY_REFILL): at the top of iteration j the
# copies of block j + 1 are issued, then block j is waited for with them in
# flight, so a program keeps two blocks (64 KB at d128) in flight through
# its wait and its next block's page lookups, instead of one block landing
# and then none while the next one's addresses are computed. Two stages
# only (with one buffer there is no free region to refill early). A module
# setting so that bench/tune_decode.py --early-refill can compare; the
# split rule's residency() is the same either way. Off: session 9 run 6
# (H200, same run, GB/s early/off) measured no gain: contiguous GQA 32/8 b1
# 32k 3,089/3,196, 128k 4,060/4,074, b16 4,014/4,039, mixed b16 4,015/4,074;
# pages of 16 3,032/2,950, 3,930/3,978, 3,861/3,963, 3,827/3,820. The decode
# kernel alone already moves 3.73 TB/s at b1 32k (35.4 us for 134 MB); the
# rest of the call's 43 us is the combine (2 us) and launch gaps.
EARLY_REFILL = False

# Programmatic dependent launch (the kernels' PRIOR_WAIT, tl.wait_prior_kernels
# and tl.launch_dependents at their top): on sm_90+ the append, decode and
# combine kernels are launched so that each may start while the kernel ahead
# of it on the stream finishes, and waits on the SM for its writes; a call's
# two or three kernels (and the next call's) then do not each pay a launch
# latency after the previous one has drained. Nothing on sm_80 and the CPU.
# A module setting so that the benches can A/B it (bench/ab_decode.py --knob
# PRIOR_WAIT; TILEC_PDL=0 keeps the kernels and launches them in plain stream
# order).
PRIOR_WAIT = True

# One new token (a decode step's k/v) is appended by the decode kernel itself
# (its APPEND: every program whose key range holds the new position stores
# the row, then a barrier, then its loop reads it; flash_attn 2's
# Append_KV) instead of a kv_append launch before it: one launch fewer per
# serving call. More new tokens, and caches the kernel reads through padded
# copies, keep kv_append. A module setting so that the benches can A/B it.
FUSED_APPEND = True

# Whether a split call merges the splits inside the decode kernel (the
# kernel's FUSED: the last of a row block's num_splits programs to arrive on
# its counter, tl.arrive, merges) instead of a second launch, the combine
# kernel. On the GPU a plan fuses where its merge takes at most
# _FUSED_MAX_TRIPS dependent L2 round trips (one per packed row and MERGE_D
# features) over at most _FUSED_MAX_SPLITS splits; the CPU runner always
# fuses (test_flash_decode_fused.py checks the fused kernels at every shape).
# Measured on the H200 (bench/ab_fused.py, bf16 d128, one token, µs two
# kernels / fused, session 11 run 12, the merge reading (splits, features)
# tiles in 16-byte loads, the next row prefetched): GQA 32/8 b16 kv 8k (3
# splits) 133.2 / 130.2, MHA b1 32k (8) 129.7 / 127.3, mixed 1k..32k b16 (9)
# 337.1 / 336.9, pages of 16 358 / 358 -- but GQA b1 32k (32 splits) 41.7 /
# 43.2 and 128k (33) 130.5 / 134.1: one program merging 32 partials per row
# is slower than the combine kernel's many (session 10's merge, 4-byte
# loads a split stride apart, lost 5.6 and 20 µs there; run 9 had the same
# wins at few splits). Hence fused by default, up to 16 splits. A module
# setting so that the benches can A/B it (bench/ab_fused.py, bench_decode
# --fused).
FUSED_COMBINE = True
_FUSED_MAX_TRIPS = 8
_FUSED_MAX_SPLITS = 16
# Registers per thread the fused merge's (MERGE_D, MERGE_SPLITS) f32 tile may
# take (its lse tile takes as many): MERGE_D is the most features that fit.
_MERGE_REGS = 64

# What the split rule knows of an SM (H100/H200; sm_80 code): shared memory
# and registers per SM, the registers per thread the decode kernel takes at
# d128 (ptxas: 208 at 64 rows), and the bytes of K/V copies that must be in
# flight per SM to cover HBM latency: Little's law says ~4.7 TB/s × ~1.8 µs
# (one block's round trip under load) over 132 SMs = 64 KB, and run 2 of
# session 8 found three programs of 32 KB per SM best where they fit (the
# 16-row tile: 48 splits at batch 1 × 8 KV heads, not 32), so 96 KB.
_SMEM_PER_SM = 228 * 1024
_SMEM_PER_CTA_RESERVED = 1024
_REGS_PER_SM = 65536
_REGS_PER_THREAD = 208
_IN_FLIGHT_PER_SM = 96 * 1024
# A program's fixed cost in key blocks: its Q load and the first block's
# latency (nothing overlaps them), the epilogue and its share of the combine.
_FIXED_BLOCKS = 2


# With lengths per sequence (a cache_seqlens tensor, batch > 1) the host does
# not know them (no read-back): the rule then also weighs lengths spread
# evenly over 0..capacity (a serving batch), taking the count best for those
# among the counts within this factor of the best for equal lengths.
_SPREAD_TOLERANCE = 1.03
# The spread model's tail: when lengths differ the programs do not end
# together; the last one to start runs this fraction of a longest chunk
# after the rest of the work is done.
_SPREAD_TAIL = 0.5


def _uniform_cost(programs, n_blocks, sms, saturating, s, resident=None):
    """cost(s) of num_splits_rule with every sequence at n_blocks: the
    busiest SM's c programs run in waves of `resident`; a wave of a programs
    of per + _FIXED_BLOCKS blocks each takes a·(per + F)·saturating / min(a,
    saturating) (below `saturating` programs an SM runs at a/saturating of
    full speed), so a last wave of fewer programs costs nearly a full one
    (session 8 run 3: batch 16 × 8 KV heads at 8k, 64-row tile: 3 splits,
    384 programs on 264 slots, 3,201 GB/s, 2 splits 4,070, 4 splits 3,932)."""
    per = -(-n_blocks // s)
    working = programs * -(-n_blocks // per)
    c = -(-working // sms)
    full, part = divmod(c, max(resident or saturating, saturating))
    wave = lambda a: a * (per + _FIXED_BLOCKS) * saturating / min(a, saturating) if a else 0
    return full * wave(max(resident or saturating, saturating)) + wave(part)


def _spread_cost(programs, n_blocks, sms, saturating, s):
    """cost(s) with the sequences' lengths spread evenly over 0..n_blocks:
    the kernel cuts each sequence into s equal parts, so the work is
    programs·(n/2 + s·_FIXED_BLOCKS), spread over the SMs, but no shorter
    than the longest program (⌈n/s⌉ blocks at 1/saturating of an SM), plus
    the tail (_SPREAD_TAIL of the longest program run after the rest)."""
    per = -(-n_blocks // s)
    work = programs * (n_blocks / 2 + s * _FIXED_BLOCKS)
    return max(work / sms, saturating * (per + _FIXED_BLOCKS)) + _SPREAD_TAIL * saturating * per


def num_splits_rule(programs, n_blocks, sms, saturating, max_splits=_MAX_SPLITS, spread=False,
                    tolerance=None, resident=None):
    """The split count for num_splits=0: the one place the rule lives.

    A decode kernel is bound by HBM, so what a split count changes is how
    evenly the key blocks land on the SMs and whether each SM has enough
    copies in flight. With s splits each program reads per = ⌈n_blocks/s⌉
    blocks and programs·⌈n_blocks/per⌉ programs do work; the busiest SM runs
    c = ⌈working/sms⌉ of them, in waves of `resident` (what the SM holds).
    An SM moves bytes at full speed once `saturating` programs run on it
    (their copies in flight cover the latency), at a/saturating of it with a
    < saturating. So with every sequence at n_blocks a wave of a programs
    takes a·(per + _FIXED_BLOCKS)·saturating/min(a, saturating), and

        cost(s) = ⌊c/resident⌋·wave(resident) + wave(c mod resident)

    in units of one block at one SM's full speed (_uniform_cost; with full
    waves it is max(c, saturating)·(per + _FIXED_BLOCKS)); the rule takes
    the s in 1..min(max_splits, n_blocks) of least cost (the smallest on
    ties). A last wave of fewer programs costs nearly a full one (session 8
    run 3: 3 splits at batch 16 × 8 KV heads, 8k, 384 programs on 264 slots:
    3,201 GB/s against 4,070 at 2). Examples at 132 SMs, 64-row tile
    (resident and saturating 2), 64-key blocks, d128: batch 1 with 8 KV
    heads at 32k keys → 32 splits (256 programs, 2 per SM); 32 KV heads
    → 8; batch 16 × 8 KV heads at 8k → 2; batch 64 × 8 at 4k → 1; the
    16-row tile (3 and 3): batch 1 × 8 at 32k → 47. Compare
    num_splits_heuristic, flash_attn 2's rule, which counts wave efficiency
    alone (29 splits in the first case: 100 SMs run two programs, 32 one).

    spread (lengths per sequence, unknown to the host, batch > 1): the
    sequences may differ, and then the longest ones bound the time, not the
    mean: with s splits the longest sequence's programs read ⌈n/s⌉ blocks
    while the short ones finish early (run 25: batch 16 × 8 KV heads with
    lengths uniform in 1k..32k ran 30% faster at 16 splits than at the 2 of
    the equal-length cost). _spread_cost models lengths spread evenly over
    0..n_blocks; the rule takes, among the counts whose equal-length cost is
    within `tolerance` (_SPREAD_TOLERANCE) of the best, the one of least
    spread cost, so equal lengths lose at most that factor. 64-row tile:
    batch 16 × 8 at up to 32k → 8, batch 64 × 8 → 8, batch 16 × 8 at 8k →
    2; 16-row tile (what the plan takes for batch 16 × 8, _gpu_tile): 9 and
    3 (run 3: 4,079 and 4,062 GB/s; best fixed counts 4,195 and 4,062)."""
    counts = range(1, max(1, min(max_splits, n_blocks)) + 1)
    uniform = {s: _uniform_cost(programs, n_blocks, sms, saturating, s, resident) for s in counts}
    if not spread:
        return min(counts, key=lambda s: (uniform[s], s))
    best = min(uniform.values())
    tol = _SPREAD_TOLERANCE if tolerance is None else tolerance
    near = [s for s in counts if uniform[s] <= tol * best]
    return min(near, key=lambda s: (_spread_cost(programs, n_blocks, sms, saturating, s), s))


def residency(block_m, block_n, stages, head_dim, elem_bytes=2):
    """(programs resident per SM, programs per SM that saturate it) for a
    decode tile: shared memory (Q, and `stages` buffers of K and V) and
    registers bound the first; the second is how many programs' copies
    (stages − 1 blocks of K and V each) make _IN_FLIGHT_PER_SM."""
    d = tile_width(head_dim)
    smem = (block_m + 2 * stages * block_n) * d * elem_bytes + _SMEM_PER_CTA_RESERVED
    threads = 32 * max(1, block_m // 16)
    resident = max(1, min(_SMEM_PER_SM // smem, _REGS_PER_SM // (_REGS_PER_THREAD * threads), 32))
    in_flight = max(1, stages - 1) * 2 * block_n * d * elem_bytes
    return resident, max(1, min(resident, -(-_IN_FLIGHT_PER_SM // in_flight)))


def num_splits_heuristic(programs, num_sms, num_n_blocks, max_splits=_MAX_SPLITS):
    """flash_attn 2's rule (csrc/flash_attn/flash_api.cpp): no split when the
    programs nearly fill the GPU (>= 80% of `num_sms` slots); else the
    smallest split count whose wave efficiency (programs·splits/slots over its
    ceiling) is >= 85% of the best, among counts that change the blocks per
    split."""
    if programs >= 0.8 * num_sms:
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)
    cdiv = lambda a, b: -(-a // b)
    eligible = lambda s: s == 1 or cdiv(num_n_blocks, s) != cdiv(num_n_blocks, s - 1)
    eff = {}
    for s in range(1, max_splits + 1):
        if eligible(s):
            waves = programs * s / num_sms
            eff[s] = waves / math.ceil(waves)
    best = max(eff.values(), default=0.0)
    for s in sorted(eff):
        if eff[s] >= 0.85 * best:
            return s
    return 1


# The values of cache_seqlens, cache_batch_idx, cache_leftpad (and on the
# CPU the block table's page numbers) are read and checked before anything is
# written. None (the default): on the CPU only. On CUDA the check is a
# device-to-host copy and a sync per call, which flash_attn does not do, so
# it is opt-in: True here, or TILEC_CHECK_VALUES=1 in the environment (a
# debugging aid; never while a CUDA graph is being captured). Unchecked, the
# kernel still reads only inside the cache: it clamps each sequence's length
# to the capacity and each page number to the pool (a bad value gives a wrong
# answer, not a fault). False: no check anywhere.
CHECK_VALUES = None

# The CPU runner's Q tile: None for the smallest that holds the packed rows
# (fast to run), or a GPU size, for tests of the GPU configuration's numerics.
CPU_BLOCK_M = None


# flash_attn 2.8 checks on its paged path that every sequence fits its
# block_table row (max(cache_seqlens) + new keys <= pages per row × page
# size; flash-attention PR 2711, its test_flash_attn_kvcache_paged_block_
# table_bounds), at the price of one device-to-host read and sync per call.
# True does the same for CUDA tensors when CHECK_VALUES does not already
# read every value (the CPU always does), never while a CUDA graph is
# captured. Off by default: the sync serializes the host and the GPU, and
# on the H200 (session 11 run 13, bench_decode, GQA 32/8 d128 b1 kv 32k)
# pages of 16 went from 3,028 to 1,106 GB/s, pages of 256 from 3,161 to
# 1,384 (b16 mixed p16 4,070 -> 3,116). Unchecked, the kernel clamps each
# length to the capacity (a wrong answer for a too-long sequence, never a
# fault); TILEC_CHECK_VALUES=1 or this flag turns the check on.
CHECK_PAGED_CAPACITY = False


def _check_paged(torch):
    """Whether a CUDA paged call with per-sequence lengths reads their
    maximum back (CHECK_PAGED_CAPACITY)."""
    return CHECK_PAGED_CAPACITY and not torch.cuda.is_current_stream_capturing()


def _check_paged_capacity(cache_seqlens, seqlen_new, capacity):
    longest = int(cache_seqlens.max())
    if longest + seqlen_new > capacity:
        _fail(f"max(cache_seqlens) = {longest} plus {seqlen_new} new keys exceeds the capacity of a "
              f"block_table row, {capacity} (pages per row × page size): give block_table more "
              "columns")


def _check_values(on_gpu):
    """Whether this call reads the int32 tensors' values back to check them
    (CHECK_VALUES)."""
    if CHECK_VALUES is None:
        return not on_gpu or os.environ.get("TILEC_CHECK_VALUES", "") not in ("", "0")
    return bool(CHECK_VALUES)


@dataclass(frozen=True)
class DecodePlan:
    """How one call runs: tiles, warps, stages and the split count."""
    seqlen_q: int
    group: int
    head_dim: int
    page_size: int          # 0: contiguous cache
    block_m: int
    block_n: int
    num_warps: int
    m_blocks: int
    num_splits: int
    page_block: int = 0     # paged: keys per sub-tile (one page's share of a block)
    num_stages: int = 2
    chunks: str = "length"  # the kernel's CHUNKS: how a split's key range is cut
    early_refill: bool = False  # the kernel's EARLY_REFILL (GPU plans: EARLY_REFILL)
    fused: bool = False     # the kernel's FUSED: the splits merge in the decode kernel (FUSED_COMBINE)
    merge_splits: int = 0   # fused: MERGE_SPLITS, the power of two >= num_splits
    merge_d: int = 0        # fused: MERGE_D, features per merge tile

    def constexprs(self, dtype, causal=False, window=False, alibi=False, softcap=False, paged=False,
                   per_batch=False, batch_idx=False, leftpad=False, append=False):
        """The decode kernel's constexprs for this plan and these features."""
        tdt = {"float16": tl.float16, "bfloat16": tl.bfloat16}[dtype]
        split = self.num_splits > 1
        qpos = "one" if self.seqlen_q == 1 else "row" if self.group == 1 else "mod"
        return dict(DTYPE=tdt, ODTYPE=tl.float32 if split else tdt, HEAD_DIM=self.head_dim,
                    SPLIT=split, CAUSAL=bool(causal), WINDOW=bool(window), ALIBI=bool(alibi),
                    SOFTCAP=bool(softcap),
                    PAGED=bool(paged), PAGE_SIZE=self.page_size if paged else 64,
                    PAGE_BLOCK=self.page_block if paged else 64,
                    PER_BATCH=bool(per_batch), BATCH_IDX=bool(batch_idx), LEFTPAD=bool(leftpad),
                    QPOS=qpos, BLOCK_M=self.block_m, BLOCK_N=self.block_n, NUM_WARPS=self.num_warps,
                    NUM_STAGES=self.num_stages, **({"CHUNKS": self.chunks} if self.chunks != "length" else {}),
                    **({"EARLY_REFILL": True} if self.early_refill else {}),
                    **(dict(FUSED=True, MERGE_SPLITS=self.merge_splits, MERGE_D=self.merge_d)
                       if self.fused and split else {}),
                    **({"PRIOR_WAIT": True} if PRIOR_WAIT else {}),
                    **({"APPEND": True} if append else {}))


def decode_plan(batch, seqlen_q, heads, heads_k, head_dim, capacity, page_size=0, num_splits=0,
                on_gpu=True, sms=runtime_support.DEFAULT_SMS, per_batch=False):
    """Tiles and splits for a call (_decode_plan, cached: the split rule is a
    loop over the candidate counts). per_batch: cache_seqlens is a tensor
    (lengths per sequence, unknown here), so num_splits=0 weighs spread
    lengths too when batch > 1 (num_splits_rule's `spread`)."""
    rows_q = heads // heads_k * seqlen_q
    tile = _gpu_tile(rows_q, page_size, batch * heads_k, bool(per_batch) and batch > 1, sms, head_dim)
    split_tile = tile
    if (SINGLE_SEQUENCE_TILE is not None and tile == GPU_TILE and batch == 1
            and 1 < rows_q <= SINGLE_SEQUENCE_TILE[0]):
        tile = SINGLE_SEQUENCE_TILE          # the split count stays GPU_TILE's
    return _decode_plan(batch, seqlen_q, heads, heads_k, head_dim, capacity, page_size, num_splits,
                        on_gpu, sms, tile,
                        CPU_BLOCK_M,
                        bool(per_batch) and batch > 1,
                        _SPREAD_TOLERANCE, _SPREAD_TAIL, SPLIT_CHUNKS, EARLY_REFILL,
                        (FUSED_COMBINE, _FUSED_MAX_TRIPS, _FUSED_MAX_SPLITS), split_tile)


def _gpu_tile(rows_q, page_size, pairs=None, spread=False, sms=runtime_support.DEFAULT_SMS, head_dim=128):
    """WIDE_GPU_TILE for head dims over 128; else GPU_TILE, or PAGED_TILE
    when the packed rows fit its 16 and either the
    cache is in pages smaller than GPU_TILE's key block, or the lengths may
    differ (`spread`) with fewer (batch, KV head) pairs than two per SM: then
    the split count is high and the 16-row tile's three programs per SM even
    the sequences out (session 8 run 3, batch 16 × 8 KV heads, lengths
    1k..32k: 4,079 GB/s at the rule's 9 splits against 3,561 for the 64-row
    tile at its 8; equal lengths in a tensor: 4,062 against 4,070). With
    more pairs the 64-row tile's waves are even (batch 64 × 8 at 4k: 4,377
    against 4,141)."""
    if WIDE_GPU_TILE is not None and head_dim > 128:
        return WIDE_GPU_TILE
    if PAGED_TILE is None or rows_q > PAGED_TILE[0]:
        return GPU_TILE
    if page_size and (page_size & -page_size) < GPU_TILE[1]:
        return PAGED_TILE
    if spread and pairs is not None and pairs < 2 * sms:
        return PAGED_TILE
    return GPU_TILE


@functools.lru_cache(maxsize=1024)
def _decode_plan(batch, seqlen_q, heads, heads_k, head_dim, capacity, page_size, num_splits, on_gpu, sms,
                 gpu_tile, cpu_block_m, spread, _tolerance, _tail, _chunks, _early_refill=False,
                 _fused=(False, 0, 0), split_tile=None):
    """Tiles and splits for a call. The Q tile holds the packed rows (group ×
    seqlen_q); on the GPU it is GPU_TILE's (64 rows over 4 warps even for one
    row, as flash_attn 2's split kernel: the warps that compute padding rows
    still share the K/V copies, and a decode kernel is bound by those). Key
    blocks are 64 keys; with pages, a block is up to 8 sub-tiles of the
    largest power of two dividing the page size (pages of 16: four, each from
    its own page), so a block stays 64 keys at any page size. num_splits=0:
    num_splits_rule over the programs (batch × KV heads × row blocks) and the
    capacity in key blocks, `spread` when the lengths may differ (the
    module's tolerance and tail are part of the cache key, so a bench that
    sets them sees its own choice). `split_tile`: the GPU tile whose
    residency the split rule counts with (default gpu_tile; see
    SINGLE_SEQUENCE_TILE)."""
    rows_q = heads // heads_k * seqlen_q
    if on_gpu:
        block_m, block_n, stages = gpu_tile
    else:
        block_m = cpu_block_m or min(64, max(16, 1 << (rows_q - 1).bit_length()))
        block_n, stages = gpu_tile[1], gpu_tile[2]
    page_block = 0
    if page_size:
        page_block = min(block_n, page_size & -page_size)
        while block_n > 8 * page_block:      # the kernel reads up to 8 sub-tiles per block
            block_n //= 2
    m_blocks = -(-rows_q // block_m)
    if num_splits == 0:
        n_blocks = max(1, -(-capacity // block_n))
        rm, rn, rs = (split_tile or gpu_tile) if on_gpu else (block_m, block_n, stages)
        resident, saturating = residency(rm, rn, rs, head_dim)
        num_splits = num_splits_rule(batch * heads_k * m_blocks, n_blocks, sms, saturating, spread=spread,
                                     tolerance=_tolerance, resident=resident)
    num_splits = min(num_splits, _MAX_SPLITS)
    chunks = SPLIT_CHUNKS if spread and num_splits > 1 else "length"
    early = bool(_early_refill) and on_gpu and stages == 2
    num_warps = max(1, block_m // 16)
    fused, merge_splits, merge_d = False, 0, 0
    if _fused[0] and num_splits > 1:
        merge_splits = 1 << (num_splits - 1).bit_length()
        d = tile_width(head_dim)
        fit = 32 * num_warps * _MERGE_REGS // merge_splits
        merge_d = min(d, max(16, 1 << (fit.bit_length() - 1)))
        trips = min(block_m, rows_q) * -(-head_dim // merge_d)
        fused = not on_gpu or (trips <= _fused[1] and num_splits <= _fused[2])
    return DecodePlan(seqlen_q, heads // heads_k, head_dim, page_size, block_m, block_n,
                      num_warps, m_blocks, num_splits, page_block, stages, chunks, early,
                      fused, merge_splits if fused else 0, merge_d if fused else 0)


def _fail(msg, cls=TilecValueError):
    raise cls(f"flash_attn_with_kvcache: {msg}")


class _Arrays:
    """numpy or torch (CPU or CUDA) operations the host side needs."""

    def __init__(self, like):
        self.torch = _is_torch(like)
        if self.torch:
            import torch

            self.t = torch
            self.device = like.device
        else:
            import numpy as np

            self.np = np

    def arange(self, n):
        if self.torch:
            return self.t.arange(n, device=self.device)
        return self.np.arange(n)

    def empty(self, shape, dtype):
        if self.torch:
            return self.t.empty(shape, dtype=getattr(self.t, dtype), device=self.device)
        return self.np.empty(shape, dtype=dtype)

    def full(self, shape, value, dtype):
        if self.torch:
            return self.t.full(shape, value, dtype=getattr(self.t, dtype), device=self.device)
        return self.np.full(shape, value, dtype=dtype)

    def zeros(self, shape, dtype):
        if self.torch:
            return self.t.zeros(shape, dtype=getattr(self.t, dtype), device=self.device)
        return self.np.zeros(shape, dtype=dtype)

    def contiguous(self, x):
        if self.torch:
            return x.clone(memory_format=self.t.contiguous_format)
        return self.np.ascontiguousarray(x).copy() if not x.flags.c_contiguous else x.copy()

    def transpose12(self, x):
        return x.transpose(1, 2) if self.torch else x.transpose(0, 2, 1, 3)

    def to_host_ints(self, x):
        """Values of a small int tensor as a Python list (a device sync on CUDA)."""
        if self.torch:
            return [int(v) for v in x.tolist()]
        return [int(v) for v in x.reshape(-1)]


def _check_tensor(name, t, on_gpu, rank, device=None):
    if t is None:
        return
    if _is_torch(t) != on_gpu and not (_is_torch(t) and t.device.type == "cpu" and not on_gpu):
        _fail(f"'{name}' must be a {'CUDA torch tensor' if on_gpu else 'numpy array or CPU torch tensor'} "
              f"like 'q', got {type(t).__name__}", TilecTypeError)
    if not hasattr(t, "shape") or len(t.shape) != rank:
        _fail(f"'{name}' must have rank {rank}, got shape {tuple(getattr(t, 'shape', ()))}")
    if on_gpu and device is not None and t.device != device:
        _fail(f"'{name}' is on {t.device}, 'q' on {device}")


def _int32_vector(name, t, batch, on_gpu, device):
    _check_tensor(name, t, on_gpu, 1, device)
    if _dtype_name(t) != "int32":
        _fail(f"'{name}' must be int32, got {_dtype_name(t)}", TilecTypeError)
    if t.shape[0] != batch:
        _fail(f"'{name}' has {t.shape[0]} entries, the batch is {batch}")


def _read_ints(ops, *tensors):
    """Host lists of the values of small int tensors (None stays None), in
    one transfer."""
    present = [t for t in tensors if t is not None]
    if not present:
        return [None] * len(tensors)
    if ops.torch:
        flat = ops.t.cat([t.reshape(-1) for t in present]).tolist()
    else:
        flat = [int(v) for t in present for v in t.reshape(-1)]
    out, at = [], 0
    for t in tensors:
        if t is None:
            out.append(None)
        else:
            out.append([int(v) for v in flat[at:at + t.shape[0]]])
            at += t.shape[0]
    return out


_dummies = {}


def _dummy(ops, dtype):
    """A one-element buffer for a pointer parameter a variant does not read."""
    key = (dtype, str(ops.device) if ops.torch else "numpy")
    if key not in _dummies:
        _dummies[key] = ops.zeros((1,), dtype)
    return _dummies[key]


# The fused combine's arrival counters (kernels/flash_decode.py FUSED): one
# int32 per (row block × KV head, batch) program group, per device and
# stream (two calls in flight on different streams must not share counts),
# zeroed once when made and reset by the kernel itself (the last program of
# a group stores 0), so no memset per call and a CUDA graph's replays find
# them zeroed. A call needing more than a buffer holds gets a new zeroed one.
_COUNTERS = {}


def _counters(zeros, n, device, stream=None):
    """An int32 buffer of at least n zeroed counters for `device` (a CUDA
    device's index, or "host") and stream; zeros(size) makes one."""
    buf = _COUNTERS.get((device, stream))
    if buf is None or buf.shape[0] < n:
        buf = _COUNTERS[(device, stream)] = zeros(max(n, 2 * buf.shape[0] if buf is not None else 1024))
    return buf


# Heads per tile of the rotary kernel (its loop takes the rest): 16 heads of
# 64 pairs are 16 f32 registers a thread per half at 4 warps.
_ROTARY_HEADS = 16
_ROTARY_TABLE_DTYPES = {"float32": tl.float32, "float16": tl.float16, "bfloat16": tl.bfloat16}


def rotary_kernel(dtype, table_dtype, head_dim, rotary_dim, interleaved, heads, per_batch):
    """The kernels/flash_decode.py rotary specialization for these features."""
    return _load_kernel("flash_decode").rotary.specialize(
        DTYPE={"float16": tl.float16, "bfloat16": tl.bfloat16}[dtype],
        CS_DTYPE=_ROTARY_TABLE_DTYPES[table_dtype], HEAD_DIM=head_dim, ROTARY_DIM=rotary_dim,
        INTERLEAVED=bool(interleaved), HEADS=min(_ROTARY_HEADS, 1 << (heads - 1).bit_length()),
        PER_BATCH=bool(per_batch),
        NUM_WARPS=4, **({"PRIOR_WAIT": True} if PRIOR_WAIT else {}))


def _rotary(ops, on_gpu, q, k, cos, sin, lens, uniform, q_step, interleaved, dtype):
    """q (b, seqlen_q, heads, d) and k (b, seqlen_new, heads_k, d) or None,
    rotated by the rotary kernel into new arrays: q's token i at position
    n + i·q_step, k's at n + i (n: lens[b], or `uniform` where lens is
    None)."""
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_new, heads_k = (k.shape[1], k.shape[2]) if k is not None else (0, 1)
    padded = -(-head_dim // 8) * 8

    def ready(x):
        # The kernel moves rows as 16-byte vectors: on CUDA, head dims that
        # are not a multiple of 8 go through zero-padded copies (the outputs
        # are sliced back), other unaligned rows through contiguous copies.
        if on_gpu and padded != head_dim:
            return _pad_head_dim(x, padded)
        return _rows_ready(ops, on_gpu, x)

    q = ready(q)
    k = ready(k) if k is not None else q
    tables = []
    for t in (cos, sin):
        if _dtype_name(t) not in _ROTARY_TABLE_DTYPES:   # e.g. float64: the kernel reads f32
            t = t.float() if ops.torch else t.astype(ops.np.float32)
        tables.append(_rows_ready(ops, on_gpu, t))
    cos, sin = tables
    if _dtype_name(cos) != _dtype_name(sin):
        sin = sin.to(cos.dtype) if ops.torch else sin.astype(cos.dtype)
    q_out = ops.empty(tuple(q.shape), dtype)
    k_out = ops.empty(tuple(k.shape), dtype) if seqlen_new else q_out
    kernel = rotary_kernel(dtype, _dtype_name(cos), head_dim, cos.shape[1] * 2, interleaved,
                           max(heads, heads_k), lens is not None)
    args, grid = _rotary_args(q, k, q_out, k_out, cos, sin, lens if lens is not None else _dummy(ops, "int32"),
                              seqlen_new, uniform, q_step)
    _launch(kernel, args, grid, on_gpu)
    if q_out.shape[-1] != head_dim:
        q_out, k_out = q_out[..., :head_dim], k_out[..., :head_dim]
    return q_out, (k_out if seqlen_new else None)


def _rotary_q_step(left, right):
    """1 where query i turns by the angle of position cache_seqlens + i, 0
    where every query takes cache_seqlens': flash_attn rotates each row at
    its own position under a causal or local mask (window (left, right),
    right 0 where causal), i.e. when either side is bounded -- (-1, 0)
    included, which is causal however the flag is set."""
    return 1 if left >= 0 or right >= 0 else 0


def _rotary_rows(seqlen_q, seqlen_new, left, right):
    """How many table rows past cache_seqlens a call reads: the new keys'
    and the queries' (one row for all of them where they share it)."""
    return max(seqlen_new, 1 + (seqlen_q - 1) * _rotary_q_step(left, right))


def _rotary_args(q, k, q_out, k_out, cos, sin, lens, seqlen_new, uniform, q_step):
    """The rotary kernel's arguments and grid (k, k_out: q, q_out where
    seqlen_new is 0); lens: cache_seqlens or an int32 dummy."""
    batch, seqlen_q, heads = q.shape[:3]
    sq, sk, sqo, sko = (_strides(t) for t in (q, k, q_out, k_out))
    parts = 2 if seqlen_new else 1
    args = (q, k, q_out, k_out, cos, sin, lens, seqlen_q, seqlen_new, batch, parts, heads, k.shape[2], uniform,
            q_step, cos.shape[0], sq[0], sq[1], sq[2], sk[0], sk[1], sk[2], sqo[0], sqo[1], sqo[2],
            sko[0], sko[1], sko[2], _strides(cos)[0], _strides(sin)[0])
    return args, (max(seqlen_q, seqlen_new), batch, parts)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None,
                            block_table=None, softmax_scale=None, causal=False, window_size=(-1, -1),
                            softcap=0.0, rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False):
    """Attention of q (batch, seqlen_q, heads, d) over a KV cache, flash_attn
    2.8's flash_attn_with_kvcache.

    k_cache, v_cache: (batch_cache, seqlen_cache, kv_heads, d), or with
    block_table (num_pages, page_size, kv_heads, d) and block_table (batch,
    pages_per_seq) int32 naming each sequence's pages in order (any pages of
    the pool, shared or not). heads must be a multiple of kv_heads (GQA/MQA).
    k, v (batch, seqlen_new, kv_heads, d): written into the cache in place at
    positions cache_seqlens … before attending. cache_seqlens: an int or
    (batch,) int32, the cache length of each sequence before the append.
    Keys visible to query i: j < cache_seqlens + seqlen_new (and j >=
    cache_leftpad); causal aligns bottom-right (j <= i + seqlen_k −
    seqlen_q); window_size (left, right) as flash_attn, −1 unbounded.
    rotary_cos/sin (seqlen_ro, rotary_dim / 2): q and the new k are rotated
    at their positions (q at cache_seqlens + i when causal or windowed, else
    all at cache_seqlens), interleaved (GPT-J) or not (GPT-NeoX).
    alibi_slopes (heads,) or (batch, heads) f32. num_splits 0 picks the
    split-KV count from the GPU's SM count, the programs and the capacity
    (num_splits_rule).

    Returns out (batch, seqlen_q, heads, d) and, with return_softmax_lse,
    lse (batch, heads, seqlen_q) f32 (+inf for a row that sees no key).
    """
    if _is_torch(q) and q.is_cuda:
        fast = _gpu_fast_path(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, causal,
                              window_size, softcap, num_splits, return_softmax_lse, k, v,
                              rotary_cos, rotary_sin, rotary_interleaved, cache_batch_idx, cache_leftpad,
                              alibi_slopes)
        if fast is not None:
            return fast
    on_gpu = _is_torch(q) and q.device.type == "cuda"
    device = q.device if on_gpu else None
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v)):
        _check_tensor(name, t, on_gpu, 4, device)
    if (k is None) != (v is None):
        _fail("'k' and 'v' go together: got " + ("k without v" if v is None else "v without k"))
    softcap = float(softcap)
    if not softcap >= 0 or math.isinf(softcap):
        _fail(f"softcap must be a finite value >= 0 (0 = off), got {softcap}")
    if not isinstance(num_splits, int) or isinstance(num_splits, bool) or num_splits < 0:
        _fail(f"num_splits must be an int >= 0 (0 = choose), got {num_splits!r}")
    dtype = _dtype_name(q)
    allowed = ("float16", "bfloat16") if _is_torch(q) else ("float16",)
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v)):
        if t is not None and _dtype_name(t) != dtype:
            _fail(f"'{name}' is {_dtype_name(t)}, 'q' is {dtype}: one dtype for q, the cache and k/v",
                  TilecTypeError)
    if dtype not in allowed:
        _fail(f"'q' must be {' or '.join(allowed)}{'' if _is_torch(q) else ' (numpy)'}, got {dtype}",
              TilecTypeError)

    batch, seqlen_q, heads, head_dim = q.shape
    paged = block_table is not None
    if paged:
        num_pages, page_size, heads_k, dk = k_cache.shape
    else:
        batch_cache, capacity, heads_k, dk = k_cache.shape
    if tuple(v_cache.shape) != tuple(k_cache.shape):
        _fail(f"'v_cache' has shape {tuple(v_cache.shape)}, 'k_cache' {tuple(k_cache.shape)}")
    if dk != head_dim:
        _fail(f"'k_cache' has head_dim {dk}, 'q' has {head_dim}")
    if not 1 <= head_dim <= 256:
        _fail(f"head_dim {head_dim} is not supported (1 to 256)")
    if heads_k == 0 or heads % heads_k:
        _fail(f"'q' has {heads} heads, not a multiple of the cache's {heads_k} KV heads")
    if batch == 0 or seqlen_q == 0 or heads == 0:
        _fail(f"empty query (q {tuple(q.shape)})")
    group = heads // heads_k
    ops = _Arrays(q)

    if paged:
        _check_tensor("block_table", block_table, on_gpu, 2, device)
        if _dtype_name(block_table) != "int32":
            _fail(f"'block_table' must be int32, got {_dtype_name(block_table)}", TilecTypeError)
        if block_table.shape[1] == 0:
            _fail("'block_table' has no columns (each sequence needs at least one page)")
        if block_table.shape[0] != batch:
            _fail(f"'block_table' has {block_table.shape[0]} rows, the batch is {batch}")
        if page_size % 16 or page_size == 0:
            _fail(f"page size {page_size} (k_cache.shape[1] with block_table) must be a multiple of 16")
        if cache_batch_idx is not None:
            _fail("cache_batch_idx with block_table: the block table already names each sequence's pages")
        if cache_leftpad is not None:
            _fail("cache_leftpad with block_table is not supported (as in flash_attn)",
                  NotImplementedError)
        capacity = block_table.shape[1] * page_size
    seqlen_new = 0
    if k is not None:
        if k.shape[0] != batch or tuple(k.shape[2:]) != (heads_k, head_dim):
            _fail(f"'k' has shape {tuple(k.shape)}, expected ({batch}, seqlen_new, {heads_k}, {head_dim})")
        if tuple(v.shape) != tuple(k.shape):
            _fail(f"'v' has shape {tuple(v.shape)}, 'k' {tuple(k.shape)}")
        seqlen_new = k.shape[1]

    # cache_seqlens: host values for the checks (one device sync on CUDA).
    per_batch = cache_seqlens is not None and not isinstance(cache_seqlens, int)
    if cache_seqlens is None:
        if k is not None:
            _fail("appending 'k'/'v' needs cache_seqlens (where they go)")
        cache_seqlens = capacity                       # flash_attn: the whole cache
    if isinstance(cache_seqlens, bool):
        _fail(f"cache_seqlens must be an int or an int32 tensor, got {cache_seqlens!r}", TilecTypeError)
    for name, t in (("cache_seqlens", cache_seqlens if per_batch else None),
                    ("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad)):
        if t is not None:
            _int32_vector(name, t, batch, on_gpu, device)
    if not paged and cache_batch_idx is None and batch_cache < batch:
        _fail(f"'k_cache' holds {batch_cache} sequences, the batch is {batch}")
    # The kernel reads these int32 tensors with unit stride: a strided view is copied.
    if per_batch and _strides(cache_seqlens)[0] != 1 and batch > 1:
        cache_seqlens = ops.contiguous(cache_seqlens)
    if cache_batch_idx is not None and _strides(cache_batch_idx)[0] != 1 and batch > 1:
        cache_batch_idx = ops.contiguous(cache_batch_idx)
    if cache_leftpad is not None and _strides(cache_leftpad)[0] != 1 and batch > 1:
        cache_leftpad = ops.contiguous(cache_leftpad)
    if paged and _strides(block_table)[1] != 1:
        block_table = ops.contiguous(block_table)
    # The values of the int32 tensors: read once and checked before anything
    # is written (on CUDA only when asked: CHECK_VALUES, one device sync).
    # Never while a CUDA graph is captured (a read-back cannot be captured).
    check_values = _check_values(on_gpu) and not (on_gpu and ops.t.cuda.is_current_stream_capturing())
    lens_host = None if per_batch else [int(cache_seqlens)] * batch
    pad_v = None
    if check_values:
        lens_v, bidx_v, pad_v = _read_ints(ops, cache_seqlens if per_batch else None, cache_batch_idx,
                                           cache_leftpad)
        lens_host = lens_v or lens_host
        bad = [i for i in bidx_v or () if not 0 <= i < batch_cache]
        if bad:
            _fail(f"cache_batch_idx holds {bad[0]}, outside the cache's batch 0..{batch_cache - 1}")
    if lens_host is not None:  # read back, or an int: known on the host, checked for free
        for b, (n, p) in enumerate(zip(lens_host, pad_v or [0] * batch)):
            if n < 0:
                _fail(f"cache_seqlens[{b}] = {n} is negative")
            if n + seqlen_new > capacity:
                _fail(f"cache_seqlens[{b}] = {n} plus {seqlen_new} new keys exceeds the cache capacity "
                      f"{capacity}" + (" (block_table pages × page size)" if paged else ""))
            if not 0 <= p <= n:
                _fail(f"cache_leftpad[{b}] = {p} is outside 0..cache_seqlens[{b}] = {n}")
    elif not check_values and paged and on_gpu and batch and _check_paged(ops.t):
        _check_paged_capacity(cache_seqlens, seqlen_new, capacity)
    if paged and check_values and not on_gpu:
        # Page numbers in the pool (the CPU path only: on CUDA it would copy the table every call).
        need = max(-(-(n + seqlen_new) // page_size) for n in lens_host)
        flat = ops.to_host_ints(block_table[:, :need].reshape(-1))
        bad = [i for i in flat if not 0 <= i < num_pages]
        if bad:
            _fail(f"block_table names page {bad[0]}, outside the pool 0..{num_pages - 1}")

    # Window, causal (flash_attn: causal sets the right side to 0).
    left, right = (int(w) for w in window_size)
    if left < -1 or right < -1:
        _fail(f"window_size values must be >= -1, got {window_size}")
    if causal:
        right = 0
    window = left >= 0 or right > 0
    # One query token sees every key under causal (j <= 0 + seqlen_k - 1).
    causal_only = right == 0 and left < 0 and seqlen_q > 1

    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    if math.isnan(scale):
        _fail("softmax_scale is NaN")

    alibi = alibi_slopes is not None
    if alibi:
        _check_tensor("alibi_slopes", alibi_slopes, on_gpu, len(alibi_slopes.shape), device)
        if _dtype_name(alibi_slopes) != "float32":
            _fail(f"'alibi_slopes' must be float32, got {_dtype_name(alibi_slopes)}", TilecTypeError)
        if tuple(alibi_slopes.shape) not in ((heads,), (batch, heads)):
            _fail(f"'alibi_slopes' has shape {tuple(alibi_slopes.shape)}, expected ({heads},) or "
                  f"({batch}, {heads})")

    rotary = rotary_cos is not None or rotary_sin is not None
    if rotary:
        if rotary_cos is None or rotary_sin is None:
            _fail("rotary_cos and rotary_sin go together")
        for name, t in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
            _check_tensor(name, t, on_gpu, 2, device)
            if _dtype_name(t) not in ("float16", "bfloat16", "float32", "float64"):
                _fail(f"'{name}' must be a floating-point table (f16, bf16, f32 or f64), got {_dtype_name(t)}",
                      TilecTypeError)
        if tuple(rotary_sin.shape) != tuple(rotary_cos.shape):
            _fail(f"'rotary_sin' has shape {tuple(rotary_sin.shape)}, 'rotary_cos' {tuple(rotary_cos.shape)}")
        rd = rotary_cos.shape[1] * 2
        if rd > head_dim or rd == 0 or rd % 16:
            _fail(f"rotary dim {rd} (2 × rotary_cos.shape[1]) must be a multiple of 16 and <= head_dim "
                  f"{head_dim}")
        # Unknown lengths (CUDA, unchecked): at least the one row every call
        # reads (the kernel clamps positions into the table).
        reach = max(n + _rotary_rows(seqlen_q, seqlen_new, left, right) for n in lens_host) if lens_host else 1
        if rotary_cos.shape[0] < reach:
            _fail(f"rotary_cos has {rotary_cos.shape[0]} positions, the call needs {reach}")

    # The kernel moves rows as 16-byte vectors: head dims that are not a
    # multiple of 8 (and, on CUDA, caches whose rows do not start 16-byte
    # aligned) attend over zero-padded copies of the cache, made after the
    # append (which writes the caller's cache), and the output is sliced
    # back, as flash_attn pads. A copy of the cache per call: correct, not fast.
    padded = -(-head_dim // 8) * 8
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if _strides(t)[-1] != 1:
            _fail(f"'{name}' must be contiguous in its last dimension (strides {_strides(t)})")
    copy_cache = padded != head_dim or (on_gpu and not (_rows_aligned(k_cache) and _rows_aligned(v_cache)))

    # Everything checked: from here on, arrays are written. Host-side steps
    # use the caller's kind of array (numpy, or torch on its device); only
    # the CPU runner's launches see numpy views of torch CPU tensors.
    lens = cache_seqlens if per_batch else None
    if rotary:  # one kernel rotates q and the new k (kernels/flash_decode.py rotary)
        q, k_rot = _rotary(ops, on_gpu, q, k if seqlen_new else None, rotary_cos, rotary_sin, lens,
                           0 if per_batch else lens_host[0], _rotary_q_step(left, right), rotary_interleaved,
                           dtype)
        k = k_rot if k_rot is not None else k
    # One new token on a cache the kernel reads in place: the decode kernel
    # appends it (FUSED_APPEND, its APPEND).
    fused_append = k is not None and seqlen_new == 1 and not copy_cache and FUSED_APPEND
    if k is not None and seqlen_new and not fused_append:
        if not copy_cache:
            # One kernel (kernels/flash_decode.py kv_append) for k and v.
            _append(ops, on_gpu, k, v, k_cache, v_cache, cache_seqlens if per_batch else None,
                    0 if per_batch else lens_host[0], block_table if paged else None, cache_batch_idx,
                    page_size if paged else 0, capacity, dtype)
        else:
            # Rows not 16-byte vectors (head dims not a multiple of 8, unaligned
            # caches): host-side indexing.
            lens_t = lens if lens is not None else ops.full((batch,), lens_host[0], "int32")
            pos = _positions(ops, lens_t, ops.arange(seqlen_new)[None, :])    # (batch, seqlen_new)
            if paged:
                rows_b = ops.arange(batch)[:, None]
                page = block_table[rows_b, pos // page_size]
                page = page.long() if ops.torch else page
                k_cache[page, pos % page_size] = k
                v_cache[page, pos % page_size] = v
            else:
                rows_b = cache_batch_idx if cache_batch_idx is not None else ops.arange(batch)
                rows_b = rows_b.reshape(batch, 1)
                rows_b = rows_b.long() if ops.torch else rows_b
                k_cache[rows_b, pos] = k
                v_cache[rows_b, pos] = v

    if scale < 0:
        q, scale = -q, -scale
    elif scale == 0:
        q, scale = q * 0, 1.0

    if copy_cache:
        q, k_cache, v_cache = (_pad_head_dim(t, padded) for t in (q, k_cache, v_cache))
    out, lse = _attend(ops, on_gpu, q, k_cache, v_cache, lens_host, per_batch,
                       lens, seqlen_new, cache_batch_idx, cache_leftpad, block_table, paged,
                       page_size if paged else 0, capacity, heads_k, group, scale, causal_only, window,
                       left, right, alibi_slopes, softcap, num_splits, dtype,
                       (_rows_ready(ops, on_gpu, k), _rows_ready(ops, on_gpu, v)) if fused_append else None)
    if padded != head_dim:
        out = ops.contiguous(out[..., :head_dim])
    return (out, lse) if return_softmax_lse else out


def _build_fast_plan(key):
    """LaunchCache builder for _gpu_fast_path: the decode (and, split, the
    combine) launcher and the grids of one call shape."""
    (dtype, batch, seqlen_q, heads, heads_k, head_dim, capacity, page_size, num_splits, per_batch, causal,
     window, softcap, append, alibi, batch_idx, leftpad, device, *_) = key
    plan = decode_plan(batch, seqlen_q, heads, heads_k, head_dim, capacity, page_size, num_splits, True,
                       runtime_support.sm_count(device), per_batch)
    kernel = decode_kernel().specialize(**plan.constexprs(dtype, causal=causal, window=window, softcap=softcap,
                                                          paged=page_size > 0, per_batch=per_batch,
                                                          append=append, alibi=alibi, batch_idx=batch_idx,
                                                          leftpad=leftpad))
    split = plan.num_splits > 1
    combine = None
    if split and not plan.fused:
        combine = combine_kernel().specialize(**combine_constexprs(dtype, head_dim)).launcher(device=device)
    return (kernel.launcher(device=device), combine, plan.num_splits,
            (plan.num_splits, plan.m_blocks * heads_k, batch), combine_grid(heads * seqlen_q, batch, head_dim),
            split and plan.fused)


#: the call shape -> (decode launcher, combine launcher or None, splits, grid, combine grid).
_FAST_PLANS = None
#: The module settings a fast-path plan depends on: the last element of its
#: key is their values (_FAST_KNOB_VALUES(globals())), so that changing one
#: re-plans. The native path (_tilec_fast) builds the same key.
_FAST_KNOBS = ("GPU_TILE", "PAGED_TILE", "WIDE_GPU_TILE", "SINGLE_SEQUENCE_TILE", "_SPREAD_TOLERANCE",
               "_SPREAD_TAIL", "COMBINE_TILE", "SPLIT_CHUNKS", "EARLY_REFILL", "FUSED_COMBINE", "_FUSED_MAX_TRIPS",
               "_FUSED_MAX_SPLITS", "PRIOR_WAIT")
_FAST_KNOB_VALUES = operator.itemgetter(*_FAST_KNOBS)
_FAST_DTYPES = {}
_FAST_DUMMIES = {}   # device index -> (int32 dummy, f32 dummy)


def _build_fast_append(key):
    """LaunchCache builder for _FAST_APPENDS: the kv_append launcher of
    (dtype, head_dim, heads_k, page size, per-batch lengths, cache batch
    index, device, PRIOR_WAIT)."""
    dtype, head_dim, heads_k, page_size, per_batch, batch_idx, device, _ = key
    return append_kernel(dtype, head_dim, heads_k, page_size, per_batch, batch_idx).launcher(device=device)


_FAST_APPENDS = LaunchCache(_build_fast_append)
_FAST_TABLE_DTYPES = {}   # torch dtype -> name, the rotary tables' (f32, f16, bf16)


def _build_fast_rotary(key):
    """LaunchCache builder for _FAST_ROTARIES: the rotary launcher of (dtype,
    table dtype, head_dim, rotary_dim, interleaved, most heads, per-batch
    lengths, device, PRIOR_WAIT)."""
    dtype, table_dtype, head_dim, rotary_dim, interleaved, heads, per_batch, device, _ = key
    return rotary_kernel(dtype, table_dtype, head_dim, rotary_dim, interleaved, heads,
                         per_batch).launcher(device=device)


_FAST_ROTARIES = LaunchCache(_build_fast_rotary)


def _fast_plans():
    """_FAST_PLANS, made on first use (tests reset it to None)."""
    global _FAST_PLANS
    if _FAST_PLANS is None:
        _FAST_PLANS = LaunchCache(_build_fast_plan)
    return _FAST_PLANS


#: Run the fast path in C++ (the torch extension _tilec_fast, where it was
#: built for this torch): the same checks, plan, buffers and launches as
#: _gpu_fast_path's Python, without the interpreter and the Python-level
#: tensor attribute reads (bench/decode_overhead.py). False: Python only.
NATIVE_FAST_PATH = True
_NATIVE = None       # the native entry, False where there is none


def _native_fast_path():
    """The native fast path's entry (cached in _NATIVE), or False: not
    built, or built for another torch (flash_attn._native_module)."""
    global _NATIVE
    if _NATIVE is None:
        from .flash_attn import _native_module

        native = _native_module()
        if native:
            native.configure(flash_decode=sys.modules[__name__])
        _NATIVE = native.decode if native else False
    return _NATIVE


def _native_counters(q, n, device, stream):
    """_counters for the native path, on q's device (a miss: made or grown)."""
    torch = sys.modules["torch"]
    return _counters(lambda size: q.new_zeros((size,), dtype=torch.int32), n, device, stream)


def _gpu_fast_path(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, causal, window_size,
                   softcap, num_splits, return_lse=True, k=None, v=None, rotary_cos=None, rotary_sin=None,
                   rotary_interleaved=True, cache_batch_idx=None, cache_leftpad=None, alibi_slopes=None):
    """The serving call in O(1): CUDA tensors of one type, f16/bf16,
    contiguous or paged, an int or int32 cache_seqlens, scale > 0, new k/v
    appended or not, rotary or not (a rotary launch first: f32, f16 or bf16
    tables of one dtype, 16-byte rows), ALiBi (f32 slopes; several query
    tokens expand them per row, as the general path), cache_batch_idx and
    cache_leftpad (int32, contiguous, contiguous caches only);
    its checks a few integer tests and no value read-back. One query token
    (decode) or several (speculative decoding, chunked prefill: q and out go
    through (batch, heads, seqlen_q, d) copies, as on the general path).
    One cache lookup of the launchers (specialized, compiled and loaded on
    the first call of a shape), two allocations, a kv_append launch for more
    than one new token (one is stored by the decode kernel), one or two for
    the attention (decode, combine).
    Returns out, or (out, lse) with return_lse, or None for anything else: the general path then
    runs it, or raises the error that names the problem. Same kernels and
    arguments as the general path, so the same bits.

    With the native module _tilec_fast (NATIVE_FAST_PATH), the same
    path runs in C++ first; it returns None for what it does not take
    (CHECK_PAGED_CAPACITY's read-back), which then runs here."""
    native = _NATIVE if NATIVE_FAST_PATH else False
    if native is None:
        native = _native_fast_path()
    if native:
        done = native(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, causal, window_size,
                      softcap, num_splits, return_lse, k, v, rotary_cos, rotary_sin, rotary_interleaved,
                      cache_batch_idx, cache_leftpad, alibi_slopes)
        if done is not None:
            return done
    torch = sys.modules["torch"]
    if not _FAST_DTYPES:
        _FAST_DTYPES.update({torch.float16: "float16", torch.bfloat16: "bfloat16"})
        _FAST_TABLE_DTYPES.update(_FAST_DTYPES)
        _FAST_TABLE_DTYPES[torch.float32] = "float32"
    kind = type(q)
    if type(k_cache) is not kind or type(v_cache) is not kind or type(window_size) not in (tuple, list) \
            or len(window_size) != 2 or type(num_splits) is not int or num_splits < 0:
        return None
    left, right = window_size
    if type(left) is not int or type(right) is not int or left < -1 or right < -1:
        return None
    dt = q.dtype
    dtype = _FAST_DTYPES.get(dt)
    if dtype is None or k_cache.dtype != dt or v_cache.dtype != dt:
        return None
    shape_q, shape_k = q.shape, k_cache.shape
    if len(shape_q) != 4 or len(shape_k) != 4 or v_cache.shape != shape_k:
        return None
    batch, seqlen_q, heads, head_dim = shape_q
    heads_k = shape_k[2]
    if (seqlen_q < 1 or shape_k[3] != head_dim or head_dim & 7 or not 8 <= head_dim <= 256
            or not (batch and heads and heads_k and shape_k[0] and shape_k[1]) or heads % heads_k):
        return None
    device = q.get_device()
    if k_cache.get_device() != device or v_cache.get_device() != device:
        return None
    if block_table is not None:
        if (type(block_table) is not kind or block_table.dtype != torch.int32 or block_table.dim() != 2
                or block_table.get_device() != device or block_table.shape[0] != batch
                or not block_table.shape[1] or block_table.stride(1) != 1 or shape_k[1] & 15):
            return None
        page_size = shape_k[1]
        capacity = block_table.shape[1] * page_size
        if cache_batch_idx is not None or cache_leftpad is not None:
            return None                       # the general path says why
    else:
        if shape_k[0] < batch and cache_batch_idx is None:
            return None
        page_size, capacity = 0, shape_k[1]
    for t in (cache_batch_idx, cache_leftpad):
        if t is not None and (type(t) is not kind or t.dtype != torch.int32 or t.dim() != 1 or t.shape[0] != batch
                              or t.get_device() != device or (batch > 1 and t.stride(0) != 1)):
            return None
    alibi_b = _fast_alibi(alibi_slopes, kind, batch, heads, device)     # stride_alibi_b
    if alibi_b is None:
        return None
    seqlen_new = 0
    if k is not None:
        if (type(k) is not kind or type(v) is not kind or k.dtype != dt or v.dtype != dt or k.dim() != 4
                or v.shape != k.shape or k.shape[0] != batch or k.shape[2] != heads_k or k.shape[3] != head_dim
                or cache_seqlens is None or k.get_device() != device or v.get_device() != device):
            return None
        skn, svn = k.stride(), v.stride()
        if (skn[3] != 1 or svn[3] != 1 or (skn[0] | skn[1] | skn[2] | svn[0] | svn[1] | svn[2]) & 7
                or (k.data_ptr() | v.data_ptr()) & 15):
            return None
        seqlen_new = k.shape[1]
    elif v is not None:
        return None
    per_batch = cache_seqlens is not None and type(cache_seqlens) is not int
    if cache_seqlens is None:
        uniform = capacity
    elif not per_batch:
        uniform = cache_seqlens
        if not 0 <= uniform <= capacity - seqlen_new:
            return None
    else:
        if (type(cache_seqlens) is not kind or cache_seqlens.dtype != torch.int32 or cache_seqlens.dim() != 1
                or cache_seqlens.shape[0] != batch or cache_seqlens.get_device() != device
                or (batch > 1 and cache_seqlens.stride(0) != 1)):
            return None
        if page_size and _check_paged(torch):
            _check_paged_capacity(cache_seqlens, seqlen_new, capacity)
        uniform = 0
    sq, sk, sv = q.stride(), k_cache.stride(), v_cache.stride()
    # Last dimension contiguous; every row 16-byte aligned (2-byte elements).
    if (sq[3] != 1 or sk[3] != 1 or sv[3] != 1
            or (sq[0] | sq[2] | sk[0] | sk[1] | sk[2] | sv[0] | sv[1] | sv[2]) & 7
            or (q.data_ptr() | k_cache.data_ptr() | v_cache.data_ptr()) & 15):
        return None
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    softcap = float(softcap)
    if not scale > 0 or not 0 <= softcap < math.inf:
        return None
    if causal:
        right = 0
    window = left >= 0 or right > 0
    rotary = rotary_cos is not None or rotary_sin is not None
    if rotary:
        if type(rotary_cos) is not kind or type(rotary_sin) is not kind or cache_seqlens is None:
            return None
        table_dtype = _FAST_TABLE_DTYPES.get(rotary_cos.dtype)
        if (table_dtype is None or rotary_sin.dtype != rotary_cos.dtype or rotary_cos.dim() != 2
                or rotary_sin.shape != rotary_cos.shape or rotary_cos.get_device() != device
                or rotary_sin.get_device() != device):
            return None
        half = rotary_cos.shape[1]
        scs, sss = rotary_cos.stride(), rotary_sin.stride()
        if (not half or half & 7 or 2 * half > head_dim or not rotary_cos.shape[0] or scs[1] != 1 or sss[1] != 1
                or (scs[0] | sss[0]) * rotary_cos.element_size() & 15
                or (rotary_cos.data_ptr() | rotary_sin.data_ptr()) & 15):
            return None
        if not per_batch and rotary_cos.shape[0] < uniform + _rotary_rows(seqlen_q, seqlen_new, left, right):
            return None                       # the general path says why
    causal_only = right == 0 and left < 0 and seqlen_q > 1   # one query token: causal alone hides no key
    fused_append = seqlen_new == 1 and FUSED_APPEND
    launch, combine, splits, grid, cgrid, fused = (_FAST_PLANS or _fast_plans())[(
        dtype, batch, seqlen_q, heads, heads_k, head_dim, capacity, page_size, num_splits, per_batch, causal_only,
        window, softcap > 0, fused_append, alibi_slopes is not None, cache_batch_idx is not None,
        cache_leftpad is not None, device, _FAST_KNOB_VALUES(globals()))]
    dummies = _FAST_DUMMIES.get(device)
    if dummies is None:
        dummies = _FAST_DUMMIES[device] = (q.new_zeros((1,), dtype=torch.int32),
                                           q.new_zeros((1,), dtype=torch.float32))
    ints, floats = dummies
    runtime = _runtime or _import_runtime()
    stream = runtime.raw_stream(device)
    if rotary:
        # q and the new k rotated into fresh (contiguous) buffers, which the
        # append and the attention then read.
        q_rot = q.new_empty(shape_q)
        k_rot = k.new_empty(k.shape) if seqlen_new else q_rot
        rkey = (dtype, table_dtype, head_dim, 2 * half, bool(rotary_interleaved), max(heads, heads_k), per_batch,
                device, PRIOR_WAIT)
        rargs, rgrid = _rotary_args(q, k if seqlen_new else q, q_rot, k_rot, rotary_cos, rotary_sin,
                                    cache_seqlens if per_batch else ints, seqlen_new, uniform,
                                    _rotary_q_step(left, right))
        runtime.launch_on(device, _FAST_ROTARIES[rkey], rargs, stream, rgrid)
        q, sq = q_rot, q_rot.stride()
        if seqlen_new:
            k, skn = k_rot, k_rot.stride()
    group = heads // heads_k
    rows = heads * seqlen_q                   # of a sequence: (head, query position)
    hd = rows * head_dim
    kd = group * seqlen_q * head_dim          # a KV head's packed rows
    # The kernel's view of q and out: (batch, heads, seqlen_q, d) rows, a KV
    # head's group of query heads' rows one after another (pack-GQA). One
    # token: q's own head stride does it, and out is (batch, 1, heads, d).
    if seqlen_q == 1:
        obuf = q.new_empty((batch, 1, heads, head_dim))
        q_rows, q_strides = q, (sq[0], group * sq[2], sq[2])
    else:
        obuf = q.new_empty((batch, heads, seqlen_q, head_dim))
        q_rows, q_strides = q.transpose(1, 2).contiguous(), (hd, kd, head_dim)
    # One f32 allocation for the partials (O, lse) and lse, each part
    # starting 64-byte aligned; lse is handed out as a view of it.
    parts = splits if splits > 1 else 0
    o_elems = parts * batch * hd
    l_at = o_elems
    lse_at = l_at + (parts * batch * rows + 15) // 16 * 16
    scratch = q.new_empty((lse_at + batch * rows,), dtype=torch.float32)
    base = scratch.data_ptr()
    finals, final_strides = (ints, floats, ints), (0, 0, 0, 0, 0)
    if parts:
        dest_o, dest_l = base, base + 4 * l_at
        o_strides = (batch * hd, hd, kd, head_dim)
        l_strides = (batch * rows, rows, group * seqlen_q)
        if fused:
            # The kernel merges into out and lse itself (FUSED).
            counters = _counters(lambda size: q.new_zeros((size,), dtype=torch.int32), grid[1] * batch,
                                 device, stream)
            finals = (obuf, base + 4 * lse_at, counters)
            final_strides = (hd, kd, head_dim, rows, group * seqlen_q)
    else:
        dest_o, dest_l = obuf, base + 4 * lse_at
        o_strides = (0, hd, kd, head_dim)
        l_strides = (0, rows, group * seqlen_q)
    news, new_strides = (q, q), (0, 0, 0, 0)
    if fused_append:
        # The decode kernel stores the token's rows itself (APPEND).
        news, new_strides = (k, v), (skn[0], skn[2], svn[0], svn[2])
    slopes, ab = floats, (0, 0)
    if alibi_slopes is not None:
        if seqlen_q == 1:   # read in place (the packed rows of KV head hk: heads hk·group + r)
            slopes, ab = alibi_slopes, (alibi_b, group)
        else:               # a slope per packed row, as the general path
            slopes, ab = _alibi_rows(alibi_slopes, batch, heads, seqlen_q), (rows, group * seqlen_q)
    args = (q_rows, k_cache, v_cache, dest_o, dest_l, cache_seqlens if per_batch else ints,
            block_table if page_size else ints, ints if cache_batch_idx is None else cache_batch_idx,
            ints if cache_leftpad is None else cache_leftpad, slopes, *finals, *news,
            group * seqlen_q, seqlen_q, uniform + seqlen_new, heads_k, batch, splits,
            left if left >= 0 else _UNBOUNDED, right if right >= 0 else _UNBOUNDED,
            capacity, shape_k[0], seqlen_new,
            *q_strides, sk[0], sk[1], sk[2], sv[0], sv[1], sv[2], *o_strides, *l_strides,
            block_table.stride(0) if page_size else 0, *ab, *final_strides, *new_strides, scale, softcap or 1.0)
    if seqlen_new and not fused_append:
        akey = (dtype, head_dim, heads_k, page_size, per_batch, cache_batch_idx is not None, device, PRIOR_WAIT)
        append = _FAST_APPENDS[akey]
        runtime.launch_on(device, append, _append_args(
            k, v, k_cache, v_cache, cache_seqlens if per_batch else None, 0 if per_batch else uniform,
            block_table if page_size else None, cache_batch_idx, capacity, ints), stream, (seqlen_new, batch, 1))
    runtime.launch_on(device, launch, args, stream, grid)
    if parts and not fused:
        runtime.launch_on(device, combine, (base, base + 4 * l_at, obuf, base + 4 * lse_at, splits, rows,
                                            batch, batch * hd, hd, head_dim, batch * rows, rows, hd,
                                            head_dim, rows), stream, cgrid)
    out = obuf if seqlen_q == 1 else obuf.transpose(1, 2).contiguous()      # (batch, seqlen_q, heads, d)
    return (out, scratch[lse_at:].view(batch, heads, seqlen_q)) if return_lse else out


_runtime = None


def _runtime_or_import():
    return _runtime or _import_runtime()


def _import_runtime():
    global _runtime
    from . import runtime

    _runtime = runtime
    return runtime


def _positions(ops, lens, rows):
    """(batch, n) positions lens[b] + rows."""
    if ops.torch:
        return lens.long().reshape(-1, 1) + rows
    return lens.astype(ops.np.int64).reshape(-1, 1) + rows


def _attend(ops, on_gpu, q, k_cache, v_cache, lens_host, per_batch, lens, seqlen_new, cache_batch_idx,
            cache_leftpad, block_table, paged, page_size, capacity, heads_k, group, scale, causal,
            window, left, right, alibi_slopes, softcap, num_splits, dtype, append=None):
    """The decode (and combine) launches; `append`: the one new token's (k,
    v), which the decode kernel stores into the cache itself (APPEND)."""
    batch, seqlen_q, heads, head_dim = q.shape
    rows_q = group * seqlen_q
    device = q.get_device() if on_gpu else "host"     # of the caller's q (q may be copied below)
    # Pack-GQA: the rows of one KV head's query heads, (head, position) order,
    # one stride apart. With one query token q's own head stride does it.
    if seqlen_q == 1 and _strides(q)[-1] == 1 and (not on_gpu or _rows_aligned(q)):
        sq = _strides(q)
        qb, qk, qr = sq[0], group * sq[2], sq[2]
    else:
        q = ops.contiguous(ops.transpose12(q))                    # (b, h, s, d)
        qb, qk, qr = heads * seqlen_q * head_dim, rows_q * head_dim, head_dim
    plan = decode_plan(batch, seqlen_q, heads, heads_k, head_dim, capacity, page_size if paged else 0,
                       num_splits, on_gpu, runtime_support.sm_count(q.device) if on_gpu else runtime_support.DEFAULT_SMS,
                       per_batch)
    m_blocks, num_splits = plan.m_blocks, plan.num_splits
    split = num_splits > 1

    obuf = ops.empty((batch, heads, seqlen_q, head_dim), dtype)
    lse = ops.empty((batch, heads, seqlen_q), "float32")
    if split:
        o_part = ops.empty((num_splits, batch, heads, seqlen_q, head_dim), "float32")
        l_part = ops.empty((num_splits, batch, heads, seqlen_q), "float32")
    else:
        o_part, l_part = obuf, lse
    dummy_i = _dummy(ops, "int32")
    seqlens_arg = lens if per_batch else dummy_i
    alibi_rows = _dummy(ops, "float32")
    ab = (0, 0)
    if alibi_slopes is not None and seqlen_q == 1 and _strides(alibi_slopes)[-1] == 1:
        # One query token: the packed rows of KV head hk are the slopes of
        # heads hk·group + r, read in place.
        alibi_rows, ab = alibi_slopes, _alibi_strides(alibi_slopes, group)
    elif alibi_slopes is not None:
        # Several: (batch, heads, seqlen_q) rows, one per packed row.
        alibi_rows, ab = _alibi_rows(alibi_slopes, batch, heads, seqlen_q), (heads * seqlen_q, rows_q)
    sk, sv = _strides(k_cache), _strides(v_cache)
    so, sl = _strides(o_part), _strides(l_part)
    if split:
        o_strides = (so[0], so[1], group * so[2], so[3])
        l_strides = (sl[0], sl[1], group * sl[2])
    else:
        o_strides = (0, so[0], group * so[1], so[2])
        l_strides = (0, sl[0], group * sl[1])
    sbt = _strides(block_table)[0] if paged else 0
    seqlen_uniform = (0 if per_batch else lens_host[0]) + seqlen_new
    fused = split and plan.fused
    if fused:
        # The kernel merges into obuf/lse itself (FUSED): rows of a KV head's
        # group one row apart, as the partials.
        sf, slf = _strides(obuf), _strides(lse)
        finals = (obuf, lse, _counters(lambda size: ops.zeros((size,), "int32"), batch * m_blocks * heads_k,
                                       device, _runtime_or_import().raw_stream(device) if on_gpu else None))
        final_strides = (sf[0], group * sf[1], sf[2], slf[0], group * slf[1])
    else:
        finals = (_dummy(ops, dtype), _dummy(ops, "float32"), dummy_i)
        final_strides = (0, 0, 0, 0, 0)
    news, new_strides = (_dummy(ops, dtype), _dummy(ops, dtype)), (0, 0, 0, 0)
    if append is not None:
        skn, svn = _strides(append[0]), _strides(append[1])
        news, new_strides = append, (skn[0], skn[2], svn[0], svn[2])
    args = (q, k_cache, v_cache, o_part, l_part, seqlens_arg,
            block_table if paged else dummy_i,
            cache_batch_idx if cache_batch_idx is not None else dummy_i,
            cache_leftpad if cache_leftpad is not None else dummy_i,
            alibi_rows, *finals, *news, rows_q, seqlen_q, seqlen_uniform, heads_k, batch, num_splits,
            left if left >= 0 else _UNBOUNDED, right if right >= 0 else _UNBOUNDED,
            capacity, k_cache.shape[0], seqlen_new,
            qb, qk, qr, sk[0], sk[1], sk[2], sv[0], sv[1], sv[2], *o_strides, *l_strides,
            sbt, ab[0], ab[1], *final_strides, *new_strides, scale, softcap or 1.0)
    kernel = decode_kernel().specialize(**plan.constexprs(
        dtype, causal=causal, window=window, alibi=alibi_slopes is not None, softcap=softcap > 0,
        paged=paged,
        per_batch=per_batch, batch_idx=cache_batch_idx is not None,
        leftpad=cache_leftpad is not None, append=append is not None))
    grid = (num_splits, m_blocks * heads_k, batch)
    _launch(kernel, args, grid, on_gpu)
    if split and not fused:
        _combine(ops, on_gpu, o_part.reshape(num_splits, batch, heads * seqlen_q, head_dim),
                 l_part.reshape(num_splits, batch, heads * seqlen_q),
                 obuf.reshape(batch, heads * seqlen_q, head_dim), lse.reshape(batch, heads * seqlen_q),
                 dtype)
    out = ops.transpose12(obuf)                                   # (b, s, h, d)
    if seqlen_q > 1:
        out = ops.contiguous(out)
    elif not ops.torch:
        out = out.reshape(batch, 1, heads, head_dim)
    return out, lse


def _alibi_rows(slopes, batch, heads, seqlen_q):
    """(heads,) or (batch, heads) slopes as a contiguous (batch, heads,
    seqlen_q) f32 array: the decode kernel's slope per packed row where a
    KV head's rows are (head, query position) pairs (several query tokens)."""
    a = slopes if len(slopes.shape) == 2 else slopes.reshape(1, heads)
    if _is_torch(slopes):
        return a.expand(batch, heads)[:, :, None].expand(batch, heads, seqlen_q).contiguous()
    import numpy as np

    return np.ascontiguousarray(np.broadcast_to(a.reshape(-1, heads, 1), (batch, heads, seqlen_q))).astype("float32")


def _alibi_strides(slopes, group):
    """The decode kernel's (stride_ab, stride_ak) reading (heads,) or
    (batch, heads) slopes (last dimension contiguous) as one query token's
    packed rows."""
    return (_strides(slopes)[0] if len(slopes.shape) == 2 else 0), group


def append_kernel(dtype, head_dim, heads_k, page_size, per_batch, batch_idx):
    """The kv_append specialization for these features."""
    tdt = {"float16": tl.float16, "bfloat16": tl.bfloat16}[dtype]
    return _load_kernel("flash_decode").kv_append.specialize(
        DTYPE=tdt, HEAD_DIM=head_dim, HEADS_K=1 << (heads_k - 1).bit_length(), PAGED=page_size > 0,
        PAGE_SIZE=page_size or 64, PER_BATCH=bool(per_batch), BATCH_IDX=bool(batch_idx),
        NUM_WARPS=4, **({"PRIOR_WAIT": True} if PRIOR_WAIT else {}))


def _append_args(k, v, k_cache, v_cache, lens, uniform, block_table, cache_batch_idx, capacity, dummy):
    """kv_append's arguments (k/v rows contiguous in their last dimension)."""
    batch, seqlen_new, heads_k, _ = k.shape
    sn, svn, sk, sv = _strides(k), _strides(v), _strides(k_cache), _strides(v_cache)
    return (k, v, k_cache, v_cache, lens if lens is not None else dummy,
            block_table if block_table is not None else dummy,
            cache_batch_idx if cache_batch_idx is not None else dummy,
            seqlen_new, batch, heads_k, uniform, capacity, k_cache.shape[0],
            sn[0], sn[1], sn[2], svn[0], svn[1], svn[2], sk[0], sk[1], sk[2], sv[0], sv[1], sv[2],
            _strides(block_table)[0] if block_table is not None else 0)


def _rows_ready(ops, on_gpu, t):
    """t, or a contiguous copy where its rows are not contiguous (or, on
    CUDA, not 16-byte aligned): the kernels read new keys and values as
    16-byte vectors."""
    if _strides(t)[-1] != 1 or (on_gpu and not _rows_aligned(t)):
        return ops.contiguous(t)
    return t


def _append(ops, on_gpu, k, v, k_cache, v_cache, lens, uniform, block_table, cache_batch_idx, page_size,
            capacity, dtype):
    """k, v (batch, seqlen_new, heads_k, d) into the cache at cache_seqlens +
    i, in place, by the kv_append kernel."""
    batch, seqlen_new, heads_k, head_dim = k.shape
    k, v = _rows_ready(ops, on_gpu, k), _rows_ready(ops, on_gpu, v)
    kernel = append_kernel(dtype, head_dim, heads_k, page_size, lens is not None, cache_batch_idx is not None)
    args = _append_args(k, v, k_cache, v_cache, lens, uniform, block_table, cache_batch_idx, capacity,
                        _dummy(ops, "int32"))
    _launch(kernel, args, (seqlen_new, batch, 1), on_gpu)


def _combine(ops, on_gpu, o_part, l_part, out, lse, dtype):
    """Merges o_part (splits, outer, rows, d) f32, l_part (splits, outer, rows)
    into out (outer, rows, d) and lse (outer, rows); rows of lse contiguous."""
    splits, outer, rows, head_dim = o_part.shape
    so, sl, sout, slse = (_strides(t) for t in (o_part, l_part, out, lse))
    if sl[2] != 1 or slse[1] != 1:
        raise TilecValueError("flash_attn_combine: lse rows must be contiguous")
    consts = combine_constexprs(dtype, head_dim)
    kernel = combine_kernel().specialize(**consts)
    args = (o_part, l_part, out, lse, splits, rows, outer, so[0], so[1], so[2], sl[0], sl[1],
            sout[0], sout[1], slse[0])
    _launch(kernel, args, combine_grid(rows, outer, head_dim), on_gpu)


def _launch(kernel, args, grid, on_gpu):
    """Launches on the GPU, or runs on the CPU runner over numpy views
    (sharing memory, so outputs and the cache are written in place) of torch
    CPU tensors; bf16 as uint16 bit patterns."""
    if on_gpu:
        kernel(*args)
        return
    cpu = []
    for a in args:
        if _is_torch(a):
            import torch

            a = a.detach()
            a = a.view(torch.int16).numpy().view("uint16") if a.dtype == torch.bfloat16 else a.numpy()
        cpu.append(a)
    kernel.run_cpu(*cpu, grid=grid)


# The combine kernel: (SPLITS_TILE, D_TILE) of flash_combine_chunks (one
# warp per (row, D_TILE features), partial outputs read split by split along
# their contiguous features), or None for flash_combine (four warps per row,
# a (d, 64 splits) tile read a split stride apart). A module setting so that
# bench/tune_decode.py --combine can compare them.
COMBINE_TILE = (64, 32)


def combine_constexprs(dtype, head_dim):
    """The combine kernel's constexprs for an output dtype and head_dim."""
    dt = {"float32": tl.float32, "float16": tl.float16, "bfloat16": tl.bfloat16}[dtype]
    early = {"PRIOR_WAIT": True} if PRIOR_WAIT else {}
    if COMBINE_TILE is None:
        return dict(DTYPE=dt, HEAD_DIM=head_dim, SPLITS_TILE=64, NUM_WARPS=4, **early)
    return dict(DTYPE=dt, HEAD_DIM=head_dim, SPLITS_TILE=COMBINE_TILE[0], D_TILE=COMBINE_TILE[1], NUM_WARPS=1,
                **early)


def combine_grid(rows, outer, head_dim):
    """The combine kernel's grid: a program per row (and D_TILE features)."""
    return (rows, outer, 1 if COMBINE_TILE is None else -(-head_dim // COMBINE_TILE[1]))


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None):
    """FlashAttention-3's combine: out_partial (splits, batch, seqlen, heads,
    d) f32 and lse_partial (splits, batch, seqlen, heads) f32, each split's
    attention over its share of the keys, merge into out (batch, seqlen,
    heads, d) (dtype out_dtype, default f32, or that of `out`, written in
    place) and lse (batch, seqlen, heads) f32: lse = log Σ exp(lse_i), out =
    Σ exp(lse_i − lse)·out_i. A row with every lse_i = −inf gets out 0 and
    lse +inf. Returns (out, lse)."""
    on_gpu = _is_torch(out_partial) and out_partial.device.type == "cuda"
    what = "flash_attn_combine"
    if not hasattr(out_partial, "shape") or len(out_partial.shape) != 5:
        raise TilecValueError(f"{what}: 'out_partial' must have rank 5 (splits, batch, seqlen, "
                              f"heads, d), got shape {tuple(getattr(out_partial, 'shape', ()))}")
    splits, batch, seqlen, heads, head_dim = out_partial.shape
    if tuple(lse_partial.shape) != (splits, batch, seqlen, heads):
        raise TilecValueError(f"{what}: 'lse_partial' has shape {tuple(lse_partial.shape)}, "
                              f"expected {(splits, batch, seqlen, heads)}")
    for name, t in (("out_partial", out_partial), ("lse_partial", lse_partial)):
        if _dtype_name(t) != "float32":
            raise TilecTypeError(f"{what}: '{name}' must be float32, got {_dtype_name(t)}")
        if _is_torch(t) != _is_torch(out_partial) or (on_gpu and t.device != out_partial.device):
            raise TilecTypeError(f"{what}: '{name}' must be on the same device and kind as "
                                 "'out_partial'")
    if splits == 0:
        raise TilecValueError(f"{what}: no splits to combine")
    if head_dim % 4 or not 4 <= head_dim <= 256:
        raise TilecValueError(f"{what}: head_dim {head_dim} is not supported (a multiple of 4 up "
                              "to 256)")
    if out_dtype is None:
        out_dtype = _dtype_name(out) if out is not None else "float32"
    out_dtype = str(out_dtype).replace("torch.", "")
    allowed = ("float32", "float16", "bfloat16") if on_gpu else ("float32", "float16")
    if out_dtype not in allowed:
        raise TilecTypeError(f"{what}: out_dtype must be one of {allowed}, got {out_dtype}")
    op, lp, out_np = out_partial, lse_partial, out
    ops = _Arrays(op)
    # Rows (seqlen, heads) flatten when each is contiguous over the next.
    op = op if _flattens(op, 2) else ops.contiguous(op)
    lp = lp if _flattens(lp, 2) and _strides(lp)[-1] == 1 else ops.contiguous(lp)
    if out_np is not None:
        if tuple(out_np.shape) != (batch, seqlen, heads, head_dim) or _dtype_name(out_np) != out_dtype:
            raise TilecValueError(f"{what}: 'out' must be {out_dtype} of shape "
                                  f"{(batch, seqlen, heads, head_dim)}, got {_dtype_name(out_np)} "
                                  f"{tuple(out_np.shape)}")
        if not _flattens(out_np, 1):
            raise TilecValueError(f"{what}: 'out' must have its seqlen and heads dimensions "
                                  f"contiguous (strides {_strides(out_np)})")
        dest = out_np
    else:
        dest = ops.empty((batch, seqlen, heads, head_dim), out_dtype)
    lse = ops.empty((batch, seqlen, heads), "float32")
    _combine(ops, on_gpu, op.reshape(splits, batch, seqlen * heads, head_dim),
             lp.reshape(splits, batch, seqlen * heads), _flat_rows(dest, batch, seqlen * heads, head_dim),
             lse.reshape(batch, seqlen * heads), out_dtype)
    return (out if out is not None else dest), lse


def _flattens(t, dim):
    """Dimensions dim and dim+1 of t merge into one strided dimension."""
    s = _strides(t)
    return s[dim] == s[dim + 1] * t.shape[dim + 1] and s[-1] == 1


def _flat_rows(t, outer, rows, d):
    """t (outer, a, b, d) as (outer, a·b, d) sharing memory."""
    if _is_torch(t):
        return t.view(outer, rows, d) if t.is_contiguous() else t.as_strided(
            (outer, rows, d), (t.stride(0), t.stride(2), 1))
    import numpy as np

    return np.lib.stride_tricks.as_strided(t, (outer, rows, d), (t.strides[0], t.strides[2], t.itemsize))


_kernels = {}


def _load_kernel(name):
    """The module of kernels/<name>.py."""
    return kernel_files.load(name)


def decode_kernel():
    """The @tilec.jit decode kernel (kernels/flash_decode.py)."""
    if "decode" not in _kernels:
        _kernels["decode"] = _load_kernel("flash_decode").flash_decode
    return _kernels["decode"]


def combine_kernel():
    """The @tilec.jit combine kernel (kernels/flash_combine.py)."""
    name = "flash_combine" if COMBINE_TILE is None else "flash_combine_chunks"
    if name not in _kernels:
        _kernels[name] = getattr(_load_kernel("flash_combine"), name)
    return _kernels[name]
