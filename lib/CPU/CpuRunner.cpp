//===- CpuRunner.cpp - run tile kernels on the host -----------------------===//
#include "tilec/CPU/CpuRunner.h"

#include "dialects/Tile/TileDialect.h"
#include "tilec/InitAll.h"
#include "tilec/Passes.h"
#include "tilec/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/ADT/Hashing.h"
#include "llvm/ExecutionEngine/Orc/Core.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

using namespace mlir;

namespace {

/// f32 -> bf16, rounding to nearest even (NaN stays a quiet NaN): what the
/// JIT-compiled kernels call for arith.truncf to bf16 where LLVM lowers it to
/// the compiler-rt builtin __truncsfbf2 (LLVM 22.1.8 on x86-64 does), which
/// Debian 12's libgcc (GCC 12) does not export, so the JIT finds no
/// definition unless the runner supplies one.
extern "C" __bf16 tilecTruncSfBf2(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  uint16_t out;
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    out = uint16_t((bits >> 16) | 0x0040u); // quiet NaN, sign kept
  else
    out = uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  __bf16 result;
  std::memcpy(&result, &out, sizeof result);
  return result;
}

/// bf16 -> f32 (exact): __extendbfsf2's definition, for the same reason.
extern "C" float tilecExtendBfSf2(__bf16 x) {
  uint16_t in;
  std::memcpy(&in, &x, sizeof in);
  uint32_t bits = uint32_t(in) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof result);
  return result;
}

/// A compiled kernel: the engine and what each parameter takes.
struct CompiledKernel {
  std::unique_ptr<ExecutionEngine> engine;
  std::vector<tilec::CpuArg::Kind> params;
  std::vector<std::string> paramNames;
  /// Declared > 0 (tile.positive, from tl.assume): the passes rely on it, so
  /// a run with a value <= 0 is rejected, as the GPU runtime does.
  std::vector<bool> positive;
  /// Bytes per element of each pointer parameter (0 for scalars).
  std::vector<int64_t> elemBytes;
  /// @__tilec_fault: (pointer argument + 1, element index) of an access
  /// outside the caller's buffer, set by the kernel (convert-tile-to-cpu).
  int64_t *fault = nullptr;
  /// Runs of one compiled kernel share its fault record: one at a time.
  std::mutex runMutex;
};

using CacheKey = std::tuple<uint64_t, std::string, std::string, bool>;

std::mutex cacheMutex;
/// Never destroyed: tearing JIT sessions down from a static destructor races
/// LLVM's own static teardown at process exit (and crashed Python on exit).
std::map<CacheKey, std::shared_ptr<CompiledKernel>> &cache() {
  static auto *kernels = new std::map<CacheKey, std::shared_ptr<CompiledKernel>>();
  return *kernels;
}

const char *kindName(tilec::CpuArg::Kind kind) {
  switch (kind) {
  case tilec::CpuArg::Kind::Ptr: return "ptr";
  case tilec::CpuArg::Kind::I32: return "i32";
  case tilec::CpuArg::Kind::I64: return "i64";
  case tilec::CpuArg::Kind::F32: return "f32";
  }
  return "?";
}

/// Collects every diagnostic, with its location and notes, as text.
class DiagnosticCollector {
public:
  DiagnosticCollector(MLIRContext &ctx)
      : handler(&ctx, [this](Diagnostic &diag) {
          llvm::raw_string_ostream os(text);
          os << where(diag.getLocation()) << ": " << severity(diag) << ": " << diag << "\n";
          for (Diagnostic &note : diag.getNotes())
            os << where(note.getLocation()) << ": note: " << note << "\n";
          return success();
        }) {}
  llvm::Error error(const llvm::Twine &what) const {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   what + (text.empty() ? "" : ":\n" + text));
  }

private:
  /// "file:line:col" (the compiler convention) where the location has one.
  static std::string where(Location loc) {
    std::string out;
    llvm::raw_string_ostream os(out);
    FileLineColLoc flc;
    loc->walk([&](Location l) {
      if (auto f = dyn_cast<FileLineColLoc>(l)) {
        flc = f;
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (flc)
      os << flc.getFilename().getValue() << ":" << flc.getLine() << ":" << flc.getColumn();
    else
      os << loc;
    return out;
  }
  static const char *severity(Diagnostic &d) {
    switch (d.getSeverity()) {
    case DiagnosticSeverity::Error: return "error";
    case DiagnosticSeverity::Warning: return "warning";
    case DiagnosticSeverity::Remark: return "remark";
    case DiagnosticSeverity::Note: return "note";
    }
    return "error";
  }
  std::string text;
  ScopedDiagnosticHandler handler;
};

llvm::Expected<std::shared_ptr<CompiledKernel>>
compile(llvm::StringRef source, llvm::StringRef bufferName, llvm::StringRef kernel,
        const tilec::CpuRunOptions &options) {
  static std::once_flag targetsOnce;
  std::call_once(targetsOnce, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });

  DialectRegistry registry;
  tilec::registerAllDialects(registry);
  MLIRContext ctx(registry);
  ctx.disableMultithreading(); // the pipeline is small; no thread pool per compile
  DiagnosticCollector diags(ctx);

  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, ParserConfig(&ctx), bufferName);
  if (!module)
    return diags.error("cannot parse " + bufferName);

  auto fn = module->lookupSymbol<func::FuncOp>(kernel);
  if (!fn || !fn->hasAttr(tile::kKernelAttrName))
    return diags.error("no tile.kernel function @" + kernel + " in " + bufferName);
  auto compiled = std::make_shared<CompiledKernel>();
  auto names = fn->getAttrOfType<ArrayAttr>(tilec::kArgNamesAttrName);
  for (auto [i, type] : llvm::enumerate(fn.getArgumentTypes())) {
    tilec::CpuArg::Kind kind;
    if (isa<tile::PtrType>(type))
      kind = tilec::CpuArg::Kind::Ptr;
    else if (type.isInteger(32))
      kind = tilec::CpuArg::Kind::I32;
    else if (type.isInteger(64))
      kind = tilec::CpuArg::Kind::I64;
    else if (type.isF32())
      kind = tilec::CpuArg::Kind::F32;
    else {
      fn.emitError() << "parameter " << i << " has type " << type
                     << ", which the CPU runner cannot pass (ptr, i32, i64, f32)";
      return diags.error("cannot run @" + kernel + " on the CPU");
    }
    compiled->params.push_back(kind);
    std::string name = "#" + std::to_string(i);
    if (names && i < names.size())
      if (auto s = dyn_cast<StringAttr>(names[i]))
        name = s.str();
    compiled->paramNames.push_back(name);
    compiled->positive.push_back(bool(fn.getArgAttr(i, tile::kPositiveAttrName)));
    // 0 (unchecked) for scalars and for pointees without a bit width.
    auto ptr = dyn_cast<tile::PtrType>(type);
    compiled->elemBytes.push_back(ptr && ptr.getPointeeType().isIntOrFloat()
                                      ? std::max<int64_t>(1, ptr.getPointeeType().getIntOrFloatBitWidth() / 8)
                                      : 0);
  }

  PassManager pm(&ctx);
  if (options.runTilePasses)
    tilec::buildTileOptimizePipeline(pm);
  tilec::buildTileToCPUPipeline(pm);
  if (failed(pm.run(*module)))
    return diags.error("lowering @" + kernel + " for the CPU failed");

  ExecutionEngineOptions engineOptions;
  auto transformer = makeOptimizingTransformer(/*optLevel=*/2, /*sizeLevel=*/0, nullptr);
  engineOptions.transformer = transformer;
  auto engine = ExecutionEngine::create(*module, engineOptions);
  if (!engine) {
    std::string msg = llvm::toString(engine.takeError());
    return diags.error("JIT compilation of @" + kernel + " failed: " + msg);
  }
  compiled->engine = std::move(*engine);
  compiled->engine->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap symbols;
    auto define = [&](const char *name, auto *fn) {
      symbols[interner(name)] = {llvm::orc::ExecutorAddr::fromPtr(fn), llvm::JITSymbolFlags::Exported};
    };
    define("__truncsfbf2", &tilecTruncSfBf2);
    define("__extendbfsf2", &tilecExtendBfSf2);
    return symbols;
  });
  llvm::Expected<void *> fault = compiled->engine->lookup("__tilec_fault");
  if (!fault)
    return diags.error("JIT compilation of @" + kernel +
                       " lost @__tilec_fault: " + llvm::toString(fault.takeError()));
  compiled->fault = static_cast<int64_t *>(*fault);
  return compiled;
}

} // namespace

llvm::Error tilec::runOnCPU(llvm::StringRef source, llvm::StringRef bufferName,
                            llvm::StringRef kernel, llvm::ArrayRef<CpuArg> args,
                            std::array<int64_t, 3> grid, const CpuRunOptions &options) {
  for (int d = 0; d < 3; ++d)
    if (grid[d] < 0 || grid[d] > INT32_MAX)
      return llvm::createStringError("grid dimension %d is %lld; it must be in [0, 2^31)", d,
                                     (long long)grid[d]);
  CacheKey key{llvm::hash_value(source), bufferName.str(), kernel.str(), options.runTilePasses};
  std::shared_ptr<CompiledKernel> compiled;
  {
    std::lock_guard<std::mutex> lock(cacheMutex);
    auto it = cache().find(key);
    if (it != cache().end())
      compiled = it->second;
  }
  if (!compiled) {
    auto fresh = compile(source, bufferName, kernel, options);
    if (!fresh)
      return fresh.takeError();
    compiled = *fresh;
    std::lock_guard<std::mutex> lock(cacheMutex);
    cache().emplace(key, compiled);
  }

  if (args.size() != compiled->params.size())
    return llvm::createStringError("@%s takes %zu arguments, got %zu", kernel.str().c_str(),
                                   compiled->params.size(), args.size());
  // The packed interface takes one pointer per LLVM-level argument; a
  // memref<?xT> is (allocated, aligned, offset, size, stride).
  struct Slot {
    void *p0, *p1;
    int64_t offset, size, stride;
    int32_t i32;
    int64_t i64;
    float f32;
  };
  std::vector<Slot> slots(args.size());
  llvm::SmallVector<void *> packed;
  for (size_t i = 0; i < args.size(); ++i) {
    CpuArg::Kind want = compiled->params[i];
    if (args[i].kind != want)
      return llvm::createStringError("argument %zu (%s) of @%s must be %s, got %s", i,
                                     compiled->paramNames[i].c_str(), kernel.str().c_str(),
                                     kindName(want), kindName(args[i].kind));
    bool isPositive = want == CpuArg::Kind::F32   ? float(args[i].f) > 0 // NaN fails
                      : want == CpuArg::Kind::I32 ? int32_t(args[i].i) > 0
                                                  : args[i].i > 0;
    if (compiled->positive[i] && want != CpuArg::Kind::Ptr && !isPositive) {
      char value[32];
      if (want == CpuArg::Kind::F32)
        std::snprintf(value, sizeof value, "%.9g", args[i].f);
      else
        std::snprintf(value, sizeof value, "%lld", (long long)args[i].i);
      return llvm::createStringError(
          "argument %zu (%s) of @%s must be > 0 (the kernel was compiled with "
          "tl.assume(%s > 0)), got %s",
          i, compiled->paramNames[i].c_str(), kernel.str().c_str(),
          compiled->paramNames[i].c_str(), value);
    }
    Slot &s = slots[i];
    switch (want) {
    case CpuArg::Kind::Ptr:
      if (!args[i].ptr)
        return llvm::createStringError("argument %zu (%s) of @%s is a null pointer", i,
                                       compiled->paramNames[i].c_str(), kernel.str().c_str());
      s.p0 = s.p1 = args[i].ptr;
      s.offset = 0;
      // The kernel refuses (and reports) elements at or past this size.
      s.size = args[i].bytes < 0 || compiled->elemBytes[i] == 0
                   ? INT64_MAX
                   : args[i].bytes / compiled->elemBytes[i];
      s.stride = 1;
      packed.append({&s.p0, &s.p1, &s.offset, &s.size, &s.stride});
      break;
    case CpuArg::Kind::I32:
      s.i32 = int32_t(args[i].i);
      packed.push_back(&s.i32);
      break;
    case CpuArg::Kind::I64:
      s.i64 = args[i].i;
      packed.push_back(&s.i64);
      break;
    case CpuArg::Kind::F32:
      s.f32 = float(args[i].f);
      packed.push_back(&s.f32);
      break;
    }
  }
  int32_t g[3] = {int32_t(grid[0]), int32_t(grid[1]), int32_t(grid[2])};
  for (int32_t &d : g)
    packed.push_back(&d);
  std::lock_guard<std::mutex> runLock(compiled->runMutex);
  compiled->fault[0] = compiled->fault[1] = 0;
  if (llvm::Error e = compiled->engine->invokePacked(("__tilec_grid_" + kernel).str(), packed))
    return e;
  if (compiled->fault[0] >= tilec::kCpuTurnFault) { // a wait_turn whose turn never came
    size_t arg = size_t(compiled->fault[0] - tilec::kCpuTurnFault - 1);
    return llvm::createStringError(
        "@%s: a program waits for turn %lld of the counter at argument %zu (%s), which the "
        "programs that start before it never pass (programs run in the GPU's start order "
        "here; on a GPU the wait would never end)",
        kernel.str().c_str(), (long long)compiled->fault[1], arg,
        compiled->paramNames[arg].c_str());
  }
  if (compiled->fault[0] != 0) {
    size_t arg = size_t(compiled->fault[0] - 1);
    long long have = args[arg].bytes / std::max<int64_t>(1, compiled->elemBytes[arg]);
    if (compiled->fault[1] < 0 || args[arg].bytes < 0)
      return llvm::createStringError(
          "@%s accessed element %lld of argument %zu (%s), before the first element its "
          "pointer points at; the access was not made",
          kernel.str().c_str(), (long long)compiled->fault[1], arg,
          compiled->paramNames[arg].c_str());
    return llvm::createStringError(
        "@%s accessed element %lld of argument %zu (%s), whose buffer holds %lld elements "
        "(%lld bytes): the kernel's views reach past the buffer; the access was not made",
        kernel.str().c_str(), (long long)compiled->fault[1], arg,
        compiled->paramNames[arg].c_str(), have, (long long)args[arg].bytes);
  }
  return llvm::Error::success();
}
