// The CPU lowering refuses tile.warp_id (test/passes/tile-skip-warp-blocks.mlir, CPU).
func.func @w(%o: !tile.ptr<i32>) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c1_i64 = arith.constant 1 : i64
  %v = tile.view %o sizes(%c1) strides(%c1_i64) : !tile.ptr<i32> -> !tile.view<i32, 1>
  %w = tile.warp_id : i32
  %t = tile.splat %w : i32 -> tensor<1xi32>
  tile.store %t, %v[%c0] : tensor<1xi32>, !tile.view<i32, 1>
  return
}
