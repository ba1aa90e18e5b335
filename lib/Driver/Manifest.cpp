//===- Manifest.cpp - a lowered kernel's ABI -> its JSON launch manifest --===//
#include "Manifest.h"

#include "dialects/Tile/TileAttrNames.h"
#include "tilec/runtime/GridSyntax.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace tilec {

// CUDA's limit on threads per block; the runtime checks the same bound.
static constexpr int64_t kMaxThreadsPerBlock = 1024;

/// The kind the manifest gives a parameter passed as `type`; empty when the
/// runtime cannot pass it.
static StringRef kindOf(Type type) {
  if (isa<LLVM::LLVMPointerType>(type))
    return "ptr";
  if (type.isInteger(32))
    return "i32";
  if (type.isInteger(64))
    return "i64";
  if (type.isF32())
    return "f32";
  return "";
}

/// The manifest's name of a pointee type; empty when the runtime has none.
static StringRef elemName(Type type) {
  if (type.isF16())
    return "f16";
  if (type.isBF16())
    return "bf16";
  if (type.isF32())
    return "f32";
  if (type.isInteger(32))
    return "i32";
  if (type.isInteger(64))
    return "i64";
  return "";
}

FailureOr<LaunchInfo> readLaunchInfo(LLVM::LLVMFuncOp kernel) {
  auto fail = [&](const Twine &message) {
    return kernel.emitError() << "kernel @" << kernel.getSymName() << ": " << message;
  };
  LaunchInfo info;

  // Parameters: kind from the signature, the rest from argument attributes.
  ArrayRef<Type> argTypes = kernel.getFunctionType().getParams();
  auto namesAttr = kernel->getAttrOfType<ArrayAttr>(kArgNamesAttrName);
  if (kernel->hasAttr(kArgNamesAttrName) && !namesAttr)
    return fail(Twine(kArgNamesAttrName) + " must be an array of strings");
  if (namesAttr && namesAttr.size() != argTypes.size())
    return fail(llvm::formatv("{0} has {1} names for {2} parameters", kArgNamesAttrName,
                              namesAttr.size(), argTypes.size())
                    .str());
  llvm::StringSet<> seen;
  for (auto [i, type] : llvm::enumerate(argTypes)) {
    LaunchParam p;
    if (namesAttr) {
      auto name = dyn_cast<StringAttr>(namesAttr[i]);
      if (!name || name.getValue().empty())
        return fail(llvm::formatv("{0}[{1}] must be a non-empty string, got {2}",
                                  kArgNamesAttrName, i, namesAttr[i])
                        .str());
      p.name = name.str();
    } else {
      p.name = "arg" + std::to_string(i);
    }
    if (!seen.insert(p.name).second)
      return fail(llvm::formatv("parameter {0} repeats the name \"{1}\"", i, p.name).str());
    p.kind = kindOf(type).str();
    if (p.kind.empty())
      return fail(llvm::formatv("parameter {0} ({1}) has type {2}; kernels take pointers, "
                                "i32, i64 or f32",
                                i, p.name, type)
                      .str());
    Attribute elem = kernel.getArgAttr(i, kElemAttrName);
    if (p.kind == "ptr") {
      auto elemType = dyn_cast_or_null<TypeAttr>(elem);
      p.elem = elemType ? elemName(elemType.getValue()).str() : "";
      if (p.elem.empty())
        return fail(llvm::formatv("parameter {0} ({1}) is a pointer and needs {2} = one of "
                                  "f16, bf16, f32, i32, i64",
                                  i, p.name, kElemAttrName)
                        .str());
    } else if (elem) {
      return fail(llvm::formatv("parameter {0} ({1}) has {2} but is not a pointer", i, p.name,
                                kElemAttrName)
                      .str());
    }
    if (Attribute positive = kernel.getArgAttr(i, kPositiveAttrName)) {
      if (!isa<UnitAttr>(positive) || p.kind == "ptr")
        return fail(llvm::formatv("parameter {0} ({1}): {2} is a unit attribute on an i32, "
                                  "i64 or f32 parameter",
                                  i, p.name, kPositiveAttrName)
                        .str());
      p.positive = true;
    }
    if (Attribute align = kernel.getArgAttr(i, kAlignAttrName)) {
      auto bytes = dyn_cast<IntegerAttr>(align);
      if (!bytes || bytes.getInt() <= 0 || !llvm::isPowerOf2_64(bytes.getInt()) || p.kind != "ptr")
        return fail(llvm::formatv("parameter {0} ({1}): {2} must be a power-of-two byte "
                                  "count, on a pointer",
                                  i, p.name, kAlignAttrName)
                        .str());
      p.align = bytes.getInt();
    }
    info.params.push_back(std::move(p));
  }

  // The grid: three expressions over the integer parameters, checked with
  // the runtime's own parser (tilec/runtime/GridSyntax.h).
  auto gridAttr = kernel->getAttrOfType<ArrayAttr>(kGridAttrName);
  if (!gridAttr || gridAttr.size() != 3)
    return fail(Twine("needs ") + kGridAttrName +
                " = [\"x\", \"y\", \"z\"]: three grid-size expressions over its integer "
                "parameters");
  std::vector<std::string> integerParams;
  for (const LaunchParam &p : info.params)
    if (p.kind == "i32" || p.kind == "i64")
      integerParams.push_back(p.name);
  for (auto [i, element] : llvm::enumerate(gridAttr)) {
    if (auto str = dyn_cast<StringAttr>(element))
      info.grid[i] = str.getValue().str();
    else if (auto integer = dyn_cast<IntegerAttr>(element))
      info.grid[i] = std::to_string(integer.getInt());
    else
      return fail(llvm::formatv("{0}[{1}] must be a string or an integer", kGridAttrName, i)
                      .str());
    grid::ParseError error;
    if (!grid::parse(info.grid[i], integerParams, error))
      return fail(llvm::formatv("{0}[{1}] '{2}': {3} at column {4}", kGridAttrName, i,
                                info.grid[i], error.message, error.column)
                      .str());
  }

  // Threads per block: what the lowering told ptxas (nvvm.maxntid), else
  // the kernel's warps.
  Attribute ntid = kernel->getAttr(NVVM::NVVMDialect::getMaxntidAttrName());
  if (!ntid)
    ntid = kernel->getAttr(NVVM::NVVMDialect::getReqntidAttrName());
  if (auto dense = dyn_cast_or_null<DenseI32ArrayAttr>(ntid)) {
    ArrayRef<int32_t> extents = dense.asArrayRef();
    for (size_t d = 0; d < 3; ++d)
      info.block[d] = d < extents.size() ? extents[d] : 1;
  } else if (auto warps = kernel->getAttrOfType<IntegerAttr>(kNumWarpsAttrName)) {
    info.block = {warps.getInt() * 32, 1, 1};
  } else {
    return fail(Twine("says nothing of its block size: give it ") +
                NVVM::NVVMDialect::getMaxntidAttrName() + " or " + kNumWarpsAttrName);
  }
  int64_t threads = 1;
  for (int64_t extent : info.block) {
    if (extent < 1 || extent > kMaxThreadsPerBlock)
      return fail(llvm::formatv("block extent {0} is outside [1, {1}]", extent,
                                kMaxThreadsPerBlock)
                      .str());
    threads *= extent;
  }
  if (threads > kMaxThreadsPerBlock)
    return fail(llvm::formatv("block has {0} threads; CUDA allows at most {1}", threads,
                              kMaxThreadsPerBlock)
                    .str());

  if (Attribute smem = kernel->getAttr(kSharedBytesAttrName)) {
    auto integer = dyn_cast<IntegerAttr>(smem);
    if (!integer || integer.getInt() < 0 || integer.getInt() > UINT32_MAX)
      return fail(Twine(kSharedBytesAttrName) + " must be a non-negative 32-bit integer");
    info.sharedBytes = integer.getInt();
  }

  if (Attribute variant = kernel->getAttr(kVariantAttrName)) {
    if (!isa<DictionaryAttr>(variant))
      return fail(Twine(kVariantAttrName) + " must be a dictionary");
    info.variant = attributeToJson(variant);
  }
  for (auto [key, field] : {std::pair(kMaskAttr, &info.mask), {kMaskNoteAttr, &info.maskNote}})
    if (Attribute value = kernel->getAttr(key)) {
      auto str = dyn_cast<StringAttr>(value);
      if (!str)
        return fail(Twine(key) + " must be a string");
      *field = str.str();
    }
  if (Attribute early = kernel->getAttr(kProgrammaticLaunchAttrName)) {
    if (!isa<UnitAttr>(early))
      return fail(Twine(kProgrammaticLaunchAttrName) + " must be a unit attribute");
    info.programmaticLaunch = true;
  }
  return info;
}

llvm::json::Value attributeToJson(Attribute attr) {
  if (auto str = dyn_cast<StringAttr>(attr))
    return str.getValue().str();
  if (auto boolean = dyn_cast<BoolAttr>(attr))
    return boolean.getValue();
  if (isa<UnitAttr>(attr))
    return true;
  if (auto integer = dyn_cast<IntegerAttr>(attr)) {
    if (integer.getType().isInteger(1))
      return integer.getValue().getBoolValue();
    if (integer.getType().isUnsignedInteger())
      return static_cast<uint64_t>(integer.getValue().getZExtValue());
    return integer.getValue().getSExtValue();
  }
  if (auto fp = dyn_cast<FloatAttr>(attr))
    return fp.getValueAsDouble();
  if (auto array = dyn_cast<ArrayAttr>(attr)) {
    llvm::json::Array out;
    for (Attribute element : array)
      out.push_back(attributeToJson(element));
    return out;
  }
  if (auto dense = dyn_cast<DenseI64ArrayAttr>(attr))
    return llvm::json::Array(dense.asArrayRef());
  if (auto dense = dyn_cast<DenseI32ArrayAttr>(attr))
    return llvm::json::Array(dense.asArrayRef());
  if (auto dict = dyn_cast<DictionaryAttr>(attr)) {
    llvm::json::Object out;
    for (NamedAttribute entry : dict)
      out[entry.getName().getValue()] = attributeToJson(entry.getValue());
    return out;
  }
  std::string printed;
  llvm::raw_string_ostream os(printed);
  attr.print(os);
  return printed;
}

/// ptxas's resource report as the manifest's "ptxas_info" object.
static llvm::json::Object ptxasInfoJson(const PtxasInfo &ptxasInfo) {
  llvm::json::Object info;
  auto put = [&](const char *key, int64_t value) {
    if (value >= 0)
      info[key] = value;
  };
  put("registers", ptxasInfo.registers);
  put("spill_stores", ptxasInfo.spillStores);
  put("spill_loads", ptxasInfo.spillLoads);
  put("stack_frame", ptxasInfo.stackFrame);
  put("shared_bytes_static", ptxasInfo.sharedBytesStatic);
  return info;
}

std::string writeManifest(StringRef kernel, StringRef arch, const ManifestFiles &files,
                          const LaunchInfo &launch,
                          const std::optional<PtxasInfo> &ptxasInfo, StringRef compiler) {
  llvm::json::Object doc;
  doc["kernel"] = kernel.str();
  doc["arch"] = arch.str();
  if (!files.cubin.empty())
    doc["cubin"] = files.cubin;
  if (!files.ptx.empty())
    doc["ptx"] = files.ptx;
  if (!files.sass.empty()) {
    llvm::json::Array sass;
    for (const ManifestFiles::Sass &image : files.sass) {
      llvm::json::Object entry{{"arch", image.arch}, {"cubin", image.file}};
      if (image.ptxasInfo)
        entry["ptxas_info"] = ptxasInfoJson(*image.ptxasInfo);
      sass.push_back(std::move(entry));
    }
    doc["sass"] = std::move(sass);
  }
  doc["block"] = llvm::json::Array(launch.block);
  doc["shared_bytes"] = launch.sharedBytes;
  doc["grid"] = llvm::json::Array(launch.grid);
  llvm::json::Array params;
  for (const LaunchParam &p : launch.params) {
    llvm::json::Object param{{"name", p.name}, {"kind", p.kind}};
    if (!p.elem.empty())
      param["elem"] = p.elem;
    if (p.positive)
      param["positive"] = true;
    if (p.align)
      param["align"] = p.align;
    params.push_back(std::move(param));
  }
  doc["params"] = std::move(params);
  if (launch.variant)
    doc["variant"] = *launch.variant;
  if (!launch.mask.empty())
    doc["mask"] = launch.mask;
  if (!launch.maskNote.empty())
    doc["mask_note"] = launch.maskNote;
  if (launch.programmaticLaunch)
    doc["programmatic_launch"] = true;
  if (launch.strategy)
    doc["strategy"] = *launch.strategy;
  if (ptxasInfo)
    doc["ptxas_info"] = ptxasInfoJson(*ptxasInfo);
  doc["compiler"] = compiler.str();

  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(doc))) << "\n";
  return text;
}

} // namespace tilec
