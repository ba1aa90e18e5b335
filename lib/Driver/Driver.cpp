//===- Driver.cpp - the whole pipeline: tile IR text -> PTX/cubin + manifest //
#include "tilec/Driver/Driver.h"

#include "Manifest.h"
#include "dialects/Tile/TileAttrNames.h"
#include "dialects/Tile/TileDialect.h"
#include "tilec/InitAll.h"
#include "tilec/Pipelines.h"
#include "tilec/Target/NVPTX.h"
#include "tilec/Target/Ptxas.h"
#include "lib/runtime/Arch.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"

#include <mutex>

using namespace mlir;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;

namespace tilec {

static constexpr const char *kTilecVersion = "0.1.0";
// Target-independent tile passes; optional, other engineers register it.
static constexpr const char *kTileOptimizePipeline = "tile-optimize";

std::string getCompilerVersion() {
  return llvm::formatv("tilec {0} (LLVM {1})", kTilecVersion, LLVM_VERSION_STRING).str();
}

static Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

namespace {
/// Collects every diagnostic of a compilation, with its source location and
/// the source line, so an llvm::Error can carry them to any front end.
class DiagnosticCapture {
public:
  DiagnosticCapture(llvm::SourceMgr &sourceMgr, MLIRContext &context)
      : os(text), handler(sourceMgr, &context, os) {}

  /// The collected diagnostics as an error; `fallback` when there are none,
  /// so the user never sees a bare "failed".
  Error takeError(const llvm::Twine &fallback) {
    if (text.empty())
      return makeError(fallback);
    return makeError(StringRef(text).rtrim());
  }

  /// Diagnostics of a compilation that succeeded are warnings or remarks.
  void flushToStderr() {
    if (!text.empty())
      llvm::errs() << text;
    text.clear();
  }

private:
  std::string text;
  llvm::raw_string_ostream os;
  SourceMgrDiagnosticHandler handler;
};

/// The pieces every compilation sets up the same way.
struct Session {
  DialectRegistry registry;
  std::unique_ptr<MLIRContext> context;
  llvm::SourceMgr sourceMgr;
  std::unique_ptr<DiagnosticCapture> diagnostics;
};
} // namespace

static void registerPassesOnce() {
  // The pass and pipeline registries are global; registering a pipeline
  // twice asserts, so every entry point shares this guard.
  static std::once_flag once;
  std::call_once(once, [] { registerAllPasses(); });
}

static bool dumpIRFromEnv() {
  std::optional<std::string> value = llvm::sys::Process::GetEnv("TILEC_DUMP_IR");
  return value && !value->empty() && *value != "0";
}

static std::unique_ptr<Session> openSession(StringRef source, StringRef bufferName,
                                            bool printIR) {
  registerPassesOnce();
  auto session = std::make_unique<Session>();
  registerAllDialects(session->registry);
  session->context = std::make_unique<MLIRContext>(session->registry);
  // The messages name what is wrong; a generic-form dump of the op would
  // bury them (and for a kernel, repeat its whole body).
  session->context->printOpOnDiagnostic(false);
  // Printing the whole module after each pass needs a single thread.
  if (printIR)
    session->context->disableMultithreading();
  session->sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(source, bufferName), llvm::SMLoc());
  session->diagnostics =
      std::make_unique<DiagnosticCapture>(session->sourceMgr, *session->context);
  return session;
}

static void configurePassManager(PassManager &pm, bool printIR, bool stats,
                                 StringRef crashReproducer) {
  if (printIR)
    pm.enableIRPrinting(/*shouldPrintBeforePass=*/[](Pass *, Operation *) { return false; },
                        /*shouldPrintAfterPass=*/[](Pass *, Operation *) { return true; },
                        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false);
  // Timing only: no tilec pass declares MLIR statistics, so the statistics
  // report would be an empty table beside the timings.
  if (stats)
    pm.enableTiming();
  if (!crashReproducer.empty())
    pm.enableCrashReproducerGeneration(crashReproducer);
}

static bool isRegistered(StringRef name) {
  return PassPipelineInfo::lookup(name) || PassInfo::lookup(name);
}

/// Runs `pipeline` (text, as after --pass-pipeline=builtin.module(...)) on
/// `module`.
static Error runTextualPipeline(ModuleOp module, StringRef pipeline, Session &session,
                                bool printIR, bool stats, StringRef crashReproducer) {
  PassManager pm(session.context.get(), ModuleOp::getOperationName());
  configurePassManager(pm, printIR, stats, crashReproducer);
  std::string parseError;
  llvm::raw_string_ostream parseOS(parseError);
  if (failed(parsePassPipeline(pipeline, pm, parseOS)))
    return makeError("invalid pass pipeline '" + pipeline + "': " + parseError);
  if (failed(pm.run(module)))
    return session.diagnostics->takeError("pipeline '" + pipeline +
                                          "' failed without a diagnostic");
  return Error::success();
}

static std::string printOp(Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->print(os);
  return text;
}

static std::string printLLVMModule(const llvm::Module &module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os, /*AAW=*/nullptr);
  return text;
}

/// The kernels of a lowered module, in order.
static SmallVector<LLVM::LLVMFuncOp> findKernels(ModuleOp module) {
  SmallVector<LLVM::LLVMFuncOp> kernels;
  for (auto func : module.getOps<LLVM::LLVMFuncOp>())
    if (func->hasAttr(NVVM::NVVMDialect::getKernelFuncAttrName()))
      kernels.push_back(func);
  return kernels;
}

/// Tells ptxas the block size the runtime will launch with, so it can budget
/// registers for exactly that many threads instead of the worst case.
static void setMaxThreads(LLVM::LLVMFuncOp kernel, const LaunchInfo &launch) {
  if (kernel->hasAttr(NVVM::NVVMDialect::getMaxntidAttrName()) ||
      kernel->hasAttr(NVVM::NVVMDialect::getReqntidAttrName()))
    return;
  SmallVector<int32_t, 3> block(launch.block.begin(), launch.block.end());
  kernel->setAttr(NVVM::NVVMDialect::getMaxntidAttrName(),
                  DenseI32ArrayAttr::get(kernel.getContext(), block));
}

Expected<std::vector<CompiledKernel>>
compileForGPU(StringRef source, StringRef bufferName, const CompileOptions &options) {
  const bool printIR = options.printIRAfterAll || dumpIRFromEnv();
  std::unique_ptr<Session> session = openSession(source, bufferName, printIR);
  DiagnosticCapture &diagnostics = *session->diagnostics;

  // Check the targets before spending time in the passes.
  for (const std::string &sassArch : options.extraSass) {
    runtime::detail::SmArch parsed;
    if (!runtime::detail::parseSmArch(sassArch, parsed) || parsed.major < 8)
      return makeError(llvm::formatv("extra SASS arch '{0}' is not a GPU architecture tilec's PTX "
                                     "runs on: expected sm_<major><minor>[a] with major >= 8 "
                                     "(e.g. sm_90)",
                                     sassArch)
                           .str());
  }
  NVPTXOptions nvptxOptions;
  nvptxOptions.arch = options.arch;
  if (options.ptxVersion)
    nvptxOptions.ptxVersion = options.ptxVersion;
  Expected<std::unique_ptr<llvm::TargetMachine>> tm = createNVPTXTargetMachine(nvptxOptions);
  if (!tm)
    return tm.takeError();

  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(session->sourceMgr, ParserConfig(session->context.get()));
  if (!module)
    return diagnostics.takeError("cannot parse " + bufferName);

  std::string tileIR;
  if (!options.inputIsLLVMDialect) {
    if (options.runTilePasses && isRegistered(kTileOptimizePipeline))
      if (Error e = runTextualPipeline(*module, kTileOptimizePipeline, *session, printIR,
                                       options.printStats, options.crashReproducerPath))
        return std::move(e);
    // The strategy record travels in the IR (and so into --emit=tile) and
    // into each manifest.
    std::optional<tile::CopyBoundsKind> bounds =
        tile::symbolizeCopyBoundsKind(options.strategy.copyBounds);
    if (!bounds)
      return makeError("copy-bounds must be row, tile or chunk, got '" +
                       options.strategy.copyBounds + "'");
    MLIRContext *ctx = session->context.get();
    ctx->getOrLoadDialect<tile::TileDialect>(); // a module may hold no tile op
    (*module)->setAttr(kStrategyAttrName,
                       tile::StrategyAttr::get(ctx, options.strategy.numWarps, options.strategy.stages,
                                               BoolAttr::get(ctx, options.strategy.smemEpilogue),
                                               *bounds, options.strategy.loweringOptions));
    tileIR = printOp(*module);

    // The lowering, built from the strategy record directly (no pipeline
    // text to format and parse again).
    PassManager pm(session->context.get(), ModuleOp::getOperationName());
    configurePassManager(pm, printIR, options.printStats, options.crashReproducerPath);
    if (Error e = buildTileToNVVMPipeline(pm, options.strategy, options.arch))
      return std::move(e);
    if (failed(pm.run(*module)))
      return diagnostics.takeError("the tile-to-nvvm pipeline failed without a diagnostic");
  }

  if (auto target = (*module)->getAttrOfType<StringAttr>(kTargetAttrName);
      target && target.getValue() != options.arch) {
    (*module)->emitError() << "module is lowered for " << target.getValue() << " ("
                           << kTargetAttrName << ") but the requested arch is "
                           << options.arch;
    return diagnostics.takeError("arch mismatch");
  }

  SmallVector<LLVM::LLVMFuncOp> kernels = findKernels(*module);
  if (kernels.empty()) {
    if (options.inputIsLLVMDialect)
      (*module)->emitError() << "no kernel to compile: expected an llvm.func with the '"
                             << NVVM::NVVMDialect::getKernelFuncAttrName() << "' attribute";
    else
      (*module)->emitError() << "no kernel to compile: mark the kernel's func.func with the "
                                "'tile.kernel' attribute";
    return diagnostics.takeError("no kernel");
  }
  SmallVector<LaunchInfo, 1> launches;
  bool launchesValid = true;
  for (LLVM::LLVMFuncOp kernel : kernels) {
    FailureOr<LaunchInfo> launch = readLaunchInfo(kernel);
    if (failed(launch)) {
      launchesValid = false;
      continue;
    }
    setMaxThreads(kernel, *launch);
    if (auto strategy = (*module)->getAttrOfType<tile::StrategyAttr>(kStrategyAttrName))
      launch->strategy = llvm::json::Object{
          {"num_warps", strategy.getNumWarps()},
          {"num_stages", strategy.getStages()},
          {"smem_epilogue", strategy.getSmemEpilogue().getValue()},
          {"copy_bounds", tile::stringifyCopyBoundsKind(strategy.getCopyBounds()).str()},
          {"lowering_options", strategy.getLoweringOptions().str()}};
    // Read into the manifest; LLVM IR translation would warn of each.
    for (unsigned i = 0; i < kernel.getNumArguments(); ++i)
      for (StringRef name : {kElemAttrName, kAlignAttrName, kPositiveAttrName})
        kernel.removeArgAttr(i, StringAttr::get(kernel.getContext(), name));
    launches.push_back(std::move(*launch));
  }
  if (!launchesValid)
    return diagnostics.takeError("invalid kernel ABI attributes");

  std::optional<std::string> ptxas = options.emitCubin ? findPtxas() : std::nullopt;
  std::vector<CompiledKernel> results;
  for (auto [kernel, launch] : llvm::zip(kernels, launches)) {
    CompiledKernel result;
    result.name = kernel.getSymName().str();
    result.tileIR = tileIR;

    // One LLVM module per kernel: each gets its own PTX and cubin, which is
    // what the manifest (one kernel, one image) describes.
    OwningOpRef<ModuleOp> single = cast<ModuleOp>((*module)->clone());
    for (LLVM::LLVMFuncOp other : llvm::make_early_inc_range(findKernels(*single)))
      if (other.getSymName() != result.name)
        other.erase();

    llvm::LLVMContext llvmContext;
    Expected<std::unique_ptr<llvm::Module>> llvmModule =
        translateToNVPTXModule(*single, llvmContext, **tm);
    if (!llvmModule) {
      llvm::consumeError(llvmModule.takeError());
      return diagnostics.takeError("translation of @" + result.name +
                                   " to LLVM IR failed");
    }
    if (printIR)
      llvm::errs() << "// -----// LLVM IR of @" << result.name
                   << " after translation //----- //\n"
                   << printLLVMModule(**llvmModule);
    if (Error e = optimizeLLVMModule(**llvmModule, **tm, nvptxOptions.optLevel))
      return makeError("@" + result.name + ": " + llvm::toString(std::move(e)));
    result.llvmIR = printLLVMModule(**llvmModule);
    if (printIR)
      llvm::errs() << "// -----// LLVM IR of @" << result.name << " after O"
                   << nvptxOptions.optLevel << " //----- //\n"
                   << result.llvmIR;

    Expected<std::string> ptx = emitPTX(**llvmModule, **tm);
    if (!ptx)
      return makeError("@" + result.name + ": " + llvm::toString(ptx.takeError()));
    result.ptx = std::move(*ptx);

    std::optional<PtxasInfo> ptxasInfo;
    ManifestFiles files;
    if (ptxas) {
      Expected<PtxasResult> assembled = runPtxas(*ptxas, result.ptx, options.arch);
      if (!assembled)
        return makeError("@" + result.name + ": " + llvm::toString(assembled.takeError()));
      result.cubin = std::move(assembled->cubin);
      result.ptxasLog = std::move(assembled->log);
      ptxasInfo = parsePtxasInfo(result.ptxasLog, result.name);
      for (const std::string &sassArch : options.extraSass) {
        bool seen = sassArch == options.arch ||
                    llvm::any_of(result.sass, [&](const auto &image) { return image.arch == sassArch; });
        if (seen)
          continue;
        Expected<PtxasResult> other = runPtxas(*ptxas, result.ptx, sassArch);
        if (!other)
          return makeError("@" + result.name + ": assembling for " + sassArch + ": " +
                           llvm::toString(other.takeError()));
        result.sass.push_back({sassArch, result.name + "." + sassArch + ".cubin",
                               std::move(other->cubin)});
        files.sass.push_back({sassArch, result.sass.back().file,
                              parsePtxasInfo(other->log, result.name)});
      }
    } else if (options.emitCubin) {
      result.notes.push_back("no ptxas found ($TILEC_PTXAS, $CUDA_HOME/bin, "
                             "/usr/local/cuda/bin, PATH): @" +
                             result.name + " has PTX only; the runtime will JIT it");
    }

    files.ptx = result.name + ".ptx";
    if (!result.cubin.empty())
      files.cubin = result.name + ".cubin";
    result.manifestJson = writeManifest(result.name, options.arch, files, launch, ptxasInfo,
                                        getCompilerVersion());
    results.push_back(std::move(result));
  }
  diagnostics.flushToStderr();
  return results;
}

Expected<std::string> runPipeline(StringRef source, StringRef bufferName,
                                  StringRef pipeline) {
  std::unique_ptr<Session> session =
      openSession(source, bufferName, /*printIR=*/dumpIRFromEnv());
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(session->sourceMgr, ParserConfig(session->context.get()));
  if (!module)
    return session->diagnostics->takeError("cannot parse " + bufferName);
  // Accept both "builtin.module(a,b)" (tile-opt's --pass-pipeline form) and
  // the bare "a,b".
  StringRef inner = pipeline.trim();
  if (inner.consume_front("builtin.module(")) {
    if (!inner.consume_back(")"))
      return makeError("invalid pass pipeline '" + pipeline + "': unbalanced parentheses");
  }
  if (Error e = runTextualPipeline(*module, inner, *session, dumpIRFromEnv(),
                                   /*stats=*/false, /*crashReproducer=*/""))
    return std::move(e);
  session->diagnostics->flushToStderr();
  return printOp(*module);
}

} // namespace tilec
