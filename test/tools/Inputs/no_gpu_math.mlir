// A kernel using math.erf, which the GPU lowering has no expansion for and
// NVPTX cannot select (tilec-errors.mlir).
func.func @uses_erf(%x: !tile.ptr<f32>, %y: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c16 = arith.constant 16 : i32
  %s = arith.constant 16 : i64
  %one = arith.constant 1 : i64
  %c0 = arith.constant 0 : i32
  %vx = tile.view %x sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %vy = tile.view %y sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %t = tile.load %vx[%c0, %c0] padding = zero : !tile.view<f32, 2> -> tensor<16x16xf32>
  %r = math.erf %t : tensor<16x16xf32>
  tile.store %r, %vy[%c0, %c0] : tensor<16x16xf32>, !tile.view<f32, 2>
  return
}
