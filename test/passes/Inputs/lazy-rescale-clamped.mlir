// The flex_fwd kernel (kernels/flex_fwd.py) with mask_mod = causal, 64x64 blocks,
// as the DSL generates it (locations dropped): its running max is clamped
// from below (rows that saw no key yet stay finite). Input of tile-lazy-rescale.mlir.
func.func @flex_causal(%q: !tile.ptr<f16>, %k: !tile.ptr<f16>, %v: !tile.ptr<f16>, %o: !tile.ptr<f16>, %lse: !tile.ptr<f32>, %seqlen_q: i32, %seqlen_k: i32, %num_heads: i32, %batch: i32, %group: i32, %stride_qb: i64, %stride_qh: i64, %stride_qs: i64, %stride_kb: i64, %stride_kh: i64, %stride_ks: i64, %stride_vb: i64, %stride_vh: i64, %stride_vs: i64, %stride_ob: i64, %stride_oh: i64, %stride_os: i64, %stride_lseb: i64, %stride_lseh: i64, %scale: f32 {tile.positive})
    attributes {tile.kernel, tile.arg_names = ["q", "k", "v", "o", "lse", "seqlen_q", "seqlen_k", "num_heads", "batch", "group", "stride_qb", "stride_qh", "stride_qs", "stride_kb", "stride_kh", "stride_ks", "stride_vb", "stride_vh", "stride_vs", "stride_ob", "stride_oh", "stride_os", "stride_lseb", "stride_lseh", "scale"], tile.grid = ["cdiv(seqlen_q, 64)", "batch * num_heads", "1"], tile.variant = {dtype = "f16", head_dim = 128 : i64, score_mod = "none", mask_mod = "causal", block_m = 64 : i64}} {
  %pid_m = tile.program_id 0 : i32
  %pid_bh = tile.program_id 1 : i32
  %b = arith.divsi %pid_bh, %num_heads : i32
  %h = arith.remsi %pid_bh, %num_heads : i32
  %hk = arith.divsi %h, %group : i32
  %t = arith.extsi %b : i32 to i64
  %t_1 = arith.muli %t, %stride_qb : i64
  %t_2 = arith.extsi %h : i32 to i64
  %t_3 = arith.muli %t_2, %stride_qh : i64
  %t_4 = arith.addi %t_1, %t_3 : i64
  %t_5 = tile.addptr %q, %t_4 : !tile.ptr<f16>, i64
  %t_6 = arith.constant 128 : i32
  %t_7 = arith.constant 1 : i64
  %qv = tile.view %t_5 sizes(%seqlen_q, %t_6) strides(%stride_qs, %t_7) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %t_8 = arith.muli %t, %stride_kb : i64
  %t_9 = arith.extsi %hk : i32 to i64
  %t_10 = arith.muli %t_9, %stride_kh : i64
  %t_11 = arith.addi %t_8, %t_10 : i64
  %t_12 = tile.addptr %k, %t_11 : !tile.ptr<f16>, i64
  %kv = tile.view %t_12 sizes(%seqlen_k, %t_6) strides(%stride_ks, %t_7) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %t_13 = arith.muli %t, %stride_vb : i64
  %t_14 = arith.muli %t_9, %stride_vh : i64
  %t_15 = arith.addi %t_13, %t_14 : i64
  %t_16 = tile.addptr %v, %t_15 : !tile.ptr<f16>, i64
  %vv = tile.view %t_16 sizes(%seqlen_k, %t_6) strides(%stride_vs, %t_7) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %t_17 = arith.muli %t, %stride_ob : i64
  %t_18 = arith.muli %t_2, %stride_oh : i64
  %t_19 = arith.addi %t_17, %t_18 : i64
  %t_20 = tile.addptr %o, %t_19 : !tile.ptr<f16>, i64
  %ov = tile.view %t_20 sizes(%seqlen_q, %t_6) strides(%stride_os, %t_7) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %t_21 = arith.muli %t, %stride_lseb : i64
  %t_22 = arith.muli %t_2, %stride_lseh : i64
  %t_23 = arith.addi %t_21, %t_22 : i64
  %t_24 = tile.addptr %lse, %t_23 : !tile.ptr<f32>, i64
  %lsev = tile.view %t_24 sizes(%seqlen_q) strides(%t_7) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %t_25 = arith.constant 64 : i32
  %row0 = arith.muli %pid_m, %t_25 : i32
  %t_26 = arith.constant 0 : i32
  %qt = tile.load %qv[%row0, %t_26] padding = zero : !tile.view<f16, 2> -> tensor<64x128xf16>
  %m = arith.constant dense<0xFF800000> : tensor<64xf32>
  %l = arith.constant dense<0.0> : tensor<64xf32>
  %acc = arith.constant dense<0.0> : tensor<64x128xf32>
  %t_27 = tile.iota : tensor<64xi32>
  %t_28 = tile.splat %row0 : i32 -> tensor<64xi32>
  %t_29 = arith.addi %t_28, %t_27 : tensor<64xi32>
  %rows = tile.expand_dims %t_29 along 1 : tensor<64xi32> -> tensor<64x1xi32>
  %t_30 = arith.constant 63 : i32
  %t_31 = arith.addi %seqlen_k, %t_30 : i32
  %t_32 = arith.divsi %t_31, %t_25 : i32
  %t_33 = arith.constant 1 : i32
  %t_34 = arith.constant dense<0.0> : tensor<64x64xf32>
  %t_35 = tile.splat %scale : f32 -> tensor<64x64xf32>
  %t_36 = tile.splat %seqlen_k : i32 -> tensor<1x64xi32>
  %t_37 = tile.broadcast %rows : tensor<64x1xi32> -> tensor<64x64xi32>
  %t_38 = arith.constant dense<0xFF800000> : tensor<64x64xf32>
  %t_39 = arith.constant dense<-1048576.0> : tensor<64xf32>
  %m_1, %l_1, %acc_1 = scf.for %j = %t_26 to %t_32 step %t_33 iter_args(%m_2 = %m, %l_2 = %l, %acc_2 = %acc) -> (tensor<64xf32>, tensor<64xf32>, tensor<64x128xf32>) : i32 {
    %col0 = arith.muli %j, %t_25 : i32
    %kt = tile.load %kv[%col0, %t_26] padding = zero : !tile.view<f16, 2> -> tensor<64x128xf16>
    %vt = tile.load %vv[%col0, %t_26] padding = zero : !tile.view<f16, 2> -> tensor<64x128xf16>
    %t_40 = tile.dot %qt, %kt, %t_34 transpose_b : tensor<64x128xf16>, tensor<64x128xf16> -> tensor<64x64xf32>
    %s = arith.mulf %t_40, %t_35 : tensor<64x64xf32>
    %t_41 = tile.splat %col0 : i32 -> tensor<64xi32>
    %t_42 = arith.addi %t_41, %t_27 : tensor<64xi32>
    %cols = tile.expand_dims %t_42 along 0 : tensor<64xi32> -> tensor<1x64xi32>
    %mask = arith.cmpi slt, %cols, %t_36 : tensor<1x64xi32>
    %t_43 = tile.broadcast %cols : tensor<1x64xi32> -> tensor<64x64xi32>
    %t_44 = arith.cmpi sge, %t_37, %t_43 : tensor<64x64xi32>
    %t_45 = tile.broadcast %mask : tensor<1x64xi1> -> tensor<64x64xi1>
    %mask_1 = arith.andi %t_45, %t_44 : tensor<64x64xi1>
    %s_1 = arith.select %mask_1, %s, %t_38 : tensor<64x64xi1>, tensor<64x64xf32>
    %t_46 = tile.reduce max %s_1 along 1 : tensor<64x64xf32> -> tensor<64xf32>
    %t_47 = arith.maximumf %m_2, %t_46 : tensor<64xf32>
    %m_new = arith.maximumf %t_47, %t_39 : tensor<64xf32>
    %t_48 = tile.expand_dims %m_new along 1 : tensor<64xf32> -> tensor<64x1xf32>
    %t_49 = tile.broadcast %t_48 : tensor<64x1xf32> -> tensor<64x64xf32>
    %t_50 = arith.subf %s_1, %t_49 : tensor<64x64xf32>
    %p = math.exp %t_50 : tensor<64x64xf32>
    %t_51 = arith.subf %m_2, %m_new : tensor<64xf32>
    %alpha = math.exp %t_51 : tensor<64xf32>
    %t_52 = arith.mulf %l_2, %alpha : tensor<64xf32>
    %t_53 = tile.reduce sum %p along 1 : tensor<64x64xf32> -> tensor<64xf32>
    %l_3 = arith.addf %t_52, %t_53 : tensor<64xf32>
    %t_54 = arith.truncf %p : tensor<64x64xf32> to tensor<64x64xf16>
    %t_55 = tile.expand_dims %alpha along 1 : tensor<64xf32> -> tensor<64x1xf32>
    %t_56 = tile.broadcast %t_55 : tensor<64x1xf32> -> tensor<64x128xf32>
    %t_57 = arith.mulf %acc_2, %t_56 : tensor<64x128xf32>
    %acc_3 = tile.dot %t_54, %vt, %t_57 : tensor<64x64xf16>, tensor<64x128xf16> -> tensor<64x128xf32>
    scf.yield %m_new, %l_3, %acc_3 : tensor<64xf32>, tensor<64xf32>, tensor<64x128xf32>
  }
  %empty = arith.cmpf oeq, %l_1, %l : tensor<64xf32>
  %t_58 = tile.expand_dims %empty along 1 : tensor<64xi1> -> tensor<64x1xi1>
  %t_59 = tile.expand_dims %l_1 along 1 : tensor<64xf32> -> tensor<64x1xf32>
  %t_60 = tile.broadcast %t_59 : tensor<64x1xf32> -> tensor<64x128xf32>
  %t_61 = arith.divf %acc_1, %t_60 : tensor<64x128xf32>
  %t_62 = tile.broadcast %t_58 : tensor<64x1xi1> -> tensor<64x128xi1>
  %t_63 = arith.select %t_62, %acc, %t_61 : tensor<64x128xi1>, tensor<64x128xf32>
  %t_64 = arith.truncf %t_63 : tensor<64x128xf32> to tensor<64x128xf16>
  tile.store %t_64, %ov[%row0, %t_26] : tensor<64x128xf16>, !tile.view<f16, 2>
  %t_65 = math.log %l_1 : tensor<64xf32>
  %t_66 = arith.addf %m_1, %t_65 : tensor<64xf32>
  tile.store %t_66, %lsev[%row0] : tensor<64xf32>, !tile.view<f32, 1>
  return
}

