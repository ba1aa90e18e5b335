//===- TileDialect.cpp - dialect, types and attributes --------------------===//
#include "dialects/Tile/TileDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/TensorEncoding.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::tile;

#include "dialects/Tile/TileDialect.cpp.inc"
#include "dialects/Tile/TileEnums.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/Tile/TileTypes.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Tile/TileAttrs.cpp.inc"

/// "64x128" for diagnostics.
static std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string out;
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i ? "x" : "") + std::to_string(shape[i]);
  return shape.empty() ? "scalar" : out;
}

namespace {
/// A distributed layout as a tensor encoding must have the tensor's rank,
/// give every element an owner and name no coordinate outside the tile: the
/// lowering indexes the tile through it.
struct LinearLayoutEncoding
    : VerifiableTensorEncoding::ExternalModel<LinearLayoutEncoding, LinearLayoutAttr> {
  LogicalResult verifyEncoding(Attribute attr, ArrayRef<int64_t> shape, Type,
                               function_ref<InFlightDiagnostic()> emitError) const {
    auto layout = cast<LinearLayoutAttr>(attr);
    if (ShapedType::isDynamicShape(shape))
      return emitError() << "a tile with a #tile.linear layout must have a static shape";
    std::string why =
        toLinearLayout(layout).checkCovers(std::vector<int64_t>(shape.begin(), shape.end()));
    if (!why.empty())
      return emitError() << "#tile.linear layout does not fit a tile of shape "
                         << shapeStr(shape) << ": " << why;
    return success();
  }
};
} // namespace

void TileDialect::initialize() {
  registerTypes();
  registerAttributes();
  LinearLayoutAttr::attachInterface<LinearLayoutEncoding>(*getContext());
  addOperations<
#define GET_OP_LIST
#include "dialects/Tile/TileOps.cpp.inc"
      >();
}

void TileDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/Tile/TileTypes.cpp.inc"
      >();
}

void TileDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Tile/TileAttrs.cpp.inc"
      >();
}

LogicalResult StrategyAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t numWarps,
                                   int64_t stages, BoolAttr smemEpilogue, CopyBoundsKind,
                                   StringRef) {
  if (numWarps < 1 || numWarps > 16 || (numWarps & (numWarps - 1)) != 0)
    return emitError() << "#tile.strategy: num_warps must be a power of two in [1, 16], got "
                       << numWarps;
  if (stages != 1 && stages != 2)
    return emitError() << "#tile.strategy: stages must be 1 or 2, got " << stages;
  if (!smemEpilogue)
    return emitError() << "#tile.strategy: smem_epilogue must be true or false";
  return success();
}

LogicalResult SharedRegionAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t offset,
                                       int64_t bytes) {
  if (offset < 0 || bytes < 0)
    return emitError() << "#tile.smem: offset and bytes must be >= 0, got offset = " << offset
                       << ", bytes = " << bytes;
  return success();
}

LogicalResult TileDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().strref();
  Attribute value = attr.getValue();
  if (name == tilec::kBlocksAttr && !isa<BlocksKindAttr>(value))
    return op->emitError() << name << " must be #tile<blocks full|partial|empty>, got " << value;
  if (name == tilec::kStrategyAttrName && !isa<StrategyAttr>(value))
    return op->emitError() << name << " must be a #tile.strategy<...>, got " << value;
  if (name == tilec::kNumWarpsAttrName) {
    auto warps = dyn_cast<IntegerAttr>(value);
    int64_t n = warps ? warps.getInt() : 0;
    if (!warps || n < 1 || n > 16 || (n & (n - 1)) != 0)
      return op->emitError() << name << ": num-warps must be a power of two in [1, 16], got "
                             << value;
  }
  if ((name == tilec::kSmemAttrName || name == tilec::kSmemBodyAttrName) &&
      !isa<SharedRegionAttr>(value))
    return op->emitError() << name << " must be a #tile.smem<offset = .., bytes = ..>, got " << value;
  if (name == tilec::kSmemTwinsAttrName) {
    auto twins = dyn_cast<ArrayAttr>(value);
    if (!twins || !llvm::all_of(twins, [](Attribute a) { return isa<SharedRegionAttr>(a); }))
      return op->emitError() << name << " must be an array of #tile.smem<...>, got " << value;
  }
  if (name == tilec::kSharedBytesAttrName) {
    auto bytes = dyn_cast<IntegerAttr>(value);
    if (!bytes || bytes.getInt() < 0)
      return op->emitError() << name << " must be a non-negative integer, got " << value;
  }
  if (name == tilec::kArgNamesAttrName) {
    auto names = dyn_cast<ArrayAttr>(value);
    if (!names || !llvm::all_of(names, [](Attribute a) {
          auto str = dyn_cast<StringAttr>(a);
          return str && !str.getValue().empty();
        }))
      return op->emitError() << name << " must be an array of non-empty parameter names, got "
                             << value;
  }
  if (name == tilec::kGridAttrName) {
    auto grid = dyn_cast<ArrayAttr>(value);
    if (!grid || grid.size() != 3 ||
        !llvm::all_of(grid, [](Attribute a) { return isa<StringAttr, IntegerAttr>(a); }))
      return op->emitError() << name << " must be [\"x\", \"y\", \"z\"]: three grid-size "
                                        "expressions over the kernel's integer parameters, got "
                             << value;
  }
  return success();
}

LogicalResult ViewType::verify(function_ref<InFlightDiagnostic()> emitError, Type elementType,
                               unsigned rank) {
  if (rank < 1 || rank > 3)
    return emitError() << "view rank must be 1, 2 or 3, got " << rank;
  if (!isa<FloatType, IntegerType>(elementType))
    return emitError() << "view element type must be a float or integer, got " << elementType;
  return success();
}

//===----------------------------------------------------------------------===//
// #tile.linear<reg = [[..], ..], lane = [..], warp = [..]>
//===----------------------------------------------------------------------===//

static ParseResult parseBases(AsmParser &parser, SmallVectorImpl<int64_t> &flat,
                              std::optional<unsigned> &rank) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() -> ParseResult {
    SmallVector<int64_t> basis;
    if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() {
          return parser.parseInteger(basis.emplace_back());
        }))
      return failure();
    if (rank && *rank != basis.size())
      return parser.emitError(parser.getCurrentLocation())
             << "every basis must have " << *rank << " coordinates, this one has "
             << basis.size();
    rank = basis.size();
    flat.append(basis.begin(), basis.end());
    return success();
  });
}

Attribute LinearLayoutAttr::parse(AsmParser &parser, Type) {
  SmallVector<int64_t> reg, lane, warp;
  std::optional<unsigned> rank;
  if (parser.parseLess() || parser.parseKeyword("reg") || parser.parseEqual() ||
      parseBases(parser, reg, rank) || parser.parseComma() || parser.parseKeyword("lane") ||
      parser.parseEqual() || parseBases(parser, lane, rank) || parser.parseComma() ||
      parser.parseKeyword("warp") || parser.parseEqual() || parseBases(parser, warp, rank))
    return {};
  if (succeeded(parser.parseOptionalComma())) {
    unsigned explicitRank;
    if (parser.parseKeyword("rank") || parser.parseEqual() || parser.parseInteger(explicitRank))
      return {};
    if (rank && *rank != explicitRank) {
      parser.emitError(parser.getCurrentLocation())
          << "rank = " << explicitRank << " disagrees with bases of " << *rank << " coordinates";
      return {};
    }
    rank = explicitRank;
  }
  if (parser.parseGreater())
    return {};
  if (!rank) {
    parser.emitError(parser.getCurrentLocation())
        << "a layout without bases needs an explicit `rank = N`";
    return {};
  }
  return parser.getChecked<LinearLayoutAttr>(parser.getContext(), reg, lane, warp, *rank);
}

void LinearLayoutAttr::print(AsmPrinter &printer) const {
  printer << "<" << toLinearLayout(*this).str();
  if (getReg().empty() && getLane().empty() && getWarp().empty())
    printer << ", rank = " << getRank();
  printer << ">";
}

Attribute SharedLayoutAttr::parse(AsmParser &parser, Type) {
  unsigned swizzle;
  if (parser.parseLess() || parser.parseKeyword("swizzle") || parser.parseEqual() ||
      parser.parseInteger(swizzle))
    return {};
  bool transposed = succeeded(parser.parseOptionalComma());
  if (transposed && parser.parseKeyword("transposed"))
    return {};
  if (parser.parseGreater())
    return {};
  return SharedLayoutAttr::get(parser.getContext(), swizzle, transposed);
}

void SharedLayoutAttr::print(AsmPrinter &printer) const {
  printer << "<swizzle = " << getSwizzle() << (getTransposed() ? ", transposed" : "") << ">";
}

LogicalResult LinearLayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                       ArrayRef<int64_t> reg, ArrayRef<int64_t> lane,
                                       ArrayRef<int64_t> warp, unsigned rank) {
  if (rank == 0 || rank > 3)
    return emitError() << "layout rank must be 1, 2 or 3, got " << rank;
  if (lane.size() != 5 * rank)
    return emitError() << "a layout needs exactly 5 lane bases (32 lanes), got "
                       << lane.size() / rank;
  // Register and warp indices are 64-bit integers built from these bits.
  for (auto [name, bases] : {std::pair<StringRef, size_t>{"register", reg.size() / rank},
                             {"warp", warp.size() / rank}})
    if (bases > 31)
      return emitError() << "a layout has at most 31 " << name << " bases, got " << bases;
  for (int64_t v : llvm::concat<const int64_t>(reg, lane, warp))
    if (v < 0)
      return emitError() << "basis coordinates must be non-negative, got " << v;
  return success();
}

static std::vector<tilec::Coord> unflatten(ArrayRef<int64_t> flat, unsigned rank) {
  std::vector<tilec::Coord> bases;
  for (size_t i = 0; i + rank <= flat.size(); i += rank)
    bases.emplace_back(flat.begin() + i, flat.begin() + i + rank);
  return bases;
}

tilec::LinearLayout mlir::tile::toLinearLayout(LinearLayoutAttr attr) {
  unsigned rank = attr.getRank();
  return tilec::LinearLayout(rank, unflatten(attr.getReg(), rank), unflatten(attr.getLane(), rank),
                             unflatten(attr.getWarp(), rank));
}

LinearLayoutAttr mlir::tile::toAttr(MLIRContext *ctx, const tilec::LinearLayout &layout) {
  auto flatten = [](const std::vector<tilec::Coord> &bases) {
    SmallVector<int64_t> flat;
    for (const tilec::Coord &b : bases)
      flat.append(b.begin(), b.end());
    return flat;
  };
  return LinearLayoutAttr::get(ctx, flatten(layout.regBases()), flatten(layout.laneBases()),
                               flatten(layout.warpBases()), layout.rank());
}
