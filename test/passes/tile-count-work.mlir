// The work per K/V iteration of the flagship kernels, before and after tile-optimize,
// as numbers: FA2's rewrites take the non-matmul element ops of an unmasked block from
// 41344 to 29056 (non-causal) and from 49536 to 29056 (causal); only the diagonal /
// last block keeps the mask's compare and select. Matmul FLOPs do not change.

// RUN: tile-opt %tilec_src_root/kernels/flash_fwd.mlir --tile-count-work -o /dev/null 2>&1 | FileCheck %s --check-prefix=NAIVE
// NAIVE:      remark: per iteration: matmul 2097152 flops, non-matmul 41344 ops
// NAIVE-SAME:   arith.mulf 12352, arith.select 4096, arith.subf 4160, arith.truncf 4096, math.exp 4160, tile.reduce 8192]
// NAIVE:      remark: outside loops: matmul 0 flops, non-matmul 16512 ops

// RUN: tile-opt %tilec_src_root/kernels/flash_fwd.mlir --pass-pipeline='builtin.module(tile-optimize,tile-count-work)' -o /dev/null 2>&1 | FileCheck %s --check-prefix=OPT
// OPT:      remark: per iteration (full blocks): matmul 2097152 flops, non-matmul 29056 ops
// OPT-SAME:   [arith.maximumf 64, arith.mulf 8256, arith.negf 64, arith.truncf 4096, math.exp2 4160, math.fma 4224, tile.reduce 8192]
// OPT:      remark: per iteration (partial blocks): matmul 2097152 flops, non-matmul 37312 ops
// OPT:      remark: per iteration (full blocks) (scale <= 0 fallback)
// OPT:      remark: per iteration (partial blocks) (scale <= 0 fallback)
// OPT:      remark: outside loops

// RUN: tile-opt %tilec_src_root/kernels/flash_fwd_causal.mlir --tile-count-work -o /dev/null 2>&1 | FileCheck %s --check-prefix=CAUSAL
// CAUSAL: remark: per iteration: matmul 2097152 flops, non-matmul 49536 ops

// RUN: tile-opt %tilec_src_root/kernels/flash_fwd_causal.mlir --pass-pipeline='builtin.module(tile-optimize,tile-count-work)' -o /dev/null 2>&1 | FileCheck %s --check-prefix=CAUSAL-OPT
// CAUSAL-OPT: remark: per iteration (full blocks): matmul 2097152 flops, non-matmul 29056 ops
// CAUSAL-OPT: remark: per iteration (partial blocks): matmul 2097152 flops, non-matmul 45504 ops
