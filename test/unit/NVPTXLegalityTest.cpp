//===- NVPTXLegalityTest.cpp - math intrinsics NVPTX cannot select --------===//
//
// tilec::checkNVPTXLegality runs on the optimised LLVM IR right before code
// generation; what it lets through must select (LLVM's "Cannot select" is
// fatal), what it refuses must be named.
//
//===----------------------------------------------------------------------===//
#include "tilec/Target/NVPTX.h"

#include "llvm/AsmParser/Parser.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/SourceMgr.h"

#include <gtest/gtest.h>

namespace {

std::string check(const std::string &call, const std::string &type) {
  llvm::LLVMContext context;
  llvm::SMDiagnostic diag;
  std::string text = "define " + type + " @k(" + type + " %x) {\n  %y = " + call +
                     "\n  ret " + type + " %y\n}\n";
  std::unique_ptr<llvm::Module> module = llvm::parseAssemblyString(text, diag, context);
  if (!module)
    return "parse error: " + diag.getMessage().str();
  llvm::Error e = tilec::checkNVPTXLegality(*module);
  return e ? llvm::toString(std::move(e)) : "";
}

TEST(NVPTXLegality, ApproximateTranscendentalsNeedAfn) {
  EXPECT_EQ(check("call afn float @llvm.tanh.f32(float %x)", "float"), "");
  EXPECT_EQ(check("call afn float @llvm.sin.f32(float %x)", "float"), "");
  EXPECT_EQ(check("call float @llvm.tanh.f32(float %x)", "float"),
            "@k calls llvm.tanh.f32, which needs the 'afn' fast-math flag on NVPTX "
            "(tanh.approx.f32)");
  EXPECT_EQ(check("call afn double @llvm.cos.f64(double %x)", "double"),
            "@k calls llvm.cos.f64, which has no f64 form on NVPTX");
}

TEST(NVPTXLegality, NoLoweringAtAll) {
  EXPECT_EQ(check("call afn float @llvm.exp.f32(float %x)", "float"),
            "@k calls llvm.exp.f32, which has no NVPTX lowering");
  EXPECT_EQ(check("call half @llvm.atan.f16(half %x)", "half"),
            "@k calls llvm.atan.f16, which has no NVPTX lowering");
  EXPECT_EQ(check("call double @llvm.exp2.f64(double %x)", "double"),
            "@k calls llvm.exp2.f64, which has no f64 form on NVPTX");
}

TEST(NVPTXLegality, NativeMathPasses) {
  EXPECT_EQ(check("call float @llvm.sqrt.f32(float %x)", "float"), "");
  EXPECT_EQ(check("call float @llvm.fabs.f32(float %x)", "float"), "");
  EXPECT_EQ(check("call float @llvm.exp2.f32(float %x)", "float"), "");
  EXPECT_EQ(check("call double @llvm.floor.f64(double %x)", "double"), "");
}

} // namespace
