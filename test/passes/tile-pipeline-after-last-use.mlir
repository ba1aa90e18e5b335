// RUN: tile-opt %s -tile-pipeline='stages=1 after-last-use=true' | FileCheck %s
// RUN: tile-opt %s -tile-pipeline='stages=1' | FileCheck %s --check-prefix=OFF

// The fused backward's loop at stages=1 (one shared buffer per tile): Q is
// the B operand of Sᵀ = K·Qᵀ and of dK += dSᵀ·Q, dO of dV += Pᵀ·dO and of
// dPᵀ = V·dOᵀ, and the loop's only writes are the dQ atomics (through
// another argument). after-last-use loads the next iteration's dO before
// the dot after its last reader (dK's), and the next Q before the dQᵀ dot
// (after dK's): both arrive one iteration early, each into its own buffer
// once every dot of this iteration has read it. Without the option the two
// loads, read by two dots each, stay at the top of the body.
// CHECK-LABEL: func.func @fused_backward_loop
// CHECK:         %[[Q0:.+]] = tile.load %[[QV:[0-9a-z_]+]]
// CHECK:         %[[DO0:.+]] = tile.load %[[DOV:[0-9a-z_]+]]
// CHECK:         scf.for %{{.+}} iter_args(%{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}, %[[Q:.+]] = %[[Q0]], %[[DO:.+]] = %[[DO0]])
// CHECK-NOT:       tile.load
// CHECK:           tile.dot %{{.+}}, %[[Q]], %{{.+}} transpose_b
// CHECK:           tile.dot %{{.+}}, %[[DO]], %{{.+}} :
// CHECK:           tile.dot %{{.+}}, %[[DO]], %{{.+}} transpose_b
// CHECK:           %[[DON:.+]] = tile.load %[[DOV]]
// CHECK-NEXT:      tile.dot %{{.+}}, %[[Q]], %{{.+}} :
// CHECK:           %[[QN:.+]] = tile.load %[[QV]]
// CHECK-NEXT:      tile.dot
// CHECK:           tile.atomic_add
// CHECK:           scf.yield %{{.+}}, %{{.+}}, %[[QN]], %[[DON]]
// OFF-LABEL: func.func @fused_backward_loop
// OFF:         scf.for
// OFF-NEXT:      arith.muli
// OFF-NEXT:      tile.load
// OFF-NEXT:      tile.load
func.func @fused_backward_loop(%qp: !tile.ptr<f16>, %dop: !tile.ptr<f16>, %dqp: !tile.ptr<f32>,
                               %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %qv = tile.view %qp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %dov = tile.view %dop sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %dqv = tile.view %dqp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %k = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %r:2 = scf.for %i = %c0 to %n step %c1 iter_args(%dk = %zero, %dv = %zero) -> (tensor<64x64xf32>, tensor<64x64xf32>) : i32 {
    %row = arith.muli %i, %c64 : i32
    %q = tile.load %qv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %do = tile.load %dov[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %st = tile.dot %k, %q, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %pt = arith.truncf %st : tensor<64x64xf32> to tensor<64x64xf16>
    %dv2 = tile.dot %pt, %do, %dv : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %dpt = tile.dot %k, %do, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %dst = arith.truncf %dpt : tensor<64x64xf32> to tensor<64x64xf16>
    %dk2 = tile.dot %dst, %q, %dk : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %kt = tile.trans %k : tensor<64x64xf16> -> tensor<64x64xf16>
    %dqt = tile.dot %kt, %dst, %zero : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    tile.atomic_add %dqt, %dqv[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
    scf.yield %dk2, %dv2 : tensor<64x64xf32>, tensor<64x64xf32>
  }
  return
}
