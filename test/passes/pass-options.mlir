// Every pass option is checked where it enters: a bad value is a diagnostic
// naming the option, the value and the allowed range, never a crash (`not`
// fails on a signal). num-warps=0 used to be a SIGFPE in tile-lazy-rescale,
// which runs before tile-partition-warps in the tile-to-nvvm pipeline.

// The pipeline checks the options its passes share, at the pipeline's name.
// RUN: not tile-opt %s --pass-pipeline='builtin.module(tile-optimize,tile-to-nvvm{arch=sm_80 num-warps=0})' 2>&1 | FileCheck %s --check-prefix=PIPE-W0
// PIPE-W0: error: tile-to-nvvm: num-warps must be a power of two in [1, 16], got 0
// PIPE-W0-NOT: Stack dump
// RUN: not tile-opt %s --pass-pipeline='builtin.module(tile-to-nvvm{num-warps=-1})' 2>&1 | FileCheck %s --check-prefix=PIPE-WNEG
// PIPE-WNEG: error: tile-to-nvvm: num-warps must be a power of two in [1, 16], got -1
// RUN: not tile-opt %s --pass-pipeline='builtin.module(tile-to-nvvm{num-warps=3})' 2>&1 | FileCheck %s --check-prefix=PIPE-W3
// PIPE-W3: error: tile-to-nvvm: num-warps must be a power of two in [1, 16], got 3
// RUN: not tile-opt %s --pass-pipeline='builtin.module(tile-to-nvvm{num-warps=32})' 2>&1 | FileCheck %s --check-prefix=PIPE-W32
// PIPE-W32: error: tile-to-nvvm: num-warps must be a power of two in [1, 16], got 32
// RUN: not tile-opt %s --pass-pipeline='builtin.module(tile-to-nvvm{stages=0})' 2>&1 | FileCheck %s --check-prefix=PIPE-S0
// PIPE-S0: error: tile-to-nvvm: stages must be 1 or 2, got 0
// RUN: not tile-opt %s --pass-pipeline='builtin.module(tile-to-nvvm{stages=3})' 2>&1 | FileCheck %s --check-prefix=PIPE-S3
// PIPE-S3: error: tile-to-nvvm: stages must be 1 or 2, got 3

// Each pass on its own.
// RUN: not tile-opt %s --pass-pipeline='builtin.module(tile-lazy-rescale{num-warps=0})' 2>&1 | FileCheck %s --check-prefix=LAZY-W0
// LAZY-W0: error: tile-lazy-rescale: num-warps must be a power of two in [1, 16], got 0
// RUN: not tile-opt %s --pass-pipeline='builtin.module(tile-lazy-rescale{min-registers=-5})' 2>&1 | FileCheck %s --check-prefix=LAZY-MIN
// LAZY-MIN: error: tile-lazy-rescale: min-registers must be >= 0, got -5
// RUN: not tile-opt %s --pass-pipeline='builtin.module(tile-partition-warps{num-warps=0})' 2>&1 | FileCheck %s --check-prefix=PART-W0
// PART-W0: error: tile-partition-warps: num-warps must be a power of two in [1, 16], got 0
// RUN: not tile-opt %s --pass-pipeline='builtin.module(tile-pipeline{stages=-1})' 2>&1 | FileCheck %s --check-prefix=PIPELINE-S
// PIPELINE-S: error: tile-pipeline: stages=-1 is not supported (1: FlashAttention-2's single buffer per tile, 2: a ring of two buffers)
// RUN: not tile-opt %s --pass-pipeline='builtin.module(tile-partition-warps,convert-tile-to-nvvm{arch=sm_70})' 2>&1 | FileCheck %s --check-prefix=ARCH
// ARCH: error: unsupported arch 'sm_70': expected sm_80, sm_86, sm_89, sm_90 or sm_90a
// RUN: not tile-opt %s --pass-pipeline='builtin.module(tile-partition-warps,convert-tile-to-nvvm{xor-ring-phases=odd})' 2>&1 | FileCheck %s --check-prefix=XOR
// XOR: error: xor-ring-phases must be auto, none, trans, non-trans or all, got 'odd'

// A kernel whose tile.num_warps was written by hand is checked as well.
// RUN: sed 's/tile.kernel,/tile.kernel, tile.num_warps = 0 : i64,/' %s | not tile-opt -convert-tile-to-nvvm 2>&1 | FileCheck %s --check-prefix=ATTR
// ATTR: error: tile.num_warps: num-warps must be a power of two in [1, 16], got 0

// Layouts assigned for 4 warps in a kernel that says 1 (tile.num_warps
// edited by hand): refused, not lowered into silently wrong code.
// RUN: tile-opt %s -tile-partition-warps=num-warps=4 | sed 's/tile.num_warps = 4 : i64/tile.num_warps = 1 : i64/' | not tile-opt -convert-tile-to-nvvm 2>&1 | FileCheck %s --check-prefix=WARP-BASES
// WARP-BASES: error: the layout of this result has 2 warp bases (4 warps), but the kernel has tile.num_warps = 1

// Parameter names written by hand must be strings (they were cast blindly:
// a crash the fuzzer's attribute mutations reach); the tile dialect
// verifies them.
// RUN: sed 's/tile.kernel,/tile.kernel, tile.arg_names = [1, "y", "n"],/' %s | not tile-opt 2>&1 | FileCheck %s --check-prefix=NAMES
// NAMES: error: tile.arg_names must be an array of non-empty parameter names, got [1, "y", "n"]

// A register tile larger than a thread's register file (here 16 x 8192 f32
// over one warp: 4096 per thread) is refused by layout assignment; lowering
// it register by register would take minutes.
// RUN: sed 's/16x16xf32/16x8192xf32/g' %s | not tile-opt -tile-partition-warps=num-warps=1 2>&1 | FileCheck %s --check-prefix=REGS
// REGS: error: the tile 'tensor<16x8192xf32>' takes 4096 registers per thread over 1 warps; a thread has at most 255: use smaller blocks or more warps

func.func @copy(%x: !tile.ptr<f32>, %y: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c16 = arith.constant 16 : i32
  %s = arith.constant 16 : i64
  %one = arith.constant 1 : i64
  %c0 = arith.constant 0 : i32
  %vx = tile.view %x sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %vy = tile.view %y sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %t = tile.load %vx[%c0, %c0] padding = zero : !tile.view<f32, 2> -> tensor<16x16xf32>
  tile.store %t, %vy[%c0, %c0] : tensor<16x16xf32>, !tile.view<f32, 2>
  return
}
