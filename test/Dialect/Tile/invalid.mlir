// Every verifier message of the tile dialect, and the declarative constraints
// a user is most likely to trip, each reported as a diagnostic (no crash).
// RUN: tile-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// Grid coordinates
//===----------------------------------------------------------------------===//

// There are three grid axes.
func.func @program_id_axis_3() -> i32 {
  // expected-error @+1 {{'tile.program_id' op attribute 'axis' failed to satisfy constraint: 32-bit signless integer attribute whose minimum value is 0 whose maximum value is 2}}
  %0 = tile.program_id 3 : i32
  return %0 : i32
}

// -----

func.func @num_programs_axis_negative() -> i32 {
  // expected-error @+1 {{'tile.num_programs' op attribute 'axis' failed to satisfy constraint}}
  %0 = tile.num_programs -1 : i32
  return %0 : i32
}

// -----

//===----------------------------------------------------------------------===//
// iota, splat, expand_dims, broadcast, trans
//===----------------------------------------------------------------------===//

func.func @iota_dynamic_length() {
  // expected-error @+1 {{'tile.iota' op result must have a static, positive length, got 'tensor<?xi32>'}}
  %0 = tile.iota : tensor<?xi32>
  return
}

// -----

func.func @iota_empty() {
  // expected-error @+1 {{'tile.iota' op result must have a static, positive length, got 'tensor<0xi32>'}}
  %0 = tile.iota : tensor<0xi32>
  return
}

// -----

// Tiles have static shapes; the declarative constraint says so.
func.func @splat_dynamic_shape(%f: f32) {
  // expected-error @+1 {{'tile.splat' op result #0 must be statically shaped tensor of floating-point or signless integer values, but got 'tensor<?x4xf32>'}}
  %0 = tile.splat %f : f32 -> tensor<?x4xf32>
  return
}

// -----

func.func @splat_element_mismatch(%f: f32) {
  // expected-error @+1 {{'tile.splat' op failed to verify that result element type matches the scalar}}
  %0 = tile.splat %f : f32 -> tensor<4xf16>
  return
}

// -----

func.func @expand_dims_axis_out_of_range(%x: tensor<64xf32>) {
  // expected-error @+1 {{'tile.expand_dims' op axis 2 is out of range [0, 1] for an input of rank 1}}
  %0 = tile.expand_dims %x along 2 : tensor<64xf32> -> tensor<64x1xf32>
  return
}

// -----

// A negative axis is reported as negative (it used to print as 4294967295).
func.func @expand_dims_axis_negative(%x: tensor<64xf32>) {
  // expected-error @+1 {{'tile.expand_dims' op axis -1 is out of range [0, 1] for an input of rank 1}}
  %0 = tile.expand_dims %x along -1 : tensor<64xf32> -> tensor<64x1xf32>
  return
}

// -----

func.func @expand_dims_wrong_result_shape(%x: tensor<64xf32>) {
  // expected-error @+1 {{'tile.expand_dims' op result shape must be 64x1 (input 64 with a 1 at axis 1), got 1x64}}
  %0 = tile.expand_dims %x along 1 : tensor<64xf32> -> tensor<1x64xf32>
  return
}

// -----

func.func @expand_dims_element_mismatch(%x: tensor<64xf32>) {
  // expected-error @+1 {{'tile.expand_dims' op result element type 'f16' differs from the input's 'f32'}}
  %0 = tile.expand_dims %x along 0 : tensor<64xf32> -> tensor<1x64xf16>
  return
}

// -----

func.func @broadcast_rank_mismatch(%x: tensor<64xf32>) {
  // expected-error @+1 {{'tile.broadcast' op input rank 1 differs from result rank 2; use tile.expand_dims first}}
  %0 = tile.broadcast %x : tensor<64xf32> -> tensor<64x64xf32>
  return
}

// -----

func.func @broadcast_non_unit_dimension(%x: tensor<64x2xf32>) {
  // expected-error @+1 {{'tile.broadcast' op dimension 1 of the input has size 2, which is neither 1 nor the result's 64}}
  %0 = tile.broadcast %x : tensor<64x2xf32> -> tensor<64x64xf32>
  return
}

// -----

func.func @broadcast_element_mismatch(%x: tensor<64x1xf32>) {
  // expected-error @+1 {{'tile.broadcast' op result element type 'i32' differs from the input's 'f32'}}
  %0 = tile.broadcast %x : tensor<64x1xf32> -> tensor<64x64xi32>
  return
}

// -----

func.func @trans_wrong_result_shape(%x: tensor<64x128xf16>) {
  // expected-error @+1 {{'tile.trans' op result shape must be 128x64 (the input 64x128 transposed), got 64x128}}
  %0 = tile.trans %x : tensor<64x128xf16> -> tensor<64x128xf16>
  return
}

// -----

func.func @trans_element_mismatch(%x: tensor<64x128xf16>) {
  // expected-error @+1 {{'tile.trans' op result element type 'bf16' differs from the input's 'f16'}}
  %0 = tile.trans %x : tensor<64x128xf16> -> tensor<128x64xbf16>
  return
}

// -----

// 2DTensorOf admits dynamic sizes; the verifier does not (it used to accept
// this).
func.func @trans_dynamic_shape(%x: tensor<?x4xf16>) {
  // expected-error @+1 {{'tile.trans' op input must have a static shape, got 'tensor<?x4xf16>'}}
  %0 = tile.trans %x : tensor<?x4xf16> -> tensor<4x?xf16>
  return
}

// -----

func.func @trans_dynamic_result(%x: tensor<4x8xf16>) {
  // expected-error @+1 {{'tile.trans' op result must have a static shape, got 'tensor<8x?xf16>'}}
  %0 = tile.trans %x : tensor<4x8xf16> -> tensor<8x?xf16>
  return
}

// -----

func.func @trans_rank_3(%x: tensor<2x4x8xf16>) {
  // expected-error @+1 {{'tile.trans' op operand #0 must be 2D tensor of floating-point or signless integer values, but got 'tensor<2x4x8xf16>'}}
  %0 = tile.trans %x : tensor<2x4x8xf16> -> tensor<8x4x2xf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Pointers and views
//===----------------------------------------------------------------------===//

func.func @addptr_i16_offset(%p: !tile.ptr<f16>, %o: i16) {
  // expected-error @+1 {{'tile.addptr' op operand #1 must be 32-bit signless integer or 64-bit signless integer or index, but got 'i16'}}
  %0 = tile.addptr %p, %o : !tile.ptr<f16>, i16
  return
}

// -----

func.func @load_scalar_wrong_type(%p: !tile.ptr<i32>) {
  // expected-error @+1 {{'tile.load_scalar' op result type 'i64' differs from the pointer's element type 'i32'}}
  %0 = tile.load_scalar %p : !tile.ptr<i32> -> i64
  return
}

// -----

func.func @load_scalar_tile_result(%p: !tile.ptr<f32>) {
  // expected-error @+1 {{'tile.load_scalar' op result #0 must be floating-point or signless integer, but got 'tensor<1xf32>'}}
  %0 = tile.load_scalar %p : !tile.ptr<f32> -> tensor<1xf32>
  return
}

// -----

// expected-error @+1 {{view rank must be 1, 2 or 3, got 4}}
func.func @view_rank_4(%v: !tile.view<f16, 4>) {
  return
}

// -----

// expected-error @+1 {{view rank must be 1, 2 or 3, got 0}}
func.func @view_rank_0(%v: !tile.view<f16, 0>) {
  return
}

// -----

// expected-error @+1 {{view element type must be a float or integer, got 'index'}}
func.func @view_index_elements(%v: !tile.view<index, 2>) {
  return
}

// -----

func.func @view_sizes_count(%p: !tile.ptr<f16>, %n: i32, %s: i64) {
  // expected-error @+1 {{'tile.view' op a rank-2 view needs 2 sizes and 2 strides, got 1 sizes and 1 strides}}
  %0 = tile.view %p sizes(%n) strides(%s) : !tile.ptr<f16> -> !tile.view<f16, 2>
  return
}

// -----

func.func @view_strides_count(%p: !tile.ptr<f16>, %n: i32, %s: i64) {
  // expected-error @+1 {{'tile.view' op a rank-2 view needs 2 sizes and 2 strides, got 2 sizes and 3 strides}}
  %0 = tile.view %p sizes(%n, %n) strides(%s, %s, %s) : !tile.ptr<f16> -> !tile.view<f16, 2>
  return
}

// -----

func.func @view_element_mismatch(%p: !tile.ptr<f16>, %n: i32, %s: i64) {
  // expected-error @+1 {{'tile.view' op view element type 'f32' differs from the base pointer's 'f16'}}
  %0 = tile.view %p sizes(%n) strides(%s) : !tile.ptr<f16> -> !tile.view<f32, 1>
  return
}

// -----

//===----------------------------------------------------------------------===//
// load / store
//===----------------------------------------------------------------------===//

func.func @load_wrong_offset_count(%v: !tile.view<f16, 2>, %r: i32) {
  // expected-error @+1 {{'tile.load' op a rank-2 view takes 2 offsets, got 1}}
  %0 = tile.load %v[%r] padding = zero : !tile.view<f16, 2> -> tensor<64x128xf16>
  return
}

// -----

func.func @load_rank_mismatch(%v: !tile.view<f16, 2>, %r: i32) {
  // expected-error @+1 {{'tile.load' op result has rank 3 but the view has rank 2}}
  %0 = tile.load %v[%r, %r] padding = zero : !tile.view<f16, 2> -> tensor<4x64x128xf16>
  return
}

// -----

func.func @load_element_mismatch(%v: !tile.view<f16, 2>, %r: i32) {
  // expected-error @+1 {{'tile.load' op result element type 'f32' differs from the view's 'f16'}}
  %0 = tile.load %v[%r, %r] padding = zero : !tile.view<f16, 2> -> tensor<64x128xf32>
  return
}

// -----

func.func @load_unknown_padding(%v: !tile.view<f16, 2>, %r: i32) {
  // expected-error @+2 {{expected ::mlir::tile::PaddingKind to be one of: zero, neg_inf, nan}}
  // expected-error @+1 {{failed to parse Tile_PaddingAttr parameter 'value' which is to be a `::mlir::tile::PaddingKind`}}
  %0 = tile.load %v[%r, %r] padding = one : !tile.view<f16, 2> -> tensor<64x128xf16>
  return
}

// -----

// An integer tile has no -inf (nor NaN) to pad with (it used to be accepted).
func.func @load_neg_inf_padding_of_integers(%v: !tile.view<i32, 2>, %r: i32) {
  // expected-error @+1 {{'tile.load' op padding neg_inf needs a float element type, got 'i32'}}
  %0 = tile.load %v[%r, %r] padding = neg_inf : !tile.view<i32, 2> -> tensor<64x64xi32>
  return
}

// -----

func.func @load_nan_padding_of_integers(%v: !tile.view<i8, 1>, %r: i32) {
  // expected-error @+1 {{'tile.load' op padding nan needs a float element type, got 'i8'}}
  %0 = tile.load %v[%r] padding = nan : !tile.view<i8, 1> -> tensor<64xi8>
  return
}

// -----

func.func @load_dynamic_shape(%v: !tile.view<f16, 2>, %r: i32) {
  // expected-error @+1 {{'tile.load' op result #0 must be statically shaped tensor of floating-point or signless integer values, but got 'tensor<?x128xf16>'}}
  %0 = tile.load %v[%r, %r] padding = zero : !tile.view<f16, 2> -> tensor<?x128xf16>
  return
}

// -----

func.func @store_wrong_offset_count(%x: tensor<64x128xf16>, %v: !tile.view<f16, 2>, %r: i32) {
  // expected-error @+1 {{'tile.store' op a rank-2 view takes 2 offsets, got 3}}
  tile.store %x, %v[%r, %r, %r] : tensor<64x128xf16>, !tile.view<f16, 2>
  return
}

// -----

func.func @store_rank_mismatch(%x: tensor<64xf16>, %v: !tile.view<f16, 2>, %r: i32) {
  // expected-error @+1 {{'tile.store' op stored value has rank 1 but the view has rank 2}}
  tile.store %x, %v[%r, %r] : tensor<64xf16>, !tile.view<f16, 2>
  return
}

// -----

func.func @store_element_mismatch(%x: tensor<64x128xf32>, %v: !tile.view<f16, 2>, %r: i32) {
  // expected-error @+1 {{'tile.store' op stored value element type 'f32' differs from the view's 'f16'}}
  tile.store %x, %v[%r, %r] : tensor<64x128xf32>, !tile.view<f16, 2>
  return
}

// -----

//===----------------------------------------------------------------------===//
// dot
//===----------------------------------------------------------------------===//

func.func @dot_f32_operands(%a: tensor<16x16xf32>, %c: tensor<16x16xf32>) {
  // expected-error @+1 {{'tile.dot' op operand #0 must be 2D tensor of 16-bit float or bfloat16 type values, but got 'tensor<16x16xf32>'}}
  %0 = tile.dot %a, %a, %c : tensor<16x16xf32>, tensor<16x16xf32> -> tensor<16x16xf32>
  return
}

// -----

func.func @dot_f16_accumulator(%a: tensor<16x16xf16>, %c: tensor<16x16xf16>) {
  // expected-error @+1 {{'tile.dot' op operand #2 must be 2D tensor of 32-bit float values, but got 'tensor<16x16xf16>'}}
  %0 = tile.dot %a, %a, %c : tensor<16x16xf16>, tensor<16x16xf16> -> tensor<16x16xf16>
  return
}

// -----

func.func @dot_dynamic_shape(%a: tensor<?x16xf16>, %c: tensor<16x16xf32>) {
  // expected-error @+1 {{'tile.dot' op operand 'a' must have a static shape}}
  %0 = tile.dot %a, %a, %c : tensor<?x16xf16>, tensor<?x16xf16> -> tensor<16x16xf32>
  return
}

// -----

func.func @dot_mixed_f16_bf16(%a: tensor<16x16xf16>, %b: tensor<16x16xbf16>, %c: tensor<16x16xf32>) {
  // expected-error @+1 {{'tile.dot' op operands a ('f16') and b ('bf16') must have the same element type}}
  %0 = tile.dot %a, %b, %c : tensor<16x16xf16>, tensor<16x16xbf16> -> tensor<16x16xf32>
  return
}

// -----

func.func @dot_k_mismatch(%a: tensor<64x128xf16>, %b: tensor<64x64xf16>, %c: tensor<64x64xf32>) {
  // expected-error @+1 {{'tile.dot' op contraction sizes differ: a (MxK) · b (KxN) needs b's K = 128 (a is 64x128), but b is 64x64}}
  %0 = tile.dot %a, %b, %c : tensor<64x128xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  return
}

// -----

func.func @dot_k_mismatch_transpose_b(%a: tensor<64x128xf16>, %b: tensor<128x64xf16>, %c: tensor<64x128xf32>) {
  // expected-error @+1 {{'tile.dot' op contraction sizes differ: a (MxK) · bᵀ with b NxK needs b's K = 128 (a is 64x128), but b is 128x64}}
  %0 = tile.dot %a, %b, %c transpose_b : tensor<64x128xf16>, tensor<128x64xf16> -> tensor<64x128xf32>
  return
}

// -----

func.func @dot_mn_mismatch(%a: tensor<64x128xf16>, %b: tensor<128x32xf16>, %c: tensor<64x64xf32>) {
  // expected-error @+1 {{'tile.dot' op acc and result must be MxN = 64x32 for a (MxK) · b (KxN) (a is 64x128, b is 128x32), got 64x64}}
  %0 = tile.dot %a, %b, %c : tensor<64x128xf16>, tensor<128x32xf16> -> tensor<64x64xf32>
  return
}

// -----

func.func @dot_mn_mismatch_transpose_b(%a: tensor<64x128xf16>, %b: tensor<32x128xf16>, %c: tensor<32x32xf32>) {
  // expected-error @+1 {{'tile.dot' op acc and result must be MxN = 64x32 for a (MxK) · bᵀ with b NxK (a is 64x128, b is 32x128), got 32x32}}
  %0 = tile.dot %a, %b, %c transpose_b : tensor<64x128xf16>, tensor<32x128xf16> -> tensor<32x32xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// reduce
//===----------------------------------------------------------------------===//

func.func @reduce_unknown_kind(%s: tensor<64x64xf32>) {
  // expected-error @+2 {{expected ::mlir::tile::ReduceKind to be one of: max, sum}}
  // expected-error @+1 {{failed to parse Tile_ReduceKindAttr parameter 'value' which is to be a `::mlir::tile::ReduceKind`}}
  %0 = tile.reduce min %s along 1 : tensor<64x64xf32> -> tensor<64xf32>
  return
}

// -----

func.func @reduce_missing_dimension(%s: tensor<64x64xf32>) {
  // expected-error @+1 {{'tile.reduce' op cannot reduce along axis 2: the input 64x64 has rank 2}}
  %0 = tile.reduce max %s along 2 : tensor<64x64xf32> -> tensor<64xf32>
  return
}

// -----

func.func @reduce_negative_axis(%s: tensor<64x64xf32>) {
  // expected-error @+1 {{'tile.reduce' op cannot reduce along axis -1: the input 64x64 has rank 2}}
  %0 = tile.reduce max %s along -1 : tensor<64x64xf32> -> tensor<64xf32>
  return
}

// -----

func.func @reduce_wrong_result_shape(%s: tensor<64x32xf32>) {
  // expected-error @+1 {{'tile.reduce' op result shape must be 64 (input 64x32 without axis 1), got 32}}
  %0 = tile.reduce sum %s along 1 : tensor<64x32xf32> -> tensor<32xf32>
  return
}

// -----

func.func @reduce_element_mismatch(%s: tensor<64x32xf32>) {
  // expected-error @+1 {{'tile.reduce' op result element type 'f16' differs from the input's 'f32'}}
  %0 = tile.reduce sum %s along 1 : tensor<64x32xf32> -> tensor<64xf16>
  return
}

// -----

func.func @reduce_integers(%s: tensor<64x32xi32>) {
  // expected-error @+1 {{'tile.reduce' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<64x32xi32>'}}
  %0 = tile.reduce sum %s along 1 : tensor<64x32xi32> -> tensor<64xi32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// convert_layout
//===----------------------------------------------------------------------===//

func.func @convert_layout_shape_change(%x: tensor<64xf32>) {
  // expected-error @+1 {{'tile.convert_layout' op requires the same shape for all operands and results}}
  %0 = tile.convert_layout %x : tensor<64xf32> -> tensor<32xf32>
  return
}

// -----

func.func @convert_layout_element_change(%x: tensor<64xf32>) {
  // expected-error @+1 {{'tile.convert_layout' op requires the same element type for all operands and results}}
  %0 = tile.convert_layout %x : tensor<64xf32> -> tensor<64xf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// #tile.linear: parser and attribute verifier
//===----------------------------------------------------------------------===//

// expected-error @+1 {{every basis must have 2 coordinates, this one has 1}}
func.func @linear_basis_wrong_coordinate_count(%x: tensor<16x8xf32, #tile.linear<reg = [[0, 1], [8]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = []>>) {
  return
}

// -----

// A warp of 32 lanes has 5 lane bits.
// expected-error @+1 {{a layout needs exactly 5 lane bases (32 lanes), got 4}}
func.func @linear_wrong_lane_basis_count(%x: tensor<16x8xf32, #tile.linear<reg = [[0, 1], [8, 0]], lane = [[0, 2], [0, 4], [1, 0], [2, 0]], warp = []>>) {
  return
}

// -----

// expected-error @+1 {{basis coordinates must be non-negative, got -1}}
func.func @linear_negative_coordinate(%x: tensor<32xf32, #tile.linear<reg = [], lane = [[1], [2], [4], [8], [-1]], warp = []>>) {
  return
}

// -----

// expected-error @+1 {{rank = 2 disagrees with bases of 1 coordinates}}
func.func @linear_rank_disagrees(%x: tensor<32xf32, #tile.linear<reg = [], lane = [[1], [2], [4], [8], [16]], warp = [], rank = 2>>) {
  return
}

// -----

// expected-error @+1 {{a layout without bases needs an explicit `rank = N`}}
func.func @linear_no_bases_no_rank(%x: tensor<32xf32, #tile.linear<reg = [], lane = [], warp = []>>) {
  return
}

// -----

// expected-error @+1 {{layout rank must be 1, 2 or 3, got 0}}
func.func @linear_rank_0(%x: tensor<32xf32, #tile.linear<reg = [], lane = [[], [], [], [], []], warp = []>>) {
  return
}

// -----

// expected-error @+1 {{layout rank must be 1, 2 or 3, got 4}}
func.func @linear_rank_4(%x: tensor<32xf32, #tile.linear<reg = [], lane = [], warp = [], rank = 4>>) {
  return
}

// -----

// Register and warp indices are 64-bit; more than 31 bits of either is
// rejected before anything computes 1 << 32 of them (it used to be accepted).
// expected-error @+1 {{a layout has at most 31 register bases, got 32}}
func.func @linear_too_many_register_bases(%x: tensor<32xf32, #tile.linear<reg = [[0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0]], lane = [[1], [2], [4], [8], [16]], warp = []>>) {
  return
}

// -----

// expected-error @+1 {{a layout has at most 31 warp bases, got 32}}
func.func @linear_too_many_warp_bases(%x: tensor<32xf32, #tile.linear<reg = [], lane = [[1], [2], [4], [8], [16]], warp = [[0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0], [0]]>>) {
  return
}

// -----

// expected-error @+1 {{expected 'reg'}}
func.func @linear_keywords_out_of_order(%x: tensor<32xf32, #tile.linear<lane = [[1], [2], [4], [8], [16]], reg = [], warp = []>>) {
  return
}

// -----

//===----------------------------------------------------------------------===//
// Layouts as tensor encodings: they must fit the tensor (used to be accepted)
//===----------------------------------------------------------------------===//

// expected-error @+1 {{#tile.linear layout does not fit a tile of shape 16x8: layout has rank 1 but the tile has rank 2}}
func.func @linear_encoding_rank_mismatch(%x: tensor<16x8xf32, #tile.linear<reg = [], lane = [[1], [2], [4], [8], [16]], warp = []>>) {
  return
}

// -----

// The m16n8 accumulator layout on a 16x16 tile leaves columns 8..15 unowned.
// expected-error @+1 {{#tile.linear layout does not fit a tile of shape 16x16: element (0,8) (row-major index 8) is owned by no thread}}
func.func @linear_encoding_leaves_elements_unowned(%x: tensor<16x16xf32, #tile.linear<reg = [[0, 1], [8, 0]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = []>>) {
  return
}

// -----

// expected-error @+1 {{#tile.linear layout does not fit a tile of shape 8x8: register 2 of lane 0 in warp 0 maps to coordinate 8 in dimension 0, outside the tile's extent 8}}
func.func @linear_encoding_outside_the_tile(%x: tensor<8x8xf32, #tile.linear<reg = [[0, 1], [8, 0]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = []>>) {
  return
}

// -----

// expected-error @+1 {{#tile.linear layout does not fit a tile of shape 48: the tile's extent 48 in dimension 0 is not a power of two; a linear layout covers only power-of-two extents}}
func.func @linear_encoding_non_power_of_two(%x: tensor<48xf32, #tile.linear<reg = [[32]], lane = [[1], [2], [4], [8], [16]], warp = []>>) {
  return
}

// -----

// expected-error @+1 {{a tile with a #tile.linear layout must have a static shape}}
func.func @linear_encoding_dynamic_shape(%x: tensor<?xf32, #tile.linear<reg = [], lane = [[1], [2], [4], [8], [16]], warp = []>>) {
  return
}

// -----

func.func @atomic_add_element_mismatch(%x: tensor<64x128xf32>, %v: !tile.view<f16, 2>, %r: i32) {
  // expected-error @+1 {{'tile.atomic_add' op added value element type 'f32' differs from the view's 'f16'}}
  tile.atomic_add %x, %v[%r, %r] : tensor<64x128xf32>, !tile.view<f16, 2>
  return
}

// -----

func.func @atomic_add_not_f32(%x: tensor<64x128xf16>, %v: !tile.view<f16, 2>, %r: i32) {
  // expected-error @+1 {{operand #0 must be tensor of 32-bit float values}}
  tile.atomic_add %x, %v[%r, %r] : tensor<64x128xf16>, !tile.view<f16, 2>
  return
}

// -----

func.func @view_block_rank(%p: !tile.ptr<f32>, %n: i32, %s: i64) {
  // expected-error @+1 {{'tile.view' op a rank-2 view needs 2 block extents, got 1}}
  %v = tile.view %p sizes(%n, %n) strides(%s, %s) {block = array<i64: 8>} : !tile.ptr<f32> -> !tile.view<f32, 2>
  return
}

// -----

func.func @view_block_power_of_two(%p: !tile.ptr<f32>, %n: i32, %s: i64) {
  // expected-error @+1 {{'tile.view' op block extents must be powers of two, got 6}}
  %v = tile.view %p sizes(%n, %n) strides(%s, %s) {block = array<i64: 8, 6>} : !tile.ptr<f32> -> !tile.view<f32, 2>
  return
}

// -----

func.func @atomic_add_offsets(%x: tensor<64x128xf32>, %v: !tile.view<f32, 2>, %r: i32) {
  // expected-error @+1 {{'tile.atomic_add' op a rank-2 view takes 2 offsets, got 1}}
  tile.atomic_add %x, %v[%r] : tensor<64x128xf32>, !tile.view<f32, 2>
  return
}

//===----------------------------------------------------------------------===//
// The typed contract attributes (dialects/Tile/TileAttrNames.h)
//===----------------------------------------------------------------------===//

// -----

// tile.blocks is an enum, not free text.
func.func @blocks_as_string(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-error@below {{tile.blocks must be #tile<blocks full|partial|empty>, got "full"}}
  scf.for %i = %c0 to %n step %c1 {
  } {tile.blocks = "full"}
  return
}

// -----

// expected-error@below {{#tile.strategy: num_warps must be a power of two in [1, 16], got 3}}
module attributes {tile.strategy = #tile.strategy<num_warps = 3, stages = 2, smem_epilogue = true, copy_bounds = row, lowering_options = "">} {
}

// -----

// expected-error@below {{#tile.strategy: stages must be 1 or 2, got 3}}
module attributes {tile.strategy = #tile.strategy<num_warps = 4, stages = 3, smem_epilogue = true, copy_bounds = row, lowering_options = "">} {
}

// -----

// expected-error@below {{tile.strategy must be a #tile.strategy<...>, got "4 warps"}}
module attributes {tile.strategy = "4 warps"} {
}

// -----

// expected-error@below {{tile.num_warps: num-warps must be a power of two in [1, 16], got 6 : i64}}
func.func @six_warps() attributes {tile.kernel, tile.num_warps = 6 : i64} {
  return
}

// -----

// expected-error@below {{tile.arg_names must be an array of non-empty parameter names, got ["x", ""]}}
func.func @empty_name(%x: i32, %y: i32) attributes {tile.kernel, tile.arg_names = ["x", ""]} {
  return
}

// -----

// expected-error@below {{tile.grid must be ["x", "y", "z"]: three grid-size expressions over the kernel's integer parameters, got ["1"]}}
func.func @one_axis() attributes {tile.kernel, tile.grid = ["1"]} {
  return
}

// -----

// expected-error @below {{tile.smem must be a #tile.smem<offset = .., bytes = ..>, got 3 : i64}}
func.func @smem_not_a_region() attributes {tile.smem = 3} {
  return
}

// -----

func.func @negative_pending() {
  // expected-error @below {{attribute 'pending' failed to satisfy constraint}}
  tile.async_wait pending = -1
  return
}

// -----

// expected-error @below {{#tile.smem: offset and bytes must be >= 0, got offset = -128, bytes = 16}}
func.func @negative_offset() attributes {tile.smem = #tile.smem<offset = -128, bytes = 16>} {
  return
}

// -----

func.func @arrive_not_i32(%c: !tile.ptr<f32>, %n: i32) {
  // expected-error @below {{'tile.arrive' op counter must point to i32, got a pointer to 'f32'}}
  %last = tile.arrive %c, %n : !tile.ptr<f32>
  return
}

// -----

func.func @wait_turn_not_i32(%c: !tile.ptr<i64>, %t: i32) {
  // expected-error @below {{'tile.wait_turn' op counter must point to i32, got a pointer to 'i64'}}
  tile.wait_turn %c, %t, %t : !tile.ptr<i64>
  return
}

// -----

func.func @wait_turn_negative(%c: !tile.ptr<i32>, %seen: i32) {
  %t = arith.constant -1 : i32
  // expected-error @below {{'tile.wait_turn' op turn must be at least 0, got -1}}
  tile.wait_turn %c, %t, %seen : !tile.ptr<i32>
  return
}

// -----

func.func @pass_turn_not_i32(%c: !tile.ptr<f32>) {
  // expected-error @below {{'tile.pass_turn' op counter must point to i32, got a pointer to 'f32'}}
  tile.pass_turn %c : !tile.ptr<f32>
  return
}

// -----

func.func @arrive_none_expected(%c: !tile.ptr<i32>) {
  %zero = arith.constant 0 : i32
  // expected-error @below {{'tile.arrive' op expected arrivals must be at least 1, got 0}}
  %last = tile.arrive %c, %zero : !tile.ptr<i32>
  return
}
