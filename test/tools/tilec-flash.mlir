// REQUIRES: ptxas
// The whole pipeline on the flagship kernel: tile IR -> tile-optimize ->
// tile-to-nvvm -> LLVM IR -> PTX -> cubin, for both targets. The manifest
// carries the launch the kernel was written for and ptxas's resource report
// (register and spill numbers are the lowering's business, not checked here).
// RUN: rm -rf %t
// RUN: tilec %tilec_src_root/kernels/flash_fwd.mlir --arch=sm_80 --num-warps=4 --emit=all -o %t/sm80
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t/sm80/flash_fwd.ptx
// RUN: FileCheck %s --check-prefixes=MANIFEST,MANIFEST80 --input-file=%t/sm80/flash_fwd.json
// RUN: FileCheck %s --check-prefix=TILE --input-file=%t/sm80/flash_fwd.tile.mlir
// RUN: tilec %tilec_src_root/kernels/flash_fwd.mlir --arch=sm_90a --num-warps=4 --emit=all -o %t/sm90a
// RUN: FileCheck %s --check-prefixes=MANIFEST,MANIFEST90 --input-file=%t/sm90a/flash_fwd.json

// PTX: .target sm_80
// PTX: .visible .entry flash_fwd(
// PTX: .maxntid 128, 1, 1
// PTX: ldmatrix.sync.aligned
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// The copies' group accounting holds across the scale > 0 branch
// tile-minimize-nonmatmul makes (each branch numbers its own groups).
// PTX-NOT: cp.async.wait_group {{[[:space:]]*}}-

// MANIFEST80: "arch": "sm_80",
// MANIFEST90: "arch": "sm_90a",
// MANIFEST:   "block": [
// MANIFEST-NEXT: 128,
// MANIFEST:   "cubin": "flash_fwd.cubin",
// MANIFEST:   "grid": [
// MANIFEST-NEXT: "cdiv(seqlen_q, 64)",
// MANIFEST-NEXT: "batch * num_heads",
// MANIFEST-NEXT: "1"
// MANIFEST:   "kernel": "flash_fwd",
// MANIFEST:   "name": "q"
// MANIFEST:   "name": "scale"
// MANIFEST:   "ptx": "flash_fwd.ptx",
// MANIFEST:   "ptxas_info": {
// MANIFEST-NEXT: "registers": {{[0-9]+}},
// MANIFEST-NEXT: "shared_bytes_static": {{[0-9]+}},
// MANIFEST-NEXT: "spill_loads": {{[0-9]+}},
// MANIFEST-NEXT: "spill_stores": {{[0-9]+}},
// MANIFEST-NEXT: "stack_frame": {{[0-9]+}}
// MANIFEST:   "shared_bytes": {{[1-9][0-9]*}},
// MANIFEST:   "variant": {
// MANIFEST:     "head_dim": 128

// The tile IR is written after tile-optimize, before any layout or NVVM op.
// TILE: func.func @flash_fwd(
// TILE-NOT: nvvm.
// TILE: tile.dot
