// The DSL flagship's variants (kernels/flash_fwd.py) keep their masks in one
// tl.where, which tile-split-masked-loops turns into loop ranges: bottom-right
// causal runs unmasked blocks, then masked diagonal blocks up to a bound
// computed from seqlen_k - seqlen_q, and skips the rest; a sliding window
// skips blocks on both sides ([0, a) and [e, cdiv) are never run) around
// masked | unmasked | masked ranges (the first tests only the left edge). No
// mask stays applied in every block.
// VARLEN's sequence lengths, loaded from cu_seqlens, split the same way.
// RUN: %python %S/Inputs/flash_variant_ir.py CAUSAL=True BLOCK_M=128 | tile-opt --tile-split-masked-loops 2>&1 | FileCheck %s --check-prefix=CAUSAL
// RUN: %python %S/Inputs/flash_variant_ir.py CAUSAL=True VARLEN=True BLOCK_M=128 | tile-opt --tile-split-masked-loops 2>&1 | FileCheck %s --check-prefix=CAUSAL
// RUN: %python %S/Inputs/flash_variant_ir.py WINDOW=True BLOCK_M=128 | tile-opt --tile-split-masked-loops 2>&1 | FileCheck %s --check-prefix=WINDOW
// RUN: %python %S/Inputs/flash_variant_ir.py WINDOW=True SOFTCAP=True ALIBI=True HEAD_DIM=64 | tile-opt --tile-split-masked-loops 2>&1 | FileCheck %s --check-prefix=WINDOW

// The diagonal's last block is min(max(skip bound, 0), cdiv(seqlen_k, 64)); the
// unmasked blocks end at the first block the diagonal reaches.
// CAUSAL-NOT:   remark
// CAUSAL-LABEL: func.func @flash_fwd_f16_d128_causal{{(_varlen)?}}(
// CAUSAL:       %[[E0:.+]] = arith.maxsi %{{.+}}, %c0_i32 : i32
// CAUSAL-NEXT:  %[[E:.+]] = arith.minsi %[[E0]], %{{.+}} : i32
// CAUSAL:       %[[D0:.+]] = arith.maxsi %{{.+}}, %c0_i32 : i32
// CAUSAL-NEXT:  %[[D:.+]] = arith.minsi %[[D0]], %[[E]] : i32
// CAUSAL-NEXT:  scf.for %{{.+}} = %c0_i32 to %[[D]] step
// CAUSAL:       } {tile.blocks = #tile<blocks full>}
// CAUSAL-NEXT:  scf.for %{{.+}} = %[[D]] to %[[E]] step
// CAUSAL:       } {tile.blocks = #tile<blocks partial>}
// CAUSAL-NOT:   scf.for

// The first block run is a = min(max(skip bound, 0), ub), the last one ends at
// e = min(max(skip bound, a), ub): both ends skip.
// WINDOW-NOT:   remark
// WINDOW-LABEL: func.func @flash_fwd_f16_d{{[0-9]+}}_window
// WINDOW:       %[[A0:.+]] = arith.maxsi %{{.+}}, %c0_i32 : i32
// WINDOW-NEXT:  %[[A:.+]] = arith.minsi %[[A0]], %[[UB:.+]] : i32
// WINDOW-NEXT:  %[[E0:.+]] = arith.maxsi %{{.+}}, %[[A]] : i32
// WINDOW-NEXT:  %[[E:.+]] = arith.minsi %[[E0]], %[[UB]] : i32
// WINDOW:       scf.for %{{.+}} = %[[A]] to %[[B:[^ ]+]] step
// WINDOW:       } {tile.blocks = #tile<blocks partial>}
// WINDOW-NEXT:  scf.for %{{.+}} = %[[B]] to %[[D:[^ ]+]] step
// WINDOW:       } {tile.blocks = #tile<blocks full>}
// WINDOW-NEXT:  scf.for %{{.+}} = %[[D]] to %[[E]] step
// WINDOW:       } {tile.blocks = #tile<blocks partial>}
// WINDOW-NOT:   scf.for
