"""The backward pass of ``flash_attn_func`` (kernels/flash_bwd.py) and the
``torch.autograd.Function`` that makes it trainable.

    dq, dk, dv = _flash_attn_backward(dout, q, k, v, out, lse, softmax_scale, causal)

runs FlashAttention-2's backward (Algorithm 2) in DSL kernels: the pair
(no atomics), the dQ kernel (one program per query block; it also writes
Delta = rowsum(dO ∘ O)), then the dK/dV kernel (one program per key block);
or FA2's fused kernel (one program per key block, dQ added with atomics;
with deterministic=True launched in groups of key blocks that each add into
their own dq_accum slice, summed in a fixed order: bitwise repeatable).
CUDA torch tensors launch on the GPU; torch CPU tensors and numpy float16 arrays run on the CPU runner
(same kernels, same IR), which is how CI checks the gradients.

``FlashAttnFunc`` wraps the forward core (tilec.flash_attn._flash_attn_forward;
`_forward` below is the one place that calls it) and saves q, k, v, out, lse
for the backward. The public flash_attn functions hand inputs that require
grad to `flash_attn_autograd`; under torch.compile the custom op
tilec::flash_attn_forward carries the same backward (tilec/ops.py).
"""

from __future__ import annotations

import math

from . import kernel_files
from .errors import TilecTypeError, TilecValueError
from . import language as tl
from . import runtime_support, strategy
from .flash_attn import _dtype_name, _is_torch, _strides



def _kernels():
    """The module of kernels/flash_bwd.py."""
    return kernel_files.load("flash_bwd")


def _bwd_config(dtype, head_dim, causal, window, softcap, alibi, varlen, dropout):
    """strategy's FlashBwdConfig for one variant (the switches as
    flash_bwd_kernels')."""
    return strategy.flash_bwd_config(head_dim=head_dim, dtype=dtype, causal=causal, dropout=dropout,
                                     variant=window or softcap or alibi or varlen)


def flash_bwd_kernels(dtype, head_dim, causal, atomic_dq=False, window=False, softcap=False,
                      alibi=False, varlen=False, dropout=False, serial=False, ordered=False):
    """The (dq, dkdv) kernels for one variant (`dtype` "float16" or
    "bfloat16"; the switches as the forward's); with atomic_dq, dkdv is the
    fused kernel that also adds dQ atomically (then dq is not launched);
    serial: its deterministic form, launched per group of key blocks
    (SERIAL_DQ, serial_schedule); ordered: its deterministic form in one
    launch, the key blocks adding in turn (ORDERED_DQ)."""
    cfg = _bwd_config(dtype, head_dim, causal, window, softcap, alibi, varlen, dropout)
    DTYPE = tl.float16 if dtype == "float16" else tl.bfloat16
    mod = _kernels()
    common = dict(DTYPE=DTYPE, HEAD_DIM=int(head_dim), CAUSAL=bool(causal))
    # Only the switches that are on: the plain kernels keep their cache keys.
    common.update({name: True for name, on in (("WINDOW", window), ("SOFTCAP", softcap),
                                                ("ALIBI", alibi), ("VARLEN", varlen),
                                                ("DROPOUT", dropout)) if on})
    if atomic_dq:
        if not atomic_dq_fits(cfg, head_dim):
            a = cfg.atomic
            raise TilecValueError(
                f"flash_attn backward: atomic_dq at head_dim {head_dim}: the fused kernel's dQᵀ "
                f"({strategy.tile_width(head_dim) // cfg.atomic_split} head-dim rows per program) "
                f"does not split into 16-row blocks over its {a.num_warps // cfg.atomic_dq_warps_n} rows "
                f"of warps ({a.num_warps} warps, atomic_dq_warps_n {cfg.atomic_dq_warps_n}); "
                "strategy.flash_bwd_config has no fused configuration for this head_dim")
        serial_kw = {"SERIAL_DQ": True} if serial else {"ORDERED_DQ": True} if ordered else {}
        dkdv = mod.flash_bwd_dkdv.specialize(**common, **cfg.constexprs("atomic"), ATOMIC_DQ=True,
                                             **serial_kw)
    else:
        dkdv = mod.flash_bwd_dkdv.specialize(**common, **cfg.constexprs("dkdv"))
    return mod.flash_bwd_dq.specialize(**common, **cfg.constexprs("dq")), dkdv, cfg


# -- CPU runner plumbing: torch CPU tensors <-> numpy (bf16 as uint16 bits) --

def _np_view(t):
    """A numpy array sharing `t`'s memory (torch CPU tensor or numpy array)."""
    if not _is_torch(t):
        return t
    import numpy as np
    import torch

    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _empty(like, shape, dtype=None):
    """An uninitialized contiguous buffer on `like`'s device (torch) or numpy;
    dtype None means like's dtype, else "float32"."""
    if _is_torch(like):
        import torch

        return torch.empty(shape, dtype=like.dtype if dtype is None else getattr(torch, dtype),
                           device=like.device)
    import numpy as np

    return np.empty(shape, dtype=like.dtype if dtype is None else np.dtype(dtype))


def _rows_aligned(t):
    """Every (batch, seq, head) row of a CUDA tensor starts 16-byte aligned."""
    return t.data_ptr() % 16 == 0 and all(
        (stride * t.element_size()) % 16 == 0 for stride in t.stride()[:3])


def _prepare(t):
    """Inputs the kernels read in 16-byte rows: the last dimension contiguous
    (autograd's dout may be an expanded tensor with stride 0) and, on the GPU,
    every row 16-byte aligned; others are copied."""
    if _is_torch(t):
        import torch

        if t.stride(-1) != 1 or (t.is_cuda and not _rows_aligned(t)):
            return t.clone(memory_format=torch.contiguous_format)
        return t
    import numpy as np

    if t.strides[-1] != t.itemsize:
        return np.ascontiguousarray(t)
    return t


def _check_backward(dout, q, k, v, out, lse, varlen=False):
    names = ("dout", "q", "k", "v", "out")
    tensors = (dout, q, k, v, out)
    torch_in = _is_torch(q)
    for name, t in zip(names + ("lse",), tensors + (lse,)):
        if _is_torch(t) != torch_in or not hasattr(t, "shape"):
            raise TilecTypeError(f"flash_attn backward: '{name}' must be a "
                                 f"{'torch tensor' if torch_in else 'numpy array'} like 'q', got "
                                 f"{type(t).__name__}")
    rank = 3 if varlen else 4
    layout = "(total_tokens, heads, head_dim)" if varlen else "(batch, seqlen, heads, head_dim)"
    for name, t in zip(names, tensors):
        if len(t.shape) != rank:
            raise TilecValueError(f"flash_attn backward: '{name}' must have rank {rank} {layout}, "
                                  f"got shape {tuple(t.shape)}")
    dtype = _dtype_name(q)
    allowed = ("float16", "bfloat16") if torch_in else ("float16",)
    for name, t in zip(names, tensors):
        if _dtype_name(t) not in allowed or _dtype_name(t) != dtype:
            raise TilecTypeError(f"flash_attn backward: '{name}' is {_dtype_name(t)}; dout, q, k, "
                                 f"v and out must share one dtype, {' or '.join(allowed)}")
    hq, d = q.shape[-2], q.shape[-1]
    hk = k.shape[-2]
    for name, t, want in (("dout", dout, q.shape), ("out", out, q.shape), ("v", v, k.shape)):
        if tuple(t.shape) != tuple(want):
            raise TilecValueError(f"flash_attn backward: '{name}' has shape {tuple(t.shape)}, "
                                  f"expected {tuple(want)}")
    if varlen:
        if k.shape[2] != d:
            raise TilecValueError(f"flash_attn backward: 'k' has shape {tuple(k.shape)}, expected "
                                  f"(total_k, kv_heads, {d})")
        want_lse = (hq, q.shape[0])
    else:
        b = q.shape[0]
        if k.shape[0] != b or k.shape[3] != d:
            raise TilecValueError(f"flash_attn backward: 'k' has shape {tuple(k.shape)}, expected "
                                  f"({b}, seqlen_k, kv_heads, {d})")
        want_lse = (b, hq, q.shape[1])
    if hk == 0 or hq % hk:
        raise TilecValueError(f"flash_attn backward: {hq} query heads are not a multiple of {hk} "
                              "key/value heads")
    if tuple(lse.shape) != want_lse or _dtype_name(lse) != "float32":
        raise TilecValueError(f"flash_attn backward: 'lse' must be float32 of shape {want_lse}, "
                              f"got {_dtype_name(lse)} {tuple(lse.shape)}")
    if d % 8 or not 8 <= d <= 256:
        raise TilecValueError(f"flash_attn backward: head_dim {d} is not supported (a multiple of "
                              "8 from 8 to 256)")
    if torch_in and len({t.device for t in tensors + (lse,)}) != 1:
        raise TilecValueError("flash_attn backward: dout, q, k, v, out and lse must be on one device, got "
                         + ", ".join(str(t.device) for t in tensors + (lse,)))
    return dtype


def _flash_attn_backward(dout, q, k, v, out, lse, softmax_scale=None, causal=False,
                         window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                         deterministic=True, dropout_p=0.0, causal_offset=None,
                         atomic_dq=None, cu_seqlens_q=None, cu_seqlens_k=None,
                         max_seqlen_q=None, max_seqlen_k=None, seqused_k=None, rng_state=None,
                         deterministic_form=None):
    """Gradients (dq, dk, dv) of out = softmax(scale·Q·Kᵀ [+ mask])·V, given the
    forward's out and lse ((batch, heads, seqlen_q) f32; +inf or -inf on rows
    that see no key, whose gradients are 0).

    q (b, sq, hq, d), k and v (b, sk, hk, d) with hq a multiple of hk (GQA:
    dk/dv of a KV head sum over its query heads); f16 or bf16 (torch), f16
    (numpy). The options are flash_attn's, handled as the forward handles
    them (tilec.flash_attn._mask_mode): causal bottom-right aligned (query i
    sees keys j <= i + sk - sq; `causal_offset` overrides sk - sq for a plain
    causal mask, 0 is top-left), window_size (left, right) with -1
    unbounded, softcap > 0 (dS through the tanh), alibi_slopes (hq,) or
    (b, hq) f32 (no gradient for the slopes, as upstream). Varlen
    (cu_seqlens_q given): q, dout, out (total_q, hq, d), k, v (total_k, hk, d),
    lse (hq, total_q), cu_seqlens_q/k int32 (b + 1,), max_seqlen_q/k, seqused_k
    int32 (b,) or None; rows of no sequence get zero gradients.

    Two forms: the pair (a dQ kernel and a dK/dV kernel, no atomics) and
    FA2's single fused kernel, which adds dQ with f32 atomics into a blocked
    f32 buffer (kernels/flash_bwd.py). atomic_dq=None (the default) takes the
    fused kernel where strategy's table says it is faster
    (FlashBwdConfig.fused, fused_min_seqlen_k) and it applies (fused_applies:
    head_dim up to 256, no window, softcap, ALiBi, varlen or dropout;
    atomic_dq_fits: the entry's dQᵀ splits over its warps); atomic_dq=True
    forces it (an error where the configuration's dQᵀ does not fit), False
    forces the pair. deterministic=False adds dQ in no fixed order;
    deterministic=True gives bitwise repeatable gradients: the pair, or the
    fused kernel in one of two deterministic forms where the table says it
    is faster: in turns (ORDERED_DQ: one launch, a head's key blocks add
    each query block's dQ one after another; from ordered_min_seqlen_k) or
    launched serially over S dq_accum slices (serial_schedule; in
    serial_min/max_seqlen_k); with atomic_dq=True always one of the two; not
    with varlen. deterministic_form ("ordered" or "serial") picks the form
    whatever the table's ranges say. Dropout: dropout_p > 0 with
    rng_state = (seed, offset), the forward's (tilec.flash_attn._dropout_rng): the kernels regenerate its
    mask from them (out must be the dropped forward's output).
    """
    from .flash_attn import _dummy, _mask_mode

    dropout_p = float(dropout_p)
    if not 0 <= dropout_p < 1:
        raise TilecValueError(f"flash_attn backward: dropout_p must be in [0, 1), got {dropout_p}")
    if dropout_p > 0 and (rng_state is None or len(rng_state) != 2):
        raise TilecValueError("flash_attn backward: dropout_p > 0 needs rng_state = (seed, "
                              f"offset), the forward's; got {rng_state!r}")
    varlen = cu_seqlens_q is not None
    if varlen and (cu_seqlens_k is None or max_seqlen_q is None or max_seqlen_k is None):
        raise TilecValueError("flash_attn backward: varlen needs cu_seqlens_q, cu_seqlens_k, "
                              "max_seqlen_q and max_seqlen_k")
    dtype = _check_backward(dout, q, k, v, out, lse, varlen)
    if varlen:  # what an earlier varlen kernel found in its values (flash_attn.SEQUENCE_ERRORS)
        from .flash_attn import _raise_sequence_errors

        _raise_sequence_errors("flash_attn backward")
    if deterministic_form not in (None, "ordered", "serial"):
        raise TilecValueError("flash_attn backward: deterministic_form must be None, 'ordered' or "
                              f"'serial', got {deterministic_form!r}")
    by_table = atomic_dq is None
    if atomic_dq is None:
        atomic_dq = fused_applies(q.shape[-1], window_size, softcap, alibi_slopes, varlen,
                                  dropout_p)
        if atomic_dq:
            table = strategy.flash_bwd_config(head_dim=q.shape[-1], causal=causal)
            keys = k.shape[-3]
            atomic_dq = (table.fused and keys >= table.fused_min_seqlen_k
                         and atomic_dq_fits(table, q.shape[-1]))
            form = deterministic_form or _deterministic_form(table, keys)
            if atomic_dq and deterministic and form == "serial":  # the table's serial range
                low, high = table.serial_min_seqlen_k, table.serial_max_seqlen_k
                atomic_dq = low is not None and low <= keys and (high is None or keys <= high)
    # deterministic=True runs the fused kernel in turns (ORDERED_DQ) or
    # serially (serial_schedule): deterministic_form "ordered" or "serial",
    # None the table's (_deterministic_form).
    serial = bool(atomic_dq and deterministic)
    if serial and varlen:
        raise TilecValueError("flash_attn backward: the fused kernel's deterministic (serial) "
                              "form takes fixed-length batches only; pass atomic_dq=None or False "
                              "with varlen and deterministic=True")
    hq, d = q.shape[-2:]
    hk = k.shape[-2]
    if varlen:
        b = cu_seqlens_q.shape[0] - 1
        sq, sk = int(max_seqlen_q), int(max_seqlen_k)
    else:
        b, sq = q.shape[:2]
        sk = k.shape[1]
    group = hq // hk
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    if math.isnan(scale):
        raise TilecValueError("flash_attn backward: softmax_scale is NaN")
    softcap = float(softcap)
    if math.isnan(softcap) or softcap < 0:
        raise TilecValueError("flash_attn backward: softcap must be >= 0 (0 turns it off), got "
                              f"{softcap}")
    left, right = window_size
    causal, window, left, right = _mask_mode(causal, left, right, sq, sk, alibi_slopes)
    offset = sk - sq if causal_offset is None else int(causal_offset)
    if causal_offset is not None and (window or varlen or alibi_slopes is not None):
        raise TilecValueError("flash_attn backward: causal_offset is for plain causal masks only")
    on_gpu = _is_torch(q) and q.is_cuda
    # The kernels declare tl.assume(scale > 0), as the forward's. The forward
    # ran scale < 0 as (-q, -scale) and 0 as (q = 0, 1): the same rewrites
    # here give dk, dv exactly, and dq = -dq' (scale < 0) or 0 (scale = 0,
    # where out does not depend on q).
    q_sign = 1.0
    if scale < 0:
        q, scale, q_sign = -q, -scale, -1.0
    elif scale == 0:
        q = q * 0
        scale, q_sign = 1.0, 0.0
    dout, q, k, v, out = (_prepare(t) for t in (dout, q, k, v, out))
    if _is_torch(lse):
        lse = lse.contiguous()
    else:
        import numpy as np

        lse = np.ascontiguousarray(lse)
    # Varlen: rows outside every sequence (and keys past seqused_k) are never
    # written by the kernels: their gradients are zero.
    alloc = _zeros if varlen else _empty
    dq = alloc(q, q.shape)
    dk = alloc(k, k.shape[:-2] + (hq, d))  # per query head; summed over each group below
    dv = alloc(v, v.shape[:-2] + (hq, d))
    cfg = _bwd_config(dtype, d, causal, window, softcap > 0, alibi_slopes is not None, varlen,
                      dropout_p > 0)
    key_blocks = -(-sk // cfg.atomic.block_n)
    splits = 1
    ordered = serial and (deterministic_form or _deterministic_form(cfg, sk)) == "ordered"
    serial = serial and not ordered
    if serial:  # S dq_accum slices, a launch per S key blocks
        sms = runtime_support.sm_count(q.device) if on_gpu else runtime_support.DEFAULT_SMS
        programs = b * hq * cfg.atomic_split
        splits = serial_schedule(key_blocks, programs, sms, cfg.atomic.num_warps,
                                 b * hq * -(-sq // cfg.atomic.block_m)
                                 * _dq_accum_rows(cfg, d) * cfg.atomic.block_m * 4)
        if by_table and not serial_fills(key_blocks, programs, sms, cfg.atomic.num_warps, splits):
            serial = atomic_dq = False
            splits = 1
    kdq, kdkdv, cfg = flash_bwd_kernels(dtype, d, causal, atomic_dq, window, softcap > 0,
                                        alibi_slopes is not None, varlen, dropout_p > 0, serial,
                                        ordered=ordered)
    if atomic_dq:
        # Delta and lse·log2e (what the dq kernel writes otherwise), and the
        # zeroed f32 dQ accumulator the fused kernel adds into.
        bm = cfg.atomic.block_m
        if varlen:
            delta, lse2 = _delta_and_lse2(dout, out, lse, varlen)
            dq_accum = _zeros(q, q.shape, "float32")
        else:  # blocked: query block i's dQᵀ is a row-major (R, BLOCK_M) tile
            delta, lse2 = _preprocess(dout, out, lse, dtype, d, on_gpu)
            dq_accum = _zeros(q, (splits, b, hq, -(-sq // bm), _dq_accum_rows(cfg, d), bm),
                              "float32")
    else:
        delta = _empty(q, lse.shape, "float32")
        lse2 = _empty(q, lse.shape, "float32")
        dq_accum = delta  # not read: only the fused kernel (ATOMIC_DQ) touches it
    sq_, sk_, sv_, so_, sdo_ = (_strides(t) for t in (q, k, v, out, dout))
    sdq, sdk, sdv, sl = (_strides(t) for t in (dq, dk, dv, lse))
    sdqa = _strides(dq_accum) if atomic_dq else (0, 0, 0)
    if atomic_dq and not varlen:  # (slice,) batch, -, head; blocks are D·BLOCK_M apart
        sdqa = (sdqa[1], 0, sdqa[2])
    if varlen:  # sequence b starts at row cu_seqlens[b]: its "batch stride" is the row's
        sq_, sk_, sv_, so_, sdo_, sdq, sdk, sdv = (
            (st[0],) + st for st in (sq_, sk_, sv_, so_, sdo_, sdq, sdk, sdv))
        sdqa = (sdqa[0],) + sdqa if atomic_dq else sdqa
        sl = (1, sl[0])
    slopes = _dummy(q) if alibi_slopes is None else alibi_slopes
    stride_alibi_b = 0 if alibi_slopes is None or len(alibi_slopes.shape) == 1 \
        else _strides(alibi_slopes)[0]
    cu_q, cu_k = (cu_seqlens_q, cu_seqlens_k) if varlen else (_dummy(q, "int32"),) * 2
    used = _dummy(q, "int32") if seqused_k is None else seqused_k
    variant_args = (left, right, softcap if softcap > 0 else 1.0, slopes, stride_alibi_b,
                    cu_q, cu_k, used, int(seqused_k is not None))
    err_index = None  # where the error buffer sits in variant_args (VARLEN only)
    if varlen:  # the VARLEN kernels' error record (flash_attn._sequence_errors) and row counts
        from .flash_attn import _sequence_errors

        err_index = len(variant_args)
        variant_args += (_sequence_errors(q, b)[1], q.shape[0], k.shape[0])
    if dropout_p > 0:
        variant_args += (dropout_p, int(rng_state[0]), int(rng_state[1]))
    dq_args = (q, k, v, out, dout, lse, delta, lse2, dq, sq, sk, hq, group, b, offset,
               *sq_[:3], *sk_[:3], *sv_[:3], *so_[:3], *sdo_[:3], *sdq[:3], *sl[:2], scale,
               *variant_args)
    dkdv_args = (q, k, v, dout, lse2, delta, dk, dv, dq_accum, sq, sk, hq, group, b, offset,
                 *sq_[:3], *sk_[:3], *sv_[:3], *sdo_[:3], *sdk[:3], *sdv[:3], *sdqa[:3],
                 *sl[:2], scale, *variant_args)
    dkdv_cfg, dkdv_split = (cfg.atomic, cfg.atomic_split) if atomic_dq else (cfg.dkdv, cfg.dkdv_split)
    if ordered:  # the turn counters: per (split, batch·head), one per query block + 1, zeroed
        dkdv_args += (_zeros(q, (dkdv_split, b * hq, -(-sq // cfg.atomic.block_m) + 1), "int32"),)
    if serial:
        _launch_serial(kdkdv, dkdv_args + (_strides(dq_accum)[0],), key_blocks, splits,
                       b * hq, dkdv_split, on_gpu)
    elif on_gpu:
        def err_at(args):  # variant_args end each kernel's arguments
            return None if err_index is None else len(args) - len(variant_args) + err_index

        if not atomic_dq:
            _launch_gpu(kdq, dq_args, err_at(dq_args))
        _launch_gpu(kdkdv, dkdv_args, err_at(dkdv_args))
    else:
        if not atomic_dq:
            _run_cpu(kdq, dq_args, (-(-sq // cfg.dq.block_m), b * hq, cfg.dq_split))
        _run_cpu(kdkdv, dkdv_args, (-(-sk // dkdv_cfg.block_n), b * hq, dkdv_split))
    if atomic_dq:
        if not varlen:  # the slices' sum, in a fixed order (one slice unless serial)
            dq_accum = dq_accum.sum(0) if len(dq_accum) > 1 else dq_accum[0]
        dq = _dq_from_accum(dq_accum, dq, varlen, scale, dtype, on_gpu)
    if group > 1:
        grouped = k.shape[:-2] + (hk, group, d)
        if _is_torch(dk):  # one reduction kernel each (torch accumulates f16/bf16 sums in f32)
            dk = dk.view(grouped).sum(-2)
            dv = dv.view(grouped).sum(-2)
        else:
            dk = dk.reshape(grouped).astype("float32").sum(-2).astype(dk.dtype)
            dv = dv.reshape(grouped).astype("float32").sum(-2).astype(dv.dtype)
    if q_sign != 1.0:
        dq = -dq if q_sign < 0 else dq * 0
    return dq, dk, dv


def _deterministic_form(cfg, seqlen_k):
    """The fused kernel's deterministic form the table picks for seqlen_k
    keys: "ordered" (one launch, turns) from cfg.ordered_min_seqlen_k, else
    "serial" (whose own range, serial_min/max_seqlen_k, the caller checks)."""
    low = cfg.ordered_min_seqlen_k
    return "ordered" if low is not None and seqlen_k >= low else "serial"


# deterministic=True on the fused kernel: FA2's dq_accum splits, as launches.
# The fused kernel adds dQ with atomics from every key block of a (batch,
# head) at once, in no fixed order. Its serial form (SERIAL_DQ) runs the
# key blocks S at a time, one launch per group: program s of a launch adds
# into dq_accum slice s only, so each element has one adder per launch and
# launches follow stream order; the S slices are summed in a fixed order at
# the end. (FA2 loops over the key blocks inside one program; one launch per
# group keeps the pipelined loop the fused kernel is tuned for.) A launch
# runs S·programs equal programs (causal: nearly equal), so S trades waves
# left part-empty against S slices to zero and sum. The fused entries are
# 8 warps of 200-255 registers (ptxas): one program per SM.
_REGS_PER_SM = 65536
_FUSED_REGS_PER_THREAD = 255
# S: the fewest slices whose launches take at most this factor of the fewest
# waves any S takes (within _SERIAL_MAX_BYTES of slices).
_SERIAL_WAVE_SLACK = 1.05
_SERIAL_MAX_BYTES = 2 << 30


def serial_schedule(key_blocks, programs, sms, num_warps, slice_bytes,
                    slack=_SERIAL_WAVE_SLACK, max_bytes=None):
    """S, the dq_accum slices of the deterministic fused backward: launches
    of S key blocks x `programs` (batch·heads·split) programs each, ceil(
    key_blocks / S) of them, each ceil(S·programs / slots) waves (slots: the
    `sms` times the programs an SM holds at `num_warps`). The smallest S
    whose waves are within `slack` of the fewest, with S slices of
    `slice_bytes` within max_bytes (None: _SERIAL_MAX_BYTES; at least 1)."""
    max_bytes = _SERIAL_MAX_BYTES if max_bytes is None else max_bytes
    key_blocks, programs = max(1, int(key_blocks)), max(1, int(programs))
    slots = _fused_slots(sms, num_warps)
    cap = max(1, min(key_blocks, int(max_bytes) // max(1, int(slice_bytes)),
                     4 * -(-slots // programs)))
    waves = {s: serial_waves(key_blocks, programs, slots, s) for s in range(1, cap + 1)}
    fewest = min(waves.values())
    return min(s for s, w in waves.items() if w <= slack * fewest)


def _fused_slots(sms, num_warps):
    """Programs of the fused kernel resident at once: the SMs times the
    programs an SM holds at `num_warps` (registers bound them)."""
    return max(1, int(sms)) * max(1, _REGS_PER_SM // (32 * int(num_warps) * _FUSED_REGS_PER_THREAD))


def serial_waves(key_blocks, programs, slots, splits):
    """Waves of the serial launches: ceil(key_blocks / S) launches of
    ceil(S·programs / slots) waves each."""
    return -(-int(key_blocks) // int(splits)) * -(-int(splits) * int(programs) // int(slots))


# The table's serial ranges were timed with S as serial_schedule picks it
# without the memory cap; where the cap (long sequences, few heads) leaves
# the launches this much emptier, deterministic=True takes the pair.
_SERIAL_CAPPED_SLACK = 1.15


def serial_fills(key_blocks, programs, sms, num_warps, splits):
    """Whether S = `splits` (capped by memory) keeps the serial launches
    within _SERIAL_CAPPED_SLACK of the waves of the uncapped schedule."""
    best = serial_schedule(key_blocks, programs, sms, num_warps, 1, max_bytes=1 << 62)
    slots = _fused_slots(sms, num_warps)
    return (serial_waves(key_blocks, programs, slots, splits)
            <= _SERIAL_CAPPED_SLACK * serial_waves(key_blocks, programs, slots, best))


def _launch_serial(kernel, args, key_blocks, splits, programs, split_d, on_gpu):
    """The serial fused kernel (SERIAL_DQ) over `key_blocks` key blocks, S =
    `splits` per launch: args are its arguments up to n_base, then
    stride_dqa_split; launch r gets n_base = r·S and a grid of its key
    blocks (the last may have fewer) x programs x split_d."""
    head, tail = args[:-1], args[-1:]
    if on_gpu:
        from . import runtime

        first = head + (0,) + tail
        device = kernel.check_args(first)
        launch = kernel.launcher(None, device)
        stream = runtime.raw_stream(device)
    for n0 in range(0, key_blocks, splits):
        grid = (min(splits, key_blocks - n0), programs, split_d)
        launch_args = head + (n0,) + tail
        if on_gpu:
            runtime.launch_on(device, launch, launch_args, stream, grid)
        else:
            _run_cpu(kernel, launch_args, grid)


def _run_cpu(kernel, args, grid):
    """kernel(*args) over `grid` on the CPU runner (torch CPU tensors and
    numpy arrays as numpy views)."""
    kernel.run_cpu(*(_np_view(a) if hasattr(a, "shape") else a for a in args), grid=grid)


def _launch_gpu(kernel, args, err_at=None):
    """kernel(*args) on the GPU. args[err_at] (VARLEN's error buffer: pinned
    host memory passed by its address, flash_attn._sequence_errors) is
    checked as an int32 CUDA placeholder, since the checked call takes only
    CUDA tensors for pointers; the launch gets the address."""
    if err_at is None:
        return kernel(*args)
    from . import runtime
    from .flash_attn import _dummy

    device = kernel.check_args(args[:err_at] + (_dummy(args[0], "int32"),) + args[err_at + 1:])
    runtime.launch_on(device, kernel.launcher(None, device), args, runtime.raw_stream(device))


PREPROCESS_BLOCK_M = 64


def preprocess_kernel(dtype, head_dim):
    """The fused kernel's preprocess (flash_bwd_preprocess) for `dtype`
    ("float16"/"bfloat16") and head_dim."""
    return _kernels().flash_bwd_preprocess.specialize(
        DTYPE=tl.float16 if dtype == "float16" else tl.bfloat16, HEAD_DIM=int(head_dim),
        BLOCK_M=PREPROCESS_BLOCK_M, NUM_WARPS=4)


def _preprocess(dout, out, lse, dtype, head_dim, on_gpu):
    """Delta and lse·log2e for the fused kernel by kernels/flash_bwd.py's
    flash_bwd_preprocess (one pass over O and dO; torch's elementwise ops
    took about 7x the bytes): f32 of lse's shape (batch, heads, seqlen_q),
    lse contiguous."""
    b, sq, hq, _ = out.shape
    delta = _empty(out, lse.shape, "float32")
    lse2 = _empty(out, lse.shape, "float32")
    kernel = preprocess_kernel(dtype, head_dim)
    block_m = PREPROCESS_BLOCK_M
    args = (out, dout, lse, delta, lse2, sq, hq, b, *_strides(out)[:3], *_strides(dout)[:3],
            *_strides(lse)[:2])
    if on_gpu:
        kernel(*args)
    else:
        _run_cpu(kernel, args, (-(-sq // block_m), b * hq, 1))
    return delta, lse2


def fused_applies(head_dim, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, varlen=False,
                  dropout_p=0.0):
    """Whether deterministic=False may take the fused atomic-dQ kernel by
    default: any head_dim up to 256 whose table entry says fused (and whose
    configuration fits, atomic_dq_fits), and the plain or causal mask only
    (the variants keep the pair until timed)."""
    return (int(head_dim) <= 256 and tuple(window_size) == (-1, -1) and not softcap
            and alibi_slopes is None and not varlen and not dropout_p)


def atomic_dq_fits(cfg, head_dim):
    """Whether FlashBwdConfig `cfg`'s fused kernel can place its dQᵀ dot at
    `head_dim`: dQᵀ has D / atomic_split head-dim rows per program (D the
    padded tile width), split over num_warps / atomic_dq_warps_n rows of
    warps in blocks of 16 (mma's m). Split-Q over 4 warps needs D >= 64 (the
    old 40-to-128 rule); D = 32 needs a grid (atomic_dq_warps_n 2 at 4
    warps, 4 at 8). A head dim the kernel computes in pieces
    (strategy.bwd_head_dim_pieces: only where every piece's dots have a
    warp grid, each piece's dQᵀ its own) fits."""
    if len(_atomic_pieces(cfg, head_dim)) > 1:
        return True
    rows = strategy.tile_width(head_dim) // cfg.atomic_split
    warp_rows = cfg.atomic.num_warps // cfg.atomic_dq_warps_n
    return rows >= 16 * warp_rows and rows % (16 * warp_rows) == 0


def _atomic_pieces(cfg, head_dim):
    """The head-dim pieces of `cfg`'s fused kernel (its PIECES)."""
    a = cfg.atomic
    return strategy.bwd_head_dim_pieces(head_dim, cfg.atomic_split, a.num_warps, a.block_n,
                                        cfg.atomic_warps_n, a.block_m, cfg.atomic_dq_warps_n)


def _dq_accum_rows(cfg, head_dim):
    """R, the head-dim rows of one query block of the fused kernel's blocked
    dq_accum: its pieces' total (head_dim rounded up to 16: d96 96, not the
    tile width 128), or the tile width D where it runs one tile."""
    pc, pw = _atomic_pieces(cfg, head_dim)[-1]
    return pc + pw


def convert_dq_warps(rows, block_m):
    """flash_bwd_convert_dq's warps: 4, but 8 where 4 would hold 64 f32 per
    thread (R·BLOCK_M = 8192, d128 at BLOCK_M 64), which ptxas spills (72
    registers, 80+42 bytes on sm_90a). H200, bf16, (4, 4096, 16) 8x8-blocked
    dq_accum, 4 / 8 warps: d64 28 / 35 µs, d96 43 / 50, d128 66 / 52,
    d192 77 / 94, d256 99 / 101 (torch's permute-and-multiply: 115, 173,
    230, 346, 461 µs; a 256 MiB copy: 4.17 TB/s)."""
    return 8 if int(rows) * int(block_m) == 8192 else 4


def convert_dq_kernel(dtype, head_dim, rows, block_m):
    """The fused kernel's dQ conversion (flash_bwd_convert_dq) for `dtype`
    ("float16"/"bfloat16"), head_dim, the blocked dq_accum's R = `rows`
    (_dq_accum_rows) and the fused kernel's BLOCK_M."""
    return _kernels().flash_bwd_convert_dq.specialize(
        DTYPE=tl.float16 if dtype == "float16" else tl.bfloat16, HEAD_DIM=int(head_dim),
        R=int(rows), BLOCK_M=int(block_m), NUM_WARPS=convert_dq_warps(rows, block_m))


def _dq_from_accum(dq_accum, dq, varlen, scale, dtype, on_gpu):
    """dq = scale·dQ from the fused kernel's f32 accumulator of Kᵀ·dSᵀ (the
    kernel adds it unscaled). Varlen's has dq's shape, (total_q, heads,
    head_dim): one multiply into a new array of dq's dtype. Else it is
    blocked, (batch, heads, blocks, R, BLOCK_M) with R >= head_dim
    (_dq_accum_rows), and kernels/flash_bwd.py's flash_bwd_convert_dq
    transposes it back into `dq` ((batch, seqlen_q, heads, head_dim), the
    caller's uninitialized buffer; rows past seqlen_q and columns past
    head_dim dropped), on the GPU or the CPU runner: torch's strided
    permute-and-multiply ran at ~0.9 TB/s on an H200."""
    if varlen:
        if _is_torch(dq):
            import torch

            return torch.mul(dq_accum, scale, out=torch.empty(dq_accum.shape, dtype=dq.dtype,
                                                               device=dq.device))
        return (dq_accum * scale).astype(dq.dtype)
    b, sq, hq, d = dq.shape
    _, _, nblk, rows, bm = dq_accum.shape
    kernel = convert_dq_kernel(dtype, d, rows, bm)
    sa = _strides(dq_accum)
    args = (dq_accum, dq, sq, hq, b, sa[0], sa[1], *_strides(dq)[:3], scale)
    if on_gpu:
        kernel(*args)
    else:
        _run_cpu(kernel, args, (nblk, b * hq, 1))
    return dq


def _zeros(like, shape, dtype=None):
    """A zeroed contiguous buffer on `like`'s device (torch) or numpy; dtype
    None means like's dtype, else a name ("float32", "int32"), as _empty."""
    if _is_torch(like):
        import torch

        return torch.zeros(shape, dtype=like.dtype if dtype is None else getattr(torch, dtype),
                           device=like.device)
    import numpy as np

    return np.zeros(shape, dtype=like.dtype if dtype is None else np.dtype(dtype))


def _delta_and_lse2(dout, out, lse, varlen=False):
    """Delta = rowsum(dO ∘ O) and lse·log2e (+inf where lse is -inf), both f32
    contiguous of lse's shape ((batch, heads, seqlen_q), varlen (heads,
    total_q)), in torch or numpy."""
    log2e = 1.0 / math.log(2.0)
    if _is_torch(out):
        import torch

        # Copies into fresh buffers: .contiguous() may keep odd strides of
        # size-1 dimensions, and the kernels take lse's.
        delta = torch.empty(lse.shape, dtype=torch.float32, device=lse.device)
        delta.copy_((dout.float() * out.float()).sum(-1).transpose(-1, -2))
        lse2 = torch.empty_like(delta)
        lse2.copy_(torch.where(lse == float("-inf"), float("inf"), lse) * log2e)
        return delta, lse2
    import numpy as np

    delta = np.empty(lse.shape, np.float32)
    delta[...] = np.swapaxes((dout.astype(np.float32) * out.astype(np.float32)).sum(-1), -1, -2)
    lse2 = np.empty(lse.shape, np.float32)
    lse2[...] = np.where(lse == -np.inf, np.inf, lse) * np.float32(log2e)
    return delta, lse2


# -- the forward the autograd Function wraps ----------------------------------

def _forward(q, k, v, opts):
    """(out, lse) of the forward core, tilec.flash_attn._flash_attn_forward
    (bottom-right causal: FORWARD_CAUSAL_OFFSET), with the options `opts`
    (see flash_attn_autograd)."""
    from .flash_attn import _flash_attn_forward

    (softmax_scale, causal, left, right, softcap, alibi_slopes, cu_q, cu_k, max_q, max_k,
     seqused_k, fn, _deterministic, dropout, return_probs) = opts
    return _flash_attn_forward(q, k, v, softmax_scale, causal, left, right, softcap, alibi_slopes,
                               cu_q, cu_k, max_q, max_k, seqused_k, fn=fn, dropout=dropout,
                               return_probs=return_probs)


def FORWARD_CAUSAL_OFFSET(seqlen_q, seqlen_k):
    """The causal alignment of `_forward`: query i sees keys j <= i + this.
    The core is flash_attn's bottom-right (seqlen_k - seqlen_q).
    test_flash_bwd reads the forward's alignment off its output and fails if
    this disagrees."""
    return seqlen_k - seqlen_q


def _backward(dout, q, k, v, out, lse, opts):
    """(dq, dk, dv) for the forward `_forward(q, k, v, opts)` computed."""
    (softmax_scale, causal, left, right, softcap, alibi_slopes, cu_q, cu_k, max_q, max_k,
     seqused_k, fn, deterministic) = opts[:13]
    dropout = opts[13] if len(opts) > 13 else None
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    pad = -d % 8
    if pad:
        # Head dims that are not multiples of 8 (the forward zero-pads them):
        # zero columns leave S, P, Delta unchanged and get zero gradients.
        import torch

        dout, q, k, v, out = (torch.nn.functional.pad(t, [0, pad]) for t in (dout, q, k, v, out))
    varlen = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max_q, max_seqlen_k=max_k,
                  seqused_k=seqused_k) if cu_q is not None else {}
    dq, dk, dv = _flash_attn_backward(dout, q, k, v, out, lse, scale, causal, (left, right),
                                      softcap, alibi_slopes, deterministic=deterministic,
                                      dropout_p=dropout[0] if dropout else 0.0,
                                      rng_state=dropout[1:] if dropout else None, **varlen)
    if pad:
        dq, dk, dv = (t[..., :d] for t in (dq, dk, dv))
    return dq, dk, dv


def _autograd_function():
    import torch

    class FlashAttnFunc(torch.autograd.Function):
        """out, lse = flash attention of q, k, v; backward through
        _flash_attn_backward (lse is not differentiable, as upstream)."""

        @staticmethod
        def forward(ctx, q, k, v, opts):
            out, lse, *probs = _forward(q, k, v, opts)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.opts = opts
            ctx.mark_non_differentiable(lse, *probs)
            return (out, lse, *probs)

        @staticmethod
        def backward(ctx, dout, _dlse, *_dprobs):
            q, k, v, out, lse = ctx.saved_tensors
            dq, dk, dv = _backward(dout, q, k, v, out, lse, ctx.opts)
            return dq, dk, dv, None

    return FlashAttnFunc


_FUNC = None


def flash_attn_autograd(fn, q, k, v, softmax_scale=None, causal=False, window_left=-1,
                        window_right=-1, softcap=0.0, alibi_slopes=None, cu_seqlens_q=None,
                        cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, seqused_k=None,
                        deterministic=False, dropout=None, return_probs=False):
    """(out, lse) of the forward core on torch tensors through FlashAttnFunc:
    out requires grad when q, k or v does. The public flash_attn functions
    call this for inputs that require grad (grad mode on); every forward
    variant has its backward."""
    global _FUNC
    for name, t in (("k", k), ("v", v)):
        if not _is_torch(t) or t.device != q.device:
            raise TilecTypeError(f"{fn}: '{name}' must be a torch tensor on {q.device} like "
                            f"'q', got {type(t).__name__}"
                            + (f" on {t.device}" if _is_torch(t) else ""))
    if _FUNC is None:
        _FUNC = _autograd_function()
    opts = (softmax_scale, bool(causal), window_left, window_right, softcap, alibi_slopes,
            cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, fn,
            bool(deterministic), dropout, bool(return_probs))
    return _FUNC.apply(q, k, v, opts)


def wants_autograd(q, k, v):
    """The public functions' hook: torch inputs that require grad, with grad
    mode on, go through FlashAttnFunc (numpy arrays never do)."""
    if not (getattr(q, "requires_grad", False) or getattr(k, "requires_grad", False)
            or getattr(v, "requires_grad", False)):
        return False
    import torch

    return torch.is_grad_enabled()
