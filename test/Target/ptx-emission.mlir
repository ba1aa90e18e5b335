// The back half on its own: an LLVM-dialect kernel (Inputs/mma_tile.mlir,
// what tile-to-nvvm produces) goes through LLVM IR and NVPTX to PTX in
// process; no CUDA toolkit needed.
// RUN: tilec --from-llvm-dialect --arch=sm_80 --emit=ptx -o - %S/Inputs/mma_tile.mlir | FileCheck %s --check-prefix=PTX
// RUN: tilec --from-llvm-dialect --arch=sm_80 --emit=llvm -o - %S/Inputs/mma_tile.mlir | FileCheck %s --check-prefix=LLVM
// The same kernel retargeted: nothing in it is sm_80-specific.
// RUN: sed 's/"sm_80"/"sm_90a"/' %S/Inputs/mma_tile.mlir | tilec --from-llvm-dialect --arch=sm_90a --emit=ptx -o - | FileCheck %s --check-prefix=SM90

// PTX ISA 8.6 (tilec's default), one entry with all four params, the block
// size (tile.num_warps) as .maxntid, and the mma survives O3 and isel.
// PTX: .version 8.6
// PTX: .target sm_80
// PTX: .address_size 64
// PTX: .visible .entry mma_tile(
// PTX-COUNT-3: .param .u64 .ptr .global {{.*}}mma_tile_param_{{[0-2]}},
// PTX-NEXT: .param .u32 mma_tile_param_3
// PTX: .maxntid 32, 1, 1
// PTX: mov.u32 {{%r[0-9]+}}, %tid.x;
// PTX: ld.global
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// PTX: st.global
// PTX: ret;

// The LLVM IR handed to NVPTX: triple, data layout, a ptx_kernel, intrinsics.
// LLVM: target datalayout = "e-{{.*}}"
// LLVM: target triple = "nvptx64-nvidia-cuda"
// LLVM: define ptx_kernel void @mma_tile(ptr addrspace(1)
// LLVM: call {{.*}}i32 @llvm.nvvm.read.ptx.sreg.tid.x()
// LLVM: call { float, float, float, float } @llvm.nvvm.mma.m16n8k16.row.col.f32.f32(

// SM90: .target sm_90a
// SM90: .visible .entry mma_tile(
// SM90: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
