//===- NVPTX.cpp - LLVM-dialect module -> LLVM IR -> PTX, in process ------===//
#include "tilec/Target/NVPTX.h"

#include "mlir/IR/Operation.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/ADT/SmallString.h"
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

Expected<std::unique_ptr<Module>>
tilec::translateToNVPTXModule(mlir::Operation *module, LLVMContext &llvmContext,
                              TargetMachine &tm) {
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
