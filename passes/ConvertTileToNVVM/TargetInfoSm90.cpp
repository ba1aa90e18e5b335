//===- TargetInfoSm90.cpp - convert-tile-to-nvvm: sm_90 primitives --------===//
//
// The seam for Hopper (sm_90, sm_90a). Today every primitive is sm_80's
// (mma.sync, cp.async, ldmatrix, bar.sync all run on sm_90), so the PTX is
// the sm_80 code with sm_90's hardware numbers (227 KB of shared memory per
// block), except f32 atomic adds, which take vectors of 2 or 4
// (red.global.add.v2/.v4.f32), and programmatic dependent launch
// (griddepcontrol, tile.wait_prior_kernels / tile.launch_dependents). What belongs here next: wgmma with shared-memory descriptors,
// TMA copies with mbarrier completion instead of cp.async groups, stmatrix,
// setmaxnreg for warp specialization (FlashAttention-3's data path).
//
//===----------------------------------------------------------------------===//
#include "TargetInfo.h"

namespace tilec::nvvm {

namespace {
class Sm90TargetInfo final : public Sm80TargetInfo {
public:
  using Sm80TargetInfo::Sm80TargetInfo;

  /// red.global.add.v2.f32 / .v4.f32 (PTX ISA 8.1, sm_90): one instruction
  /// for up to 4 contiguous f32 (FA2's dQ accumulator pairs).
  int maxAtomicAddF32Width() const override { return 4; }
  void atomicAddF32(mlir::ImplicitLocOpBuilder &b, mlir::Value address, mlir::ValueRange values,
                    mlir::Value pred) const override {
    emitRedAddF32(b, address, values, pred);
  }

  /// griddepcontrol (PTX ISA 7.8, sm_90) as inline PTX with a memory
  /// clobber: LLVM's intrinsic is IntrNoMem, which would let loads move
  /// above the wait.
  bool hasProgrammaticLaunch() const override { return true; }
  void waitPriorKernels(mlir::ImplicitLocOpBuilder &b) const override {
    inlinePtx(b, mlir::TypeRange{}, mlir::ValueRange{}, "griddepcontrol.wait;", "~{memory}");
  }
  void launchDependents(mlir::ImplicitLocOpBuilder &b) const override {
    inlinePtx(b, mlir::TypeRange{}, mlir::ValueRange{}, "griddepcontrol.launch_dependents;", "~{memory}");
  }
};
} // namespace

std::unique_ptr<TargetInfo> createSm90TargetInfo(const TargetDescription &description) {
  return std::make_unique<Sm90TargetInfo>(description);
}

} // namespace tilec::nvvm
