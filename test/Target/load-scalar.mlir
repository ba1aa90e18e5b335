// tile.load_scalar on the GPU: one uniform global load per element, every
// thread the same address. A buffer the kernel never stores to (cu_seqlens)
// is read through the non-coherent path (llvm.load invariant -> ld.global.nc);
// one it also writes is read with a plain ld.global.
// RUN: tile-opt %s -split-input-file -tile-partition-warps -tile-allocate-shared -tile-insert-waits -convert-tile-to-nvvm | FileCheck %s --check-prefix=NVVM
// RUN: tilec --arch=sm_80 --emit=ptx --split-input-file -o - %s | FileCheck %s --check-prefix=PTX

// Varlen's bounds: start = cu[b], end = cu[b + 1], a view of end - start
// rows at src + start. The two loads are adjacent words of one buffer.
// NVVM-LABEL: llvm.func @segment_copy
// NVVM:         %[[P0:.+]] = llvm.getelementptr %arg2[%{{.+}}] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
// NVVM:         %[[START:.+]] = llvm.load %[[P0]] invariant {alignment = 4 : i64} : !llvm.ptr<1> -> i32
// NVVM:         %[[P1:.+]] = llvm.getelementptr %[[P0]][%{{.+}}] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
// NVVM:         %[[END:.+]] = llvm.load %[[P1]] invariant {alignment = 4 : i64} : !llvm.ptr<1> -> i32
// NVVM:         arith.subi %[[END]], %[[START]] : i32
// PTX-LABEL: .visible .entry segment_copy(
// PTX:         ld.global.nc.b32 {{%r[0-9]+}}, [[[CU:%rd[0-9]+]]];
// PTX-NEXT:    ld.global.nc.b32 {{%r[0-9]+}}, [[[CU]]+4];
func.func @segment_copy(%src: !tile.ptr<f32>, %dst: !tile.ptr<f32>, %cu: !tile.ptr<i32>)
    attributes {tile.kernel, tile.arg_names = ["src", "dst", "cu"], tile.grid = ["1", "1", "1"]} {
  %b = tile.program_id 1 : i32
  %p0 = tile.addptr %cu, %b : !tile.ptr<i32>, i32
  %start = tile.load_scalar %p0 : !tile.ptr<i32> -> i32
  %c1 = arith.constant 1 : i32
  %p1 = tile.addptr %p0, %c1 : !tile.ptr<i32>, i32
  %end = tile.load_scalar %p1 : !tile.ptr<i32> -> i32
  %n = arith.subi %end, %start : i32
  %s1 = arith.constant 1 : i64
  %c0 = arith.constant 0 : i32
  %sp = tile.addptr %src, %start : !tile.ptr<f32>, i32
  %sv = tile.view %sp sizes(%n) strides(%s1) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %dp = tile.addptr %dst, %start : !tile.ptr<f32>, i32
  %dv = tile.view %dp sizes(%n) strides(%s1) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %t = tile.load %sv[%c0] padding = zero : !tile.view<f32, 1> -> tensor<128xf32>
  tile.store %t, %dv[%c0] : tensor<128xf32>, !tile.view<f32, 1>
  return
}

// -----

// The kernel stores into the buffer it reads the scalar (an f32) from: no
// ld.global.nc, whose cache is not coherent with the kernel's own stores.
// NVVM-LABEL: llvm.func @read_write
// NVVM:         %[[X:.+]] = llvm.load %{{.+}} {alignment = 4 : i64} : !llvm.ptr<1> -> f32
// NVVM-NOT:     invariant
// PTX-LABEL: .visible .entry read_write(
// PTX-NOT:     ld.global.nc
// PTX:         ld.global.b32
// PTX-NOT:     ld.global.nc
func.func @read_write(%x: !tile.ptr<f32>)
    attributes {tile.kernel, tile.arg_names = ["x"], tile.grid = ["1", "1", "1"]} {
  %c64 = arith.constant 64 : i64
  %p = tile.addptr %x, %c64 : !tile.ptr<f32>, i64
  %v = tile.load_scalar %p : !tile.ptr<f32> -> f32
  %n = arith.constant 64 : i32
  %s1 = arith.constant 1 : i64
  %c0 = arith.constant 0 : i32
  %xv = tile.view %x sizes(%n) strides(%s1) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %t = tile.splat %v : f32 -> tensor<64xf32>
  tile.store %t, %xv[%c0] : tensor<64xf32>, !tile.view<f32, 1>
  return
}
