// tile.wait_prior_kernels and tile.launch_dependents on the GPU
// (passes/ConvertTileToNVVM/LoadStore.cpp, TargetInfo::waitPriorKernels /
// launchDependents). sm_90a: griddepcontrol.wait / .launch_dependents as
// inline PTX with a memory clobber (LLVM's intrinsics are IntrNoMem, so
// loads could move above them), the kernel marked
// tile.programmatic_launch for the manifest, and its scalar loads no longer
// !invariant.load (LLVM may hoist those above the wait). sm_80 has no
// programmatic launch: no instruction, no mark, the read-only scalar load
// stays invariant (ld.global.nc).
// RUN: tile-opt %s -tile-partition-warps -tile-allocate-shared=arch=sm_90a -tile-insert-waits -convert-tile-to-nvvm=arch=sm_90a | FileCheck %s --check-prefix=SM90
// RUN: tile-opt %s -tile-partition-warps -tile-allocate-shared=arch=sm_80 -tile-insert-waits -convert-tile-to-nvvm=arch=sm_80 | FileCheck %s --check-prefix=SM80

// SM90-LABEL: llvm.func @scaled_copy
// SM90-SAME:    tile.programmatic_launch
// SM90:         llvm.inline_asm has_side_effects asm_dialect = att "griddepcontrol.wait;", "~{memory}"
// SM90-NEXT:    llvm.inline_asm has_side_effects asm_dialect = att "griddepcontrol.launch_dependents;", "~{memory}"
// SM90:         %[[S:.+]] = llvm.load %arg2 {alignment = 4 : i64} : !llvm.ptr<1> -> f32
// SM90-NOT:     griddepcontrol
// SM90:         llvm.return

// SM80-LABEL: llvm.func @scaled_copy
// SM80-NOT:     tile.programmatic_launch
// SM80-NOT:     griddepcontrol
// SM80:         llvm.load %arg2 invariant {alignment = 4 : i64} : !llvm.ptr<1> -> f32
// SM80-NOT:     griddepcontrol
// SM80:         llvm.return
func.func @scaled_copy(%src: !tile.ptr<f32>, %dst: !tile.ptr<f32>, %scale: !tile.ptr<f32>) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  tile.wait_prior_kernels
  tile.launch_dependents
  %s = tile.load_scalar %scale : !tile.ptr<f32> -> f32
  %sv = tile.view %src sizes(%c64) strides(%one) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %dv = tile.view %dst sizes(%c64) strides(%one) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %x = tile.load %sv[%c0] padding = zero : !tile.view<f32, 1> -> tensor<64xf32>
  %ss = tile.splat %s : f32 -> tensor<64xf32>
  %y = arith.mulf %x, %ss : tensor<64xf32>
  tile.store %y, %dv[%c0] : tensor<64xf32>, !tile.view<f32, 1>
  return
}

// Without a wait a kernel is launched in stream order, even when it lets
// the next kernel start early.
// SM90-LABEL: llvm.func @trigger_only
// SM90-NOT:     tile.programmatic_launch
// SM90:         griddepcontrol.launch_dependents
func.func @trigger_only(%dst: !tile.ptr<f32>) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  tile.launch_dependents
  %dv = tile.view %dst sizes(%c64) strides(%one) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %y = arith.constant dense<1.0> : tensor<64xf32>
  tile.store %y, %dv[%c0] : tensor<64xf32>, !tile.view<f32, 1>
  return
}
