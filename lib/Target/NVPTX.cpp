//===- NVPTX.cpp - LLVM-dialect module -> LLVM IR -> PTX, in process ------===//
#include "tilec/Target/NVPTX.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/OptimizationLevel.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CodeGen.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Triple.h"

#include <mutex>

using namespace llvm;

void tilec::initializeNVPTXBackend() {
  // Only NVPTX: initialising every target would pull all of them into the
  // registry for nothing.
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

static CodeGenOptLevel toCodeGenOptLevel(unsigned level) {
  switch (level) {
  case 0:
    return CodeGenOptLevel::None;
  case 1:
    return CodeGenOptLevel::Less;
  case 2:
    return CodeGenOptLevel::Default;
  default:
    return CodeGenOptLevel::Aggressive;
  }
}

Expected<std::unique_ptr<TargetMachine>>
tilec::createNVPTXTargetMachine(const NVPTXOptions &options) {
  initializeNVPTXBackend();
  Triple triple(kNVPTXTriple);
  std::string error;
  const Target *target = TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return createStringError(inconvertibleErrorCode(),
                             "NVPTX backend unavailable in this LLVM: " + error);
  // LLVM accepts any CPU string and only warns on stderr for unknown ones,
  // so check against the subtarget table ourselves.
  std::unique_ptr<MCSubtargetInfo> sti(
      target->createMCSubtargetInfo(triple, options.arch, ""));
  if (!sti || !sti->isCPUStringValid(options.arch))
    return createStringError(inconvertibleErrorCode(),
                             "unknown GPU architecture '" + options.arch +
                                 "' (expected e.g. sm_80, sm_90a)");
  std::string ptxFeature = "ptx" + std::to_string(options.ptxVersion);
  if (llvm::none_of(sti->getAllProcessorFeatures(),
                    [&](const SubtargetFeatureKV &kv) { return ptxFeature == kv.Key; }))
    return createStringError(inconvertibleErrorCode(),
                             "LLVM cannot emit PTX ISA version " +
                                 std::to_string(options.ptxVersion / 10) + "." +
                                 std::to_string(options.ptxVersion % 10));
  // 32-bit shared-memory pointers: the kernels keep a dozen shared
  // addresses (ldmatrix bases, ring deltas) live through the K/V loop, and
  // 64-bit ones cost twice the registers at ptxas's 255 limit. The option is
  // the backend's global flag (read when the target machine is built).
  auto *shortPointers =
      static_cast<cl::opt<bool> *>(cl::getRegisteredOptions().lookup("nvptx-short-ptr"));
  if (!shortPointers)
    return createStringError(inconvertibleErrorCode(),
                             "this LLVM's NVPTX backend has no nvptx-short-ptr option; tilec's "
                             "lowering emits 32-bit shared-memory addresses");
  shortPointers->setValue(true);
  TargetOptions targetOptions;
  std::unique_ptr<TargetMachine> tm(target->createTargetMachine(
      triple, options.arch, "+" + ptxFeature, targetOptions, /*RM=*/std::nullopt,
      /*CM=*/std::nullopt, toCodeGenOptLevel(options.optLevel)));
  if (!tm)
    return createStringError(inconvertibleErrorCode(),
                             "could not create an NVPTX target machine for " +
                                 options.arch);
  return std::move(tm);
}

/// Why LLVM 22's NVPTX backend cannot select math intrinsic `llvm.<base>`
/// on `type` (with or without `afn`), or "" when it can. Selecting one it
/// cannot is not an error LLVM returns: "Cannot select" (and "no libcall
/// available") end the process, a Python one included. Measured with llc
/// for f16/f32/f64: sin, cos and tanh select only with afn and not on f64
/// (sin/cos/tanh.approx.f32), exp2 not on f64, and none of tan, exp, exp10,
/// log, log2, log10, the inverse and hyperbolic functions or pow select at
/// all; sqrt, fabs, floor, ceil, trunc, rint, round(even) do.
static std::string unselectableMath(StringRef base, bool f64, bool afn) {
  if (base == "sin" || base == "cos" || base == "tanh") {
    if (f64)
      return "has no f64 form on NVPTX";
    if (!afn)
      return "needs the 'afn' fast-math flag on NVPTX (" + base.str() + ".approx.f32)";
    return "";
  }
  if (base == "exp2")
    return f64 ? "has no f64 form on NVPTX" : "";
  if (llvm::is_contained({"tan", "exp", "exp10", "log", "log2", "log10", "asin", "acos", "atan",
                          "atan2", "sinh", "cosh", "pow", "powi", "sincos", "sincospi", "modf",
                          "frexp"},
                         base))
    return "has no NVPTX lowering";
  return "";
}

/// Legality of the math in an LLVM-dialect module before translation, with
/// the op's location (tilec's own lowering never emits these; input given
/// as LLVM dialect may).
static bool checkMathLegality(mlir::Operation *module) {
  bool ok = true;
  module->walk([&](mlir::Operation *op) {
    StringRef name = op->getName().getStringRef();
    if (!name.consume_front("llvm.intr.") || op->getNumResults() != 1 ||
        !isa<mlir::FloatType>(mlir::getElementTypeOrSelf(op->getResult(0).getType())))
      return;
    auto flags = op->getAttrOfType<mlir::LLVM::FastmathFlagsAttr>("fastmathFlags");
    bool afn = flags && bitEnumContainsAll(flags.getValue(), mlir::LLVM::FastmathFlags::afn);
    mlir::Type elem = mlir::getElementTypeOrSelf(op->getResult(0).getType());
    std::string why = unselectableMath(name, elem.isF64(), afn);
    if (!why.empty()) {
      op->emitError() << "'" << op->getName() << "' on " << elem << " " << why;
      ok = false;
    }
  });
  return ok;
}

Error tilec::checkNVPTXLegality(const Module &module) {
  for (const Function &fn : module)
    for (const BasicBlock &block : fn)
      for (const Instruction &inst : block) {
        auto *call = dyn_cast<CallInst>(&inst);
        const Function *callee = call ? call->getCalledFunction() : nullptr;
        if (!callee || !callee->isIntrinsic() || !call->getType()->isFPOrFPVectorTy())
          continue;
        StringRef base = callee->getName();
        base.consume_front("llvm.");
        base = base.take_until([](char c) { return c == '.'; });
        std::string why = unselectableMath(base, call->getType()->getScalarType()->isDoubleTy(),
                                           call->hasApproxFunc());
        if (!why.empty())
          return createStringError(inconvertibleErrorCode(),
                                   "@" + fn.getName().str() + " calls " + callee->getName().str() +
                                       ", which " + why);
      }
  return Error::success();
}

Expected<std::unique_ptr<Module>>
tilec::translateToNVPTXModule(mlir::Operation *module, LLVMContext &llvmContext,
                              TargetMachine &tm) {
  if (!checkMathLegality(module))
    return createStringError(inconvertibleErrorCode(),
                             "the module uses math the NVPTX backend cannot select");
  std::unique_ptr<Module> llvmModule =
      mlir::translateModuleToLLVMIR(module, llvmContext, "tilec");
  if (!llvmModule)
    return createStringError(inconvertibleErrorCode(),
                             "translation to LLVM IR failed");
  llvmModule->setTargetTriple(tm.getTargetTriple());
  llvmModule->setDataLayout(tm.createDataLayout());
  return std::move(llvmModule);
}

Error tilec::optimizeLLVMModule(Module &module, TargetMachine &tm, unsigned optLevel) {
  // Catch malformed IR here, with LLVM's message, rather than as a crash
  // somewhere inside the optimiser or the backend.
  std::string verifyError;
  raw_string_ostream verifyOS(verifyError);
  if (verifyModule(module, &verifyOS))
    return createStringError(inconvertibleErrorCode(),
                             "invalid LLVM IR: " + verifyError);
  if (optLevel == 0)
    return Error::success();

  LoopAnalysisManager lam;
  FunctionAnalysisManager fam;
  CGSCCAnalysisManager cgam;
  ModuleAnalysisManager mam;
  PipelineTuningOptions tuning;
  tuning.LoopUnrolling = true;
  tuning.LoopVectorization = optLevel > 1;
  tuning.SLPVectorization = optLevel > 1;
  // Passing the target machine lets NVPTX add its own passes (NVVMReflect,
  // address-space inference) and gives the optimiser its cost model.
  PassBuilder pb(&tm, tuning);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);

  OptimizationLevel level = optLevel == 1   ? OptimizationLevel::O1
                            : optLevel == 2 ? OptimizationLevel::O2
                                            : OptimizationLevel::O3;
  ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(level);
  mpm.run(module, mam);
  return Error::success();
}

Expected<std::string> tilec::emitPTX(Module &module, TargetMachine &tm) {
  // The last line of defence against LLVM's fatal "Cannot select": the
  // optimiser may have formed an intrinsic the IR did not have.
  if (Error e = checkNVPTXLegality(module))
    return std::move(e);
  SmallString<0> ptx;
  {
    raw_svector_ostream os(ptx);
    legacy::PassManager codegen;
    if (tm.addPassesToEmitFile(codegen, os, /*DwoOut=*/nullptr,
                               CodeGenFileType::AssemblyFile))
      return createStringError(inconvertibleErrorCode(),
                               "the NVPTX target cannot emit assembly");
    codegen.run(module);
  }
  return std::string(ptx.str());
}
