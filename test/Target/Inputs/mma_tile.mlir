// A hand-written LLVM-dialect kernel, the shape tile-to-nvvm produces: one
// warp multiplies a 16x16 f16 tile by a 16x8 one with mma.sync m16n8k16.
// Each lane reads its fragments pre-arranged (a: 4 x f16x2, b: 2 x f16x2 per
// lane, the PTX m16n8k16 fragment order) and writes its 4 f32 accumulators
// to out[4*lane..]; lanes >= n skip the store. Its ABI attributes are the
// ones the lowering leaves (dialects/Tile/TileAttrNames.h). Used by the
// tests beside Inputs/.
module attributes {tile.target = "sm_80"} {
  llvm.func @mma_tile(%a: !llvm.ptr<1> {tile.elem = f16}, %b: !llvm.ptr<1> {tile.elem = f16},
                      %out: !llvm.ptr<1> {tile.elem = f32}, %n: i32)
      attributes {nvvm.kernel, tile.num_warps = 1 : i64, tile.grid = ["1", "1", "1"],
                  tile.shared_bytes = 0 : i64, tile.arg_names = ["a", "b", "out", "n"],
                  tile.variant = {name = "mma_smoke", block_m = 16 : i64, causal = false}} {
    %lane = nvvm.read.ptx.sreg.tid.x : i32
    %c2 = llvm.mlir.constant(2 : i32) : i32
    %c4 = llvm.mlir.constant(4 : i32) : i32
    %i1 = llvm.mlir.constant(1 : i32) : i32
    %i2 = llvm.mlir.constant(2 : i32) : i32
    %i3 = llvm.mlir.constant(3 : i32) : i32
    %zero = llvm.mlir.constant(0.0 : f32) : f32

    %abase = llvm.mul %lane, %c4 : i32
    %pa0 = llvm.getelementptr %a[%abase] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<2xf16>
    %pa1 = llvm.getelementptr %pa0[%i1] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<2xf16>
    %pa2 = llvm.getelementptr %pa0[%i2] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<2xf16>
    %pa3 = llvm.getelementptr %pa0[%i3] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<2xf16>
    %a0 = llvm.load %pa0 : !llvm.ptr<1> -> vector<2xf16>
    %a1 = llvm.load %pa1 : !llvm.ptr<1> -> vector<2xf16>
    %a2 = llvm.load %pa2 : !llvm.ptr<1> -> vector<2xf16>
    %a3 = llvm.load %pa3 : !llvm.ptr<1> -> vector<2xf16>

    %bbase = llvm.mul %lane, %c2 : i32
    %pb0 = llvm.getelementptr %b[%bbase] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<2xf16>
    %pb1 = llvm.getelementptr %pb0[%i1] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<2xf16>
    %b0 = llvm.load %pb0 : !llvm.ptr<1> -> vector<2xf16>
    %b1 = llvm.load %pb1 : !llvm.ptr<1> -> vector<2xf16>

    %d = nvvm.mma.sync A[%a0, %a1, %a2, %a3] B[%b0, %b1] C[%zero, %zero, %zero, %zero]
        {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>,
         shape = #nvvm.shape<m = 16, n = 8, k = 16>}
        : (vector<2xf16>, vector<2xf16>, f32) -> !llvm.struct<(f32, f32, f32, f32)>

    %inRange = llvm.icmp "ult" %lane, %n : i32
    llvm.cond_br %inRange, ^store, ^done
  ^store:
    %d0 = llvm.extractvalue %d[0] : !llvm.struct<(f32, f32, f32, f32)>
    %d1 = llvm.extractvalue %d[1] : !llvm.struct<(f32, f32, f32, f32)>
    %d2 = llvm.extractvalue %d[2] : !llvm.struct<(f32, f32, f32, f32)>
    %d3 = llvm.extractvalue %d[3] : !llvm.struct<(f32, f32, f32, f32)>
    %po0 = llvm.getelementptr %out[%abase] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
    %po1 = llvm.getelementptr %po0[%i1] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
    %po2 = llvm.getelementptr %po0[%i2] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
    %po3 = llvm.getelementptr %po0[%i3] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
    llvm.store %d0, %po0 : f32, !llvm.ptr<1>
    llvm.store %d1, %po1 : f32, !llvm.ptr<1>
    llvm.store %d2, %po2 : f32, !llvm.ptr<1>
    llvm.store %d3, %po3 : f32, !llvm.ptr<1>
    llvm.br ^done
  ^done:
    llvm.return
  }
}
