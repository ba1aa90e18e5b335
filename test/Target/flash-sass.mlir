// REQUIRES: ptxas, cuobjdump
// The sm_80 machine code of the head_dim-64 flagship: tensor-core HMMA.16816
// with f32 accumulators, K through LDSM and V through LDSM.MT (ldmatrix.trans),
// K/V tiles copied by LDGSTS (cp.async, 16 bytes, L1 bypass), and no local
// memory at all (STL/LDL would be register spills).
// RUN: rm -rf %t && mkdir -p %t
// RUN: tilec %tilec_src_root/kernels/flash_fwd_d64.mlir --arch=sm_80 --emit=cubin -o %t/d64.cubin
// RUN: %cuobjdump -sass %t/d64.cubin | FileCheck %s
// RUN: %cuobjdump -sass %t/d64.cubin | FileCheck %s --check-prefix=NOSPILL

// CHECK: Function : flash_fwd_d64
// CHECK-DAG: LDGSTS.E.BYPASS.128
// CHECK-DAG: LDSM.16.M88.4
// CHECK-DAG: LDSM.16.MT88.4
// CHECK-DAG: HMMA.16816.F32
// CHECK: EXIT
// NOSPILL: Function : flash_fwd_d64
// NOSPILL-NOT: {{STL|LDL}}
