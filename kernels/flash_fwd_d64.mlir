// FlashAttention-2 forward, written the way the math reads.
//
// One program computes a 64-row block of O = softmax(scale · Q·Kᵀ)·V for one
// (batch, head): a blocked loop over K/V with the online softmax written
// naively — math.exp, the scale as a multiply, the running rescale every
// iteration, the division by the row sum after the loop. Masks are ordinary
// IR (iota + compare + select). Making this fast is the compiler's job:
// tile-minimize-nonmatmul, tile-split-masked-loops and tile-partition-warps.
//
// Tensors use flash_attn's layout (batch, seqlen, heads, head_dim) with
// arbitrary strides in elements (the last dimension contiguous); lse is
// (batch, heads, seqlen_q) f32. Causal is top-left aligned: query row i sees
// keys 0..i.

// Non-causal, f16, head_dim 64, 64x64 blocks.
// Generated from flash_fwd.mlir (same kernel, this variant); keep them in step.
func.func @flash_fwd_d64(
    %q: !tile.ptr<f16>, %k: !tile.ptr<f16>, %v: !tile.ptr<f16>, %o: !tile.ptr<f16>,
    %lse: !tile.ptr<f32>, %seqlen_q: i32, %seqlen_k: i32, %num_heads: i32, %batch: i32,
    %stride_qb: i64, %stride_qs: i64, %stride_qh: i64,
    %stride_kb: i64, %stride_ks: i64, %stride_kh: i64,
    %stride_vb: i64, %stride_vs: i64, %stride_vh: i64,
    %stride_ob: i64, %stride_os: i64, %stride_oh: i64,
    %stride_lseb: i64, %stride_lseh: i64, %scale: f32)
    attributes {tile.kernel,
                tile.arg_names = ["q", "k", "v", "o", "lse", "seqlen_q", "seqlen_k", "num_heads",
                                  "batch", "stride_qb", "stride_qs", "stride_qh", "stride_kb",
                                  "stride_ks", "stride_kh", "stride_vb", "stride_vs", "stride_vh",
                                  "stride_ob", "stride_os", "stride_oh", "stride_lseb",
                                  "stride_lseh", "scale"],
                tile.grid = ["cdiv(seqlen_q, 64)", "batch * num_heads", "1"],
                tile.variant = {dtype = "f16", head_dim = 64 : i64, causal = false, block_m = 64 : i64}} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c63 = arith.constant 63 : i32
  %c64 = arith.constant 64 : i32
  %hd = arith.constant 64 : i32
  %c1_i64 = arith.constant 1 : i64
  // Which (row block, batch, head) this program owns.
  %pid_m = tile.program_id 0 : i32
  %pid_bh = tile.program_id 1 : i32
  %b32 = arith.divsi %pid_bh, %num_heads : i32
  %h32 = arith.remsi %pid_bh, %num_heads : i32
  %b = arith.extsi %b32 : i32 to i64
  %h = arith.extsi %h32 : i32 to i64
  // Views of this (batch, head)'s rows: seqlen x head_dim.
  %q_bo = arith.muli %b, %stride_qb : i64
  %q_ho = arith.muli %h, %stride_qh : i64
  %q_off = arith.addi %q_bo, %q_ho : i64
  %q_bh = tile.addptr %q, %q_off : !tile.ptr<f16>, i64
  %qv = tile.view %q_bh sizes(%seqlen_q, %hd) strides(%stride_qs, %c1_i64)
      : !tile.ptr<f16> -> !tile.view<f16, 2>
  %k_bo = arith.muli %b, %stride_kb : i64
  %k_ho = arith.muli %h, %stride_kh : i64
  %k_off = arith.addi %k_bo, %k_ho : i64
  %k_bh = tile.addptr %k, %k_off : !tile.ptr<f16>, i64
  %kv = tile.view %k_bh sizes(%seqlen_k, %hd) strides(%stride_ks, %c1_i64)
      : !tile.ptr<f16> -> !tile.view<f16, 2>
  %v_bo = arith.muli %b, %stride_vb : i64
  %v_ho = arith.muli %h, %stride_vh : i64
  %v_off = arith.addi %v_bo, %v_ho : i64
  %v_bh = tile.addptr %v, %v_off : !tile.ptr<f16>, i64
  %vv = tile.view %v_bh sizes(%seqlen_k, %hd) strides(%stride_vs, %c1_i64)
      : !tile.ptr<f16> -> !tile.view<f16, 2>
  %o_bo = arith.muli %b, %stride_ob : i64
  %o_ho = arith.muli %h, %stride_oh : i64
  %o_off = arith.addi %o_bo, %o_ho : i64
  %o_bh = tile.addptr %o, %o_off : !tile.ptr<f16>, i64
  %ov = tile.view %o_bh sizes(%seqlen_q, %hd) strides(%stride_os, %c1_i64)
      : !tile.ptr<f16> -> !tile.view<f16, 2>
  %l_bo = arith.muli %b, %stride_lseb : i64
  %l_ho = arith.muli %h, %stride_lseh : i64
  %l_off = arith.addi %l_bo, %l_ho : i64
  %lse_bh = tile.addptr %lse, %l_off : !tile.ptr<f32>, i64
  %lsev = tile.view %lse_bh sizes(%seqlen_q) strides(%c1_i64)
      : !tile.ptr<f32> -> !tile.view<f32, 1>

  %row0 = arith.muli %pid_m, %c64 : i32
  %qt = tile.load %qv[%row0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %m_init = arith.constant dense<0xFF800000> : tensor<64xf32>
  %l_init = arith.constant dense<0.0> : tensor<64xf32>
  %acc_init = arith.constant dense<0.0> : tensor<64x64xf32>
  %s_zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %neg_inf = arith.constant dense<0xFF800000> : tensor<64x64xf32>
  %scale_t = tile.splat %scale : f32 -> tensor<64x64xf32>
  %seqlen_k_t = tile.splat %seqlen_k : i32 -> tensor<64x64xi32>
  %cols_base = tile.iota : tensor<64xi32>
  %k_hi = arith.addi %seqlen_k, %c63 : i32
  %num_kv_blocks = arith.divsi %k_hi, %c64 : i32

  %m_fin, %l_fin, %acc_fin = scf.for %j = %c0 to %num_kv_blocks step %c1
      iter_args(%m = %m_init, %l = %l_init, %acc = %acc_init)
      -> (tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>) : i32 {
    %col0 = arith.muli %j, %c64 : i32
    %kt = tile.load %kv[%col0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %vt = tile.load %vv[%col0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    // S = scale · Q·Kᵀ
    %qk = tile.dot %qt, %kt, %s_zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %s = arith.mulf %qk, %scale_t : tensor<64x64xf32>
    // Keys past seqlen_k do not exist.
    %col0_t = tile.splat %col0 : i32 -> tensor<64xi32>
    %cols1 = arith.addi %cols_base, %col0_t : tensor<64xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<64xi32> -> tensor<1x64xi32>
    %cols = tile.broadcast %cols2 : tensor<1x64xi32> -> tensor<64x64xi32>
    %in_bounds = arith.cmpi slt, %cols, %seqlen_k_t : tensor<64x64xi32>
    %s_masked = arith.select %in_bounds, %s, %neg_inf : tensor<64x64xi1>, tensor<64x64xf32>
    // Online softmax.
    %row_max = tile.reduce max %s_masked along 1 : tensor<64x64xf32> -> tensor<64xf32>
    %m_new = arith.maximumf %m, %row_max : tensor<64xf32>
    %m_new2 = tile.expand_dims %m_new along 1 : tensor<64xf32> -> tensor<64x1xf32>
    %m_new_b = tile.broadcast %m_new2 : tensor<64x1xf32> -> tensor<64x64xf32>
    %s_shift = arith.subf %s_masked, %m_new_b : tensor<64x64xf32>
    %p = math.exp %s_shift : tensor<64x64xf32>
    %m_diff = arith.subf %m, %m_new : tensor<64xf32>
    %alpha = math.exp %m_diff : tensor<64xf32>
    %l_scaled = arith.mulf %l, %alpha : tensor<64xf32>
    %p_sum = tile.reduce sum %p along 1 : tensor<64x64xf32> -> tensor<64xf32>
    %l_new = arith.addf %l_scaled, %p_sum : tensor<64xf32>
    %alpha2 = tile.expand_dims %alpha along 1 : tensor<64xf32> -> tensor<64x1xf32>
    %alpha_b = tile.broadcast %alpha2 : tensor<64x1xf32> -> tensor<64x64xf32>
    %acc_scaled = arith.mulf %acc, %alpha_b : tensor<64x64xf32>
    %p16 = arith.truncf %p : tensor<64x64xf32> to tensor<64x64xf16>
    %acc_new = tile.dot %p16, %vt, %acc_scaled : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %m_new, %l_new, %acc_new : tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>
  }

  // O = diag(l)⁻¹·acc ; lse = m + log(l)
  %l_fin2 = tile.expand_dims %l_fin along 1 : tensor<64xf32> -> tensor<64x1xf32>
  %l_fin_b = tile.broadcast %l_fin2 : tensor<64x1xf32> -> tensor<64x64xf32>
  %out = arith.divf %acc_fin, %l_fin_b : tensor<64x64xf32>
  %out16 = arith.truncf %out : tensor<64x64xf32> to tensor<64x64xf16>
  tile.store %out16, %ov[%row0, %c0] : tensor<64x64xf16>, !tile.view<f16, 2>
  %log_l = math.log %l_fin : tensor<64xf32>
  %lse_t = arith.addf %m_fin, %log_l : tensor<64xf32>
  tile.store %lse_t, %lsev[%row0] : tensor<64xf32>, !tile.view<f32, 1>
  return
}
