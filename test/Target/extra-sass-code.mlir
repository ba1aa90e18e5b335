// REQUIRES: ptxas, cuobjdump
// --extra-sass=sm_90's cubin holds sm_90 machine code (the tensor-core MMA
// included), the main cubin sm_80's.
// RUN: rm -rf %t && mkdir -p %t
// RUN: tilec --from-llvm-dialect --arch=sm_80 --extra-sass=sm_90 --emit=all -o %t %S/Inputs/mma_tile.mlir
// RUN: %cuobjdump -sass %t/mma_tile.sm_90.cubin | FileCheck %s --check-prefix=SM90
// RUN: %cuobjdump -sass %t/mma_tile.cubin | FileCheck %s --check-prefix=SM80

// SM90: code for sm_90
// SM90: HMMA
// SM80: code for sm_80
// SM80: HMMA
