// REQUIRES: ptxas, cuobjdump
// The mma.sync tilec emits becomes a tensor-core HMMA.16816 with an f32
// accumulator in the SASS ptxas produces, on sm_80 and on sm_90a.
// RUN: rm -rf %t && mkdir -p %t
// RUN: tilec --from-llvm-dialect --arch=sm_80 --emit=cubin -o %t/sm80.cubin %S/Inputs/mma_tile.mlir
// RUN: %cuobjdump -sass %t/sm80.cubin | FileCheck %s
// RUN: sed 's/"sm_80"/"sm_90a"/' %S/Inputs/mma_tile.mlir | tilec --from-llvm-dialect --arch=sm_90a --emit=cubin -o %t/sm90a.cubin
// RUN: %cuobjdump -sass %t/sm90a.cubin | FileCheck %s

// CHECK: Function : mma_tile
// CHECK: HMMA.16816.F32
// CHECK: EXIT
