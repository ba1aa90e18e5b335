// RUN: tile-opt %s -tile-pipeline -tile-partition-warps -tile-allocate-shared -tile-insert-waits | FileCheck %s
// RUN: tile-opt %s -tile-pipeline -tile-partition-warps -tile-allocate-shared -tile-insert-waits=region-barriers=true | FileCheck %s --check-prefix=REGIONS

// The fused backward's loop (ring of Q and dO, Pᵀ and dSᵀ written to shared
// for grid dots). Default: a write into shared memory waits behind a barrier
// for any access since the last one, so Pᵀ's and dSᵀ's writes each get one
// before them (K and Q were just read by ldmatrix).
// CHECK-LABEL: func.func @fused_step
// CHECK:         scf.for
// CHECK:           tile.async_wait pending = 0
// CHECK-NEXT:      tile.barrier
// CHECK:           tile.dot
// CHECK:           tile.barrier
// CHECK-NEXT:      tile.convert_layout {{.*}}#tile.shared
// CHECK-NEXT:      tile.barrier
// CHECK-NEXT:      tile.dot
// CHECK:           tile.barrier
// CHECK-NEXT:      tile.convert_layout {{.*}}#tile.shared
// CHECK-NEXT:      tile.barrier
// CHECK-NEXT:      tile.dot
// region-barriers: since the iteration's top barrier only K's and Q's
// regions were read before Pᵀ's write, and only Pᵀ's, dO's and V's before
// dSᵀ's (the previous iteration read Pᵀ and dSᵀ before that barrier):
// no barrier before either write, one after each (the readers are other
// threads).
// REGIONS-LABEL: func.func @fused_step
// REGIONS:         scf.for
// REGIONS:           tile.async_wait pending = 0
// REGIONS-NEXT:      tile.barrier
// REGIONS:           tile.dot
// REGIONS-NOT:       tile.barrier
// REGIONS:           tile.convert_layout {{.*}}#tile.shared
// REGIONS-NEXT:      tile.barrier
// REGIONS-NEXT:      tile.dot
// REGIONS-NOT:       tile.barrier
// REGIONS:           tile.convert_layout {{.*}}#tile.shared
// REGIONS-NEXT:      tile.barrier
// REGIONS-NEXT:      tile.dot
// REGIONS-NOT:       tile.barrier
// REGIONS:           scf.yield
func.func @fused_step(%kp: !tile.ptr<f16>, %vp: !tile.ptr<f16>, %qp: !tile.ptr<f16>, %dop: !tile.ptr<f16>,
                      %dkp: !tile.ptr<f16>, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %vv = tile.view %vp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %qv = tile.view %qp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %dov = tile.view %dop sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %dkv = tile.view %dkp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %v = tile.load %vv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %r:2 = scf.for %j = %c0 to %n step %c1 iter_args(%dk = %zero, %dv = %zero) -> (tensor<64x64xf32>, tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %q = tile.load %qv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %do = tile.load %dov[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %st = tile.dot %k, %q, %zero transpose_b {warps_n = 2 : i64} : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %pt = math.exp2 %st : tensor<64x64xf32>
    %p16 = arith.truncf %pt : tensor<64x64xf32> to tensor<64x64xf16>
    %dv2 = tile.dot %p16, %do, %dv {warps_n = 2 : i64} : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %dpt = tile.dot %v, %do, %zero transpose_b {warps_n = 2 : i64} : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %dst = arith.mulf %pt, %dpt : tensor<64x64xf32>
    %ds16 = arith.truncf %dst : tensor<64x64xf32> to tensor<64x64xf16>
    %dk2 = tile.dot %ds16, %q, %dk {warps_n = 2 : i64} : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %dk2, %dv2 : tensor<64x64xf32>, tensor<64x64xf32>
  }
  %dk16 = arith.truncf %r#0 : tensor<64x64xf32> to tensor<64x64xf16>
  tile.store %dk16, %dkv[%c0, %c0] : tensor<64x64xf16>, !tile.view<f16, 2>
  return
}
