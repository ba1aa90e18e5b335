// REQUIRES: ptxas, cuobjdump
// The head_dim-128 flagship (64x64 blocks, Q, O and S in registers) is at
// ptxas's 255-register limit; the few values it spills are saved before the
// K/V loops and reloaded after them. Inside every loop — where the time goes —
// there is no local-memory access. The checker finds loops as backward
// branches in the SASS; it is shown failing on a spill inside a loop.
// RUN: rm -rf %t && mkdir -p %t
// RUN: tilec %tilec_src_root/kernels/flash_fwd.mlir --arch=sm_80 --emit=cubin -o %t/d128.cubin
// RUN: %cuobjdump -sass %t/d128.cubin | %python %S/Inputs/loop_spills.py | FileCheck %s
// RUN: not %python %S/Inputs/loop_spills.py < %S/Inputs/spill_in_loop.sass | FileCheck %s --check-prefix=BAD

// CHECK: flash_fwd: {{[1-9][0-9]*}} loops, {{[0-9]+}} local-memory accesses, 0 inside loops
// BAD: fake_kernel: 1 loops, 2 local-memory accesses, 1 inside loops
// BAD-NEXT: inside a loop at 0x30: LDL R3, [R1+0x4]
