//===- TileOps.td - the ops of the tile dialect ----------------------------===//
#ifndef TILE_OPS_TD
#define TILE_OPS_TD

include "TileDialect.td"
include "TileTypes.td"
include "TileAttrs.td"

//===----------------------------------------------------------------------===//
// Grid coordinates
//===----------------------------------------------------------------------===//

def Tile_ProgramIdOp : Tile_Op<"program_id", [Pure]> {
  let summary = "index of this program (thread block) along a grid axis";
  let description = [{
    Returns the coordinate of the running program along grid axis `axis`
    (0, 1 or 2). Example: `%row_block = tile.program_id 0 : i32`.
  }];
  let arguments = (ins ConfinedAttr<I32Attr, [IntMinValue<0>, IntMaxValue<2>]>:$axis);
  let results = (outs I32:$result);
  let assemblyFormat = "$axis attr-dict `:` type($result)";
}

def Tile_NumProgramsOp : Tile_Op<"num_programs", [Pure]> {
  let summary = "number of programs along a grid axis";
  let description = [{
    Returns the grid size along `axis` (0, 1 or 2).
    Example: `%n = tile.num_programs 1 : i32`.
  }];
  let arguments = (ins ConfinedAttr<I32Attr, [IntMinValue<0>, IntMaxValue<2>]>:$axis);
  let results = (outs I32:$result);
  let assemblyFormat = "$axis attr-dict `:` type($result)";
}

def Tile_WarpIdOp : Tile_Op<"warp_id", [Pure]> {
  let summary = "index of the running warp within its program";
  let description = [{
    Returns which warp of the program runs this op (0 .. num_warps - 1), the
    index the `warp` bases of a `#tile.linear` layout are read with. It only
    means something on layout-assigned IR (after tile-partition-warps), where
    the passes that make a warp's control flow its own create it
    (tile-skip-warp-blocks); the CPU pipeline refuses it.
    Example: `%w = tile.warp_id : i32`.
  }];
  let results = (outs I32:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Index tiles and shape plumbing
//===----------------------------------------------------------------------===//

def Tile_IotaOp : Tile_Op<"iota", [Pure]> {
  let summary = "the 1-D tile 0, 1, ..., N-1";
  let description = [{
    Builds index tiles for masks and addressing.
    Example: `%cols = tile.iota : tensor<64xi32>`.
  }];
  let results = (outs 1DTensorOf<[I32]>:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Tile_SplatOp : Tile_Op<"splat", [Pure,
    TypesMatchWith<"result element type matches the scalar", "result", "value",
                   "::llvm::cast<::mlir::ShapedType>($_self).getElementType()">]> {
  let summary = "a tile with every element equal to one scalar";
  let description = [{
    Example: `%neg_inf = tile.splat %m : f32 -> tensor<64xf32>`.
  }];
  let arguments = (ins AnyTypeOf<[AnyFloat, AnySignlessInteger]>:$value);
  let results = (outs Tile_AnyTile:$result);
  let assemblyFormat = "$value attr-dict `:` type($value) `->` type($result)";
}

def Tile_ExpandDimsOp : Tile_Op<"expand_dims", [Pure]> {
  let summary = "insert a dimension of size 1";
  let description = [{
    Inserts a unit dimension at position `axis` (0..rank). With
    `tile.broadcast` this turns a row vector into a full tile.
    Example: `%col = tile.expand_dims %m along 1 : tensor<64xf32> -> tensor<64x1xf32>`.
  }];
  let arguments = (ins Tile_AnyTile:$input, I32Attr:$axis);
  let results = (outs Tile_AnyTile:$result);
  let assemblyFormat = "$input `along` $axis attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Tile_BroadcastOp : Tile_Op<"broadcast", [Pure]> {
  let summary = "repeat a tile along its dimensions of size 1";
  let description = [{
    Every dimension of the input is either equal to the result's or 1; size-1
    dimensions are repeated. Example:
    `%b = tile.broadcast %col : tensor<64x1xf32> -> tensor<64x64xf32>`.
  }];
  let arguments = (ins Tile_AnyTile:$input);
  let results = (outs Tile_AnyTile:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Tile_TransOp : Tile_Op<"trans", [Pure]> {
  let summary = "transpose a 2-D tile";
  let description = [{
    Example: `%kt = tile.trans %k : tensor<64x128xf16> -> tensor<128x64xf16>`.
  }];
  let arguments = (ins 2DTensorOf<[AnyFloat, AnySignlessInteger]>:$input);
  let results = (outs 2DTensorOf<[AnyFloat, AnySignlessInteger]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Global memory
//===----------------------------------------------------------------------===//

def Tile_AddPtrOp : Tile_Op<"addptr", [Pure, AllTypesMatch<["ptr", "result"]>]> {
  let summary = "advance a global pointer by a number of elements";
  let description = [{
    Pointer arithmetic in elements of the pointee type, e.g. to select one
    (batch, head) slice before building a view.
    Example: `%qb = tile.addptr %q, %off : !tile.ptr<f16>, i64`.
  }];
  let arguments = (ins Tile_PtrType:$ptr, Tile_Int:$offset);
  let results = (outs Tile_PtrType:$result);
  let assemblyFormat = "$ptr `,` $offset attr-dict `:` type($ptr) `,` type($offset)";
}

def Tile_ViewOp : Tile_Op<"view", [Pure, AttrSizedOperandSegments]> {
  let summary = "a strided 1-D..3-D window of a global buffer";
  let description = [{
    Describes `sizes[i]` elements along dimension i, `strides[i]` elements
    apart, starting at `base`. Sizes bound every load and store made through
    the view. Sizes are i32 (a dimension has fewer than 2^31 elements);
    strides are i64 (a whole tensor may not). Example:
    ```mlir
    %qv = tile.view %q sizes(%seqlen, %c128) strides(%stride_s, %c1)
        : !tile.ptr<f16> -> !tile.view<f16, 2>
    ```

    With `block` (one power of two per dimension), the memory is a grid of
    blocks of that shape, each stored contiguously and row-major, and the
    strides step between blocks: element (i, j) of a rank-2 view with block
    (b0, b1) is at (i / b0)·strides[0] + (j / b1)·strides[1] + (i % b0)·b1 +
    j % b1. A buffer whose tiles are added by mma accumulator fragments
    (tile.atomic_add) takes block (8, 8): each thread's 8-byte pair and its
    warp's 32 lanes then cover 256 contiguous bytes (2 L2 requests per
    instruction instead of 8 for a row-major tile). Blocked views are read
    and written through registers (tile.load, tile.store, tile.atomic_add),
    never by cp.async or the shared-memory epilogue.
    ```mlir
    %blk = tile.view %acc sizes(%c128, %c64) strides(%c512, %c64) {block = array<i64: 8, 8>}
        : !tile.ptr<f32> -> !tile.view<f32, 2>
    ```
  }];
  let arguments = (ins Tile_PtrType:$base, Variadic<I32>:$sizes,
                       Variadic<I64>:$strides, OptionalAttr<DenseI64ArrayAttr>:$block);
  let results = (outs Tile_ViewType:$result);
  let assemblyFormat = [{
    $base `sizes` `(` $sizes `)` `strides` `(` $strides `)` attr-dict `:`
    type($base) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tile_LoadOp : Tile_Op<"load", [MemoryEffects<[MemRead]>]> {
  let summary = "load a tile at element offsets of a view";
  let description = [{
    Reads the tile whose element (i, j, ...) is view[offsets + (i, j, ...)]
    (offsets are i32 element offsets, one per dimension).
    Elements outside the view's sizes read `padding` (`zero`, `neg_inf` or
    `nan`) and never touch memory. Example:
    ```mlir
    %k = tile.load %kv[%row, %c0] padding = zero
        : !tile.view<f16, 2> -> tensor<64x128xf16>
    ```
  }];
  let arguments = (ins Tile_ViewType:$view, Variadic<I32>:$offsets,
                       Tile_PaddingAttr:$padding);
  let results = (outs Tile_AnyTile:$result);
  let assemblyFormat = [{
    $view `[` $offsets `]` `padding` `=` $padding attr-dict `:`
    type($view) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tile_StoreOp : Tile_Op<"store", [MemoryEffects<[MemWrite]>]> {
  let summary = "store a tile at element offsets of a view";
  let description = [{
    Writes element (i, j, ...) of `value` to view[offsets + (i, j, ...)];
    elements that fall outside the view's sizes are not written. Example:
    ```mlir
    tile.store %o, %ov[%row, %c0] : tensor<64x128xf16>, !tile.view<f16, 2>
    ```
  }];
  let arguments = (ins Tile_AnyTile:$value, Tile_ViewType:$view,
                       Variadic<I32>:$offsets);
  let assemblyFormat = [{
    $value `,` $view `[` $offsets `]` attr-dict `:`
    type($value) `,` type($view)
  }];
  let hasVerifier = 1;
}

def Tile_AtomicAddOp : Tile_Op<"atomic_add", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "add a tile into a view, element by element, atomically";
  let description = [{
    view[offsets + (i, j, ...)] += value(i, j, ...) as an atomic f32 add
    (`red.global.add.f32` on the GPU), so programs may accumulate into the
    same elements (FlashAttention-2's dQ); the order of the adds, and so the
    rounding, is not deterministic. Elements outside the view are not
    touched. Example:
    ```mlir
    tile.atomic_add %dq, %dqv[%row, %c0] : tensor<64x128xf32>, !tile.view<f32, 2>
    ```
  }];
  let arguments = (ins TensorOf<[F32]>:$value, Tile_ViewType:$view,
                       Variadic<I32>:$offsets);
  let assemblyFormat = [{
    $value `,` $view `[` $offsets `]` attr-dict `:`
    type($value) `,` type($view)
  }];
  let hasVerifier = 1;
}

def Tile_ArriveOp : Tile_Op<"arrive", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "count this program's arrival; true in the last of `expected` programs";
  let description = [{
    Each program that runs this op adds one to the i32 counter at `counter`
    (one element; make the address with `tile.addptr`) after every write it
    made before the op, and gets `true` in exactly one program: the one whose
    arrival brings the count to `expected` (i32, at least 1). That program
    also resets the counter to 0 (so the next launch finds it zeroed without
    a memset) and, after the op, sees every write the other `expected - 1`
    programs made before their arrival. The result is uniform over the
    program: use it as a run-time `if` condition (split-KV decode's fused
    combine: the last split of a row merges the partials). Every program
    that uses a counter must arrive on it exactly once, and exactly
    `expected` programs must arrive, or the counter keeps a stale count.
    GPU: bar.sync, then thread 0 `fence.acq_rel.gpu` + `atom.global.add.u32`,
    made uniform by `bar.red.or.pred`; the last program's threads fence
    before reading. CPU runner: a read-modify-write (programs run one after
    another). Example:
    ```mlir
    %c = tile.addptr %counters, %group : !tile.ptr<i32>, i32
    %last = tile.arrive %c, %num_splits : !tile.ptr<i32>
    ```
  }];
  let arguments = (ins Tile_PtrType:$counter, I32:$expected);
  let results = (outs I1:$last);
  let assemblyFormat = "$counter `,` $expected attr-dict `:` type($counter)";
  let hasVerifier = 1;
}

def Tile_WaitTurnOp : Tile_Op<"wait_turn", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "wait until an i32 turn counter reaches `turn`";
  let description = [{
    Blocks the program until the i32 counter at `counter` (one element) is
    at least `turn`; afterwards the program is ordered after every write
    the programs that passed the turns before it (`tile.pass_turn`) made
    before passing. With `tile.pass_turn` it orders programs that update
    the same memory (a fixed order of floating-point adds: deterministic
    accumulation without per-program slices). `seen` is a value of the
    counter read earlier (`tile.load_scalar ... volatile`): when it is
    already `turn` or more, the op reads nothing, so the read's latency
    hides behind the work between the two. A program may wait only for
    programs that start before it (the GPU starts programs in order, axis 0
    from the top, see tile.program_id's lowering; otherwise the wait can
    hang), and the turns on one counter must be handed out 0, 1, 2, ... by
    exactly one pass each. GPU: every thread polls with
    `ld.acquire.gpu` (with `nanosleep` between polls). CPU runner (programs
    run one after another in the GPU's start order): a counter still below
    `turn` is reported as an error (on a GPU the program would wait
    forever). Example:
    ```mlir
    %seen = tile.load_scalar %c volatile : !tile.ptr<i32> -> i32
    ...
    tile.wait_turn %c, %turn, %seen : !tile.ptr<i32>
    tile.atomic_add %dq, %dqv[%r, %c0] : tensor<64x128xf32>, !tile.view<f32, 2>
    tile.pass_turn %c : !tile.ptr<i32>
    ```
  }];
  let arguments = (ins Tile_PtrType:$counter, I32:$turn, I32:$seen);
  let assemblyFormat = "$counter `,` $turn `,` $seen attr-dict `:` type($counter)";
  let hasVerifier = 1;
}

def Tile_PassTurnOp : Tile_Op<"pass_turn", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "give the next program its turn: add 1 to an i32 turn counter";
  let description = [{
    After every write the program (all its threads) made before the op,
    adds one to the i32 counter at `counter`, which lets the program waiting
    for the next turn (`tile.wait_turn`) go on. GPU: bar.sync, then thread 0
    `red.release.gpu.global.add.u32`. CPU runner: a read-modify-write.
    Example: see `tile.wait_turn`.
  }];
  let arguments = (ins Tile_PtrType:$counter);
  let assemblyFormat = "$counter attr-dict `:` type($counter)";
  let hasVerifier = 1;
}

def Tile_WaitPriorKernelsOp : Tile_Op<"wait_prior_kernels", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "wait until the kernels launched before this one on the stream are done";
  let description = [{
    Blocks the program until every kernel launched before this one on its
    stream has completed and its writes are visible. A kernel with this op
    may be launched while the kernel before it is still running
    (programmatic dependent launch, sm_90 and later): its programs start as
    soon as the earlier kernel lets them (`tile.launch_dependents`, or its
    end) and do what comes before the wait meanwhile, so what comes before
    the wait must read nothing an earlier kernel writes and write nothing an
    earlier kernel reads. GPU sm_90+: `griddepcontrol.wait`, and the
    manifest's "programmatic_launch" tells the runtime to launch the kernel
    so; sm_80 and the CPU runner: nothing (kernels run one after another).
    Example:
    ```mlir
    tile.wait_prior_kernels
    tile.launch_dependents
    %q = tile.load %qv[%r, %c0] ...
    ```
  }];
  let assemblyFormat = "attr-dict";
}

def Tile_LaunchDependentsOp : Tile_Op<"launch_dependents", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "let the next kernel on the stream start its programs";
  let description = [{
    Once every program of this kernel has executed it (or ended), the next
    kernel on the stream, if it waits with `tile.wait_prior_kernels`, may
    start its programs on the SMs this kernel leaves free; they wait there
    until this kernel is done, so the launch latency hides behind this
    kernel's tail. It orders nothing and says nothing about memory. GPU
    sm_90+: `griddepcontrol.launch_dependents`; sm_80 and the CPU runner:
    nothing.
  }];
  let assemblyFormat = "attr-dict";
}

def Tile_LoadScalarOp : Tile_Op<"load_scalar", [MemoryEffects<[MemRead]>]> {
  let summary = "load one element of global memory as a scalar";
  let description = [{
    Reads the element `ptr` points at (make the address with `tile.addptr`)
    and returns it as a scalar of the pointee type, usable wherever a scalar
    is: offsets, view sizes, loop bounds, arithmetic, masks. It is what
    varlen kernels read their sequence bounds with and paged kernels their
    block tables. Every thread of the program reads the same element (a
    uniform load); unlike `tile.load` nothing bounds it: the address must be
    inside the buffer. `volatile`: a fresh read of memory other programs
    are changing (`ld.volatile.global`: never cached, merged or moved out of
    a loop), e.g. a turn counter for `tile.wait_turn`. Example:
    ```mlir
    %p = tile.addptr %cu_seqlens, %b : !tile.ptr<i32>, i32
    %start = tile.load_scalar %p : !tile.ptr<i32> -> i32
    ```
  }];
  let arguments = (ins Tile_PtrType:$ptr, UnitAttr:$volatile_);
  let results = (outs AnyTypeOf<[AnyFloat, AnySignlessInteger]>:$result);
  let assemblyFormat = "$ptr (`volatile` $volatile_^)? attr-dict `:` type($ptr) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Compute
//===----------------------------------------------------------------------===//

def Tile_DotOp : Tile_Op<"dot", [Pure, AllTypesMatch<["acc", "result"]>]> {
  let summary = "matrix multiply-accumulate on tiles: acc + a·b (or a·bᵀ)";
  let description = [{
    `a` is MxK, `b` is KxN (NxK with `transpose_b`), `acc` and the result are
    MxN. Operands are f16 or bf16 (both the same), the accumulator is f32.
    Example (S = Q·Kᵀ):
    ```mlir
    %s = tile.dot %q, %k, %zero transpose_b
        : tensor<64x128xf16>, tensor<64x128xf16> -> tensor<64x64xf32>
    ```
    `warps_n` (optional, default 1) asks tile-partition-warps for a 2-D warp
    grid: the program's warps split M in num_warps / warps_n groups and N in
    warps_n (FlashAttention-2's backward tiled MMAs); a warp then owns an
    (M·warps_n/num_warps) x (N/warps_n) block of the result, reads A (kept in
    shared memory) for its rows and B for its columns only. 1 is split-Q.
  }];
  let arguments = (ins 2DTensorOf<[F16, BF16]>:$a, 2DTensorOf<[F16, BF16]>:$b,
                       2DTensorOf<[F32]>:$acc, UnitAttr:$transpose_b,
                       OptionalAttr<I64Attr>:$warps_n);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $a `,` $b `,` $acc (`transpose_b` $transpose_b^)? attr-dict `:`
    type($a) `,` type($b) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tile_ReduceOp : Tile_Op<"reduce", [Pure]> {
  let summary = "max or sum of a tile along one dimension";
  let description = [{
    Removes dimension `axis` by reducing over it with `kind` (`max` or `sum`).
    Example (row max of S):
    `%m = tile.reduce max %s along 1 : tensor<64x64xf32> -> tensor<64xf32>`.
  }];
  let arguments = (ins Tile_ReduceKindAttr:$kind, Tile_FloatTile:$input, I32Attr:$axis);
  let results = (outs Tile_FloatTile:$result);
  let assemblyFormat = "$kind $input `along` $axis attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Layout-assigned IR (produced by tile-partition-warps)
//===----------------------------------------------------------------------===//

def Tile_ConvertLayoutOp : Tile_Op<"convert_layout", [Pure, SameOperandsAndResultShape,
                                                      SameOperandsAndResultElementType]> {
  let summary = "move a tile from one distributed layout to another";
  let description = [{
    Same values, different owners: after layout assignment every tile carries
    a distributed layout (`#tile.linear`) or a shared-memory placement
    (`#tile.shared`) as its tensor encoding, and this op changes it. The
    lowering picks the cheapest mechanism: a register renaming when only the
    register order differs, shared memory otherwise.
  }];
  let arguments = (ins Tile_AnyTile:$input);
  let results = (outs Tile_AnyTile:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Asynchronous copies into shared memory and their synchronization
//===----------------------------------------------------------------------===//
//
// A tile.load whose result is a #tile.shared tile is an asynchronous copy
// (cp.async on sm_80): it joins the open commit group and its data may not
// have landed when the next op runs. These three ops, placed by
// tile-insert-waits (passes/InsertWaits.cpp) from the dataflow, say when it
// has; convert-tile-to-nvvm translates each to one instruction.

def Tile_AsyncCommitOp : Tile_Op<"async_commit", [MemoryEffects<[MemWrite]>]> {
  let summary = "close the open group of asynchronous copies";
  let description = [{
    The copies issued by this thread since the previous commit form one
    group, numbered in program order (cp.async.commit_group). Example:
    `tile.async_commit`.
  }];
  let assemblyFormat = "attr-dict";
}

def Tile_AsyncWaitOp : Tile_Op<"async_wait", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "wait until at most `pending` committed groups are in flight";
  let description = [{
    Blocks this thread until all but the `pending` most recently committed
    groups of its copies have landed (cp.async.wait_group N). Other threads'
    copies are visible only after a following tile.barrier. With N stages of
    copies in flight, a use waits with `pending = N - 1`. Example:
    `tile.async_wait pending = 1`.
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntMinValue<0>]>:$pending);
  let assemblyFormat = "`pending` `=` $pending attr-dict";
}

def Tile_BarrierOp : Tile_Op<"barrier", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "every thread of the program reaches this point (bar.sync)";
  let description = [{
    Orders shared-memory accesses across threads: writes (and copies waited
    for) before it are visible to every thread after it, and no thread
    writes after it before every thread has done what came before.
    Example: `tile.barrier`.
  }];
  let assemblyFormat = "attr-dict";
}

#endif // TILE_OPS_TD
