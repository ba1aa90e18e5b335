//===- TileAttrs.td - enums and layout attributes --------------------------===//
#ifndef TILE_ATTRS_TD
#define TILE_ATTRS_TD

include "TileDialect.td"
include "mlir/IR/EnumAttr.td"

def Tile_PaddingZero   : I32EnumAttrCase<"zero", 0>;
def Tile_PaddingNegInf : I32EnumAttrCase<"neg_inf", 1>;
def Tile_PaddingNaN    : I32EnumAttrCase<"nan", 2>;
def Tile_PaddingKind : I32EnumAttr<"PaddingKind",
    "value read for elements outside a view",
    [Tile_PaddingZero, Tile_PaddingNegInf, Tile_PaddingNaN]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::tile";
}
def Tile_PaddingAttr : EnumAttr<Tile_Dialect, Tile_PaddingKind, "padding">;

def Tile_ReduceMax : I32EnumAttrCase<"max", 0>;
def Tile_ReduceSum : I32EnumAttrCase<"sum", 1>;
def Tile_ReduceKind : I32EnumAttr<"ReduceKind", "reduction combiner",
    [Tile_ReduceMax, Tile_ReduceSum]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::tile";
}
def Tile_ReduceKindAttr : EnumAttr<Tile_Dialect, Tile_ReduceKind, "reduce_kind">;

def Tile_BlocksFull    : I32EnumAttrCase<"full", 0>;
def Tile_BlocksPartial : I32EnumAttrCase<"partial", 1>;
def Tile_BlocksEmpty   : I32EnumAttrCase<"empty", 2>;
def Tile_BlocksKind : I32EnumAttr<"BlocksKind",
    "which K/V blocks a loop tile-split-masked-loops made runs: full (no block needs the "
    "mask), partial (every block may), empty",
    [Tile_BlocksFull, Tile_BlocksPartial, Tile_BlocksEmpty]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::tile";
}
// `tile.blocks = #tile<blocks full>` on an scf.for (TileAttrNames.h).
def Tile_BlocksAttr : EnumAttr<Tile_Dialect, Tile_BlocksKind, "blocks">;

def Tile_CopyBoundsRow   : I32EnumAttrCase<"row", 0>;
def Tile_CopyBoundsTile  : I32EnumAttrCase<"tile", 1>;
def Tile_CopyBoundsChunk : I32EnumAttrCase<"chunk", 2>;
def Tile_CopyBoundsKind : I32EnumAttr<"CopyBoundsKind",
    "how global->shared copies respect their view's bounds (convert-tile-to-nvvm's copy-bounds)",
    [Tile_CopyBoundsRow, Tile_CopyBoundsTile, Tile_CopyBoundsChunk]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::tile";
}

def Tile_StrategyAttr : Tile_Attr<"Strategy", "strategy"> {
  let summary = "the strategy record: how a kernel is lowered";
  let description = [{
    Every knob that chooses how the kernels of a module are lowered, beyond
    their block sizes (tilec/Strategy.h, whose defaults it takes; the Python
    twin is tilec.strategy.Strategy). The driver puts it on the module it
    lowers as `tile.strategy` and writes it into each manifest. Example:
    `#tile.strategy<num_warps = 4, stages = 2, smem_epilogue = true, copy_bounds = row, lowering_options = "">`
  }];
  let parameters = (ins "int64_t":$num_warps, "int64_t":$stages, "::mlir::BoolAttr":$smem_epilogue,
                        EnumParameter<Tile_CopyBoundsKind>:$copy_bounds,
                        StringRefParameter<"more tile-to-nvvm options, verbatim">:$lowering_options);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Tile_LinearLayoutAttr : Tile_Attr<"LinearLayout", "linear"> {
  let summary = "distributed layout: (register, lane, warp) -> tile coordinates";
  let description = [{
    One representation for every register layout (see DESIGN.md, "Layouts").
    Each bit of the register, lane and warp index contributes one basis vector
    of tile coordinates; an element's coordinates are the XOR of the bases of
    the set bits. A zero basis means the bit replicates (broadcast). The
    mma.sync m16n8k16 A/B/accumulator fragments, wgmma fragments, and
    coalesced global-access layouts are all instances. Example (the m16n8
    accumulator of one warp):
    `#tile.linear<reg = [[0, 1], [8, 0]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = []>`
  }];
  let parameters = (ins
    ArrayRefParameter<"int64_t", "flattened register bases">:$reg,
    ArrayRefParameter<"int64_t", "flattened lane bases">:$lane,
    ArrayRefParameter<"int64_t", "flattened warp bases">:$warp,
    "unsigned":$rank);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Tile_SharedLayoutAttr : Tile_Attr<"SharedLayout", "shared"> {
  let summary = "a tile held in shared memory, row-major with an XOR swizzle";
  let description = [{
    The tile lives in shared memory, row-major. 16-byte chunks of a row are
    XOR-swizzled with the row index (`swizzle` = number of chunk-index bits
    swizzled, 0 = none) so that the eight row addresses of an ldmatrix hit
    distinct bank groups. Example: `#tile.shared<swizzle = 3>`.

    `transposed`: the tile is the transpose of the one stored, so element
    (i, j) of an MxN tile sits at (j, i) of an NxM row-major tile: what
    `tile.trans` of a shared tile gives, without moving data
    (FlashAttention-2's transposed views of K and dS, read with
    ldmatrix.trans). Example: `#tile.shared<swizzle = 3, transposed>`.
  }];
  let parameters = (ins "unsigned":$swizzle, DefaultValuedParameter<"bool", "false">:$transposed);
  let builders = [
    AttrBuilder<(ins "unsigned":$swizzle), [{ return $_get($_ctxt, swizzle, false); }]>
  ];
  let hasCustomAssemblyFormat = 1;
}

def Tile_SharedRegionAttr : Tile_Attr<"SharedRegion", "smem"> {
  let summary = "a region of the kernel's dynamic shared memory";
  let description = [{
    Bytes [offset, offset + bytes) of the one dynamic shared-memory window a
    kernel's shared tiles live in. tile-allocate-shared puts one on every op
    that needs shared memory (`tile.smem`: a tile.load or tile.convert_layout
    into a shared tile, a layout conversion's scratch, a staged epilogue
    store), the twins of prefetch rings on their scf.for (`tile.smem_twins`)
    and the space a loop body's own tiles start at (`tile.smem_body`);
    convert-tile-to-nvvm reads them (dialects/Tile/TileAttrNames.h). Offsets
    are multiples of the target's swizzle period (128 bytes). Example:
    `#tile.smem<offset = 8192, bytes = 16384>`.
  }];
  let parameters = (ins "int64_t":$offset, "int64_t":$bytes);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // TILE_ATTRS_TD
