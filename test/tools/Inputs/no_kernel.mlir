// A module whose only function is not marked tile.kernel.
func.func @helper(%x: i32) -> i32 {
  return %x : i32
}
