// REQUIRES: ptxas
// Kernels without a dot compile for the GPU and ptxas assembles them: a row
// softmax (row max and sum by butterfly shuffles inside a warp, no shared
// memory) and the combine of split-KV partial results (the in-thread lse rows,
// 4 per row, meet O's 16x64 layout through an unswizzled shared scratch tile
// one element wide per row, the row-vector conversion the lowering once
// refused). Both made by the DSL (test/python/test_dsl_no_dot.py), locations
// stripped.
// RUN: rm -rf %t && mkdir -p %t
// RUN: tilec --arch=sm_80 --emit=all --split-input-file -o %t %s
// RUN: test -s %t/softmax.cubin && test -s %t/combine.cubin
// RUN: FileCheck %s --check-prefix=SOFTMAX --input-file=%t/softmax.ptx
// RUN: FileCheck %s --check-prefix=COMBINE --input-file=%t/combine.ptx
// SOFTMAX-LABEL: .visible .entry softmax(
// SOFTMAX-COUNT-5: shfl.sync.bfly.b32
// SOFTMAX-NOT:   st.shared
// SOFTMAX-NOT:   bar.sync
// SOFTMAX:       ret;
// COMBINE-LABEL: .visible .entry combine(
// COMBINE:       st.shared.b32
// COMBINE:       bar.sync 0;
// COMBINE:       ld.shared.b32
// COMBINE:       ret;
func.func @softmax(%x: !tile.ptr<f32>, %y: !tile.ptr<f32>, %n_rows: i32, %n_cols: i32, %stride: i64)
    attributes {tile.kernel, tile.arg_names = ["x", "y", "n_rows", "n_cols", "stride"], tile.grid = ["cdiv(n_rows, 16)", "1", "1"]} {
  %t = tile.program_id 0 : i32
  %t_1 = arith.constant 16 : i32
  %row0 = arith.muli %t, %t_1 : i32
  %t_2 = arith.constant 1 : i64
  %xv = tile.view %x sizes(%n_rows, %n_cols) strides(%stride, %t_2) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %t_3 = arith.constant 0 : i32
  %t_4 = tile.load %xv[%row0, %t_3] padding = neg_inf : !tile.view<f32, 2> -> tensor<16x128xf32>
  %t_5 = tile.reduce max %t_4 along 1 : tensor<16x128xf32> -> tensor<16xf32>
  %t_6 = tile.expand_dims %t_5 along 1 : tensor<16xf32> -> tensor<16x1xf32>
  %t_7 = tile.broadcast %t_6 : tensor<16x1xf32> -> tensor<16x128xf32>
  %t_8 = arith.subf %t_4, %t_7 : tensor<16x128xf32>
  %p = math.exp %t_8 : tensor<16x128xf32>
  %t_9 = tile.view %y sizes(%n_rows, %n_cols) strides(%stride, %t_2) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %t_10 = tile.reduce sum %p along 1 : tensor<16x128xf32> -> tensor<16xf32>
  %t_11 = tile.expand_dims %t_10 along 1 : tensor<16xf32> -> tensor<16x1xf32>
  %t_12 = tile.broadcast %t_11 : tensor<16x1xf32> -> tensor<16x128xf32>
  %t_13 = arith.divf %p, %t_12 : tensor<16x128xf32>
  tile.store %t_13, %t_9[%row0, %t_3] : tensor<16x128xf32>, !tile.view<f32, 2>
  return
}

// -----
func.func @combine(%o_part: !tile.ptr<f32>, %lse_part: !tile.ptr<f32>, %o: !tile.ptr<f32>, %lse: !tile.ptr<f32>, %n_rows: i32)
    attributes {tile.kernel, tile.arg_names = ["o_part", "lse_part", "o", "lse", "n_rows"], tile.grid = ["cdiv(n_rows, 16)", "1", "1"]} {
  %t = tile.program_id 0 : i32
  %t_1 = arith.constant 16 : i32
  %row0 = arith.muli %t, %t_1 : i32
  %t_2 = arith.constant 4 : i32
  %t_3 = arith.constant 4 : i64
  %t_4 = arith.constant 1 : i64
  %t_5 = tile.view %lse_part sizes(%n_rows, %t_2) strides(%t_3, %t_4) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %t_6 = arith.constant 0 : i32
  %lp = tile.load %t_5[%row0, %t_6] padding = neg_inf : !tile.view<f32, 2> -> tensor<16x4xf32>
  %mx = tile.reduce max %lp along 1 : tensor<16x4xf32> -> tensor<16xf32>
  %t_7 = tile.expand_dims %mx along 1 : tensor<16xf32> -> tensor<16x1xf32>
  %t_8 = tile.broadcast %t_7 : tensor<16x1xf32> -> tensor<16x4xf32>
  %t_9 = arith.subf %lp, %t_8 : tensor<16x4xf32>
  %t_10 = math.exp %t_9 : tensor<16x4xf32>
  %t_11 = tile.reduce sum %t_10 along 1 : tensor<16x4xf32> -> tensor<16xf32>
  %t_12 = math.log %t_11 : tensor<16xf32>
  %lse_row = arith.addf %mx, %t_12 : tensor<16xf32>
  %acc = arith.constant dense<0.0> : tensor<16x64xf32>
  %t_13 = arith.constant 1 : i32
  %t_14 = arith.constant 64 : i32
  %t_15 = arith.constant 256 : i64
  %acc_1 = scf.for %s = %t_6 to %t_2 step %t_13 iter_args(%acc_2 = %acc) -> (tensor<16x64xf32>) : i32 {
    %t_16 = arith.muli %s, %t_14 : i32
    %t_17 = tile.addptr %o_part, %t_16 : !tile.ptr<f32>, i32
    %t_18 = tile.view %t_17 sizes(%n_rows, %t_14) strides(%t_15, %t_4) : !tile.ptr<f32> -> !tile.view<f32, 2>
    %ot = tile.load %t_18[%row0, %t_6] padding = zero : !tile.view<f32, 2> -> tensor<16x64xf32>
    %t_19 = tile.addptr %lse_part, %s : !tile.ptr<f32>, i32
    %t_20 = tile.view %t_19 sizes(%n_rows) strides(%t_3) : !tile.ptr<f32> -> !tile.view<f32, 1>
    %ls = tile.load %t_20[%row0] padding = zero : !tile.view<f32, 1> -> tensor<16xf32>
    %t_21 = arith.subf %ls, %lse_row : tensor<16xf32>
    %t_22 = math.exp %t_21 : tensor<16xf32>
    %t_23 = tile.expand_dims %t_22 along 1 : tensor<16xf32> -> tensor<16x1xf32>
    %t_24 = tile.broadcast %t_23 : tensor<16x1xf32> -> tensor<16x64xf32>
    %t_25 = arith.mulf %t_24, %ot : tensor<16x64xf32>
    %acc_3 = arith.addf %acc_2, %t_25 : tensor<16x64xf32>
    scf.yield %acc_3 : tensor<16x64xf32>
  }
  %t_26 = arith.constant 64 : i64
  %t_27 = tile.view %o sizes(%n_rows, %t_14) strides(%t_26, %t_4) : !tile.ptr<f32> -> !tile.view<f32, 2>
  tile.store %acc_1, %t_27[%row0, %t_6] : tensor<16x64xf32>, !tile.view<f32, 2>
  %t_28 = tile.view %lse sizes(%n_rows) strides(%t_4) : !tile.ptr<f32> -> !tile.view<f32, 1>
  tile.store %lse_row, %t_28[%row0] : tensor<16xf32>, !tile.view<f32, 1>
  return
}

