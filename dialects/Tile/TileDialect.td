//===- TileDialect.td - the tile dialect and its base classes -------------===//
//
// The tile dialect is small on purpose: values are builtin scalars and builtin
// ranked tensors of static shape ("tiles"); elementwise math is upstream arith
// and math on tensors; loops are scf.for. This dialect adds only what those lack:
// grid coordinates, index tiles, shape plumbing, strided views of global memory,
// bounds-checked loads/stores, matrix multiply-accumulate and row reductions.
//
//===----------------------------------------------------------------------===//
#ifndef TILE_DIALECT_TD
#define TILE_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def Tile_Dialect : Dialect {
  let name = "tile";
  let summary = "Tiles of static shape, views of global memory, dot and reduce";
  let description = [{
    The input language of tilec. A kernel is a `func.func` marked `tile.kernel`
    whose body computes on tiles (builtin tensors of static shape) with the ops
    of this dialect plus upstream `arith`, `math` and `scf`. One instance of the
    function runs per program (thread block); `tile.program_id` tells which.
  }];
  let cppNamespace = "::mlir::tile";
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  // The typed contract attributes of TileAttrNames.h are checked wherever
  // they appear (TileDialect.cpp).
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    void registerTypes();
    void registerAttributes();
  }];
}

// Every tile op carries the dialect-wide invariants once, here.
class Tile_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tile_Dialect, mnemonic, traits>;

class Tile_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Tile_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

class Tile_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Tile_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

#endif // TILE_DIALECT_TD
