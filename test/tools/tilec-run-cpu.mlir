// `tilec run-cpu` runs a kernel on the CPU: here it copies a 4-element i32
// buffer that lit writes and reads back as raw bytes; a missing argument gets
// the usage line.
// RUN: %python -c "import struct,sys; open(sys.argv[1],'wb').write(struct.pack('<4i',7,-3,11,5)); open(sys.argv[2],'wb').write(struct.pack('<4i',0,0,0,0))" %t.in %t.out
// RUN: tilec run-cpu %s --kernel copy --grid 1,1,1 --arg ptr:%t.in --arg ptr:%t.out --arg i32:3
// RUN: %python -c "import struct,sys; print(struct.unpack('<4i', open(sys.argv[1],'rb').read()))" %t.out | FileCheck %s
// RUN: not tilec run-cpu %s 2>&1 | FileCheck %s --check-prefix=USAGE
// A destination file of 3 elements while the view says 4: the fourth store is
// refused (the file keeps its 12 bytes) and reported, not made past the end.
// RUN: %python -c "import struct,sys; open(sys.argv[1],'wb').write(struct.pack('<3i',0,0,0))" %t.short
// RUN: not tilec run-cpu %s --kernel copy --grid 1,1,1 --arg ptr:%t.in --arg ptr:%t.short --arg i32:4 2>&1 | FileCheck %s --check-prefix=SHORT
// SHORT: @copy accessed element 3 of argument 1 (#1), whose buffer holds 3 elements (12 bytes)

// Three elements are in bounds; the fourth is never written.
// CHECK: (7, -3, 11, 0)
// USAGE: run-cpu: FILE, --kernel and --grid are required
func.func @copy(%src: !tile.ptr<i32>, %dst: !tile.ptr<i32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %one = arith.constant 1 : i64
  %sv = tile.view %src sizes(%n) strides(%one) : !tile.ptr<i32> -> !tile.view<i32, 1>
  %dv = tile.view %dst sizes(%n) strides(%one) : !tile.ptr<i32> -> !tile.view<i32, 1>
  %t = tile.load %sv[%c0] padding = zero : !tile.view<i32, 1> -> tensor<4xi32>
  tile.store %t, %dv[%c0] : tensor<4xi32>, !tile.view<i32, 1>
  return
}
