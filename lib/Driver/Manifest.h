//===- Manifest.h - a lowered kernel's ABI -> its JSON launch manifest ----===//
//
// The kernel ABI is the driver's: from the attributes a lowered llvm.func
// carries (dialects/Tile/TileAttrNames.h: tile.arg_names, tile.grid,
// tile.variant, tile.mask, tile.shared_bytes, tile.programmatic_launch,
// nvvm.maxntid, and per
// parameter tile.elem, tile.align, tile.positive) this builds the launch
// description, checking it (diagnostics on the function), and writes the
// JSON the runtime parses (lib/runtime/Manifest.cpp is the reader; keep the
// two in step).
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_LIB_DRIVER_MANIFEST_H
#define TILEC_LIB_DRIVER_MANIFEST_H

#include "tilec/Target/Ptxas.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "llvm/Support/JSON.h"

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace tilec {

struct LaunchParam {
  std::string name;
  std::string kind; ///< "ptr", "i32", "i64", "f32"
  std::string elem; ///< element type of a "ptr"; empty otherwise
  /// Declared > 0 (tl.assume): the runtime rejects launches with a value
  /// <= 0 (or NaN). Scalars only.
  bool positive = false;
  /// Widest access through a "ptr" in bytes, when wider than one element:
  /// the runtime rejects pointers not aligned to it (0: no requirement).
  int64_t align = 0;
};

struct LaunchInfo {
  std::array<std::string, 3> grid; ///< expressions over the integer params
  std::array<int64_t, 3> block = {1, 1, 1};
  int64_t sharedBytes = 0;
  std::vector<LaunchParam> params;
  std::optional<llvm::json::Value> variant;
  /// tile-split-masked-loops' verdict on the kernel's masks ("split", "skip",
  /// "dense"; empty: no mask) and, when not "split", its remark.
  std::string mask, maskNote;
  /// The kernel waits for the kernels before it (tile.programmatic_launch):
  /// the runtime may launch it before they end.
  bool programmaticLaunch = false;
  /// The strategy record it was lowered with (tile.strategy on the module),
  /// by tilec.strategy.Strategy's field names; none for LLVM-dialect input.
  std::optional<llvm::json::Value> strategy;
};

/// Builds and checks the launch description of `kernel` from its
/// attributes: one param per argument (the runtime packs arguments from the
/// manifest alone), a grid over the integer params. Emits an error on the
/// kernel and fails otherwise.
mlir::FailureOr<LaunchInfo> readLaunchInfo(mlir::LLVM::LLVMFuncOp kernel);

struct ManifestFiles {
  std::string ptx;   ///< file name; empty: not listed
  std::string cubin; ///< file name; empty: not listed
  /// The same PTX assembled for other GPUs.
  struct Sass {
    std::string arch, file;
    std::optional<PtxasInfo> ptxasInfo; ///< that assembly's resource report
  };
  std::vector<Sass> sass;
};

/// The manifest of one kernel, as pretty-printed JSON.
std::string writeManifest(llvm::StringRef kernel, llvm::StringRef arch,
                          const ManifestFiles &files, const LaunchInfo &launch,
                          const std::optional<PtxasInfo> &ptxasInfo,
                          llvm::StringRef compiler);

/// An attribute as JSON: strings, numbers, booleans, arrays and dictionaries
/// map to their JSON counterparts; anything else to its printed form.
llvm::json::Value attributeToJson(mlir::Attribute attr);

} // namespace tilec

#endif
