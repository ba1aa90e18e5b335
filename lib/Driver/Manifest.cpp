//===- Manifest.cpp - tile.launch -> the runtime's JSON launch manifest ---===//
#include "Manifest.h"

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

static std::optional<std::array<int64_t, 3>> readInt3(Attribute attr) {
  std::array<int64_t, 3> out;
  if (auto dense = dyn_cast<DenseI64ArrayAttr>(attr)) {
    if (dense.size() != 3)
      return std::nullopt;
    llvm::copy(dense.asArrayRef(), out.begin());
    return out;
  }
  if (auto dense = dyn_cast<DenseI32ArrayAttr>(attr)) {
    if (dense.size() != 3)
      return std::nullopt;
    llvm::copy(dense.asArrayRef(), out.begin());
    return out;
  }
  auto array = dyn_cast<ArrayAttr>(attr);
  if (!array || array.size() != 3)
    return std::nullopt;
  for (auto [i, element] : llvm::enumerate(array)) {
    auto integer = dyn_cast<IntegerAttr>(element);
    if (!integer)
      return std::nullopt;
    out[i] = integer.getInt();
  }
  return out;
}

/// Whether `type` is how the lowering passes a parameter of `kind`.
static bool matchesKind(Type type, StringRef kind) {
  if (kind == "ptr")
    return isa<LLVM::LLVMPointerType>(type);
  if (kind == "i32")
    return type.isInteger(32);
  if (kind == "i64")
    return type.isInteger(64);
  if (kind == "f32")
    return type.isF32();
  return false;
}

FailureOr<LaunchInfo> readLaunchInfo(LLVM::LLVMFuncOp kernel) {
  auto fail = [&](const Twine &message) {
    return kernel.emitError() << "kernel @" << kernel.getSymName() << ": '"
                              << kLaunchAttrName << "' " << message;
  };
  Attribute raw = kernel->getAttr(kLaunchAttrName);
  if (!raw)
    return kernel.emitError() << "kernel @" << kernel.getSymName() << " has no '"
                              << kLaunchAttrName
                              << "' dictionary: nothing says how to launch it";
  auto dict = dyn_cast<DictionaryAttr>(raw);
  if (!dict)
    return fail("must be a dictionary, got " + llvm::formatv("{0}", raw).str());

  LaunchInfo info;
  auto gridAttr = dyn_cast_or_null<ArrayAttr>(dict.get("grid"));
  if (!gridAttr || gridAttr.size() != 3)
    return fail("needs 'grid' = [x, y, z] with three string expressions");
  for (auto [i, element] : llvm::enumerate(gridAttr)) {
    if (auto str = dyn_cast<StringAttr>(element))
      info.grid[i] = str.getValue().str();
    else if (auto integer = dyn_cast<IntegerAttr>(element))
      info.grid[i] = std::to_string(integer.getInt());
    else
      return fail(llvm::formatv("grid[{0}] must be a string or an integer", i).str());
    if (info.grid[i].empty())
      return fail(llvm::formatv("grid[{0}] is empty", i).str());
  }

  Attribute blockAttr = dict.get("block");
  std::optional<std::array<int64_t, 3>> block =
      blockAttr ? readInt3(blockAttr) : std::nullopt;
  if (!block)
    return fail("needs 'block' = array<i64: x, y, z>");
  info.block = *block;
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

  if (Attribute smem = dict.get("shared_bytes")) {
    auto integer = dyn_cast<IntegerAttr>(smem);
    if (!integer || integer.getInt() < 0 || integer.getInt() > UINT32_MAX)
      return fail("'shared_bytes' must be a non-negative 32-bit integer");
    info.sharedBytes = integer.getInt();
  }

  auto paramsAttr = dyn_cast_or_null<ArrayAttr>(dict.get("params"));
  if (!paramsAttr)
    return fail("needs 'params' = [{name = ..., kind = ...}, ...]");
  ArrayRef<Type> argTypes = kernel.getFunctionType().getParams();
  if (paramsAttr.size() != argTypes.size())
    return fail(llvm::formatv("lists {0} params but the kernel takes {1} arguments",
                              paramsAttr.size(), argTypes.size())
                    .str());
  llvm::StringSet<> seen;
  for (auto [i, element] : llvm::enumerate(paramsAttr)) {
    auto param = dyn_cast<DictionaryAttr>(element);
    auto name = param ? dyn_cast_or_null<StringAttr>(param.get("name")) : nullptr;
    auto kind = param ? dyn_cast_or_null<StringAttr>(param.get("kind")) : nullptr;
    if (!name || !kind || name.getValue().empty())
      return fail(llvm::formatv("params[{0}] needs a non-empty string 'name' and a 'kind'", i)
                      .str());
    LaunchParam p{name.str(), kind.str(), ""};
    if (!seen.insert(p.name).second)
      return fail(llvm::formatv("params[{0}] repeats the name \"{1}\"", i, p.name).str());
    if (!llvm::is_contained({"ptr", "i32", "i64", "f32"}, p.kind))
      return fail(llvm::formatv("params[{0}] ({1}) has kind \"{2}\"; expected ptr, i32, "
                                "i64 or f32",
                                i, p.name, p.kind)
                      .str());
    auto elem = dyn_cast_or_null<StringAttr>(param.get("elem"));
    if (p.kind == "ptr") {
      if (!elem || !llvm::is_contained({"f16", "bf16", "f32", "i32", "i64"}, elem.getValue()))
        return fail(llvm::formatv("params[{0}] ({1}) is a ptr and needs 'elem' = one of f16, "
                                  "bf16, f32, i32, i64",
                                  i, p.name)
                        .str());
      p.elem = elem.str();
    } else if (param.get("elem")) {
      return fail(llvm::formatv("params[{0}] ({1}) has 'elem' but is not a ptr", i, p.name)
                      .str());
    }
    if (Attribute positive = param.get("positive")) {
      auto flag = dyn_cast<BoolAttr>(positive);
      if (!flag)
        return fail(llvm::formatv("params[{0}] ({1}): 'positive' must be a bool", i, p.name)
                        .str());
      if (flag.getValue() && p.kind == "ptr")
        return fail(llvm::formatv("params[{0}] ({1}) is a ptr and cannot be 'positive'", i,
                                  p.name)
                        .str());
      p.positive = flag.getValue();
    }
    if (Attribute align = param.get("align")) {
      auto bytes = dyn_cast<IntegerAttr>(align);
      if (!bytes || bytes.getInt() <= 0 || !llvm::isPowerOf2_64(bytes.getInt()) || p.kind != "ptr")
        return fail(llvm::formatv("params[{0}] ({1}): 'align' must be a power-of-two byte "
                                  "count, on a ptr",
                                  i, p.name)
                        .str());
      p.align = bytes.getInt();
    }
    if (!matchesKind(argTypes[i], p.kind))
      return fail(llvm::formatv("params[{0}] ({1}) is declared {2} but argument #{0} has "
                                "type {3}",
                                i, p.name, p.kind, argTypes[i])
                      .str());
    info.params.push_back(std::move(p));
  }

  if (Attribute variant = dict.get("variant")) {
    if (!isa<DictionaryAttr>(variant))
      return fail("'variant' must be a dictionary");
    info.variant = attributeToJson(variant);
  }
  for (auto [key, field] : {std::pair("mask", &info.mask), {"mask_note", &info.maskNote}})
    if (Attribute value = dict.get(key)) {
      auto str = dyn_cast<StringAttr>(value);
      if (!str)
        return fail(llvm::formatv("'{0}' must be a string", key).str());
      *field = str.str();
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
  if (ptxasInfo)
    doc["ptxas_info"] = ptxasInfoJson(*ptxasInfo);
  doc["compiler"] = compiler.str();

  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(doc))) << "\n";
  return text;
}

} // namespace tilec
