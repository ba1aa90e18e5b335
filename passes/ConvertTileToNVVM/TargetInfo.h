//===- TargetInfo.h - convert-tile-to-nvvm: per-architecture primitives ---===//
//
// The lowering's op-family files emit target instructions only through this
// interface (cf. Triton's TargetInfoBase): thread and program ids, barriers,
// warp shuffles and votes, cp.async copies with their commit groups and
// waits, ldmatrix, mma.sync, f32 atomic adds, the arrival count (tile.arrive) and the approximate exp2/log2. Its hardware
// numbers are the architecture's TargetDescription
// (include/tilec/Target/TargetDescription.h).
//
// TargetInfoSm80.cpp implements it for sm_80, sm_86 and sm_89;
// TargetInfoSm90.cpp for sm_90 and sm_90a, which for now forwards to the
// sm_80 primitives: wgmma, TMA and mbarriers go there, so a new target is a
// new file, not new branches in the op families. `--arch` (the pass's `arch`
// option) selects the implementation (createTargetInfo).
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_PASSES_CONVERTTILETONVVM_TARGETINFO_H
#define TILEC_PASSES_CONVERTTILETONVVM_TARGETINFO_H

#include "tilec/Target/TargetDescription.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <memory>
#include <string>

namespace tilec::nvvm {

/// NVPTX's address spaces (LLVM's numbering, the same on every target).
inline constexpr unsigned kGlobalAddressSpace = 1;
inline constexpr unsigned kSharedAddressSpace = 3;

class TargetInfo {
public:
  explicit TargetInfo(const TargetDescription &description) : hw(description) {}
  virtual ~TargetInfo();

  /// The hardware numbers of this architecture.
  const TargetDescription &description() const { return hw; }

  /// threadIdx.x (i32); blocks are one-dimensional.
  virtual mlir::Value threadIdX(mlir::ImplicitLocOpBuilder &b) const = 0;
  /// blockIdx / gridDim along `axis` (0, 1, 2; i32).
  virtual mlir::Value blockId(mlir::ImplicitLocOpBuilder &b, unsigned axis) const = 0;
  virtual mlir::Value gridDim(mlir::ImplicitLocOpBuilder &b, unsigned axis) const = 0;
  /// A barrier of all threads of the block that also makes their shared
  /// memory accesses visible to each other.
  virtual void barrier(mlir::ImplicitLocOpBuilder &b) const = 0;
  /// `value` (32 bits) of the lane whose id is this lane's XOR `laneMask`,
  /// every lane of the warp taking part.
  virtual mlir::Value shuffleXor(mlir::ImplicitLocOpBuilder &b, mlir::Value value,
                                 int64_t laneMask) const = 0;
  /// Whether `pred` (i1) holds in some lane of the warp (every lane taking part).
  virtual mlir::Value voteAny(mlir::ImplicitLocOpBuilder &b, mlir::Value pred) const = 0;

  /// One asynchronous copy of chunkBytes from global `src` to shared `dst`,
  /// of which `srcBytes` (i32, 0..chunkBytes) are read and the rest
  /// zero-filled; it joins the group the next asyncCommitGroup closes.
  virtual void asyncCopy(mlir::ImplicitLocOpBuilder &b, mlir::Value dst, mlir::Value src,
                         mlir::Value srcBytes) const = 0;
  virtual void asyncCommitGroup(mlir::ImplicitLocOpBuilder &b) const = 0;
  /// Waits until at most `pending` of this thread's committed groups are in
  /// flight (its own copies only: a barrier shows them to other threads).
  virtual void asyncWait(mlir::ImplicitLocOpBuilder &b, int64_t pending) const = 0;

  /// ldmatrix.x{num}[.trans] of 8x8 b16 matrices at shared [base + offset]:
  /// a struct of `num` i32 fragments.
  virtual mlir::Value ldmatrix(mlir::ImplicitLocOpBuilder &b, mlir::Value base, int64_t offset,
                               int num, bool transpose) const = 0;
  /// One warp-wide mma of shape (mmaM, mmaN, mmaK) with f16 or bf16 operands
  /// and f32 accumulators: A and B fragments as packed pairs, C as 4 floats;
  /// returns the struct of the 4 result floats.
  virtual mlir::Value mma(mlir::ImplicitLocOpBuilder &b, mlir::ValueRange a, mlir::ValueRange bFrag,
                          mlir::ValueRange c, bool bf16) const = 0;

  /// The most f32 elements one atomic add to global memory can take (1: a
  /// scalar red per element).
  virtual int maxAtomicAddF32Width() const = 0;
  /// red.global.add of `values` (1 .. maxAtomicAddF32Width() f32, a power of
  /// two, contiguous at `address` and aligned to their size) where `pred`
  /// (i1; null: always) holds.
  virtual void atomicAddF32(mlir::ImplicitLocOpBuilder &b, mlir::Value address,
                            mlir::ValueRange values, mlir::Value pred) const = 0;

  /// tile.arrive: after a barrier of the block, thread `leader` (i1) adds 1
  /// to the u32 at global `counter`; returns i1, uniform over the block: the
  /// old count was `expectedMinusOne` (i32), i.e. this block arrived last.
  /// The last block resets the counter to 0 and every thread of it is
  /// ordered after the other blocks' writes made before their arrival.
  virtual mlir::Value arriveLast(mlir::ImplicitLocOpBuilder &b, mlir::Value counter,
                                 mlir::Value expectedMinusOne, mlir::Value leader) const = 0;

  /// tile.wait_turn: every thread returns once the i32 at global `counter`
  /// is >= `turn` (i32), ordered after the writes released before it
  /// (acquire); `seen` (i32, read earlier) >= `turn` skips the reads.
  virtual void waitTurn(mlir::ImplicitLocOpBuilder &b, mlir::Value counter, mlir::Value turn,
                        mlir::Value seen) const = 0;
  /// tile.pass_turn: after a barrier of the block, thread `leader` (i1)
  /// releases the block's earlier writes and adds 1 to the i32 at `counter`.
  virtual void passTurn(mlir::ImplicitLocOpBuilder &b, mlir::Value counter,
                        mlir::Value leader) const = 0;

  /// Whether the target has programmatic dependent launch (griddepcontrol,
  /// sm_90+). Without it tile.wait_prior_kernels and tile.launch_dependents
  /// are nothing and launches stay in stream order.
  virtual bool hasProgrammaticLaunch() const = 0;
  /// tile.wait_prior_kernels (hasProgrammaticLaunch only): waits until the
  /// kernels launched before this one on its stream are done and their
  /// writes visible. Only a kernel that waits may be launched before the
  /// kernel ahead of it ends (the manifest's "programmatic_launch").
  virtual void waitPriorKernels(mlir::ImplicitLocOpBuilder &b) const = 0;
  /// tile.launch_dependents (hasProgrammaticLaunch only): lets the next
  /// kernel on the stream start its programs.
  virtual void launchDependents(mlir::ImplicitLocOpBuilder &b) const = 0;

  /// 2^x and log2(x) with the approximate hardware instructions (f32).
  virtual mlir::Value exp2Approx(mlir::ImplicitLocOpBuilder &b, mlir::Value x) const = 0;
  virtual mlir::Value log2Approx(mlir::ImplicitLocOpBuilder &b, mlir::Value x) const = 0;

  /// Inline PTX with side effects (kept in order with barriers and waits).
  static mlir::Operation *inlinePtx(mlir::ImplicitLocOpBuilder &b, mlir::TypeRange results,
                                    mlir::ValueRange operands, llvm::StringRef text,
                                    llvm::StringRef constraints);

protected:
  const TargetDescription &hw;
};

/// The implementation for `arch`, or null (with `error` set to a message
/// naming the supported ones) when tilec does not support it.
std::unique_ptr<TargetInfo> createTargetInfo(llvm::StringRef arch, std::string &error);

/// The sm_80 family (sm_80, sm_86, sm_89): mma.sync, cp.async, ldmatrix,
/// bar.sync, shfl.sync, vote.sync (TargetInfoSm80.cpp). Declared here so the
/// sm_90 implementation can derive from it and override what it does better.
class Sm80TargetInfo : public TargetInfo {
public:
  using TargetInfo::TargetInfo;
  mlir::Value threadIdX(mlir::ImplicitLocOpBuilder &b) const override;
  mlir::Value blockId(mlir::ImplicitLocOpBuilder &b, unsigned axis) const override;
  mlir::Value gridDim(mlir::ImplicitLocOpBuilder &b, unsigned axis) const override;
  void barrier(mlir::ImplicitLocOpBuilder &b) const override;
  mlir::Value shuffleXor(mlir::ImplicitLocOpBuilder &b, mlir::Value value,
                         int64_t laneMask) const override;
  mlir::Value voteAny(mlir::ImplicitLocOpBuilder &b, mlir::Value pred) const override;
  void asyncCopy(mlir::ImplicitLocOpBuilder &b, mlir::Value dst, mlir::Value src,
                 mlir::Value srcBytes) const override;
  void asyncCommitGroup(mlir::ImplicitLocOpBuilder &b) const override;
  void asyncWait(mlir::ImplicitLocOpBuilder &b, int64_t pending) const override;
  mlir::Value ldmatrix(mlir::ImplicitLocOpBuilder &b, mlir::Value base, int64_t offset, int num,
                       bool transpose) const override;
  mlir::Value mma(mlir::ImplicitLocOpBuilder &b, mlir::ValueRange a, mlir::ValueRange bFrag,
                  mlir::ValueRange c, bool bf16) const override;
  int maxAtomicAddF32Width() const override { return 1; }
  void atomicAddF32(mlir::ImplicitLocOpBuilder &b, mlir::Value address, mlir::ValueRange values,
                    mlir::Value pred) const override;
  mlir::Value arriveLast(mlir::ImplicitLocOpBuilder &b, mlir::Value counter,
                         mlir::Value expectedMinusOne, mlir::Value leader) const override;
  void waitTurn(mlir::ImplicitLocOpBuilder &b, mlir::Value counter, mlir::Value turn,
                mlir::Value seen) const override;
  void passTurn(mlir::ImplicitLocOpBuilder &b, mlir::Value counter,
                mlir::Value leader) const override;
  /// sm_80 has no programmatic dependent launch.
  bool hasProgrammaticLaunch() const override { return false; }
  void waitPriorKernels(mlir::ImplicitLocOpBuilder &) const override {}
  void launchDependents(mlir::ImplicitLocOpBuilder &) const override {}
  mlir::Value exp2Approx(mlir::ImplicitLocOpBuilder &b, mlir::Value x) const override;
  mlir::Value log2Approx(mlir::ImplicitLocOpBuilder &b, mlir::Value x) const override;
};

/// `red.global.add.f32` (one value) or `red.global.add.v{2,4}.f32` (sm_90+) of
/// `values` at `address`, predicated on `pred` (i1) unless it is null.
void emitRedAddF32(mlir::ImplicitLocOpBuilder &b, mlir::Value address, mlir::ValueRange values,
                   mlir::Value pred);

/// The sm_90 family (sm_90, sm_90a): TargetInfoSm90.cpp.
std::unique_ptr<TargetInfo> createSm90TargetInfo(const TargetDescription &description);

} // namespace tilec::nvvm

#endif // TILEC_PASSES_CONVERTTILETONVVM_TARGETINFO_H
