// Every malformed input is a diagnostic on stderr with its location and exit
// code 1, never a crash; one case per chunk.
// RUN: not tilec --from-llvm-dialect --split-input-file --emit=ptx -o - %s 2>&1 | FileCheck %s

// A math op the GPU has no lowering for is refused before code generation,
// at its line, with exit status 1 (it was LLVM's fatal "Cannot select",
// SIGABRT, which also ended any Python process compiling it; `not` fails on
// a crash).
// RUN: not tilec --emit=ptx -o - %S/Inputs/no_gpu_math.mlir 2> %t.math
// RUN: FileCheck %s --check-prefix=NO-LOWERING --input-file=%t.math
// NO-LOWERING: no_gpu_math.mlir:12:8: error: 'math.erf' on 'f32' has no GPU (NVPTX) lowering; the GPU lowers math.exp, exp2, log, log2, tanh, sin, cos
// NO-LOWERING-NOT: LLVM ERROR

// A kernel the runtime could not launch: nothing says grid or block.
// CHECK: tilec-errors.mlir:1 offset :[[@LINE+1]]:3: error: kernel @no_launch has no 'tile.launch' dictionary
  llvm.func @no_launch() attributes {nvvm.kernel} {
    llvm.return
  }

// -----

// The runtime packs arguments from params alone, so a count mismatch is fatal.
// CHECK: error: kernel @too_few_params: 'tile.launch' lists 1 params but the kernel takes 2 arguments
llvm.func @too_few_params(%a: !llvm.ptr<1>, %n: i32) attributes {nvvm.kernel,
    tile.launch = {grid = ["1", "1", "1"], block = array<i64: 32, 1, 1>,
                   params = [{name = "a", kind = "ptr", elem = "f16"}]}} {
  llvm.return
}

// -----

// A param declared i32 where the kernel takes a pointer.
// CHECK: error: kernel @kind_mismatch: 'tile.launch' params[0] (n) is declared i32 but argument #0 has type !llvm.ptr<1>
llvm.func @kind_mismatch(%a: !llvm.ptr<1>) attributes {nvvm.kernel,
    tile.launch = {grid = ["1", "1", "1"], block = array<i64: 32, 1, 1>,
                   params = [{name = "n", kind = "i32"}]}} {
  llvm.return
}

// -----

// A pointer must say what it points to (the runtime checks tensor dtypes).
// CHECK: error: kernel @ptr_without_elem: 'tile.launch' params[0] (q) is a ptr and needs 'elem' = one of f16, bf16, f32, i32, i64
llvm.func @ptr_without_elem(%q: !llvm.ptr<1>) attributes {nvvm.kernel,
    tile.launch = {grid = ["1", "1", "1"], block = array<i64: 32, 1, 1>,
                   params = [{name = "q", kind = "ptr"}]}} {
  llvm.return
}

// -----

// Two parameters of one name would be ambiguous in grid expressions.
// CHECK: error: kernel @repeated_name: 'tile.launch' params[1] repeats the name "n"
llvm.func @repeated_name(%n: i32, %m: i32) attributes {nvvm.kernel,
    tile.launch = {grid = ["1", "1", "1"], block = array<i64: 32, 1, 1>,
                   params = [{name = "n", kind = "i32"}, {name = "n", kind = "i32"}]}} {
  llvm.return
}

// -----

// CUDA allows at most 1024 threads per block.
// CHECK: error: kernel @huge_block: 'tile.launch' block has 2048 threads; CUDA allows at most 1024
llvm.func @huge_block() attributes {nvvm.kernel,
    tile.launch = {grid = ["1", "1", "1"], block = array<i64: 1024, 2, 1>, params = []}} {
  llvm.return
}

// -----

// A grid needs three extents.
// CHECK: error: kernel @short_grid: 'tile.launch' needs 'grid' = [x, y, z] with three string expressions
llvm.func @short_grid() attributes {nvvm.kernel,
    tile.launch = {grid = ["1", "1"], block = array<i64: 32, 1, 1>, params = []}} {
  llvm.return
}

// -----

// IR lowered for one target is not compiled for another.
// CHECK: error: module is lowered for sm_90a (tile.target) but the requested arch is sm_80
module attributes {tile.target = "sm_90a"} {
  llvm.func @other_target() attributes {nvvm.kernel,
      tile.launch = {grid = ["1", "1", "1"], block = array<i64: 32, 1, 1>, params = []}} {
    llvm.return
  }
}

// -----

// Functions without nvvm.kernel are device functions, not launchable.
// CHECK: error: no kernel to compile: expected an llvm.func with the 'nvvm.kernel' attribute
llvm.func @device_only() {
  llvm.return
}

// -----

// An op with no LLVM IR translation (the lowering left it behind) is named.
// CHECK: error: cannot be converted to LLVM IR: missing `LLVMTranslationDialectInterface` registration for dialect for op: func.func
func.func @leftover() {
  return
}
llvm.func @uses_leftover() attributes {nvvm.kernel,
    tile.launch = {grid = ["1", "1", "1"], block = array<i64: 32, 1, 1>, params = []}} {
  llvm.return
}

// -----

// Syntax errors come from the parser, with the location.
// CHECK: within split at {{.*}}tilec-errors.mlir:{{[0-9]+}} offset :{{[0-9]+}}:1: error: custom op 'llvm.bogus' is unknown
llvm.bogus

// -----

// 'align' (the widest access through a pointer) is a power-of-two byte
// count, and only pointers have one.
// CHECK: error: kernel @bad_align: 'tile.launch' params[0] (q): 'align' must be a power-of-two byte count, on a ptr
llvm.func @bad_align(%q: !llvm.ptr<1>) attributes {nvvm.kernel,
    tile.launch = {grid = ["1", "1", "1"], block = array<i64: 32, 1, 1>,
                   params = [{name = "q", kind = "ptr", elem = "f16", align = 12 : i64}]}} {
  llvm.return
}

// -----

// CHECK: error: kernel @align_on_scalar: 'tile.launch' params[0] (n): 'align' must be a power-of-two byte count, on a ptr
llvm.func @align_on_scalar(%n: i32) attributes {nvvm.kernel,
    tile.launch = {grid = ["1", "1", "1"], block = array<i64: 32, 1, 1>,
                   params = [{name = "n", kind = "i32", align = 16 : i64}]}} {
  llvm.return
}

// -----

// LLVM dialect input is checked too, before translation: llvm.tanh without
// `afn` has no NVPTX pattern (LLVM's fatal "Cannot select: ftanh").
// CHECK: tilec-errors.mlir:{{[0-9]+}} offset :10:8: error: 'llvm.intr.tanh' on 'f32' needs the 'afn' fast-math flag on NVPTX (tanh.approx.f32)
llvm.func @strict_tanh(%p: !llvm.ptr<1>) attributes {nvvm.kernel,
    tile.launch = {grid = ["1", "1", "1"], block = array<i64: 32, 1, 1>,
                   params = [{name = "p", kind = "ptr", elem = "f32"}]}} {
  %x = llvm.load %p : !llvm.ptr<1> -> f32
  %y = llvm.intr.tanh(%x) : (f32) -> f32
  llvm.store %y, %p : f32, !llvm.ptr<1>
  llvm.return
}

// -----

// llvm.exp has no NVPTX lowering at all ("no libcall available for fexp").
// CHECK: error: 'llvm.intr.exp' on 'f32' has no NVPTX lowering
llvm.func @plain_exp(%p: !llvm.ptr<1>) attributes {nvvm.kernel,
    tile.launch = {grid = ["1", "1", "1"], block = array<i64: 32, 1, 1>,
                   params = [{name = "p", kind = "ptr", elem = "f32"}]}} {
  %x = llvm.load %p : !llvm.ptr<1> -> f32
  %y = llvm.intr.exp(%x) : (f32) -> f32
  llvm.store %y, %p : f32, !llvm.ptr<1>
  llvm.return
}

// -----

// f64 sine: NVPTX has no approximate f64 form.
// CHECK: error: 'llvm.intr.sin' on 'f64' has no f64 form on NVPTX
llvm.func @sin_f64(%p: !llvm.ptr<1>) attributes {nvvm.kernel,
    tile.launch = {grid = ["1", "1", "1"], block = array<i64: 32, 1, 1>,
                   params = [{name = "p", kind = "ptr", elem = "f32"}]}} {
  %x = llvm.load %p : !llvm.ptr<1> -> f64
  %y = llvm.intr.sin(%x) {fastmathFlags = #llvm.fastmath<afn>} : (f64) -> f64
  llvm.store %y, %p : f64, !llvm.ptr<1>
  llvm.return
}
