// tile.wait_turn and tile.pass_turn on the GPU (passes/ConvertTileToNVVM/
// LoadStore.cpp, TargetInfo::waitTurn / passTurn). The counter read early
// (tile.load_scalar volatile) is a volatile load; the wait polls only when
// that read was behind the turn: every thread, ld.acquire.gpu in a loop
// with nanosleep, trapping after 2^26 polls (a broken turn contract fails
// the launch instead of hanging it). The pass: bar.sync (every thread's
// adds before it), then thread 0's red.release.gpu add of 1.
// sm_90a uses the same instructions.
// RUN: tile-opt %s -tile-partition-warps -tile-allocate-shared=arch=sm_80 -tile-insert-waits -convert-tile-to-nvvm=arch=sm_80 | FileCheck %s
// RUN: tile-opt %s -tile-partition-warps -tile-allocate-shared=arch=sm_90a -tile-insert-waits -convert-tile-to-nvvm=arch=sm_90a | FileCheck %s

// CHECK-LABEL: llvm.func @add_in_turn
// CHECK:         %[[TID:.+]] = nvvm.read.ptx.sreg.tid.x
// CHECK:         %[[SEEN:.+]] = llvm.load volatile %arg0 {alignment = 4 : i64} : !llvm.ptr<1> -> i32
// CHECK:         %[[LAST:.+]] = arith.subi %arg2
// CHECK:         %[[TURN:.+]] = arith.subi %[[LAST]]
// CHECK:         %[[BEHIND:.+]] = arith.cmpi slt, %[[SEEN]], %[[TURN]] : i32
// CHECK:         scf.if %[[BEHIND]] {
// CHECK:           scf.while
// CHECK:             %[[NOW:.+]] = llvm.inline_asm has_side_effects asm_dialect = att "ld.acquire.gpu.global.b32 $0, [$1];", "=r,l,~{memory}" %arg0
// CHECK:             %[[WAIT:.+]] = arith.cmpi slt, %[[NOW]], %[[TURN]] : i32
// CHECK:             scf.condition(%[[WAIT]])
// CHECK:           } do {
// CHECK:             arith.constant 67108864 : i64
// CHECK:             llvm.inline_asm has_side_effects asm_dialect = att "{\0A.reg .pred p;\0Asetp.ne.b32 p, $0, 0;\0A@p trap;\0Ananosleep.u32 64;\0A}", "r"
// CHECK:         red.global.add
// CHECK:         %[[LEADER:.+]] = arith.cmpi eq, %[[TID]], %{{.+}} : i32
// CHECK:         %[[LEADER32:.+]] = arith.extui %[[LEADER]] : i1 to i32
// CHECK:         llvm.inline_asm has_side_effects asm_dialect = att "{\0A.reg .pred p;\0Asetp.ne.b32 p, $1, 0;\0Abar.sync 0;\0A@p red.release.gpu.global.add.u32 [$0], 1;\0A}", "l,r,~{memory}" %arg0, %[[LEADER32]]
func.func @add_in_turn(%cnt: !tile.ptr<i32>, %acc: !tile.ptr<f32>, %n: i32) attributes {tile.kernel, tile.grid = ["arg2", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %pid = tile.program_id 0 : i32
  %seen = tile.load_scalar %cnt volatile : !tile.ptr<i32> -> i32
  %last = arith.subi %n, %c1 : i32
  %turn = arith.subi %last, %pid : i32
  %av = tile.view %acc sizes(%c64) strides(%one) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %mine = arith.constant dense<1.0> : tensor<64xf32>
  tile.wait_turn %cnt, %turn, %seen : !tile.ptr<i32>
  tile.atomic_add %mine, %av[%c0] : tensor<64xf32>, !tile.view<f32, 1>
  tile.pass_turn %cnt : !tile.ptr<i32>
  return
}
