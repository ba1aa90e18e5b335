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

// A kernel the runtime could not launch: nothing says its grid.
// CHECK: tilec-errors.mlir:1 offset :[[@LINE+1]]:3: error: kernel @no_grid: needs tile.grid = ["x", "y", "z"]: three grid-size expressions over its integer parameters
  llvm.func @no_grid() attributes {nvvm.kernel, tile.num_warps = 1 : i64} {
    llvm.return
  }

// -----

// Nor its block.
// CHECK: error: kernel @no_block: says nothing of its block size: give it nvvm.maxntid or tile.num_warps
llvm.func @no_block() attributes {nvvm.kernel, tile.grid = ["1", "1", "1"]} {
  llvm.return
}

// -----

// The runtime packs arguments by the manifest's params, one per argument.
// CHECK: error: kernel @too_few_names: tile.arg_names has 1 names for 2 parameters
llvm.func @too_few_names(%a: !llvm.ptr<1> {tile.elem = f16}, %n: i32) attributes {nvvm.kernel,
    tile.num_warps = 1 : i64, tile.grid = ["1", "1", "1"], tile.arg_names = ["a"]} {
  llvm.return
}

// -----

// A parameter the runtime cannot pass.
// CHECK: error: kernel @f64_param: parameter 0 (x) has type f64; kernels take pointers, i32, i64 or f32
llvm.func @f64_param(%x: f64) attributes {nvvm.kernel, tile.num_warps = 1 : i64, tile.grid = ["1", "1", "1"], tile.arg_names = ["x"]} {
  llvm.return
}

// -----

// A pointer must say what it points to (the runtime checks tensor dtypes).
// CHECK: error: kernel @ptr_without_elem: parameter 0 (q) is a pointer and needs tile.elem = one of f16, bf16, f32, i32, i64
llvm.func @ptr_without_elem(%q: !llvm.ptr<1>) attributes {nvvm.kernel, tile.num_warps = 1 : i64, tile.grid = ["1", "1", "1"], tile.arg_names = ["q"]} {
  llvm.return
}

// -----

// Two parameters of one name would be ambiguous in grid expressions.
// CHECK: error: kernel @repeated_name: parameter 1 repeats the name "n"
llvm.func @repeated_name(%n: i32, %m: i32) attributes {nvvm.kernel, tile.num_warps = 1 : i64, tile.grid = ["1", "1", "1"], tile.arg_names = ["n", "n"]} {
  llvm.return
}

// -----

// A grid expression reads integer parameters only (the runtime's parser,
// tilec/runtime/GridSyntax.h, checks it here already).
// CHECK: error: kernel @grid_names_pointer: tile.grid[0] 'cdiv(q, 64)': unknown name 'q' (integer parameters: n) at column 6
llvm.func @grid_names_pointer(%q: !llvm.ptr<1> {tile.elem = f16}, %n: i32) attributes {nvvm.kernel,
    tile.num_warps = 1 : i64, tile.grid = ["cdiv(q, 64)", "1", "1"], tile.arg_names = ["q", "n"]} {
  llvm.return
}

// -----

// CHECK: error: kernel @bad_grid_syntax: tile.grid[1] 'n +': expected a number, a name or '(' at column 4
llvm.func @bad_grid_syntax(%n: i32) attributes {nvvm.kernel,
    tile.num_warps = 1 : i64, tile.grid = ["1", "n +", "1"], tile.arg_names = ["n"]} {
  llvm.return
}

// -----

// CUDA allows at most 1024 threads per block.
// CHECK: error: kernel @huge_block: block has 2048 threads; CUDA allows at most 1024
llvm.func @huge_block() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 1024, 2, 1>,
    tile.grid = ["1", "1", "1"]} {
  llvm.return
}

// -----

// A grid needs three extents (the tile dialect verifies tile.grid's shape).
// CHECK: error: tile.grid must be ["x", "y", "z"]: three grid-size expressions over the kernel's integer parameters, got ["1", "1"]
llvm.func @short_grid() attributes {nvvm.kernel, tile.num_warps = 1 : i64, tile.grid = ["1", "1"]} {
  llvm.return
}

// -----

// IR lowered for one target is not compiled for another.
// CHECK: error: module is lowered for sm_90a (tile.target) but the requested arch is sm_80
module attributes {tile.target = "sm_90a"} {
  llvm.func @other_target() attributes {nvvm.kernel, tile.num_warps = 1 : i64, tile.grid = ["1", "1", "1"]} {
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
llvm.func @uses_leftover() attributes {nvvm.kernel, tile.num_warps = 1 : i64, tile.grid = ["1", "1", "1"]} {
  llvm.return
}

// -----

// Syntax errors come from the parser, with the location.
// CHECK: within split at {{.*}}tilec-errors.mlir:{{[0-9]+}} offset :{{[0-9]+}}:1: error: custom op 'llvm.bogus' is unknown
llvm.bogus

// -----

// tile.align (the widest access through a pointer) is a power-of-two byte
// count, and only pointers have one.
// CHECK: error: kernel @bad_align: parameter 0 (q): tile.align must be a power-of-two byte count, on a pointer
llvm.func @bad_align(%q: !llvm.ptr<1> {tile.elem = f16, tile.align = 12 : i64}) attributes {nvvm.kernel,
    tile.num_warps = 1 : i64, tile.grid = ["1", "1", "1"], tile.arg_names = ["q"]} {
  llvm.return
}

// -----

// CHECK: error: kernel @align_on_scalar: parameter 0 (n): tile.align must be a power-of-two byte count, on a pointer
llvm.func @align_on_scalar(%n: i32 {tile.align = 16 : i64}) attributes {nvvm.kernel,
    tile.num_warps = 1 : i64, tile.grid = ["1", "1", "1"], tile.arg_names = ["n"]} {
  llvm.return
}

// -----

// tl.assume(x > 0) is for scalars; a pointer is never checked for it.
// CHECK: error: kernel @positive_pointer: parameter 0 (q): tile.positive is a unit attribute on an i32, i64 or f32 parameter
llvm.func @positive_pointer(%q: !llvm.ptr<1> {tile.elem = f16, tile.positive}) attributes {nvvm.kernel,
    tile.num_warps = 1 : i64, tile.grid = ["1", "1", "1"], tile.arg_names = ["q"]} {
  llvm.return
}

// -----

// LLVM dialect input is checked too, before translation: llvm.tanh without
// `afn` has no NVPTX pattern (LLVM's fatal "Cannot select: ftanh").
// CHECK: tilec-errors.mlir:{{[0-9]+}} offset :9:8: error: 'llvm.intr.tanh' on 'f32' needs the 'afn' fast-math flag on NVPTX (tanh.approx.f32)
llvm.func @strict_tanh(%p: !llvm.ptr<1> {tile.elem = f32}) attributes {nvvm.kernel,
    tile.num_warps = 1 : i64, tile.grid = ["1", "1", "1"]} {
  %x = llvm.load %p : !llvm.ptr<1> -> f32
  %y = llvm.intr.tanh(%x) : (f32) -> f32
  llvm.store %y, %p : f32, !llvm.ptr<1>
  llvm.return
}

// -----

// llvm.exp has no NVPTX lowering at all ("no libcall available for fexp").
// CHECK: error: 'llvm.intr.exp' on 'f32' has no NVPTX lowering
llvm.func @plain_exp(%p: !llvm.ptr<1> {tile.elem = f32}) attributes {nvvm.kernel,
    tile.num_warps = 1 : i64, tile.grid = ["1", "1", "1"]} {
  %x = llvm.load %p : !llvm.ptr<1> -> f32
  %y = llvm.intr.exp(%x) : (f32) -> f32
  llvm.store %y, %p : f32, !llvm.ptr<1>
  llvm.return
}

// -----

// f64 sine: NVPTX has no approximate f64 form.
// CHECK: error: 'llvm.intr.sin' on 'f64' has no f64 form on NVPTX
llvm.func @sin_f64(%p: !llvm.ptr<1> {tile.elem = f32}) attributes {nvvm.kernel,
    tile.num_warps = 1 : i64, tile.grid = ["1", "1", "1"]} {
  %x = llvm.load %p : !llvm.ptr<1> -> f64
  %y = llvm.intr.sin(%x) {fastmathFlags = #llvm.fastmath<afn>} : (f64) -> f64
  llvm.store %y, %p : f64, !llvm.ptr<1>
  llvm.return
}
