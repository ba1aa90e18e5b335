// An early exit (`if tl.load(flags + pid) == 0: return` in the DSL) is an
// scf.if around the rest of the kernel: on the GPU one uniform branch
// (every thread of the program reads the same flag) over the tile's loads
// and stores, and a single exit. The work inside, a 64x64 f16 tile through
// a view, lowers as it does outside a branch.
// RUN: tilec --arch=sm_80 --emit=ptx -o - %s | FileCheck %s
// CHECK-LABEL: .visible .entry early_exit(
// CHECK:         ld.global.nc.b32 [[FLAG:%r[0-9]+]], [{{%rd[0-9]+}}];
// CHECK:         setp.eq.b32 [[SKIP:%p[0-9]+]], [[FLAG]], 0;
// CHECK:         @[[SKIP]] bra [[EXIT:\$L__BB0_[0-9]+]];
// CHECK:         ld.global
// CHECK:         st.global
// CHECK:       [[EXIT]]:
// CHECK-NEXT:    ret;
// CHECK-NOT:     ret;
func.func @early_exit(%x: !tile.ptr<f16>, %y: !tile.ptr<f16>, %flags: !tile.ptr<i32>, %n: i32)
    attributes {tile.kernel, tile.arg_names = ["x", "y", "flags", "n"], tile.grid = ["n", "1", "1"]} {
  %pid = tile.program_id 0 : i32
  %fp = tile.addptr %flags, %pid : !tile.ptr<i32>, i32
  %flag = tile.load_scalar %fp : !tile.ptr<i32> -> i32
  %c0 = arith.constant 0 : i32
  %go = arith.cmpi ne, %flag, %c0 : i32
  scf.if %go {
    %c64 = arith.constant 64 : i32
    %s64 = arith.constant 64 : i64
    %s1 = arith.constant 1 : i64
    %row0 = arith.muli %pid, %c64 : i32
    %xv = tile.view %x sizes(%n, %c64) strides(%s64, %s1) : !tile.ptr<f16> -> !tile.view<f16, 2>
    %yv = tile.view %y sizes(%n, %c64) strides(%s64, %s1) : !tile.ptr<f16> -> !tile.view<f16, 2>
    %t = tile.load %xv[%row0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    tile.store %t, %yv[%row0, %c0] : tensor<64x64xf16>, !tile.view<f16, 2>
  }
  return
}
