// RUN: tile-opt %s -split-input-file -tile-partition-warps -tile-allocate-shared -tile-insert-waits -convert-tile-to-nvvm -verify-diagnostics | FileCheck %s

// One attention step at the smallest tile mma.sync allows per warp (64x16 Q
// over 4 warps, 16 keys): K and V are copied to shared memory with 16-byte
// cp.async (their waits deferred to the first read), S = Q·Kᵀ is two
// mma.sync m16n8k16 fed by one ldmatrix.x4 of K, the row max is two
// butterfly shuffles (lanes 1 and 2 of a quad), P·V is two more mma.sync fed
// by ldmatrix.x4.trans of V, and P never touches shared memory. ldmatrix is
// inline PTX so its constant offset sits in the instruction ([base+imm]).
// The lowering leaves the kernel's ABI for the driver's manifest: the
// widest access through each pointer (Q's f16 pairs in registers: 4 bytes;
// K and V by 16-byte cp.async; O by 16-byte chunks), which the runtime
// checks the pointers' alignment against, each pointee, the kernel's own
// attributes carried over, and its shared memory.
// CHECK-LABEL: llvm.func @attention_step
// CHECK-SAME:    (%{{.*}}: !llvm.ptr<1> {tile.align = 4 : i64, tile.elem = f16}, %{{.*}}: !llvm.ptr<1> {tile.align = 16 : i64, tile.elem = f16}, %{{.*}}: !llvm.ptr<1> {tile.align = 16 : i64, tile.elem = f16}, %{{.*}}: !llvm.ptr<1> {tile.align = 16 : i64, tile.elem = f32}, %{{.*}}: i32)
// CHECK-SAME:    nvvm.kernel
// CHECK-SAME:    nvvm.maxntid = array<i32: 128, 1, 1>
// CHECK-SAME:    tile.arg_names = ["q", "k", "v", "o", "n"], tile.grid = ["cdiv(n, 64)", "1", "1"], tile.num_warps = 4 : i64, tile.shared_bytes = 5120 : i64}
// Nothing has touched shared memory when the kernel starts, and nothing
// between the two fills: neither needs a barrier before it.
// CHECK-NOT:     nvvm.barrier0
// CHECK:         nvvm.cp.async.shared.global {{.*}}, 16, cache = {{ *}}cg, %{{.*}} : !llvm.ptr<3>, !llvm.ptr<1>, i32
// CHECK:         nvvm.cp.async.commit.group
// CHECK-NOT:     nvvm.barrier0
// CHECK:         nvvm.cp.async.shared.global {{.*}}, 16, cache = {{ *}}cg
// CHECK:         nvvm.cp.async.commit.group
// CHECK:         nvvm.cp.async.wait.group 1
// CHECK-NEXT:    nvvm.barrier0
// CHECK:         llvm.inline_asm has_side_effects {{.*}}"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {$0, $1, $2, $3}, [$4+0];", "=r,=r,=r,=r,r" %{{.*}} : (!llvm.ptr<3>) -> !llvm.struct<(i32, i32, i32, i32)>
// CHECK-COUNT-2: nvvm.mma.sync {{.*}} {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (vector<2xf16>, vector<2xf16>, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// CHECK-COUNT-2: nvvm.shfl.sync {{ *}}bfly %{{.*}}, %{{.*}}, %c1_i32{{.*}}, %c31_i32{{[_0-9]*}} : f32 -> f32
// CHECK-COUNT-2: nvvm.shfl.sync {{ *}}bfly %{{.*}}, %{{.*}}, %c2_i32{{.*}}, %c31_i32{{[_0-9]*}} : f32 -> f32
// CHECK-NOT:     nvvm.shfl.sync
// CHECK:         llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK:         nvvm.cp.async.wait.group 0
// CHECK-NEXT:    nvvm.barrier0
// CHECK:         llvm.inline_asm has_side_effects {{.*}}"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// CHECK-COUNT-2: nvvm.mma.sync
// CHECK-NOT:     nvvm.mma.sync
// O leaves through shared memory (FA2's epilogue): each thread writes its
// accumulator words as it holds them, a barrier, then every thread reads a
// 16-byte chunk of a row and stores it with one predicated st.global.v4.
// CHECK:         llvm.store {{.*}} : i32, !llvm.ptr<3>
// CHECK:         nvvm.barrier0
// CHECK:         llvm.load {{.*}} {alignment = 16 : i64} : !llvm.ptr<3> -> vector<4xi32>
// CHECK:         "{ .reg .pred p; setp.ne.b32 p, $5, 0; @p st.global.v4.b32 [$0], {$1, $2, $3, $4}; }"
// CHECK:         llvm.return
func.func @attention_step(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %vp: !tile.ptr<f16>,
                          %op: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.arg_names = ["q", "k", "v", "o", "n"],
                tile.grid = ["cdiv(n, 64)", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c16 = arith.constant 16 : i32
  %c1 = arith.constant 1 : i64
  %s16 = arith.constant 16 : i64
  %qv = tile.view %qp sizes(%n, %c16) strides(%s16, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%n, %c16) strides(%s16, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %vv = tile.view %vp sizes(%n, %c16) strides(%s16, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%n, %c16) strides(%s16, %c1) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x16xf16>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<16x16xf16>
  %v = tile.load %vv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<16x16xf16>
  %zero = arith.constant dense<0.0> : tensor<64x16xf32>
  %s = tile.dot %q, %k, %zero transpose_b : tensor<64x16xf16>, tensor<16x16xf16> -> tensor<64x16xf32>
  %m = tile.reduce max %s along 1 : tensor<64x16xf32> -> tensor<64xf32>
  %m2 = tile.expand_dims %m along 1 : tensor<64xf32> -> tensor<64x1xf32>
  %mb = tile.broadcast %m2 : tensor<64x1xf32> -> tensor<64x16xf32>
  %d = arith.subf %s, %mb : tensor<64x16xf32>
  %p = math.exp2 %d : tensor<64x16xf32>
  %p16 = arith.truncf %p : tensor<64x16xf32> to tensor<64x16xf16>
  %o = tile.dot %p16, %v, %zero : tensor<64x16xf16>, tensor<16x16xf16> -> tensor<64x16xf32>
  tile.store %o, %ov[%c0, %c0] : tensor<64x16xf32>, !tile.view<f32, 2>
  return
}

// -----

// bf16 operands go to mma.sync as packed i32 pairs.
// CHECK-LABEL: llvm.func @bf16_dot
// CHECK-COUNT-2: nvvm.mma.sync {{.*}}multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>{{.*}} : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
func.func @bf16_dot(%qp: !tile.ptr<bf16>, %kp: !tile.ptr<bf16>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c16 = arith.constant 16 : i32
  %c1 = arith.constant 1 : i64
  %s16 = arith.constant 16 : i64
  %qv = tile.view %qp sizes(%n, %c16) strides(%s16, %c1) : !tile.ptr<bf16> -> !tile.view<bf16, 2>
  %kv = tile.view %kp sizes(%n, %c16) strides(%s16, %c1) : !tile.ptr<bf16> -> !tile.view<bf16, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<bf16, 2> -> tensor<64x16xbf16>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<bf16, 2> -> tensor<16x16xbf16>
  %zero = arith.constant dense<0.0> : tensor<64x16xf32>
  %s = tile.dot %q, %k, %zero transpose_b : tensor<64x16xbf16>, tensor<16x16xbf16> -> tensor<64x16xf32>
  return
}

// -----

// Shared tiles are filled by cp.async, which zero-fills: other padding
// cannot be honoured there.
func.func @shared_with_nan_padding(%kp: !tile.ptr<f16>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c16 = arith.constant 16 : i32
  %c1 = arith.constant 1 : i64
  %s16 = arith.constant 16 : i64
  %kv = tile.view %kp sizes(%n, %c16) strides(%s16, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %a = arith.constant dense<1.0> : tensor<64x16xf16>
  // expected-error@below {{a tile loaded into shared memory pads with zero}}
  %k = tile.load %kv[%c0, %c0] padding = nan : !tile.view<f16, 2> -> tensor<16x16xf16>
  %zero = arith.constant dense<0.0> : tensor<64x16xf32>
  %s = tile.dot %a, %k, %zero transpose_b : tensor<64x16xf16>, tensor<16x16xf16> -> tensor<64x16xf32>
  return
}

// -----

// Q, O and S of a 128-row block over 4 warps at head_dim 128 would pin
// 64 + 128 + 64 registers per thread: Q stays in shared memory and its
// fragments are read with ldmatrix (non-transposed) at every k step, each
// warp at its own rows — FlashAttention-2's choice for this shape.
// CHECK-LABEL: llvm.func @q_in_shared_memory
// CHECK-SAME:    shared_bytes = 65536
// CHECK:         scf.for
// CHECK:           llvm.inline_asm has_side_effects {{.*}}"ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK:           nvvm.mma.sync
func.func @q_in_shared_memory(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %vp: !tile.ptr<f16>,
                              %n: i32) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %c128 = arith.constant 128 : i32
  %one = arith.constant 1 : i64
  %s128 = arith.constant 128 : i64
  %qv = tile.view %qp sizes(%n, %c128) strides(%s128, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%n, %c128) strides(%s128, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %vv = tile.view %vp sizes(%n, %c128) strides(%s128, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<128x128xf16>
  %zs = arith.constant dense<0.0> : tensor<128x64xf32>
  %zo = arith.constant dense<0.0> : tensor<128x128xf32>
  %o = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %zo) -> (tensor<128x128xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x128xf16>
    %v = tile.load %vv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x128xf16>
    %s = tile.dot %q, %k, %zs transpose_b : tensor<128x128xf16>, tensor<64x128xf16> -> tensor<128x64xf32>
    %p = arith.truncf %s : tensor<128x64xf32> to tensor<128x64xf16>
    %acc2 = tile.dot %p, %v, %acc : tensor<128x64xf16>, tensor<64x128xf16> -> tensor<128x128xf32>
    scf.yield %acc2 : tensor<128x128xf32>
  }
  return
}

// -----

// T is copied before a loop that may run zero times and read after it: the
// wait after the loop cannot count on the body's commits having happened, so
// it waits for everything (group 0), then the barrier, then the reads.
// CHECK-LABEL: llvm.func @zerotrip
// CHECK:         scf.for
// CHECK:           scf.yield {{.*}} : f32
// CHECK-NEXT:    }
// CHECK:         nvvm.cp.async.wait.group 0
// CHECK-NEXT:    nvvm.barrier0
// CHECK:         llvm.inline_asm {{.*}}ldmatrix
// Nothing is left in flight at exit.
// CHECK:         nvvm.cp.async.wait.group 0
// CHECK-NEXT:    llvm.return
func.func @zerotrip(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %qv = tile.view %qp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %t = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %acc = scf.for %j = %c1 to %n step %c1 iter_args(%o = %zero) -> (tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %u = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %u, %o transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %s : tensor<64x64xf32>
  }
  %s2 = tile.dot %q, %t, %acc transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  tile.store %s2, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}

// -----

// A shared tile filled before two loops in a row (what tile-split-masked-loops
// makes) and read in both: it is waited for once, before the first loop and
// outside it, so the wait holds whatever the trip counts (a wait inside the
// first loop would prove nothing for the second when the first runs zero
// times), and no iteration pays for it.
// CHECK-LABEL: llvm.func @leak
// CHECK:         nvvm.cp.async.wait.group 0
// CHECK-NEXT:    nvvm.barrier0
// CHECK:         scf.for
// CHECK-NOT:       nvvm.cp.async.wait.group
// CHECK:           llvm.inline_asm {{.*}}ldmatrix
// CHECK:         scf.for
// CHECK-NOT:       nvvm.cp.async.wait.group
// CHECK:           llvm.inline_asm {{.*}}ldmatrix
func.func @leak(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n1: i32, %n2: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %qv = tile.view %qp sizes(%n2, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %t = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %a1 = scf.for %j = %c0 to %n1 step %c1 iter_args(%o = %zero) -> (tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %q = tile.load %qv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %t, %o transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %s : tensor<64x64xf32>
  }
  %a2 = scf.for %j = %n1 to %n2 step %c1 iter_args(%o = %a1) -> (tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %q = tile.load %qv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %t, %o transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %s : tensor<64x64xf32>
  }
  tile.store %a2, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}

// -----

// tile-pipeline's ring (stages=2): K(j+1) and V(j+1) are loaded at the top of
// the body, before iteration j's tiles are read. Each carried tile gets a twin
// region (K0 V0 K1 V1: 4 x 8 KiB) and a loop-carried parity picks the one to
// read (parity * 16384 bytes on) and the one to fill (the other). One wait and
// one barrier at the top of each iteration cover both: the wait lands the
// previous iteration's copies, the barrier shows them to every warp and
// proves every warp is done with the regions about to be refilled.
// CHECK-LABEL: llvm.func @ring
// CHECK-SAME:    shared_bytes = 32768
// CHECK:         scf.for {{.*}}, %[[PARITY:[^ ]+]] = %c0_i32{{[_0-9]*}})
// CHECK:           %[[READ:.+]] = arith.muli %[[PARITY]], %[[TWIN:c16384_i32[_0-9]*]]
// CHECK:           arith.subi %[[TWIN]], %[[READ]]
// CHECK:           nvvm.cp.async.wait.group 0
// CHECK-NEXT:      nvvm.barrier0
// CHECK-NOT:       nvvm.barrier0
// CHECK:           nvvm.cp.async.commit.group
// CHECK-NOT:       nvvm.barrier0
// CHECK:           nvvm.cp.async.commit.group
// CHECK-NOT:       nvvm.barrier0
// CHECK-NOT:       nvvm.cp.async.wait.group
// CHECK:           "ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK-NOT:       nvvm.barrier0
// CHECK-NOT:       nvvm.cp.async.wait.group
// CHECK:           "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// CHECK-NOT:       nvvm.barrier0
// CHECK:           %[[FLIP:.+]] = arith.xori %[[PARITY]], %c1
// CHECK-NEXT:      scf.yield {{.*}}, %[[FLIP]] :
// CHECK:         nvvm.cp.async.wait.group 0
// CHECK:         llvm.return
func.func @ring(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %vp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %qv = tile.view %qp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %vv = tile.view %vp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %k0 = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %v0 = tile.load %vv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %acc:3 = scf.for %j = %c0 to %n step %c1 iter_args(%o = %zero, %k = %k0, %v = %v0) -> (tensor<64x64xf32>, tensor<64x64xf16>, tensor<64x64xf16>) : i32 {
    %j1 = arith.addi %j, %c1 : i32
    %row = arith.muli %j1, %c64 : i32
    %knext = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %vnext = tile.load %vv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %p = arith.truncf %s : tensor<64x64xf32> to tensor<64x64xf16>
    %o2 = tile.dot %p, %v, %o : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %o2, %knext, %vnext : tensor<64x64xf32>, tensor<64x64xf16>, tensor<64x64xf16>
  }
  tile.store %acc#0, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}

// -----

// A row vector computed in one layout (the row sums of a tile read out of
// shared memory, 8 registers per thread in the default layout) and needed in
// another (the accumulator's row slice, 2 registers) moves through one row of
// shared scratch: each thread stores its 8 f32, a barrier, each loads its 2.
// (The backward's Delta = rowsum(dO ∘ O) takes this path at head_dim 128;
// rank-1 conversions were refused before.)
// CHECK-LABEL: llvm.func @row_vector_between_layouts
// CHECK:         nvvm.barrier0
// CHECK-COUNT-8: llvm.store %{{.*}} : f32, !llvm.ptr<3>
// CHECK-NEXT:    nvvm.barrier0
// CHECK-COUNT-2: llvm.load %{{.*}} : !llvm.ptr<3> -> f32
func.func @row_vector_between_layouts(%kp: !tile.ptr<f16>, %op: !tile.ptr<f32>) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %a = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %s = tile.dot %a, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  %k32 = arith.extf %k : tensor<64x64xf16> to tensor<64x64xf32>
  %sum = tile.reduce sum %k32 along 1 : tensor<64x64xf32> -> tensor<64xf32>
  %col = tile.expand_dims %sum along 1 : tensor<64xf32> -> tensor<64x1xf32>
  %b = tile.broadcast %col : tensor<64x1xf32> -> tensor<64x64xf32>
  %d = arith.subf %s, %b : tensor<64x64xf32>
  tile.store %d, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}

// -----

// tile.atomic_add: one predicated red.global.add.f32 per element a thread
// holds, and each replicated element added once: the row sums of a 64x64
// accumulator are replicated over the 4 lanes of a quad (2 rows per thread),
// so 2 reds whose predicate includes lane bits 0-1 being zero.
// CHECK-LABEL: llvm.func @atomic_add_row_vector
// CHECK:         arith.andi %{{.*}}, %c3_i32{{[_0-9]*}} : i32
// CHECK:         arith.cmpi eq, %{{.*}}, %{{.*}} : i32
// CHECK-COUNT-2: @p red.global.add.f32 [$0], $1;
// CHECK-NOT:     red.global.add
func.func @atomic_add_row_vector(%kp: !tile.ptr<f16>, %op: !tile.ptr<f32>) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64) strides(%one) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %a = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %s = tile.dot %a, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  %sum = tile.reduce sum %s along 1 : tensor<64x64xf32> -> tensor<64xf32>
  tile.atomic_add %sum, %ov[%c0] : tensor<64xf32>, !tile.view<f32, 1>
  return
}
