//===- TargetInfoSm80.cpp - convert-tile-to-nvvm: sm_80 primitives --------===//
//
// The sm_80 family's instructions (sm_80, sm_86, sm_89; and, until sm_90 has
// its own, sm_90): NVVM ops where MLIR has them, inline PTX where LLVM would
// otherwise move what the schedule depends on (ldmatrix, see there).
//
//===----------------------------------------------------------------------===//
#include "TargetInfo.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace tilec::nvvm {

// The lowering computes lane and warp ids with one warp size for all targets.
static_assert([] {
  for (const TargetDescription &target : kTargets)
    if (target.warpSize != 32)
      return false;
  return true;
}());

TargetInfo::~TargetInfo() = default;

Operation *TargetInfo::inlinePtx(ImplicitLocOpBuilder &b, TypeRange results, ValueRange operands,
                                 StringRef text, StringRef constraints) {
  return LLVM::InlineAsmOp::create(b, results, operands, text, constraints,
                                   /*has_side_effects=*/true, /*is_align_stack=*/false,
                                   LLVM::tailcallkind::TailCallKind::None,
                                   LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
                                   ArrayAttr());
}

static Value i32(ImplicitLocOpBuilder &b, int64_t v) { return arith::ConstantIntOp::create(b, v, 32); }

Value Sm80TargetInfo::threadIdX(ImplicitLocOpBuilder &b) const {
  return NVVM::ThreadIdXOp::create(b, b.getI32Type());
}

Value Sm80TargetInfo::blockId(ImplicitLocOpBuilder &b, unsigned axis) const {
  switch (axis) {
  case 0: return NVVM::BlockIdXOp::create(b, b.getI32Type());
  case 1: return NVVM::BlockIdYOp::create(b, b.getI32Type());
  default: return NVVM::BlockIdZOp::create(b, b.getI32Type());
  }
}

Value Sm80TargetInfo::gridDim(ImplicitLocOpBuilder &b, unsigned axis) const {
  switch (axis) {
  case 0: return NVVM::GridDimXOp::create(b, b.getI32Type());
  case 1: return NVVM::GridDimYOp::create(b, b.getI32Type());
  default: return NVVM::GridDimZOp::create(b, b.getI32Type());
  }
}

void Sm80TargetInfo::barrier(ImplicitLocOpBuilder &b) const { NVVM::Barrier0Op::create(b); }

Value Sm80TargetInfo::shuffleXor(ImplicitLocOpBuilder &b, Value value, int64_t laneMask) const {
  // Member mask: every lane; clamp 0x1f: the whole warp is one segment.
  Value fullMask = i32(b, -1);
  Value lanes = i32(b, laneMask);
  return NVVM::ShflOp::create(b, value.getType(), fullMask, value, lanes, i32(b, hw.warpSize - 1),
                              NVVM::ShflKindAttr::get(b.getContext(), NVVM::ShflKind::bfly),
                              UnitAttr());
}

Value Sm80TargetInfo::voteAny(ImplicitLocOpBuilder &b, Value pred) const {
  return NVVM::VoteSyncOp::create(b, b.getI1Type(), i32(b, -1), pred,
                                  NVVM::VoteSyncKindAttr::get(b.getContext(), NVVM::VoteSyncKind::any));
}

void Sm80TargetInfo::asyncCopy(ImplicitLocOpBuilder &b, Value dst, Value src, Value srcBytes) const {
  // .cg: cache in L2 only; K and V are read once per program.
  NVVM::CpAsyncOp::create(b, dst, src, b.getI32IntegerAttr(hw.chunkBytes),
                          NVVM::LoadCacheModifierKindAttr::get(b.getContext(),
                                                               NVVM::LoadCacheModifierKind::CG),
                          srcBytes);
}

void Sm80TargetInfo::asyncCommitGroup(ImplicitLocOpBuilder &b) const {
  NVVM::CpAsyncCommitGroupOp::create(b);
}

void Sm80TargetInfo::asyncWait(ImplicitLocOpBuilder &b, int64_t pending) const {
  NVVM::CpAsyncWaitGroupOp::create(b, b.getI32IntegerAttr(pending));
}

/// ldmatrix.x{num}[.trans] at [base + offset], as inline PTX with the offset
/// in the instruction text. Why not nvvm.ldmatrix: every one of a dot's
/// ldmatrix addresses is loop-invariant, so LLVM's LICM hoists each
/// base+offset out of the K/V loop, pinning one 64-bit register per ldmatrix
/// (over 100 registers and spills at head_dim 128). With the offset in the
/// immediate field only the few bases stay live. Side effects keep it from
/// being hoisted itself (it reads shared memory that changes every
/// iteration) and ordered with the barriers and cp.async waits around it.
Value Sm80TargetInfo::ldmatrix(ImplicitLocOpBuilder &b, Value base, int64_t offset, int num,
                               bool transpose) const {
  std::string regs;
  for (int i = 0; i < num; ++i)
    regs += (i ? ", $" : "$") + std::to_string(i);
  std::string text = "ldmatrix.sync.aligned.m8n8.x" + std::to_string(num) +
                     (transpose ? ".trans" : "") + ".shared.b16 {" + regs + "}, [$" +
                     std::to_string(num) + "+" + std::to_string(offset) + "];";
  std::string constraints;
  for (int i = 0; i < num; ++i)
    constraints += "=r,";
  // Shared addresses are 32-bit: lib/Target builds the NVPTX target with
  // short pointers (nvptx-short-ptr).
  constraints += "r";
  auto type = LLVM::LLVMStructType::getLiteral(b.getContext(), SmallVector<Type>(num, b.getI32Type()));
  return inlinePtx(b, type, base, text, constraints)->getResult(0);
}

Value Sm80TargetInfo::mma(ImplicitLocOpBuilder &b, ValueRange a, ValueRange bFrag, ValueRange c,
                          bool bf16) const {
  auto resultType = LLVM::LLVMStructType::getLiteral(b.getContext(), SmallVector<Type>(4, b.getF32Type()));
  NVVM::MMATypes operandType = bf16 ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16;
  return NVVM::MmaOp::create(b, resultType, a, bFrag, c,
                             {int32_t(hw.mmaM), int32_t(hw.mmaN), int32_t(hw.mmaK)}, std::nullopt,
                             std::nullopt, std::array<NVVM::MMATypes, 2>{operandType, operandType},
                             std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row, NVVM::MMALayout::col});
}

/// The text of `red.global.add{vector}.f32 [$0], {values}`, predicated on
/// the i32 operand after the values when `predicated`.
static std::string redAddF32Ptx(size_t width, bool predicated) {
  std::string vals;
  for (size_t i = 0; i < width; ++i)
    vals += (i ? ", $" : "$") + std::to_string(i + 1);
  std::string op = width == 1 ? "red.global.add.f32 [$0], " + vals + ";"
                              : "red.global.add.v" + std::to_string(width) + ".f32 [$0], {" + vals +
                                    "};";
  if (!predicated)
    return op;
  return "{ .reg .pred p; setp.ne.b32 p, $" + std::to_string(width + 1) + ", 0; @p " + op + " }";
}

void emitRedAddF32(ImplicitLocOpBuilder &b, Value address, ValueRange values, Value pred) {
  SmallVector<Value> operands{address};
  llvm::append_range(operands, values);
  std::string constraints = "l";
  for (size_t i = 0; i < values.size(); ++i)
    constraints += ",f";
  if (pred) {
    operands.push_back(arith::ExtUIOp::create(b, b.getI32Type(), pred));
    constraints += ",r";
  }
  TargetInfo::inlinePtx(b, TypeRange{}, operands, redAddF32Ptx(values.size(), bool(pred)),
                        constraints);
}

/// sm_80 has scalar f32 reductions only.
void Sm80TargetInfo::atomicAddF32(ImplicitLocOpBuilder &b, Value address, ValueRange values,
                                  Value pred) const {
  assert(values.size() == 1 && "sm_80 adds one f32 per red");
  emitRedAddF32(b, address, values, pred);
}

Value Sm80TargetInfo::exp2Approx(ImplicitLocOpBuilder &b, Value x) const {
  // ex2.approx.ftz: ~2 ulp, exp2(-inf) = +0; what FlashAttention uses.
  return LLVM::CallIntrinsicOp::create(b, b.getF32Type(),
                                       b.getStringAttr("llvm.nvvm.ex2.approx.ftz.f32"), ValueRange{x})
      .getResult(0);
}

Value Sm80TargetInfo::log2Approx(ImplicitLocOpBuilder &b, Value x) const {
  return LLVM::CallIntrinsicOp::create(b, b.getF32Type(),
                                       b.getStringAttr("llvm.nvvm.lg2.approx.ftz.f"), ValueRange{x})
      .getResult(0);
}

std::unique_ptr<TargetInfo> createTargetInfo(StringRef arch, std::string &error) {
  const TargetDescription *description = lookupTarget(arch);
  if (!description) {
    error = "unsupported arch '" + arch.str() + "': expected ";
    for (size_t i = 0; i < std::size(kTargets); ++i)
      error += (i == 0 ? "" : i + 1 == std::size(kTargets) ? " or " : ", ") + kTargets[i].arch.str();
    return nullptr;
  }
  switch (description->family) {
  case TargetFamily::Sm80: return std::make_unique<Sm80TargetInfo>(*description);
  case TargetFamily::Sm90: return createSm90TargetInfo(*description);
  }
  llvm_unreachable("every target family has an implementation");
}

} // namespace tilec::nvvm

namespace tilec::nvvm {

/// One inline PTX block, so nothing is scheduled between its steps (and
/// "~{memory}": no memory access moves across it). The release side: every
/// thread's earlier writes are ordered before the leader's fence by the
/// bar.sync (PTX's causality order is cumulative through barriers), and the
/// fence.acq_rel.gpu before the relaxed atom makes them visible to whoever
/// observes the count (cooperative_groups' grid sync is built the same way:
/// one thread's fence and atomic after __syncthreads). One atom per block,
/// not per warp: the counter's address serializes at L2. The acquire side:
/// the leader of the last block fences after its atom (the acquire pattern:
/// a relaxed read, then a fence, in one thread), and bar.red.or.pred hands
/// the outcome to every thread (uniform, no shared memory) and orders their
/// reads after the leader's fence (cumulative through the barrier, as the
/// release side; cooperative_groups' grid sync fences in one thread too).
/// The last block then stores 0, after its fence, which so does not wait
/// for that store: every other block has arrived, so nothing adds after it
/// in this launch, and the next launch (or graph replay) starts at zero.
/// (Until session 11 the leader fenced after the store and every thread of
/// the last block fenced again after bar.red: on the critical path of the
/// fused decode merge, two more waits for L2, one per thread.)
Value Sm80TargetInfo::arriveLast(ImplicitLocOpBuilder &b, Value counter, Value expectedMinusOne,
                                 Value leader) const {
  Value leaderI32 = arith::ExtUIOp::create(b, b.getI32Type(), leader);
  static constexpr const char *text =
      "{\n"
      ".reg .pred p<3>;\n"
      ".reg .b32 old, zero;\n"
      "setp.ne.b32 p0, $3, 0;\n"
      "mov.b32 old, 0;\n"
      "mov.b32 zero, 0;\n"
      "bar.sync 0;\n"
      "@p0 fence.acq_rel.gpu;\n"
      "@p0 atom.global.add.u32 old, [$1], 1;\n"
      "setp.eq.and.u32 p1, old, $2, p0;\n"
      "@p1 fence.acq_rel.gpu;\n"
      "@p1 st.relaxed.gpu.global.b32 [$1], zero;\n"
      "bar.red.or.pred p2, 0, p1;\n"
      "selp.b32 $0, 1, 0, p2;\n"
      "}";
  Value last = inlinePtx(b, TypeRange{b.getI32Type()}, ValueRange{counter, expectedMinusOne, leaderI32},
                         text, "=r,l,r,r,~{memory}")
                   ->getResult(0);
  return arith::CmpIOp::create(b, arith::CmpIPredicate::ne, last, i32(b, 0));
}

/// tile.wait_turn. Every thread polls (one transaction per warp: its
/// lanes read one address), so each warp's later accesses are ordered by its
/// own acquire load and no barrier is needed. `seen` was read earlier with
/// a volatile load (tile.load_scalar volatile): in the steady state of a
/// turn-ordered loop it is already enough, and the op costs one compare.
/// The program this one waits for started before it (tile.wait_turn's
/// contract), so the wait ends; a broken contract would hang the GPU, so
/// after kMaxPolls polls (tens of seconds with the sleeps) the thread traps
/// and the launch fails with an error instead.
void Sm80TargetInfo::waitTurn(ImplicitLocOpBuilder &b, Value counter, Value turn,
                              Value seen) const {
  constexpr int64_t kMaxPolls = int64_t(1) << 26;
  Value behind = arith::CmpIOp::create(b, arith::CmpIPredicate::slt, seen, turn);
  auto ifOp = scf::IfOp::create(b, TypeRange{}, behind, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  Value zero64 = arith::ConstantIntOp::create(b, 0, 64);
  auto loop = scf::WhileOp::create(b, TypeRange{b.getI64Type()}, ValueRange{zero64});
  {
    Block *before = b.createBlock(&loop.getBefore(), loop.getBefore().end(), {b.getI64Type()}, {b.getLoc()});
    b.setInsertionPointToStart(before);
    Value polls = before->getArgument(0);
    Value now = inlinePtx(b, TypeRange{b.getI32Type()}, ValueRange{counter},
                          "ld.acquire.gpu.global.b32 $0, [$1];", "=r,l,~{memory}")
                    ->getResult(0);
    Value waiting = arith::CmpIOp::create(b, arith::CmpIPredicate::slt, now, turn);
    scf::ConditionOp::create(b, waiting, ValueRange{polls});
  }
  {
    Block *after = b.createBlock(&loop.getAfter(), loop.getAfter().end(), {b.getI64Type()}, {b.getLoc()});
    b.setInsertionPointToStart(after);
    Value polls = arith::AddIOp::create(b, after->getArgument(0),
                                        arith::ConstantIntOp::create(b, 1, 64));
    Value tooLong = arith::CmpIOp::create(b, arith::CmpIPredicate::sge, polls,
                                          arith::ConstantIntOp::create(b, kMaxPolls, 64));
    inlinePtx(b, TypeRange{}, ValueRange{arith::ExtUIOp::create(b, b.getI32Type(), tooLong)},
              "{\n.reg .pred p;\nsetp.ne.b32 p, $0, 0;\n@p trap;\nnanosleep.u32 64;\n}",
              "r");
    scf::YieldOp::create(b, ValueRange{polls});
  }
}

/// tile.pass_turn: the release half of tile.arrive (arriveLast): the bar.sync
/// orders every thread's earlier writes (the turn's red.global.add of dQ)
/// before the leader's release add, which makes them visible before the
/// count moves (red: nothing waits for its result). red.release.gpu is
/// MEMBAR.ALL.GPU + RED on sm_90; fence.acq_rel.gpu + a relaxed red (as
/// arriveLast's) adds CCTL.IVALL, an L1 invalidation only the acquire side
/// needs (timed the same, session 16 runs 1-2).
void Sm80TargetInfo::passTurn(ImplicitLocOpBuilder &b, Value counter, Value leader) const {
  Value leaderI32 = arith::ExtUIOp::create(b, b.getI32Type(), leader);
  static constexpr const char *text = "{\n"
                                      ".reg .pred p;\n"
                                      "setp.ne.b32 p, $1, 0;\n"
                                      "bar.sync 0;\n"
                                      "@p red.release.gpu.global.add.u32 [$0], 1;\n"
                                      "}";
  inlinePtx(b, TypeRange{}, ValueRange{counter, leaderI32}, text, "l,r,~{memory}");
}

} // namespace tilec::nvvm
