// REQUIRES: ptxas
// ptxas assembles tilec's PTX for both targets, and the manifest describes
// the launch exactly as the kernel's ABI attributes say, plus ptxas's resource report.
// RUN: rm -rf %t && mkdir -p %t
// RUN: tilec --from-llvm-dialect --arch=sm_80 --emit=all -o %t/sm80 %S/Inputs/mma_tile.mlir --stats 2>&1 | FileCheck %s --check-prefix=STATS
// RUN: ls %t/sm80 | FileCheck %s --check-prefix=FILES
// RUN: FileCheck %s --check-prefix=MANIFEST --input-file=%t/sm80/mma_tile.json
// RUN: sed 's/"sm_80"/"sm_90a"/' %S/Inputs/mma_tile.mlir > %t/mma_tile_sm90a.mlir
// RUN: tilec --from-llvm-dialect --arch=sm_90a --emit=all -o %t/sm90a %t/mma_tile_sm90a.mlir
// RUN: FileCheck %s --check-prefix=MANIFEST90 --input-file=%t/sm90a/mma_tile.json
// A single emit to a path with the emit's extension writes just that file.
// RUN: tilec --from-llvm-dialect --arch=sm_80 --emit=cubin -o %t/one.cubin %S/Inputs/mma_tile.mlir
// RUN: test -s %t/one.cubin
// --emit=cubin: the manifest names only the cubin, the only file written.
// RUN: tilec --from-llvm-dialect --arch=sm_80 --emit=cubin -o %t/cubin-only %S/Inputs/mma_tile.mlir
// RUN: ls %t/cubin-only | FileCheck %s --check-prefix=CUBIN-ONLY
// RUN: FileCheck %s --check-prefix=CUBIN-MANIFEST --input-file=%t/cubin-only/mma_tile.json

// STATS: tilec: @mma_tile sm_80: {{[0-9]+}} registers, 0 B spill stores, 0 B spill loads, 0 B static smem, 0 B launch smem

// FILES: mma_tile.cubin
// FILES-NEXT: mma_tile.json
// FILES-NEXT: mma_tile.ll
// FILES-NEXT: mma_tile.ptx

// llvm::json prints keys sorted.
// MANIFEST:      "arch": "sm_80",
// MANIFEST-NEXT: "block": [
// MANIFEST-NEXT:   32,
// MANIFEST-NEXT:   1,
// MANIFEST-NEXT:   1
// MANIFEST-NEXT: ],
// MANIFEST-NEXT: "compiler": "tilec {{[0-9.]+}} (LLVM {{.*}})",
// MANIFEST-NEXT: "cubin": "mma_tile.cubin",
// MANIFEST-NEXT: "grid": [
// MANIFEST-NEXT:   "1",
// MANIFEST-NEXT:   "1",
// MANIFEST-NEXT:   "1"
// MANIFEST-NEXT: ],
// MANIFEST-NEXT: "kernel": "mma_tile",
// MANIFEST-NEXT: "params": [
// MANIFEST-NEXT:   {
// MANIFEST-NEXT:     "elem": "f16",
// MANIFEST-NEXT:     "kind": "ptr",
// MANIFEST-NEXT:     "name": "a"
// MANIFEST:          "name": "b"
// MANIFEST:          "elem": "f32",
// MANIFEST-NEXT:     "kind": "ptr",
// MANIFEST-NEXT:     "name": "out"
// MANIFEST:          "kind": "i32",
// MANIFEST-NEXT:     "name": "n"
// MANIFEST:      "ptx": "mma_tile.ptx",
// MANIFEST-NEXT: "ptxas_info": {
// MANIFEST-NEXT:   "registers": {{[1-9][0-9]*}},
// MANIFEST-NEXT:   "shared_bytes_static": 0,
// MANIFEST-NEXT:   "spill_loads": 0,
// MANIFEST-NEXT:   "spill_stores": 0,
// MANIFEST-NEXT:   "stack_frame": 0
// MANIFEST-NEXT: },
// MANIFEST-NEXT: "shared_bytes": 0,
// MANIFEST-NEXT: "variant": {
// MANIFEST-NEXT:   "block_m": 16,
// MANIFEST-NEXT:   "causal": false,
// MANIFEST-NEXT:   "name": "mma_smoke"
// MANIFEST-NEXT: }

// MANIFEST90: "arch": "sm_90a",
// MANIFEST90: "cubin": "mma_tile.cubin",
// MANIFEST90: "ptxas_info": {
// MANIFEST90-NEXT: "registers": {{[1-9][0-9]*}},

// CUBIN-ONLY: mma_tile.cubin
// CUBIN-ONLY-NEXT: mma_tile.json
// CUBIN-ONLY-NOT: mma_tile.ptx
// CUBIN-MANIFEST: "cubin": "mma_tile.cubin",
// CUBIN-MANIFEST-NOT: "ptx":
