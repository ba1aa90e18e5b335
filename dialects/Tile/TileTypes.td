//===- TileTypes.td - pointer and view types -------------------------------===//
#ifndef TILE_TYPES_TD
#define TILE_TYPES_TD

include "TileDialect.td"
include "mlir/IR/BuiltinTypeInterfaces.td"

def Tile_PtrType : Tile_Type<"Ptr", "ptr"> {
  let summary = "pointer to elements in global memory";
  let description = [{
    A kernel parameter that points at a global buffer of `pointeeType`
    elements. Example: `!tile.ptr<f16>`.
  }];
  let parameters = (ins "::mlir::Type":$pointeeType);
  let assemblyFormat = "`<` $pointeeType `>`";
}

def Tile_ViewType : Tile_Type<"View", "view"> {
  let summary = "strided window of a global buffer";
  let description = [{
    A rank-1..3 window of global memory made by `tile.view`: a base pointer
    plus runtime sizes and strides (in elements). Loads and stores address it
    with element offsets and never touch elements outside `[0, size)` in any
    dimension. Example: `!tile.view<f16, 2>`.
  }];
  let parameters = (ins "::mlir::Type":$elementType, "unsigned":$rank);
  let assemblyFormat = "`<` $elementType `,` $rank `>`";
  let genVerifyDecl = 1;
}

// Tiles: statically shaped tensors. A dynamic dimension is a user error that
// the declarative constraint reports before any hand-written verifier runs.
def Tile_FloatTile : StaticShapeTensorOf<[AnyFloat]>;
def Tile_IntTile : StaticShapeTensorOf<[AnySignlessInteger]>;
def Tile_AnyTile : StaticShapeTensorOf<[AnyFloat, AnySignlessInteger]>;
def Tile_MmaOperandTile : StaticShapeTensorOf<[F16, BF16]>;
def Tile_AccTile : StaticShapeTensorOf<[F32]>;
def Tile_Int : AnyTypeOf<[I32, I64, Index]>;

#endif // TILE_TYPES_TD
