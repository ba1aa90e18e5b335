// tile.arrive on the GPU (passes/ConvertTileToNVVM/LoadStore.cpp,
// TargetInfo::arriveLast): one inline PTX block, so nothing is scheduled
// between its steps and no memory access moves across it (~{memory}). A
// bar.sync after the program's writes; thread 0 alone fences and adds 1
// (one atom per program); the old count against expected - 1 gives "last",
// made uniform by bar.red.or.pred; the last program's thread 0 fences
// (acquire) and then resets the counter, and bar.red orders every thread's
// reads after that fence (no fence per thread); the i1 drives the scf.if.
// sm_90a uses the same instructions.
// RUN: tile-opt %s -split-input-file -tile-partition-warps -tile-allocate-shared=arch=sm_80 -tile-insert-waits -convert-tile-to-nvvm=arch=sm_80 | FileCheck %s
// RUN: tile-opt %s -split-input-file -tile-partition-warps -tile-allocate-shared=arch=sm_90a -tile-insert-waits -convert-tile-to-nvvm=arch=sm_90a | FileCheck %s

// CHECK-LABEL: llvm.func @merge_when_last
// CHECK:         %[[TID:.+]] = nvvm.read.ptx.sreg.tid.x
// CHECK:         st.global.v4.b32
// CHECK:         %[[LEADER:.+]] = arith.cmpi eq, %[[TID]], %{{.+}} : i32
// CHECK:         %[[EXPECTED:.+]] = arith.subi %{{.+}}, %{{.+}} : i32
// CHECK:         %[[LEADER32:.+]] = arith.extui %[[LEADER]] : i1 to i32
// CHECK:         %[[LAST32:.+]] = llvm.inline_asm has_side_effects asm_dialect = att "{\0A.reg .pred p<3>;\0A.reg .b32 old, zero;\0Asetp.ne.b32 p0, $3, 0;\0Amov.b32 old, 0;\0Amov.b32 zero, 0;\0Abar.sync 0;\0A@p0 fence.acq_rel.gpu;\0A@p0 atom.global.add.u32 old, [$1], 1;\0Asetp.eq.and.u32 p1, old, $2, p0;\0A@p1 fence.acq_rel.gpu;\0A@p1 st.relaxed.gpu.global.b32 [$1], zero;\0Abar.red.or.pred p2, 0, p1;\0Aselp.b32 $0, 1, 0, p2;\0A}", "=r,l,r,r,~{memory}" %{{.+}}, %[[EXPECTED]], %[[LEADER32]] : (!llvm.ptr<1>, i32, i32) -> i32
// CHECK:         %[[LAST:.+]] = arith.cmpi ne, %[[LAST32]], %{{.+}} : i32
// CHECK:         scf.if %[[LAST]] {
// CHECK:           llvm.load
// CHECK:         }
func.func @merge_when_last(%cnt: !tile.ptr<i32>, %part: !tile.ptr<f32>, %n: i32) attributes {tile.kernel, tile.grid = ["arg2", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %pid = tile.program_id 0 : i32
  %g = tile.program_id 1 : i32
  %pv = tile.view %part sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %mine = arith.constant dense<1.0> : tensor<1x64xf32>
  "tile.store"(%mine, %pv, %pid, %c0) : (tensor<1x64xf32>, !tile.view<f32, 2>, i32, i32) -> ()
  %c = tile.addptr %cnt, %g : !tile.ptr<i32>, i32
  %last = tile.arrive %c, %n : !tile.ptr<i32>
  scf.if %last {
    %all = tile.load %pv[%c0, %c0] padding = zero : !tile.view<f32, 2> -> tensor<64x64xf32>
    %sum = tile.reduce sum %all along 1 : tensor<64x64xf32> -> tensor<64xf32>
    %ov = tile.view %part sizes(%c64) strides(%one) : !tile.ptr<f32> -> !tile.view<f32, 1>
    tile.store %sum, %ov[%c0] : tensor<64xf32>, !tile.view<f32, 1>
  }
  return
}

// -----

// A kernel that arrives on a counter does not read that parameter through
// the non-coherent path: a scalar load of it is a plain ld.global.
// CHECK-LABEL: llvm.func @counter_not_read_only
// CHECK:         llvm.load %arg0 {alignment = 4 : i64} : !llvm.ptr<1> -> i32
// CHECK:         llvm.inline_asm
func.func @counter_not_read_only(%cnt: !tile.ptr<i32>, %n: i32) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %before = tile.load_scalar %cnt : !tile.ptr<i32> -> i32
  %last = tile.arrive %cnt, %before : !tile.ptr<i32>
  return
}
