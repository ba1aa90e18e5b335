module {
  func.func @flash_fwd(%arg0: !tile.ptr<f16>, %arg1: !tile.ptr<f16>, %arg2: !tile.ptr<f16>, %arg3: !tile.ptr<f16>, %arg4: !tile.ptr<f32>, %arg5: i32, %arg6: i32, %arg7: i32, %arg8: i32, %arg9: i64, %arg10: i64, %arg11: i64, %arg12: i64, %arg13: i64, %arg14: i64, %arg15: i64, %arg16: i64, %arg17: i64, %arg18: i64, %arg19: i64, %arg20: i64, %arg21: i64, %arg22: i64, %arg23: f32) attributes {tile.arg_names = ["q", "k", "v", "o", "lse", "seqlen_q", "seqlen_k", "num_heads", "batch", "stride_qb", "stride_qs", "stride_qh", "stride_kb", "stride_ks", "stride_kh", "stride_vb", "stride_vs", "stride_vh", "stride_ob", "stride_os", "stride_oh", "stride_lseb", "stride_lseh", "scale"], tile.grid = ["cdiv(seqlen_q, 64)", "batch * num_heads", "1"], tile.kernel, tile.variant = {block_m = 64 : i64, causal = false, dtype = "f16", head_dim = 128 : i64}} {
    %c-64_i32 = arith.constant -64 : i32
    %c-1_i32 = arith.constant -1 : i32
    %cst = arith.constant dense<1.000000e+00> : tensor<64xf32>
    %cst_0 = arith.constant 1.44269502 : f32
    %cst_1 = arith.constant 0.000000e+00 : f32
    %cst_2 = arith.constant dense<0xFF800000> : tensor<64x64xf32>
    %cst_3 = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %cst_4 = arith.constant dense<0.000000e+00> : tensor<64x128xf32>
    %cst_5 = arith.constant dense<0.000000e+00> : tensor<64xf32>
    %cst_6 = arith.constant dense<0xFF800000> : tensor<64xf32>
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %c63_i32 = arith.constant 63 : i32
    %c64_i32 = arith.constant 64 : i32
    %c128_i32 = arith.constant 128 : i32
    %c1_i64 = arith.constant 1 : i64
    %0 = tile.program_id 0 : i32
    %1 = tile.program_id 1 : i32
    %2 = arith.divsi %1, %arg7 : i32
    %3 = arith.remsi %1, %arg7 : i32
    %4 = arith.extsi %2 : i32 to i64
    %5 = arith.extsi %3 : i32 to i64
    %6 = arith.muli %4, %arg9 : i64
    %7 = arith.muli %5, %arg11 : i64
    %8 = arith.addi %6, %7 : i64
    %9 = tile.addptr %arg0, %8 : <f16>, i64
    %10 = tile.view %9 sizes(%arg5, %c128_i32) strides(%arg10, %c1_i64) : <f16> -> <f16, 2>
    %11 = arith.muli %4, %arg12 : i64
    %12 = arith.muli %5, %arg14 : i64
    %13 = arith.addi %11, %12 : i64
    %14 = tile.addptr %arg1, %13 : <f16>, i64
    %15 = tile.view %14 sizes(%arg6, %c128_i32) strides(%arg13, %c1_i64) : <f16> -> <f16, 2>
    %16 = arith.muli %4, %arg15 : i64
    %17 = arith.muli %5, %arg17 : i64
    %18 = arith.addi %16, %17 : i64
    %19 = tile.addptr %arg2, %18 : <f16>, i64
    %20 = tile.view %19 sizes(%arg6, %c128_i32) strides(%arg16, %c1_i64) : <f16> -> <f16, 2>
    %21 = arith.muli %4, %arg18 : i64
    %22 = arith.muli %5, %arg20 : i64
    %23 = arith.addi %21, %22 : i64
    %24 = tile.addptr %arg3, %23 : <f16>, i64
    %25 = tile.view %24 sizes(%arg5, %c128_i32) strides(%arg19, %c1_i64) : <f16> -> <f16, 2>
    %26 = arith.muli %4, %arg21 : i64
    %27 = arith.muli %5, %arg22 : i64
    %28 = arith.addi %26, %27 : i64
    %29 = tile.addptr %arg4, %28 : <f32>, i64
    %30 = tile.view %29 sizes(%arg5) strides(%c1_i64) : <f32> -> <f32, 1>
    %31 = arith.muli %0, %c64_i32 : i32
    %32 = tile.load %10[%31, %c0_i32] padding =  zero : <f16, 2> -> tensor<64x128xf16>
    %33 = tile.splat %arg23 : f32 -> tensor<64x64xf32>
    %34 = tile.splat %arg6 : i32 -> tensor<64x64xi32>
    %35 = tile.iota : tensor<64xi32>
    %36 = arith.addi %arg6, %c63_i32 : i32
    %37 = arith.divsi %36, %c64_i32 : i32
    %38 = arith.cmpf ogt, %arg23, %cst_1 : f32
    %39 = tile.splat %arg23 : f32 -> tensor<64xf32>
    %40 = arith.mulf %arg23, %cst_0 : f32
    %41 = tile.splat %40 : f32 -> tensor<64xf32>
    %42 = tile.splat %40 : f32 -> tensor<64x64xf32>
    %43:3 = scf.if %38 -> (tensor<64xf32>, tensor<64xf32>, tensor<64x128xf32>) {
      %51 = arith.addi %arg6, %c-64_i32 : i32
      %52 = arith.divsi %51, %c64_i32 : i32
      %53 = arith.remsi %51, %c64_i32 : i32
      %54 = arith.cmpi slt, %53, %c0_i32 : i32
      %55 = arith.select %54, %c-1_i32, %c0_i32 : i32
      %56 = arith.addi %52, %55 : i32
      %57 = arith.addi %56, %c1_i32 : i32
      %58 = arith.divsi %arg6, %c64_i32 : i32
      %59 = arith.remsi %arg6, %c64_i32 : i32
      %60 = arith.cmpi sgt, %59, %c0_i32 : i32
      %61 = arith.extui %60 : i1 to i32
      %62 = arith.addi %58, %61 : i32
      %63 = arith.maxsi %62, %c0_i32 : i32
      %64 = arith.minsi %63, %37 : i32
      %65 = arith.maxsi %57, %c0_i32 : i32
      %66 = arith.minsi %65, %64 : i32
      %67:3 = scf.for %arg24 = %c0_i32 to %66 step %c1_i32 iter_args(%arg25 = %cst_6, %arg26 = %cst_5, %arg27 = %cst_4) -> (tensor<64xf32>, tensor<64xf32>, tensor<64x128xf32>)  : i32 {
        %70 = arith.muli %arg24, %c64_i32 : i32
        %71 = tile.load %15[%70, %c0_i32] padding =  zero : <f16, 2> -> tensor<64x128xf16>
        %72 = tile.load %20[%70, %c0_i32] padding =  zero : <f16, 2> -> tensor<64x128xf16>
        %73 = tile.dot %32, %71, %cst_3 transpose_b : tensor<64x128xf16>, tensor<64x128xf16> -> tensor<64x64xf32>
        %74 = tile.reduce  max %73 along 1 : tensor<64x64xf32> -> tensor<64xf32>
        %75 = arith.maximumf %arg25, %74 : tensor<64xf32>
        %76 = arith.mulf %75, %41 : tensor<64xf32>
        %77 = arith.negf %76 : tensor<64xf32>
        %200 = arith.maximumf %arg25, %74 : tensor<64xf32>
        %201 = arith.mulf %200, %41 : tensor<64xf32>
        %202 = arith.negf %201 : tensor<64xf32>
        %78 = tile.expand_dims %202 along 1 : tensor<64xf32> -> tensor<64x1xf32>
        %79 = tile.broadcast %78 : tensor<64x1xf32> -> tensor<64x64xf32>
        %80 = math.fma %73, %42, %79 : tensor<64x64xf32>
        %81 = math.exp2 %80 : tensor<64x64xf32>
        %82 = math.fma %arg25, %41, %77 : tensor<64xf32>
        %83 = math.exp2 %82 : tensor<64xf32>
        %84 = tile.reduce  sum %81 along 1 : tensor<64x64xf32> -> tensor<64xf32>
        %85 = math.fma %arg26, %83, %84 : tensor<64xf32>
        %86 = tile.expand_dims %83 along 1 : tensor<64xf32> -> tensor<64x1xf32>
        %87 = tile.broadcast %86 : tensor<64x1xf32> -> tensor<64x128xf32>
        %88 = arith.mulf %arg27, %87 : tensor<64x128xf32>
        %89 = arith.truncf %81 : tensor<64x64xf32> to tensor<64x64xf16>
        %90 = tile.dot %89, %72, %88 : tensor<64x64xf16>, tensor<64x128xf16> -> tensor<64x128xf32>
        scf.yield %75, %85, %90 : tensor<64xf32>, tensor<64xf32>, tensor<64x128xf32>
      } {tile.blocks = #tile<blocks full>}
      %68:3 = scf.for %arg24 = %66 to %64 step %c1_i32 iter_args(%arg25 = %67#0, %arg26 = %67#1, %arg27 = %67#2) -> (tensor<64xf32>, tensor<64xf32>, tensor<64x128xf32>)  : i32 {
        %70 = arith.muli %arg24, %c64_i32 : i32
        %71 = tile.load %15[%70, %c0_i32] padding =  zero : <f16, 2> -> tensor<64x128xf16>
        %72 = tile.load %20[%70, %c0_i32] padding =  zero : <f16, 2> -> tensor<64x128xf16>
        %73 = tile.dot %32, %71, %cst_3 transpose_b : tensor<64x128xf16>, tensor<64x128xf16> -> tensor<64x64xf32>
        %74 = tile.splat %70 : i32 -> tensor<64xi32>
        %75 = arith.addi %35, %74 : tensor<64xi32>
        %76 = tile.expand_dims %75 along 0 : tensor<64xi32> -> tensor<1x64xi32>
        %77 = tile.broadcast %76 : tensor<1x64xi32> -> tensor<64x64xi32>
        %78 = arith.cmpi slt, %77, %34 : tensor<64x64xi32>
        %79 = arith.select %78, %73, %cst_2 : tensor<64x64xi1>, tensor<64x64xf32>
        %80 = tile.reduce  max %79 along 1 : tensor<64x64xf32> -> tensor<64xf32>
        %81 = arith.maximumf %arg25, %80 : tensor<64xf32>
        %82 = arith.mulf %81, %41 : tensor<64xf32>
        %83 = arith.negf %82 : tensor<64xf32>
        %84 = tile.expand_dims %83 along 1 : tensor<64xf32> -> tensor<64x1xf32>
        %85 = tile.broadcast %84 : tensor<64x1xf32> -> tensor<64x64xf32>
        %86 = math.fma %79, %42, %85 : tensor<64x64xf32>
        %87 = math.exp2 %86 : tensor<64x64xf32>
        %88 = math.fma %arg25, %41, %83 : tensor<64xf32>
        %89 = math.exp2 %88 : tensor<64xf32>
        %90 = tile.reduce  sum %87 along 1 : tensor<64x64xf32> -> tensor<64xf32>
        %91 = math.fma %arg26, %89, %90 : tensor<64xf32>
        %92 = tile.expand_dims %89 along 1 : tensor<64xf32> -> tensor<64x1xf32>
        %93 = tile.broadcast %92 : tensor<64x1xf32> -> tensor<64x128xf32>
        %94 = arith.mulf %arg27, %93 : tensor<64x128xf32>
        %95 = arith.truncf %87 : tensor<64x64xf32> to tensor<64x64xf16>
        %96 = tile.dot %95, %72, %94 : tensor<64x64xf16>, tensor<64x128xf16> -> tensor<64x128xf32>
        scf.yield %81, %91, %96 : tensor<64xf32>, tensor<64xf32>, tensor<64x128xf32>
      } {tile.blocks = #tile<blocks partial>}
      %69 = arith.mulf %68#0, %39 : tensor<64xf32>
      scf.yield %69, %68#1, %68#2 : tensor<64xf32>, tensor<64xf32>, tensor<64x128xf32>
    } else {
      %51 = arith.addi %arg6, %c-64_i32 : i32
      %52 = arith.divsi %51, %c64_i32 : i32
      %53 = arith.remsi %51, %c64_i32 : i32
      %54 = arith.cmpi slt, %53, %c0_i32 : i32
      %55 = arith.select %54, %c-1_i32, %c0_i32 : i32
      %56 = arith.addi %52, %55 : i32
      %57 = arith.addi %56, %c1_i32 : i32
      %58 = arith.divsi %arg6, %c64_i32 : i32
      %59 = arith.remsi %arg6, %c64_i32 : i32
      %60 = arith.cmpi sgt, %59, %c0_i32 : i32
      %61 = arith.extui %60 : i1 to i32
      %62 = arith.addi %58, %61 : i32
      %63 = arith.maxsi %62, %c0_i32 : i32
      %64 = arith.minsi %63, %37 : i32
      %65 = arith.maxsi %57, %c0_i32 : i32
      %66 = arith.minsi %65, %64 : i32
      %67:3 = scf.for %arg24 = %c0_i32 to %66 step %c1_i32 iter_args(%arg25 = %cst_6, %arg26 = %cst_5, %arg27 = %cst_4) -> (tensor<64xf32>, tensor<64xf32>, tensor<64x128xf32>)  : i32 {
        %69 = arith.muli %arg24, %c64_i32 : i32
        %70 = tile.load %15[%69, %c0_i32] padding =  zero : <f16, 2> -> tensor<64x128xf16>
        %71 = tile.load %20[%69, %c0_i32] padding =  zero : <f16, 2> -> tensor<64x128xf16>
        %72 = tile.dot %32, %70, %cst_3 transpose_b : tensor<64x128xf16>, tensor<64x128xf16> -> tensor<64x64xf32>
        %73 = arith.mulf %72, %33 : tensor<64x64xf32>
        %74 = tile.reduce  max %73 along 1 : tensor<64x64xf32> -> tensor<64xf32>
        %75 = arith.maximumf %arg25, %74 : tensor<64xf32>
        %76 = tile.expand_dims %75 along 1 : tensor<64xf32> -> tensor<64x1xf32>
        %77 = tile.broadcast %76 : tensor<64x1xf32> -> tensor<64x64xf32>
        %78 = arith.subf %73, %77 : tensor<64x64xf32>
        %79 = math.exp %78 : tensor<64x64xf32>
        %80 = arith.subf %arg25, %75 : tensor<64xf32>
        %81 = math.exp %80 : tensor<64xf32>
        %82 = tile.reduce  sum %79 along 1 : tensor<64x64xf32> -> tensor<64xf32>
        %83 = math.fma %arg26, %81, %82 : tensor<64xf32>
        %84 = tile.expand_dims %81 along 1 : tensor<64xf32> -> tensor<64x1xf32>
        %85 = tile.broadcast %84 : tensor<64x1xf32> -> tensor<64x128xf32>
        %86 = arith.mulf %arg27, %85 : tensor<64x128xf32>
        %87 = arith.truncf %79 : tensor<64x64xf32> to tensor<64x64xf16>
        %88 = tile.dot %87, %71, %86 : tensor<64x64xf16>, tensor<64x128xf16> -> tensor<64x128xf32>
        scf.yield %75, %83, %88 : tensor<64xf32>, tensor<64xf32>, tensor<64x128xf32>
      } {tile.blocks = #tile<blocks full>, tile.softmax_fallback}
      %68:3 = scf.for %arg24 = %66 to %64 step %c1_i32 iter_args(%arg25 = %67#0, %arg26 = %67#1, %arg27 = %67#2) -> (tensor<64xf32>, tensor<64xf32>, tensor<64x128xf32>)  : i32 {
        %69 = arith.muli %arg24, %c64_i32 : i32
        %70 = tile.load %15[%69, %c0_i32] padding =  zero : <f16, 2> -> tensor<64x128xf16>
        %71 = tile.load %20[%69, %c0_i32] padding =  zero : <f16, 2> -> tensor<64x128xf16>
        %72 = tile.dot %32, %70, %cst_3 transpose_b : tensor<64x128xf16>, tensor<64x128xf16> -> tensor<64x64xf32>
        %73 = arith.mulf %72, %33 : tensor<64x64xf32>
        %74 = tile.splat %69 : i32 -> tensor<64xi32>
        %75 = arith.addi %35, %74 : tensor<64xi32>
        %76 = tile.expand_dims %75 along 0 : tensor<64xi32> -> tensor<1x64xi32>
        %77 = tile.broadcast %76 : tensor<1x64xi32> -> tensor<64x64xi32>
        %78 = arith.cmpi slt, %77, %34 : tensor<64x64xi32>
        %79 = arith.select %78, %73, %cst_2 : tensor<64x64xi1>, tensor<64x64xf32>
        %80 = tile.reduce  max %79 along 1 : tensor<64x64xf32> -> tensor<64xf32>
        %81 = arith.maximumf %arg25, %80 : tensor<64xf32>
        %82 = tile.expand_dims %81 along 1 : tensor<64xf32> -> tensor<64x1xf32>
        %83 = tile.broadcast %82 : tensor<64x1xf32> -> tensor<64x64xf32>
        %84 = arith.subf %79, %83 : tensor<64x64xf32>
        %85 = math.exp %84 : tensor<64x64xf32>
        %86 = arith.subf %arg25, %81 : tensor<64xf32>
        %87 = math.exp %86 : tensor<64xf32>
        %88 = tile.reduce  sum %85 along 1 : tensor<64x64xf32> -> tensor<64xf32>
        %89 = math.fma %arg26, %87, %88 : tensor<64xf32>
        %90 = tile.expand_dims %87 along 1 : tensor<64xf32> -> tensor<64x1xf32>
        %91 = tile.broadcast %90 : tensor<64x1xf32> -> tensor<64x128xf32>
        %92 = arith.mulf %arg27, %91 : tensor<64x128xf32>
        %93 = arith.truncf %85 : tensor<64x64xf32> to tensor<64x64xf16>
        %94 = tile.dot %93, %71, %92 : tensor<64x64xf16>, tensor<64x128xf16> -> tensor<64x128xf32>
        scf.yield %81, %89, %94 : tensor<64xf32>, tensor<64xf32>, tensor<64x128xf32>
      } {tile.blocks = #tile<blocks partial>, tile.softmax_fallback}
      scf.yield %68#0, %68#1, %68#2 : tensor<64xf32>, tensor<64xf32>, tensor<64x128xf32>
    }
    %44 = arith.divf %cst, %43#1 : tensor<64xf32>
    %45 = tile.expand_dims %44 along 1 : tensor<64xf32> -> tensor<64x1xf32>
    %46 = tile.broadcast %45 : tensor<64x1xf32> -> tensor<64x128xf32>
    %47 = arith.mulf %43#2, %46 : tensor<64x128xf32>
    %48 = arith.truncf %47 : tensor<64x128xf32> to tensor<64x128xf16>
    tile.store %48, %25[%31, %c0_i32] : tensor<64x128xf16>, <f16, 2>
    %49 = math.log %43#1 : tensor<64xf32>
    %50 = arith.addf %43#0, %49 : tensor<64xf32>
    tile.store %50, %30[%31] : tensor<64xf32>, <f32, 1>
    return
  }
}

