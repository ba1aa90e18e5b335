"""What the suite imports from flash_attn.flash_attn_interface: tilec's public
functions, _get_block_size_n, and upstream's private layer (below)."""
from tilec import *  # noqa: F401,F403

USE_TRITON_ROCM = False


def _get_block_size_n(device, head_dim, is_dropout, is_causal):
    """The key-block width the suite uses to decode S_dmask (upstream's rule
    for sm80/sm90, whose S_dmask layout tilec reproduces): 128 for head dims
    up to 32 and up to 64 without dropout, 32 at 65..128 with dropout, else 64."""
    assert head_dim <= 256
    if head_dim <= 32:
        return 128
    if head_dim <= 64:
        return 64 if is_dropout else 128
    if 96 < head_dim <= 128 and is_dropout:
        return 32
    return 64


# ---------------------------------------------------------------------------
# upstream's private layer, which some of its tests call: the raw C++ entry
# points (flash_attn_gpu.fwd/varlen_fwd/bwd/varlen_bwd, positional, as
# csrc/flash_attn/flash_api.cpp binds them) and the _flash_attn_*_forward /
# _backward wrappers over them, each on tilec's core (tilec.flash_attn.
# _flash_attn_forward, tilec.flash_bwd._backward). Errors are RuntimeErrors
# as TORCH_CHECK raises (tilec.TilecError).

import types as _types

import torch as _torch
from tilec import TilecValueError as _Bad
from tilec import flash_attn as _fa
from tilec import flash_bwd as _fb


def _no_generator(gen):
    if gen is not None:
        raise _Bad("The `generator` argument is no longer supported; pass None (the RNG is "
                   "the device's default generator)")


def _rng(dropout_p, q, counters):
    rng = _fa._dropout_rng("flash_attn_gpu", dropout_p, q, None, counters)
    state = _torch.tensor(rng[1:] if rng else (0, 0), dtype=_torch.int64, device=q.device)
    return rng, state


def _fwd_result(result, out, return_softmax, q):
    o, lse = result[:2]
    if out is not None:
        out.copy_(o)
        o = out
    s_dmask = result[2] if len(result) == 3 else (_fa._s_dmask(q) if return_softmax else None)
    return o, lse, s_dmask


def _fwd(q, k, v, out, alibi_slopes, p_dropout, softmax_scale, is_causal, window_size_left,
         window_size_right, softcap, return_softmax, gen):
    _no_generator(gen)
    rng, state = _rng(p_dropout, q, _fa._dense_counters(q, k))
    result = _fa._flash_attn_forward(q, k, v, softmax_scale, is_causal, window_size_left,
                                     window_size_right, softcap, alibi_slopes, fn="fwd",
                                     dropout=rng, return_probs=return_softmax and bool(rng))
    return (*_fwd_result(result, out, return_softmax, q), state)


def _varlen_fwd(q, k, v, out, cu_seqlens_q, cu_seqlens_k, seqused_k, leftpad_k, block_table,
                alibi_slopes, max_seqlen_q, max_seqlen_k, p_dropout, softmax_scale, zero_tensors,
                is_causal, window_size_left, window_size_right, softcap, return_softmax, gen,
                num_splits=0):
    _no_generator(gen)
    if num_splits > 1:
        raise _Bad(f"num_splits > 1 is not supported in varlen_fwd, got {num_splits}")
    if leftpad_k is not None:
        raise NotImplementedError("varlen_fwd: leftpad_k is not supported by tilec's varlen")
    if block_table is not None:
        k, v, cu_seqlens_k, used = _fa._gather_pages("varlen_fwd", k, v, block_table,
                                                     cu_seqlens_k, max_seqlen_k)
        seqused_k = used if seqused_k is None else seqused_k
    batch = cu_seqlens_q.shape[0] - 1
    rng, state = _rng(p_dropout, q, batch * q.shape[-2] * max_seqlen_q * max_seqlen_k)
    result = _fa._flash_attn_forward(q, k, v, softmax_scale, is_causal, window_size_left,
                                     window_size_right, softcap, alibi_slopes, cu_seqlens_q,
                                     cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                                     fn="varlen_fwd", dropout=rng,
                                     return_probs=return_softmax and bool(rng))
    return (*_fwd_result(result, out, return_softmax, q), state)


def _bwd_common(dout, q, k, v, out, lse, dq, dk, dv, alibi_slopes, p_dropout, softmax_scale,
                is_causal, left, right, softcap, deterministic, gen, rng_state, varlen):
    _no_generator(gen)
    dropout = None
    if p_dropout > 0:
        seed, offset = (int(x) for x in rng_state.tolist())
        dropout = (p_dropout, seed, offset)
    cu_q, cu_k, max_q, max_k = varlen
    opts = (softmax_scale, is_causal, left, right, softcap, alibi_slopes, cu_q, cu_k, max_q,
            max_k, None, "bwd", deterministic, dropout)
    grads = _fb._backward(dout, q, k, v, out, lse, opts)
    for dst, g in zip((dq, dk, dv), grads):
        if dst is not None:
            dst.copy_(g)
    softmax_d = (dout.float() * out.float()).sum(-1)
    softmax_d = softmax_d.transpose(0, 1) if cu_q is not None else softmax_d.transpose(1, 2)
    return (*(g if dst is None else dst for dst, g in zip((dq, dk, dv), grads)),
            softmax_d.contiguous())


def _bwd(dout, q, k, v, out, softmax_lse, dq, dk, dv, alibi_slopes, p_dropout, softmax_scale,
         is_causal, window_size_left, window_size_right, softcap, deterministic, gen, rng_state):
    return _bwd_common(dout, q, k, v, out, softmax_lse, dq, dk, dv, alibi_slopes, p_dropout,
                       softmax_scale, is_causal, window_size_left, window_size_right, softcap,
                       deterministic, gen, rng_state, (None, None, None, None))


def _varlen_bwd(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k,
                alibi_slopes, max_seqlen_q, max_seqlen_k, p_dropout, softmax_scale, zero_tensors,
                is_causal, window_size_left, window_size_right, softcap, deterministic, gen,
                rng_state):
    return _bwd_common(dout, q, k, v, out, softmax_lse, dq, dk, dv, alibi_slopes, p_dropout,
                       softmax_scale, is_causal, window_size_left, window_size_right, softcap,
                       deterministic, gen, rng_state,
                       (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k))


flash_attn_gpu = _types.SimpleNamespace(fwd=_fwd, varlen_fwd=_varlen_fwd, bwd=_bwd,
                                        varlen_bwd=_varlen_bwd)


def _flash_attn_forward(q, k, v, dropout_p, softmax_scale, causal, window_size_left,
                        window_size_right, softcap, alibi_slopes, return_softmax):
    return flash_attn_gpu.fwd(q, k, v, None, alibi_slopes, dropout_p, softmax_scale, causal,
                              window_size_left, window_size_right, softcap, return_softmax, None)


def _flash_attn_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               dropout_p, softmax_scale, causal, window_size_left=-1,
                               window_size_right=-1, softcap=0.0, alibi_slopes=None,
                               return_softmax=False, block_table=None, leftpad_k=None,
                               seqused_k=None, zero_tensors=False, num_splits=0):
    return flash_attn_gpu.varlen_fwd(q, k, v, None, cu_seqlens_q, cu_seqlens_k, seqused_k,
                                     leftpad_k, block_table, alibi_slopes, max_seqlen_q,
                                     max_seqlen_k, dropout_p, softmax_scale, zero_tensors, causal,
                                     window_size_left, window_size_right, softcap, return_softmax,
                                     None, num_splits)


def _flash_attn_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale,
                         causal, window_size_left, window_size_right, softcap, alibi_slopes,
                         deterministic, rng_state=None):
    return flash_attn_gpu.bwd(dout, q, k, v, out, softmax_lse, dq, dk, dv, alibi_slopes,
                              dropout_p, softmax_scale, causal, window_size_left,
                              window_size_right, softcap, deterministic, None, rng_state)[3]


def _flash_attn_varlen_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q,
                                cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                softmax_scale, causal, window_size_left, window_size_right,
                                softcap, alibi_slopes, deterministic, rng_state=None,
                                zero_tensors=False):
    return flash_attn_gpu.varlen_bwd(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q,
                                     cu_seqlens_k, alibi_slopes, max_seqlen_q, max_seqlen_k,
                                     dropout_p, softmax_scale, zero_tensors, causal,
                                     window_size_left, window_size_right, softcap, deterministic,
                                     None, rng_state)[3]
