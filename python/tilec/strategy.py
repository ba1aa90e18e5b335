"""Strategy selection for the flash-attention kernels, kept apart from the
lowering: block sizes and warps per (arch, head_dim, dtype, causal).

The compiler lowers whatever configuration it is given (BLOCK_M rows split
over NUM_WARPS warps, 16 * k rows each; BLOCK_N keys per iteration); this
table says which one to use. Winners come from a tuning run:

    scripts/build_artifacts.py --tune        # every CANDIDATES config, here
    bench/gpu.sh with TILEC_TUNE=1           # times them on the GPU

and the measured numbers are recorded in bench/RESULTS.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .language import constexpr_function

COPY_BOUNDS = ("row", "tile", "chunk")
# Warps per program: a power of two up to 16 (tile-partition-warps; the C++
# side refuses other values too). Pipeline stages: 1 or 2 (tile-pipeline).
MAX_WARPS = 16
NUM_STAGES = (1, 2)


def _integer(value, what):
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{what} must be an int, got {value!r}")
    return value.__index__()


def check_num_warps(value, what="num_warps"):
    """`value` as an int if it is a valid number of warps, else a ValueError
    (TypeError for a non-integer) that names it and the allowed values."""
    n = _integer(value, what)
    if n < 1 or n > MAX_WARPS or n & (n - 1):
        raise ValueError(f"{what} must be a power of two in [1, {MAX_WARPS}], got {value!r}")
    return n


def check_num_stages(value, what="num_stages"):
    n = _integer(value, what)
    if n not in NUM_STAGES:
        raise ValueError(f"{what} must be 1 (one shared buffer per K/V tile) or 2 (a ring), "
                         f"got {value!r}")
    return n


def check_flag(value, what):
    if not isinstance(value, bool) and value not in (0, 1):
        raise TypeError(f"{what} must be a bool, got {value!r}")
    return bool(value)


def check_copy_bounds(value, what="copy_bounds"):
    if value not in COPY_BOUNDS:
        raise ValueError(f"{what} must be one of {COPY_BOUNDS}, got {value!r}")
    return value


@dataclass(frozen=True)
class Strategy:
    """The strategy record: every knob that chooses how a kernel is lowered
    (beyond the block sizes, which are the kernel's constexprs), with its
    default -- the one place Python spells them. The C++ twin is
    include/tilec/Strategy.h (test_strategy.py checks the defaults agree);
    the compiled kernel's manifest carries it as "strategy". `key()` is its
    one canonical form: it keys the compile cache and prebuilt digests."""

    num_warps: int = 4          # warps per program
    num_stages: int = 2         # shared buffers per K/V tile (tile-pipeline stages)
    smem_epilogue: bool = True  # O leaves through shared memory, 16-byte chunks
    copy_bounds: str = "row"    # how K/V copies respect the view's bounds (COPY_BOUNDS)
    # More tile-to-nvvm options for an experiment ("skip-unit-rescale=true").
    lowering_options: str = ""

    def checked(self, what=""):
        """This record with each field checked (ValueError/TypeError naming
        it, prefixed by `what`) and normalized (ints, bools)."""
        p = f"{what}: " if what else ""
        if "copy-bounds=" in self.lowering_options:
            raise ValueError("pass the copy-bounds mode as copy_bounds=, not in lowering_options "
                             f"({self.lowering_options!r})")
        return Strategy(check_num_warps(self.num_warps, p + "num_warps"),
                        check_num_stages(self.num_stages, p + "num_stages"),
                        check_flag(self.smem_epilogue, p + "smem_epilogue"),
                        check_copy_bounds(self.copy_bounds, p + "copy_bounds"),
                        " ".join(self.lowering_options.split()))

    def key(self):
        """The canonical text of the record: part of a prebuilt artifact's
        digest and of the compile cache's key, so that two builds of the same
        IR (the tuner's configurations) are told apart."""
        return (f"num_warps={int(self.num_warps)} num_stages={int(self.num_stages)} "
                f"smem_epilogue={bool(self.smem_epilogue)} copy_bounds={self.copy_bounds} "
                f"{self.lowering_options}").strip()

    def replace(self, **changes):
        """A copy with `changes`; a None value keeps this record's field."""
        import dataclasses

        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


# The forward's head-dim split (kernels/flash_fwd.py). Tiles have
# power-of-two widths; a head dim that is not one is computed as a few
# power-of-two column pieces instead of one padded tile (d96 as 64 + 32, not
# 128: QKᵀ's k-dim and P·V's n-dim lose nothing to padding).
HEAD_DIM_PIECE_MIN = 16     # an mma k-step: narrower pieces round up to it
HEAD_DIM_PIECES_MAX = 3     # more pieces than this (d240 = 128+64+32+16): one padded tile


@constexpr_function
def head_dim_pieces(head_dim):
    """The (column offset, width) pieces a forward kernel of this head dim
    computes, widest first: head_dim rounded up to a multiple of 16, split
    into its powers of two (96 -> (0, 64), (64, 32); 80 -> 64 + 16; 192 ->
    128 + 64; 224 -> 128 + 64 + 32). A power of two (or a head dim that
    rounds up to one: 59 -> 64, 120 -> 128) is one piece, today's padded
    tile; so is a split of more than HEAD_DIM_PIECES_MAX pieces (240). The
    view's bounds zero-fill the columns of the last piece past head_dim."""
    head_dim = int(head_dim)
    if head_dim < 1:
        raise ValueError(f"head_dim must be positive, got {head_dim}")
    width = -(-max(head_dim, HEAD_DIM_PIECE_MIN) // HEAD_DIM_PIECE_MIN) * HEAD_DIM_PIECE_MIN
    pieces, col = [], 0
    w = 1 << (width.bit_length() - 1)
    while col < width:
        if width - col >= w:
            pieces.append((col, w))
            col += w
        w //= 2
    if len(pieces) > HEAD_DIM_PIECES_MAX:
        return ((0, tile_width(width)),)
    return tuple(pieces)


@constexpr_function
def dot_warps_n(m, n, num_warps, warps_n):
    """The warps_n (tile.dot's warp grid: num_warps / warps_n warp rows x
    warps_n warp columns) an m x n dot runs on: `warps_n` when m splits into
    16-row blocks over the warp rows and n into 8-column blocks over the warp
    columns, else the nearest power of two that does (a narrow head-dim
    piece: the fused kernel's dQᵀ of d96's 32-row piece on 8 warps takes a
    2 x 4 grid where the 64-row piece takes 4 x 2). ValueError if none does."""
    m, n, num_warps, warps_n = int(m), int(n), int(num_warps), int(warps_n)
    cands = [1 << i for i in range(num_warps.bit_length()) if num_warps % (1 << i) == 0]
    cands.sort(key=lambda c: (abs(c.bit_length() - warps_n.bit_length()), -c))
    for c in cands:
        if m % (16 * (num_warps // c)) == 0 and n % (8 * c) == 0:
            return c
    raise ValueError(f"no warp grid of {num_warps} warps places a {m} x {n} dot (16-row blocks "
                     "over warp rows, 8-column blocks over warp columns)")


@constexpr_function
def bwd_head_dim_pieces(head_dim, split_d=1, num_warps=4, block_n=64, warps_n=1, block_m=0,
                        dq_warps_n=1):
    """The head-dim pieces (column offset, width) of a backward kernel
    (kernels/flash_bwd.py): head_dim_pieces, as the forward, unless
    - split_d > 1 (the head_dim split over programs: program_id(2) owns a
      run-time column range of the accumulators): one padded tile, as before;
    - a piece's dK/dV dot (block_n key rows x its width, on warps_n warp
      columns) or, for the fused kernel (block_m > 0), its dQᵀ dot (its width
      in head-dim rows x block_m queries, dq_warps_n) has no warp grid
      (dot_warps_n): one padded tile (e.g. d40 = 32 + 16 at the default
      fused blocks, 16 queries: a 16-row piece over 4 warps needs 4 warp
      columns of 8 queries).
    The fused kernel's blocked dq_accum has the pieces' total rows per block
    (flash_bwd._dq_accum_rows): head_dim rounded up to 16, or the tile width."""
    d = tile_width(head_dim)
    if int(split_d) > 1:
        return ((0, d),)
    pieces = head_dim_pieces(head_dim)
    if len(pieces) > 1:
        try:
            for _, w in pieces:
                dot_warps_n(block_n, w, num_warps, warps_n)
                if block_m:
                    dot_warps_n(w, block_m, num_warps, dq_warps_n)
        except ValueError:
            return ((0, d),)
    return pieces


_D = Strategy()


@dataclass(frozen=True)
class FlashConfig:
    """Block sizes plus the strategy record's fields (defaults: Strategy's)."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int = _D.num_stages
    smem_epilogue: bool = _D.smem_epilogue
    copy_bounds: str = _D.copy_bounds
    # More tile-to-nvvm options: the tuner's experiments, and the causal
    # window kernels' warp-blocks=true (flash_fwd_config). A kernel given a config
    # with options must declare the LOWERING_OPTIONS constexpr (flash_fwd does).
    lowering_options: str = _D.lowering_options

    @property
    def strategy(self):
        return Strategy(self.num_warps, self.num_stages, self.smem_epilogue, self.copy_bounds,
                        self.lowering_options)

    @property
    def tag(self):
        """e.g. m128n64w4s2e: blocks 128x64, 4 warps, 2 stages, O stored
        through shared memory (no trailing e: stored from registers); an
        experiment's options follow as -name (skip-unit-rescale=true ->
        -skip-unit-rescale)."""
        extra = "".join("-" + opt.replace("=true", "").replace("=", "-")
                        for opt in self.lowering_options.split())
        bounds = "" if self.copy_bounds == _D.copy_bounds else f"-copy-bounds-{self.copy_bounds}"
        return (f"m{self.block_m}n{self.block_n}w{self.num_warps}s{self.num_stages}"
                + ("e" if self.smem_epilogue else "") + bounds + extra)

    def __post_init__(self):
        check_copy_bounds(self.copy_bounds)

    def valid(self):
        """Split-Q gives every warp whole m16 row tiles."""
        return self.block_m % (16 * self.num_warps) == 0 and self.block_n % 16 == 0

    def constexprs(self):
        return {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "NUM_WARPS": self.num_warps,
                "NUM_STAGES": self.num_stages, "SMEM_EPILOGUE": self.smem_epilogue,
                "COPY_BOUNDS": self.copy_bounds,
                **({"LOWERING_OPTIONS": self.lowering_options} if self.lowering_options else {})}


# What the tuner may try. Registers bound the choice: each warp holds its
# rows of O (head_dim wide), S (BLOCK_N wide) and Q in registers.
CANDIDATES = (
    FlashConfig(128, 64, 4, 2, True),
    FlashConfig(128, 64, 4, 2, False),
    FlashConfig(128, 64, 4, 1, True),
    FlashConfig(64, 64, 4, 2, True),
    FlashConfig(128, 32, 4, 2, False),
    FlashConfig(128, 128, 8, 2, True),
    FlashConfig(128, 128, 8, 2, False),
    # Measured 2026-11-29 11:04 (bench/RESULTS.md): the O rescale skipped in
    # warps whose factors are all 1. Mixed: +2-4% for causal head_dim 128 on
    # 128x64 blocks, -5..-11% elsewhere (8 warps, non-causal).
    FlashConfig(128, 64, 4, 2, False, lowering_options="skip-unit-rescale=true"),
    FlashConfig(128, 64, 4, 2, True, lowering_options="skip-unit-rescale=true"),
    FlashConfig(128, 128, 8, 2, True, lowering_options="skip-unit-rescale=true"),
    # A/B of how copies respect the view's bounds (copy-bounds; the default
    # 'row' sizes each chunk 16 or 0 by its row, without a branch): 'tile'
    # branches once per tile to unchecked or checked copies, 'chunk' checks
    # and clamps every chunk (the code before 2026-11-29).
    FlashConfig(128, 64, 4, 2, False, copy_bounds="tile"),
    FlashConfig(128, 64, 4, 2, False, copy_bounds="chunk"),
    FlashConfig(128, 64, 4, 2, True, copy_bounds="tile"),
    FlashConfig(128, 64, 4, 2, True, copy_bounds="chunk"),
    FlashConfig(128, 128, 8, 2, True, copy_bounds="chunk"),
    FlashConfig(128, 128, 8, 2, True, copy_bounds="tile"),
    # O stored straight from registers as 4-byte stores (store-transpose off;
    # it is on by default since 2026-11-29, see TABLE), for the A/B.
    FlashConfig(128, 64, 4, 2, False, copy_bounds="chunk", lowering_options="store-transpose=false"),
    FlashConfig(128, 64, 4, 2, False, lowering_options="store-transpose=false"),
    # The O rescale done every iteration (lazy-rescale off; it is on by
    # default since 2026-11-29 12:30, see TABLE), for the A/B.
    FlashConfig(128, 64, 4, 2, False, lowering_options="lazy-rescale=false"),
    # The K/V ring's ldmatrix bases kept loop-invariant (carry-ring-addresses
    # off; it is on by default since 2026-11-29 Session 5, see TABLE), for the
    # A/B: 3-5 local-memory reloads per d128 iteration, causal up to 2.5% faster.
    FlashConfig(128, 64, 4, 2, False, lowering_options="carry-ring-addresses=false"),
    # Every carried ring tile's swizzle phases XOR-derived (K too; the default
    # derives V's only): no local memory on sm_80, but the sm_90 JIT's causal
    # hot loop spills (9 LDL/STL) and it measured 1-3% slower causal.
    FlashConfig(128, 64, 4, 2, False, lowering_options="xor-ring-phases=all"),
    # 8 warps of 16 rows over 64-key blocks: tried for the head_dim-128
    # variants (windows, softcap, ALiBi); 12-23% slower than the table's
    # (bench/tune_variants.py, 2026-12-01).
    FlashConfig(128, 64, 8, 2, True),
)

DEFAULT = FlashConfig(64, 64, _D.num_warps)

# (arch, head_dim, causal) -> config. Measured on an H200 with the sm_80 code
# path; see bench/RESULTS.md for the tuning runs behind each entry
# (2026-11-29): 128x64 blocks over 4 warps (32 rows each) win at both head
# dims; at 128 the layout pass then keeps Q in shared memory (registers would
# not hold Q, O and S), as FlashAttention-2 does. The two-buffer ring
# (stages=2) beat one buffer by 3-6%. Storing O through shared memory won 1-4%
# at head_dim 64 and lost 2-9% at 128, where the kernel sits at ptxas's
# 255-register limit and the epilogue's registers cost spills inside the
# loop. Causal head_dim 128 was the exception until store-transpose:
# 128x128 blocks over 8 warps (16 rows each, no spills, one CTA per SM) led
# at 2k-16k (bench/RESULTS.md, 10:05 UTC); it still leads at 16k causal.
# 256-row blocks over 8 warps lost 6-21% (Session 4).
# How the K/V copies respect the view's bounds (copy_bounds) was measured
# per variant on 2026-11-29 (bench/RESULTS.md, Session 3): the default
# 'row' (no branch) is as fast as the others at head_dim 64; the non-causal
# head_dim-128 kernel, at ptxas's 255-register limit, is 1-2% faster with
# 'chunk' (the per-chunk checks; 'tile''s branch cost it 2%); the 8-warp
# causal one is 1-3% faster with 'tile'.
# Since store-transpose (O leaves registers as 16-byte stores after lane
# shuffles, the default since 2026-11-29 12:20) the direct-store 128x64 kernels
# win at head_dim 128 (bench/RESULTS.md, Session 4): non-causal with 'row'
# (+7% at 512, +2% at 2k, level at 16k against the 'chunk' entry before),
# causal with 'chunk' (+15% at 512, +7% at 2k, +4% at 4k, level at 8k and
# 3-7% behind the 8-warp kernel at 16k, still ahead of FA2 there).
# Lazy rescale (tile-lazy-rescale plus the warp-uniform skip of O's
# multiply, on by default where O holds >= 128 registers per thread, i.e.
# both head_dim-128 entries) measured +5-7% non-causal and +4-7% causal
# (Session 4, 12:27 and the 12:36 run); with it the causal kernel is fastest with 'row'.
# Head dims without an entry of their own take the entry of their tile width
# (tile_width: the power of two the kernel's tiles are padded to; d96 runs
# 128-wide tiles, so d128's blocks), and an "sm_90" entry (Hopper: 227 KB of
# shared memory per block) wins over the "sm_80" one when the kernel is
# compiled for sm_90/sm_90a (table_lookup). Measured on the H200, bf16, 16k
# tokens, seqlen 4k, public API, same run as FA2 (bench/bench_head_dims.py,
# bench/RESULTS.md session 12 run 1; TFLOP/s over the true head dim,
# non-causal / causal):
# - width 32 (d32): 128x128 over 4 warps 222 / 208 (128x32 221 / 204, 128x64
#   212 / 203, DEFAULT's 64x64 186 / 177; FA2 218 / 201);
# - d96 (width 128) on d128's 128x64 4-warp entry: 291 / 256 (DEFAULT 201 /
#   206; FA2 342 / 306: the padded columns are a third of the matmuls).
# - d96 (head-dim pieces 64 + 32, kernels/flash_fwd.py) on 128x64 over 4
#   warps with O stored through shared memory (the epilogue keeps the
#   pieces' spills out of the loop): 320 / 289 (registers: 309 / 272; 8 warps
#   260 / 236; FA2 333 / 307) (session 12 run 2);
# - width 256: 128x64 over 8 warps. d256 at s2 (192 KB of shared memory:
#   Hopper's entry) 308 / 264, s1 (128 KB, sm_80's) 302 / 257, 128x32 s2 271
#   / 235, 64x32 over 4 warps 293 / 264; FA2 325 / 282. d192 (pieces 128 +
#   64) s2 313 / 273, s1 302 / 265; FA2 319 / 275 (session 12 run 2).
TABLE = {
    ("sm_80", 32, False): FlashConfig(128, 128, 4, 2, False),
    ("sm_80", 32, True): FlashConfig(128, 128, 4, 2, False),
    ("sm_80", 96, False): FlashConfig(128, 64, 4, 2, True),
    # d96 causal: 289 TFLOP/s in session 12, 253-267 in session 15 (0.87x
    # FA2): ptxas (sm_90, session 15) now spills 88 + 152 bytes here, 13 and
    # 15 LDL per iteration in its two K/V loops (non-causal: none; the same
    # with longest_first removed: 10 and 10). Loops without spills, timed in
    # session 16 run 5 (2k / 4k / 8k, this entry 266 / 268 / 278):
    # m128n64w4s1e 266 / 271 / 282, m128n128w8s2e 229 / 243 / 254,
    # m128n32w4s2e 247 / 249 / 259, m64n64w4s2e 245 / 257 / 265: the spills
    # cost <= 1%; the gap to FA2 (283 / 306 / 317) is elsewhere.
    ("sm_80", 96, True): FlashConfig(128, 64, 4, 2, True),
    ("sm_80", 256, False): FlashConfig(128, 64, 8, 1, False),
    ("sm_80", 256, True): FlashConfig(128, 64, 8, 1, False),
    ("sm_90", 256, False): FlashConfig(128, 64, 8, 2, False),
    ("sm_90", 256, True): FlashConfig(128, 64, 8, 2, False),
    ("sm_80", 64, False): FlashConfig(128, 64, 4, 2, True),
    ("sm_80", 64, True): FlashConfig(128, 64, 4, 2, True),
    ("sm_80", 128, False): FlashConfig(128, 64, 4, 2, False),
    ("sm_80", 128, True): FlashConfig(128, 64, 4, 2, False),
}


def tile_width(head_dim):
    """The width of the kernels' head-dim tiles: head_dim rounded up to a
    power of two, at least 16 (kernels/flash_fwd.py's D; the view's bounds
    zero the padding)."""
    return max(16, 1 << (int(head_dim) - 1).bit_length())


def arch_family(arch):
    """The tables' arch key: "sm_90" for sm_90 and sm_90a (227 KB of shared
    memory per block), "sm_80" for everything else (its entries fit sm_80's
    163 KB)."""
    return "sm_90" if str(arch).startswith("sm_90") else "sm_80"


def table_lookup(table, arch, head_dim, *rest):
    """table's entry for (arch, head_dim, *rest): the head dim's own entry,
    else its tile width's; at each, the arch family's entry before sm_80's.
    None if neither has one."""
    families = dict.fromkeys((arch_family(arch), "sm_80"))
    for d in dict.fromkeys((int(head_dim), tile_width(head_dim))):
        for family in families:
            hit = table.get((family, d, *rest))
            if hit is not None:
                return hit
    return None


# Variants with more live values per score than the dense kernels (WINDOW's
# two bounds, SOFTCAP's tanh, ALIBI's bias): (arch, head_dim) -> a config that
# overrides TABLE's for them. Empty: on 2026-12-01 (bench/tune_variants.py,
# bench/RESULTS.md run 23) TABLE's 4-warp 128x64 kernels beat every other
# candidate for window, softcap and ALiBi, causal and not, at head_dim 128 --
# by 12-23% over the 8-warp 128x64 config chosen before from ptxas's spill
# report (the 4-warp one spills 24-252 bytes of stores+loads with them, ptxas 13.0; the spills cost less
# than halving the rows per warp). With TABLE's config every variant runs
# within ~10% of the dense kernel of its shape.
VARIANT_TABLE = {}

# Windows: (arch, head_dim) -> a config that overrides both tables for a
# window (causal or not). A block of M rows spans w + M keys of a window of
# w, so halving the rows per CTA cuts the masked waste where w is small
# (blocks of 64 rows over 2 warps keep TABLE's 32 rows per warp). Measured
# on the H200 at head_dim 64, bf16, tune_variants (ms, m64n64w2s2 / TABLE's
# m128n64w4s2 with the window's lowering options), same run:
# - window (256, 256) s4k: 0.151 / 0.162 (session 10 run 9), 0.145 / 0.161
#   (session 11 run 10);
# - causal window 1024 s8k: 0.238 / 0.243 (session 11 run 10).
# At head_dim 128 TABLE's blocks won every window candidate (run 23).
WINDOW_TABLE = {
    ("sm_80", 64): FlashConfig(64, 64, 2, 2, False),
}


# The tables' entries take no lowering options (those are experiments, for
# the tuner); flash_fwd_config adds the window kernels' own below.
assert not any(c.lowering_options for c in TABLE.values()), "TABLE entries take no lowering_options"
assert not any(c.lowering_options for c in VARIANT_TABLE.values())
assert not any(c.lowering_options for c in WINDOW_TABLE.values())

# Windows: in a masked K/V block a warp whose 32 rows see none of its keys
# skips its compute, and in the diagonal blocks a warp whose rows all lie
# inside the window's left edge tests the other bound only
# (tile-skip-warp-blocks; bf16 d128 sm_90a causal window: the diagonal loop's
# path 1203 -> 1113 SASS instructions, an empty warp's 127, and no spills
# where the kernel without it spills 28/72 bytes). Measured on the H200,
# tune_variants, bf16, same-run A/B (ms, on / off):
# - causal window 1024 s8k d128: 0.417 / 0.439 (2026-12-01 session 9 run 6),
#   0.420 / 0.442 (session 10 run 8; FlexAttention 0.436);
# - window (256, 256) s4k d128: 0.264 / 0.273 (session 10 run 8), although
#   ptxas spills more in its unmasked loop (3 LDL + 2 STL per iteration, was
#   1 LDL);
# - window (256, 256) s4k d64: 0.167 / 0.162 (session 10 run 9; 28/36 bytes
#   of spills where the kernel without has none), so non-causal windows at
#   head dims of 64 and less keep their code.
# Dense and causal kernels keep their code (their PTX is the digests').
NONCAUSAL_WINDOW_MIN_HEAD_DIM = 65
WINDOW_LOWERING_OPTIONS = "warp-blocks=true"


# Dropout regenerates a Philox number per element of P (10 rounds, 4 live
# words): the table's 128x64 blocks (64 elements per thread) spilled 1.5-3.8 KB
# at d64/d128 (ptxas sm_80, 2026-12-01); 64x64 over 4 warps spills none.
DROPOUT_BLOCKS = (64, 64, 4)


def flash_fwd_config(arch="sm_80", dtype=None, head_dim=128, causal=False, window=False,
                     softcap=False, alibi=False, dropout=False):
    """The configuration to compile flash_fwd with for `arch` (the arch the
    kernel is compiled for; dtype does not change the choice today; it is an
    argument so it can). The dense kernels (causal or not) come from TABLE;
    with a window WINDOW_TABLE's entry for the head dim wins, then (window,
    softcap or ALiBi) VARIANT_TABLE's, where there is one; each looked up by
    table_lookup (the head dim, else its tile width)."""
    # Every arch runs the mma.sync (sm_80) code path today; the arch picks
    # entries by shared memory (table_lookup).
    config = None
    if window:
        config = table_lookup(WINDOW_TABLE, arch, head_dim)
    if config is None and (window or softcap or alibi):
        config = table_lookup(VARIANT_TABLE, arch, head_dim)
    if config is None:
        config = table_lookup(TABLE, arch, head_dim, bool(causal)) or DEFAULT
    if dropout and int(head_dim) <= 128:
        bm, bn, nw = DROPOUT_BLOCKS
        config = replace(config, block_m=bm, block_n=bn, num_warps=nw)
    return with_mask_options(config, causal, window, head_dim)


def with_mask_options(config, causal, window, head_dim):
    """`config` with the lowering options its mask takes (a causal window,
    or a window without causal at head dims of NONCAUSAL_WINDOW_MIN_HEAD_DIM
    and more: WINDOW_LOWERING_OPTIONS), unless it sets warp-blocks itself
    (the tuner's A/B: warp-blocks=false)."""
    opts = config.lowering_options.split()
    takes = window and (causal or int(head_dim) >= NONCAUSAL_WINDOW_MIN_HEAD_DIM)
    if takes and not any(o.startswith("warp-blocks=") for o in opts):
        config = replace(config, lowering_options=" ".join(opts + [WINDOW_LOWERING_OPTIONS]))
    return config


# -- backward (kernels/flash_bwd.py) ------------------------------------------

@dataclass(frozen=True)
class FlashBwdConfig:
    """Blocks of the two backward kernels. dq: BLOCK_M query rows per program
    (split over the warps), a loop over BLOCK_N keys. dkdv: BLOCK_N key rows
    per program (split over the warps), a loop over BLOCK_M queries; its
    accumulators dK and dV hold 2·BLOCK_N·head_dim f32, so BLOCK_M (the
    width of Sᵀ, Pᵀ, dPᵀ) stays small. *_split: programs per (block, head)
    that each own 1/split of the head_dim columns of the result (S and dP
    are recomputed by each)."""
    dq: FlashConfig
    dkdv: FlashConfig
    dq_split: int = 1
    dkdv_split: int = 1
    # The fused dK/dV + atomic dQ kernel (FA2's: 5 matmuls per block pair
    # instead of the pair's 7; dQ added with f32 atomics in no fixed order).
    atomic: FlashConfig = FlashConfig(16, 64, 4, 2, False)
    atomic_split: int = 1
    # deterministic=False (flash_attn's default) runs the fused kernel where
    # it applies (flash_bwd.fused_applies); deterministic=True the pair or,
    # in the serial range below, the fused kernel's serial launches.
    fused: bool = False
    # ... for calls of at least this many keys (shorter ones take the pair).
    fused_min_seqlen_k: int = 0
    # deterministic=True: the fused kernel's serial launches
    # (flash_bwd.serial_schedule) for calls with seqlen_k in [serial_min_seqlen_k,
    # serial_max_seqlen_k] (None: unbounded) where the fused kernel itself
    # applies; the pair elsewhere. serial_min_seqlen_k None: always the pair
    # (entries where the serial form was not timed against the pair).
    serial_min_seqlen_k: int | None = None
    serial_max_seqlen_k: int | None = None
    # deterministic=True: the fused kernel in one launch, its key blocks
    # adding dQ in turns (kernels/flash_bwd.py's ORDERED_DQ), for calls of at
    # least this many keys where the fused kernel applies (before the serial
    # range above is looked at); None: never.
    ordered_min_seqlen_k: int | None = None
    # dkdv's warp grid (its WARPS_N, tile.dot's warps_n): 1 is split-Q (each
    # warp owns BLOCK_N / num_warps key rows); w > 1 splits its four dots
    # over (num_warps / w) x w warps, FlashAttention-2's backward layouts.
    dkdv_warps_n: int = 1
    # The same for the fused kernel's four dK/dV dots.
    atomic_warps_n: int = 1
    # The fused kernel's dQᵀ = Kᵀ·dSᵀ dot (head_dim x BLOCK_M): 1 splits its
    # head_dim rows over the warps; w > 1 a (num_warps / w) x w grid.
    atomic_dq_warps_n: int = 1

    def constexprs(self, which):
        cfg = getattr(self, which)
        out = {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "NUM_WARPS": cfg.num_warps,
               "NUM_STAGES": cfg.num_stages, "SMEM_EPILOGUE": cfg.smem_epilogue,
               "SPLIT_D": getattr(self, which + "_split")}
        warps_n = {"dkdv": self.dkdv_warps_n, "atomic": self.atomic_warps_n}.get(which, 1)
        if warps_n != 1:  # (split-Q kernels keep their cache keys)
            n = check_num_warps(warps_n, f"{which}_warps_n")
            if cfg.num_warps % n:
                raise ValueError(f"{which}_warps_n ({n}) must divide the {which} kernel's "
                                 f"num_warps ({cfg.num_warps})")
            out["WARPS_N"] = n
        if which == "atomic" and self.atomic_dq_warps_n != 1:
            n = check_num_warps(self.atomic_dq_warps_n, "atomic_dq_warps_n")
            if cfg.num_warps % n:
                raise ValueError(f"atomic_dq_warps_n ({n}) must divide the atomic kernel's "
                                 f"num_warps ({cfg.num_warps})")
            out["DQ_WARPS_N"] = n
        if cfg.lowering_options:  # (kernels without options keep their cache keys)
            if which == "dq":
                raise ValueError("lowering_options are taken by the dkdv and atomic kernels "
                                 f"only, not dq (got {cfg.lowering_options!r})")
            out["LOWERING_OPTIONS"] = cfg.lowering_options
        return out


# ptxas (sm_80 and sm_90, f16; tilec --stats), 2026-12-01, tile width D =
# head_dim rounded up to a power of two:
# D <= 128: dq 64x64 over 4 warps: 174-231 registers, no spills (128x64
#   spills 88+ bytes); dkdv 64 keys x 32 queries over 4 warps: no spills
#   except causal D=128 (8 bytes sm_80, 20 sm_90); 64 x 64 spilled 4-64
#   bytes, 128 x 64 over 8 warps 32-68.
# D = 256: dq 64x32 (no spills, 115 KB shared; 64x64 spilled 384 bytes);
#   dkdv 64 keys x 16 queries with the head_dim split over 2 programs (no
#   spills, 112 KB shared; unsplit 4.6 KB of spills at 64x32, 2.2 KB at 64x16).
# Fused dK/dV + atomic dQ (D <= 128; blocked dq_accum, unpredicated reds):
#   d128: 64 keys x 16 queries over 4 warps and 128 x 16 over 8 warps no
#   spills (sm_90a and sm_80, causal or not); 128 x 32 over 8 warps 0-32
#   bytes, 64 x 32 over 4 warps 8-40, 128 x 64 over 8 warps 650-830.
#   d64: 64 x 16 and 128 x 16 over 4 warps (32 key rows per warp) none
#   (64 x 16 causal sm_90a 8), 64 x 32 16-80, 64 x 64 0-28; 8 warps do not
#   compile (dQᵀ's 64 rows over 8 warps).
#   Warp grids (atomic_warps_n; sm_90, bwdspill, Kᵀ read transposed from
#   K's shared tile): FA2's blocks, 64 queries x 128 keys over 8 warps, 2 x 4
#   grid, 16 + 16 bytes (240 + 320 with Kᵀ in registers); atomic_dq_warps_n
#   2 none; d64 128 x 128 over 8 warps, dQᵀ on 2 x 4, none.
# bench/tune_bwd.py times them all against FA2.
# dkdv's num_stages is 1: its Q and dO tiles (two dots read each) are then
# not prefetched, the schedule it was tuned and spill-checked with; at 2
# tile-pipeline prefetches them into rings (since the bwd2d branch), which
# adds 100-150 bytes of spills at the table's blocks (bench/tune_bwd.py
# --grid measures both). BWD_WIDE's dkdv keeps 2: with SPLIT_D its loads
# feed one dot each and were always prefetched. dq's 2 prefetches K and V
# (K feeds two dots too).
BWD_DEFAULT = FlashBwdConfig(dq=FlashConfig(64, 64, 4, 2, False), dkdv=FlashConfig(32, 64, 4, 1, False))
# BWD_WIDE's fused kernel (atomic_dq=True forced, deterministic=False) splits
# the head_dim over 2 programs as its dkdv does, each adding its half of dQᵀ
# (64 keys x 16 queries over 4 warps, s1: sm_90a 0 bytes of spills, 106 KB).
BWD_WIDE = FlashBwdConfig(dq=FlashConfig(64, 32, 4, 2, False), dkdv=FlashConfig(16, 64, 4, 2, False),
                          dkdv_split=2, atomic=FlashConfig(16, 64, 4, 1, False), atomic_split=2)
# Tuned on the H200 (bench/tune_bwd.py, runs 2-3 of session 8, bf16, 16k
# tokens; whole output: bench/RESULTS.md "Backward tuning"). The pair: dkdv
# 128 keys x 32 queries over 4 warps (32 key rows per warp: half the
# B-operand traffic per mma) at d64, 64 x 64 over
# 4 warps at d128; TFLOP/s at 16k, BWD_DEFAULT -> table: d64 210 -> 246
# (non-causal), 208 -> 230 (causal); d128 204 -> 227, 211 -> 223 (FA2: 291,
# 277, 313, 316). ptxas: dkdv d64 128x32 0 bytes of spills (causal sm_90a 40),
# d128 64x64 4-60. The fused atomic-dQ kernel (fused=False: never faster,
# 0.80-0.97x the pair; its best blocks are kept for atomic_dq=True): d64
# 64 x 64 (non-causal) and 128 keys x 16 (causal) over 4 warps, d128 64 x 32
# and 64 x 16 over 4 warps (d128's replaced since, below). Keys: (arch, head_dim, causal); arch is "sm_80"
# for every target (the sm_90 code is sm_80's but for vector reds).
# d128's dkdv runs on a 2x2 warp grid (dkdv_warps_n=2: each warp 32 keys x
# 32 queries of the 64 x 64 block, Q and dO prefetched, num_stages 2) since
# session 10: H200 bf16 16k, same-run A/B against the split-Q 64 x 64 s1
# entry, non-causal/causal: 249/245 vs 243/235 TFLOP/s (session 9 run 6),
# 247/245 vs 240/235 (session 10 run 8). ptxas spills in its loops on sm_90
# (that is why it waited for a second measurement); gradients checked on
# the GPU by test_flash_bwd_grid.py / test_flash_bwd_gpu.py.
# d128 with deterministic=False (flash_attn's default) runs the fused kernel
# at FA2's blocks since session 11: 64 queries x 128 keys over 8 warps, its
# dK/dV dots on a 2 x 4 grid, dQᵀ on a 4 x 2 one, Kᵀ read transposed from
# K's shared tile, two-buffer rings (160 KB of shared memory, inside sm_80's
# 163) and region-barriers (3 bar.sync per iteration). H200 bf16 16k,
# tune_bwd, non-causal/causal: 277/267 TFLOP/s against the pair's 244/241
# and FA2's 313/318 (session 11 run 12). ptxas sm_90: 48+80 bytes of spills
# (causal 68+140), bounded in test_flash_registers. deterministic=True keeps
# the pair (0.88x / 0.90x of it). The public API, same run (session 11 run
# 13, bench_bwd, fused / pair): non-causal 2k 243 / 241, 16k 277 / 245;
# causal 16k 267 / 244 but 2k 204 / 219 (the short causal rows' uneven work
# per key block: the pair's dq kernel splits it finer), so causal calls of
# fewer than 4096 keys kept the pair (fused_min_seqlen_k) until session 14:
# with dq_accum in 8x8 blocks (session 13) and the Q/dO ring's addresses
# carried (carry-ring-addresses' carried-tiles rule, xor-ring-phases auto ->
# all; 2 LDL per iteration instead of 7), tune_bwd --grid (session 14 run
# 1, bf16, TFLOP/s fused / pair / FA2): causal 1k 209 / 193 / 208, 2k 248 /
# 213 / 247, 4k 275 / 223 / 274; non-causal 1k 273 / 218 / 260, 2k 298 /
# 227 / 286, 4k 312 / 233 / 303 (run 2: 512 keys 229 / 216 / 222, 8k 319
# / 246 / 308). Causal from 1024 keys (run 2, 512: 157 / 164 / 156).
_FUSED_D128 = FlashConfig(64, 128, 8, 2, False, "row", "region-barriers=true")
# Causal, xor-ring-phases=trans rather than auto's all (9/2/11 LDL in its three
# loops against 1/0/0, yet 1-2% faster in three runs of session 14: 2k 248 /
# 246, 244 / 239; 8k 291 / 288; 16k 322 / 319 TFLOP/s).
_FUSED_D128_CAUSAL = replace(_FUSED_D128, lowering_options="region-barriers=true xor-ring-phases=trans")
# d64 runs the fused kernel too since its dq_accum went to 8x8 blocks (a
# quarter of the L2 red requests): 128 queries x 128 keys over 8 warps, 4 x 4
# grids (wn4, dqwn4), one buffer refilled after its last use. H200 bf16,
# 16k tokens, seqlen 4k, tune_bwd (session 13 run 3), non-causal / causal:
# 265 / 241 TFLOP/s against the pair's 233 / 222 and FA2's 278 / 247.
# Causal calls under 2048 keys keep the pair (session 14 run 1, tune_bwd,
# causal, fused / pair / FA2: 512 keys 132 / 139 / 138, 1k 179 / 179 / 186,
# 2k 214 / 206 / 223).
_FUSED_D64 = FlashConfig(128, 128, 8, 1, False, "row",
                         "region-barriers=true prefetch-after-last-use=true")
# D = 32 and D = 256 (keyed by the padded tile width D: head_dims 17-32
# take D = 32's, 129-256 D = 256's; table_lookup), chosen from ptxas (sm_90a,
# bf16) and measured on the H200 (session 12 run 2, bench/tune_bwd.py
# --head-dims 32,256 --seqlens 4096, bf16, 16k tokens, TFLOP/s non-causal /
# causal): d32 fused 160 / 146, the pair with dq 128x64 162 / 119 (table's
# dq 64x64: 149 / 112), FA2 213 / 185; before: BWD_DEFAULT's pair 127 / 133.
# d256 fused 199 / 185, the pair 194 / 183 (its dK/dV kernel at s2, 208 KB
# of shared memory, Hopper only: 204 / 187), FA2 253 / 230; before:
# BWD_WIDE's 137 / 123. Causal thresholds (session 14 run 2, causal, fused
# / pair / FA2): d256 1k 181 / 155 / 182, 2k 208 / 173 / 211: fused from
# 1024 keys (512 unmeasured); d32 1k 124 / 132 / 141, 2k 147 / 157 / 168:
# the pair under 4096 keys (at 4096 the fused kernel led, run 2 of session 12).
# D = 256, FA2's d256 blocks: 64 queries x 64 keys over 8 warps, the dK/dV
# dots on a 2 x 4 grid (atomic_warps_n 4), dQᵀ on 4 x 2 (atomic_dq_warps_n
# 2), unsplit (5 matmuls' HMMAs: 320 per iteration), s1: 144 KB of shared
# memory (inside sm_80's 163), 255 registers, spills 24+28 bytes (causal
# 8+8), 2-4 LDL per iteration, 800 SASS instructions per iteration; the
# pair's dK/dV kernel on the same grid: no spills (causal 4+4), 144 KB; dq
# BWD_WIDE's 64 x 32 (no spills, 128 KB). BWD_WIDE's pair split the head_dim
# over 2 programs (S and dP computed twice).
# D = 32, FA2's d32 blocks: 128 x 128 over 8 warps, dK/dV dots on 4 x 2
# (atomic_warps_n 2), dQᵀ's 32 rows on 2 x 4 (atomic_dq_warps_n 4; split-Q
# cannot place them), s2: no spills, 112 KB; the pair: d64's dkdv (128 keys
# x 32 queries over 4 warps, no spills) and dq 128 queries x 64 keys over 4
# warps (32 rows per warp).
_FUSED_D256 = FlashConfig(64, 64, 8, 1, False, "row", "region-barriers=true")
_FUSED_D32 = FlashConfig(128, 128, 8, 2, False, "row", "region-barriers=true")
_PAIR_D256 = dict(dq=FlashConfig(64, 32, 4, 2, False), dkdv=_FUSED_D256, dkdv_warps_n=4,
                  atomic=_FUSED_D256, atomic_warps_n=4, atomic_dq_warps_n=2, fused=True)
_PAIR_D32 = dict(dq=FlashConfig(128, 64, 4, 2, False), dkdv=FlashConfig(32, 128, 4, 1, False),
                 atomic=_FUSED_D32, atomic_warps_n=2, atomic_dq_warps_n=4, fused=True)
# deterministic=True's form (serial_min/max_seqlen_k): H200, bf16, 16k
# tokens, TFLOP/s serial / pair (bench/bench_deterministic.py, session 15
# run 3; 2k from bench_bwd run 2): d64 non-causal 1k 207 / 204, 2k 229 /
# 220, 4k 235 / 233, 8k 250 / 243, 16k 258 / 248 -> serial everywhere;
# d64 causal 1k 155 / 176, 2k 189 / 206, 4k 210 / 221, 8k 235 / 231, 16k
# 249 / 237 -> serial from 8192; d128 non-causal 1k 239 / 234, 2k 259 /
# 242, 4k 239 / 247, 8k 240 / 252, 16k 245 / 250 -> serial to 2048 (its
# query loops rotated per launch, session 15 run 8: +5-7% at d128, -10% at
# d64; removed in session 16, the ordered form below beats both); d128
# causal 1k 182 / 199, 2k 218 / 224, 4k 240 / 238, 8k 265 / 247, 16k 277 /
# 249 -> serial from 8192. The ordered form (ordered_min_seqlen_k; session 16
# run 4, ordered / best of serial and pair, TFLOP/s): d128 non-causal 1k
# 227 / 240, 2k 249 / 258, 4k 265 / 249, 8k 274 / 249, 16k 279 / 246 ->
# from 4096; causal 1k 193 / 200, 2k 231 / 224, 4k 256 / 240, 8k 271 / 265,
# 16k 278 / 276 -> from 2048; d64 (run 3) non-causal 0.81-0.87x of the
# atomic form against serial's 0.90-0.95x, causal 0.85-0.90x against the
# pair's / serial's 0.88-0.97x -> not at d64.
BWD_TABLE = {
    ("sm_80", 64, False): FlashBwdConfig(dq=FlashConfig(64, 64, 4, 2, False),
                                         dkdv=FlashConfig(32, 128, 4, 1, False),
                                         atomic=_FUSED_D64, atomic_warps_n=4, atomic_dq_warps_n=4,
                                         fused=True, serial_min_seqlen_k=0),
    ("sm_80", 64, True): FlashBwdConfig(dq=FlashConfig(64, 32, 4, 2, False),
                                        dkdv=FlashConfig(32, 128, 4, 1, False),
                                        atomic=_FUSED_D64, atomic_warps_n=4, atomic_dq_warps_n=4,
                                        fused=True, fused_min_seqlen_k=2048,
                                        serial_min_seqlen_k=8192),
    ("sm_80", 128, False): FlashBwdConfig(dq=FlashConfig(64, 64, 4, 2, False),
                                          dkdv=FlashConfig(64, 64, 4, 2, False), dkdv_warps_n=2,
                                          atomic=_FUSED_D128, atomic_warps_n=4, atomic_dq_warps_n=2,
                                          fused=True, serial_min_seqlen_k=0,
                                          serial_max_seqlen_k=2048, ordered_min_seqlen_k=4096),
    ("sm_80", 128, True): FlashBwdConfig(dq=FlashConfig(64, 64, 4, 2, False),
                                         dkdv=FlashConfig(64, 64, 4, 2, False), dkdv_warps_n=2,
                                         atomic=_FUSED_D128_CAUSAL, atomic_warps_n=4,
                                         atomic_dq_warps_n=2, fused=True, fused_min_seqlen_k=1024,
                                         serial_min_seqlen_k=8192, ordered_min_seqlen_k=2048),
    # D = 32 and D = 256 (see above, session 12 run 2).
    ("sm_80", 32, False): FlashBwdConfig(**_PAIR_D32),
    ("sm_80", 32, True): FlashBwdConfig(**_PAIR_D32, fused_min_seqlen_k=4096),
    ("sm_80", 256, False): FlashBwdConfig(**_PAIR_D256),
    ("sm_80", 256, True): FlashBwdConfig(**_PAIR_D256, fused_min_seqlen_k=1024),
    # d96 non-causal (bwdpieces, chosen from ptxas; not A/B-timed against
    # other blocks, in run 3's table at 209 TFLOP/s): d128's entry, computed in
    # pieces (64 + 32), the fused kernel with smem-epilogue: sm_90a 0 bytes
    # of spills, no LDL in its loops (without it 16+28 bytes, 4 LDL per
    # iteration; the padded kernel 0). d96 causal keeps d128's (4+12 bytes,
    # padded 72+144; smem-epilogue there 40+40).
    ("sm_80", 96, False): FlashBwdConfig(dq=FlashConfig(64, 64, 4, 2, False),
                                         dkdv=FlashConfig(64, 64, 4, 2, False), dkdv_warps_n=2,
                                         atomic=FlashConfig(64, 128, 8, 2, True, "row",
                                                            "region-barriers=true"),
                                         atomic_warps_n=4, atomic_dq_warps_n=2, fused=True),
    # d192 causal (bwdpieces, chosen from ptxas; not A/B-timed against
    # the 4 x 2 grid, in run 3's table at 177 TFLOP/s): D = 256's blocks, computed in
    # pieces (128 + 64); dQᵀ on a 2 x 4 grid: sm_90a 0 bytes of spills (4 x 2:
    # 4+8 bytes, the padded kernel's 0). d192 non-causal keeps D = 256's
    # entry (4 x 2: 0 bytes; 2 x 4: 4+4).
    ("sm_80", 192, True): FlashBwdConfig(**dict(_PAIR_D256, atomic_dq_warps_n=4),
                                         fused_min_seqlen_k=1024),
}


def flash_bwd_config(arch="sm_80", dtype=None, head_dim=128, causal=False, dropout=False,
                     variant=False):
    """The configuration of the backward kernels. BWD_TABLE holds what the
    tuner measured, the plain and causal masks (table_lookup: the head dim's
    entry, else its tile width's); `variant` (window, softcap,
    ALiBi, varlen) and dropout keep BWD_DEFAULT's blocks, whose spills were
    checked with them. Dropout: the dq kernel's 64x64 blocks spilled 72-172
    bytes at d64/d128 (its Philox numbers), 64 queries x 32 keys none."""
    config = None if variant or dropout else table_lookup(BWD_TABLE, arch, head_dim, bool(causal))
    if config is None:
        config = BWD_WIDE if int(head_dim) > 128 else BWD_DEFAULT
    if dropout and int(head_dim) <= 128:
        config = replace(config, dq=replace(config.dq, block_n=32))
    return config
