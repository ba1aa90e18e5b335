//===- TargetInfoSm90.cpp - convert-tile-to-nvvm: sm_90 primitives --------===//
//
// The seam for Hopper (sm_90, sm_90a). Today every primitive is sm_80's
// (mma.sync, cp.async, ldmatrix, bar.sync all run on sm_90), so the PTX is
// the sm_80 code with sm_90's hardware numbers (227 KB of shared memory per
// block). What belongs here next: wgmma with shared-memory descriptors,
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
};
} // namespace

std::unique_ptr<TargetInfo> createSm90TargetInfo(const TargetDescription &description) {
  return std::make_unique<Sm90TargetInfo>(description);
}

} // namespace tilec::nvvm
