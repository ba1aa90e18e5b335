// The tilec command line: version, option checks, and the paths that do not
// need a CUDA toolkit. The kernel is test/Target/Inputs/mma_tile.mlir.
// RUN: tilec --version | FileCheck %s --check-prefix=VERSION
// VERSION: tilec {{[0-9]+\.[0-9]+\.[0-9]+}} (LLVM 22.{{.*}})

// An architecture LLVM does not know is refused before any work.
// RUN: not tilec --from-llvm-dialect --arch=sm_99 --emit=ptx -o - %S/../Target/Inputs/mma_tile.mlir 2>&1 | FileCheck %s --check-prefix=BAD-ARCH
// BAD-ARCH: tilec: error: unknown GPU architecture 'sm_99' (expected e.g. sm_80, sm_90a)

// --extra-sass names are checked before any work (an empty one used to reach
// ptxas as -arch=, an sm_ with too many digits the runtime's std::stoi).
// RUN: not tilec --from-llvm-dialect --extra-sass=sm_70 --emit=ptx -o - %S/../Target/Inputs/mma_tile.mlir 2>&1 | FileCheck %s --check-prefix=BAD-SASS
// BAD-SASS: tilec: error: extra SASS arch 'sm_70' is not a GPU architecture tilec's PTX runs on: expected sm_<major><minor>[a] with major >= 8 (e.g. sm_90)
// RUN: not tilec --from-llvm-dialect --extra-sass=sm_90, --emit=ptx -o - %S/../Target/Inputs/mma_tile.mlir 2>&1 | FileCheck %s --check-prefix=EMPTY-SASS
// EMPTY-SASS: tilec: error: extra SASS arch '' is not a GPU architecture

// Several files cannot go to stdout.
// RUN: not tilec --from-llvm-dialect --emit=all %S/../Target/Inputs/mma_tile.mlir 2>&1 | FileCheck %s --check-prefix=NEED-OUT
// NEED-OUT: tilec: error: --emit=all (the default) writes files: give -o OUTDIR (or -o FILE with a single --emit)

// Tile IR without a tile.kernel function says what to mark.
// RUN: not tilec %S/Inputs/no_kernel.mlir -o %t.nk 2>&1 | FileCheck %s --check-prefix=NO-KERNEL
// NO-KERNEL: error: no kernel to compile: mark the kernel's func.func with the 'tile.kernel' attribute

// Python kernels go through the Python package.
// RUN: not tilec %tilec_src_root/kernels/flash_fwd.py -o %t.py.out 2>&1 | FileCheck %s --check-prefix=PY
// PY: tilec: error: {{.*}}flash_fwd.py is Python: tilec compiles tile-dialect MLIR

// RUN: not tilec --from-llvm-dialect --emit=ptx -o - %t.missing.mlir 2>&1 | FileCheck %s --check-prefix=NO-INPUT
// NO-INPUT: tilec: error: cannot read {{.*}}missing.mlir: No such file or directory

// Without ptxas (TILEC_PTXAS set to nothing turns it off) --emit=all still
// writes PTX and a manifest that names only the PTX, and says why.
// RUN: rm -rf %t && env TILEC_PTXAS= tilec --from-llvm-dialect --emit=all -o %t %S/../Target/Inputs/mma_tile.mlir 2>&1 | FileCheck %s --check-prefix=NO-PTXAS
// NO-PTXAS: tilec: note: no ptxas found ({{.*}}): @mma_tile has PTX only; the runtime will JIT it
// RUN: ls %t | FileCheck %s --check-prefix=NO-PTXAS-FILES
// NO-PTXAS-FILES-NOT: cubin
// NO-PTXAS-FILES: mma_tile.json
// NO-PTXAS-FILES: mma_tile.ptx
// RUN: FileCheck %s --check-prefix=NO-PTXAS-MANIFEST --input-file=%t/mma_tile.json
// NO-PTXAS-MANIFEST-NOT: "cubin"
// NO-PTXAS-MANIFEST-NOT: "ptxas_info"
// NO-PTXAS-MANIFEST: "ptx": "mma_tile.ptx"

// --emit=cubin without ptxas is an error, not an empty file.
// RUN: not env TILEC_PTXAS= tilec --from-llvm-dialect --emit=cubin -o %t/c %S/../Target/Inputs/mma_tile.mlir 2>&1 | FileCheck %s --check-prefix=CUBIN-NO-PTXAS
// CUBIN-NO-PTXAS: tilec: error: --emit=cubin needs ptxas; none was found for @mma_tile

// -o FILE (any file name with an extension) writes that one file.
// RUN: tilec --from-llvm-dialect --emit=ptx -o %t/single.ptx %S/../Target/Inputs/mma_tile.mlir
// RUN: FileCheck %s --check-prefix=SINGLE --input-file=%t/single.ptx
// RUN: tilec --from-llvm-dialect --emit=ptx -o %t/single.txt %S/../Target/Inputs/mma_tile.mlir
// RUN: FileCheck %s --check-prefix=SINGLE --input-file=%t/single.txt
// SINGLE: .visible .entry mma_tile(

// Warps come in powers of two up to 16, as tile-partition-warps takes them.
// RUN: not tilec --from-llvm-dialect --num-warps=3 --emit=ptx -o - %S/../Target/Inputs/mma_tile.mlir 2>&1 | FileCheck %s --check-prefix=WARPS
// WARPS: tilec: error: --num-warps=3 must be a power of two in [1, 16]
// RUN: not tilec --stages=3 --emit=ptx -o - %S/../Target/Inputs/mma_tile.mlir 2>&1 | FileCheck %s --check-prefix=STAGES
// STAGES: tilec: error: --stages=3 must be 1 or 2
// Options with their own flag cannot also come through --lowering-options.
// RUN: not tilec --lowering-options="num-warps=8" --emit=ptx -o - %tilec_src_root/kernels/flash_fwd_d64.mlir 2>&1 | FileCheck %s --check-prefix=OWNED
// OWNED: lowering option 'num-warps=8' has its own setting (--num-warps)
// An architecture without mma.sync is refused up front, not at 0:0 of the file.
// RUN: not tilec --arch=sm_75 --emit=ptx -o - %S/../Target/Inputs/mma_tile.mlir 2>&1 | FileCheck %s --check-prefix=ARCH
// ARCH: tilec: error: --arch=sm_75 is not supported: tilec emits mma.sync (sm_80 and newer)
// --stats prints the pass timings, without MLIR's (empty) statistics table.
// RUN: tilec %tilec_src_root/kernels/flash_fwd_d64.mlir --emit=ptx -o %t.ptx --stats 2>&1 | FileCheck %s --check-prefix=STATS
// STATS-NOT: Pass statistics report
// STATS: Execution time report

// --results lists each kernel with its notes and ptxas log (what the Python
// package's child-process compile reads back); --source-name names stdin in
// diagnostics.
// RUN: env TILEC_PTXAS= tilec --from-llvm-dialect -o %t.res --results=%t.res.json < %S/../Target/Inputs/mma_tile.mlir 2>/dev/null
// RUN: FileCheck %s --check-prefix=RESULTS --input-file=%t.res.json
// RESULTS: [
// RESULTS-NEXT:   {
// RESULTS-NEXT:     "name": "mma_tile",
// RESULTS-NEXT:     "notes": [
// RESULTS-NEXT:       "no ptxas found ({{.*}}): @mma_tile has PTX only; the runtime will JIT it"
// RESULTS-NEXT:     ],
// RESULTS-NEXT:     "ptxas_log": ""
// RESULTS-NEXT:   }
// RESULTS-NEXT: ]
// RUN: not tilec --source-name=named.mlir -o %t.sn < %S/Inputs/no_kernel.mlir 2>&1 | FileCheck %s --check-prefix=SOURCE-NAME
// SOURCE-NAME: named.mlir:{{[0-9]+}}:{{[0-9]+}}: error: no kernel to compile
// RUN: not tilec --split-input-file --results=%t.x.json -o %t.split %S/Inputs/no_kernel.mlir 2>&1 | FileCheck %s --check-prefix=RESULTS-SPLIT
// RESULTS-SPLIT: tilec: error: --results takes one input, not --split-input-file

// TILEC_DUMP_IR=1 prints the IR at every stage, here the LLVM IR before and
// after the O3 pipeline.
// RUN: env TILEC_DUMP_IR=1 tilec --from-llvm-dialect --emit=ptx -o - %S/../Target/Inputs/mma_tile.mlir 2>&1 >/dev/null | FileCheck %s --check-prefix=DUMP
// DUMP: // -----// LLVM IR of @mma_tile after translation //----- //
// DUMP: define ptx_kernel void @mma_tile(
// DUMP: // -----// LLVM IR of @mma_tile after O3 //----- //
