// REQUIRES: ptxas
// --extra-sass assembles the same PTX for more GPUs: an sm_80 kernel cannot
// run as sm_80 machine code on an sm_90 GPU (the H100/H200), where the driver
// would JIT-compile the PTX. <kernel>.sm_90.cubin holds that code instead and
// the manifest lists it under "sass"; the runtime loads it on a matching GPU.
// RUN: rm -rf %t && mkdir -p %t
// RUN: tilec --from-llvm-dialect --arch=sm_80 --extra-sass=sm_90 --emit=all -o %t/x %S/Inputs/mma_tile.mlir --stats 2>&1 | FileCheck %s --check-prefix=STATS
// RUN: ls %t/x | FileCheck %s --check-prefix=FILES
// RUN: FileCheck %s --check-prefix=MANIFEST --input-file=%t/x/mma_tile.json
// The same arch twice, or the main one, is assembled once.
// RUN: tilec --from-llvm-dialect --arch=sm_80 --extra-sass=sm_90,sm_80,sm_90 --emit=all -o %t/dup %S/Inputs/mma_tile.mlir
// RUN: FileCheck %s --check-prefix=MANIFEST --input-file=%t/dup/mma_tile.json
// RUN: grep -c '"arch": "sm_90"' %t/dup/mma_tile.json | FileCheck %s --check-prefix=ONCE
// One cubin file cannot hold them all.
// RUN: not tilec --from-llvm-dialect --arch=sm_80 --extra-sass=sm_90 --emit=cubin -o %t/one.cubin %S/Inputs/mma_tile.mlir 2>&1 | FileCheck %s --check-prefix=ONE
// Without a cubin (--emit=ptx) there is no machine code to list.
// RUN: tilec --from-llvm-dialect --arch=sm_80 --extra-sass=sm_90 --emit=ptx -o %t/ptx-only %S/Inputs/mma_tile.mlir
// RUN: FileCheck %s --check-prefix=PTX-ONLY --input-file=%t/ptx-only/mma_tile.json
// A GPU the PTX cannot run on is refused before any work, naming it.
// RUN: not tilec --from-llvm-dialect --arch=sm_80 --extra-sass=sm_80,sm_7 --emit=all -o %t/bad %S/Inputs/mma_tile.mlir 2>&1 | FileCheck %s --check-prefix=BAD

// FILES: mma_tile.cubin
// FILES-NEXT: mma_tile.json
// FILES-NEXT: mma_tile.ll
// FILES-NEXT: mma_tile.ptx
// FILES-NEXT: mma_tile.sm_90.cubin

// MANIFEST:      "cubin": "mma_tile.cubin",
// MANIFEST:      "sass": [
// MANIFEST-NEXT:   {
// MANIFEST-NEXT:     "arch": "sm_90",
// MANIFEST-NEXT:     "cubin": "mma_tile.sm_90.cubin",
// MANIFEST-NEXT:     "ptxas_info": {
// MANIFEST-NEXT:       "registers": {{[1-9][0-9]*}},
// MANIFEST-NEXT:       "shared_bytes_static": 0,
// MANIFEST-NEXT:       "spill_loads": 0,
// MANIFEST-NEXT:       "spill_stores": 0,
// MANIFEST-NEXT:       "stack_frame": 0
// MANIFEST-NEXT:     }
// MANIFEST-NEXT:   }
// MANIFEST-NEXT: ],

// The resource report of each assembly (--stats).
// STATS: tilec: @mma_tile sm_80: {{[0-9]+}} registers, 0 B spill stores, 0 B spill loads, 0 B static smem, 0 B launch smem
// STATS-NEXT: tilec: @mma_tile sm_90 (extra SASS): {{[0-9]+}} registers, 0 B spill stores, 0 B spill loads, 0 B static smem

// ONCE: {{^}}1{{$}}

// ONE: --extra-sass writes more cubins than the one file {{.*}}one.cubin: give -o a folder

// The manifest names the PTX and no machine code, before or after it.
// PTX-ONLY-NOT: "sass"
// PTX-ONLY-NOT: "cubin"
// PTX-ONLY: "ptx": "mma_tile.ptx"
// PTX-ONLY-NOT: "sass"
// PTX-ONLY-NOT: "cubin"

// BAD: error: extra SASS arch 'sm_7' is not a GPU architecture tilec's PTX runs on: expected sm_<major><minor>[a] with major >= 8 (e.g. sm_90)
