"""tilec's entry points as torch custom ops, so torch.compile traces them.

    torch.ops.tilec.flash_attn_forward(q, k, v, softmax_scale, causal, window_left,
        window_right, softcap, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
        max_seqlen_q, max_seqlen_k, seqused_k, fn) -> (out, lse)

    torch.ops.tilec.flash_attn_backward(dout, q, k, v, out, lse, softmax_scale,
        causal, window_left, window_right, softcap, alibi_slopes, cu_seqlens_q,
        cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, fn, deterministic)
        -> (dq, dk, dv)

The forward op's autograd is registered (`register_autograd`): its backward
is the second op (tilec.flash_bwd's kernels, every variant), so torch.compile differentiates
through it with no graph break. Eager calls that need grad use
tilec.flash_bwd's autograd.Function instead (same backward).

The flash_attn functions call the op only while torch.compile (or
torch.export) traces them (``torch.compiler.is_compiling()``); eager calls go
straight to the core, because a Python custom op's dispatch costs ~12 µs
per call, most of the per-call budget. The op's real implementation is that
same core (`flash_attn._flash_attn_forward`): CUDA tensors launch on torch's
current stream (so CUDA-graph capture records the launch), CPU tensors run
through the CPU runner (the core's numpy views, bf16 as uint16). The fake implementation gives the
output shapes, dtypes and strides for tracing. As with cuBLAS, call a
kernel once before capturing it in a CUDA graph: the first call per kernel
loads its module, which capture does not allow.

Adding an entry point: define its op here with the core's signature (tensor
arguments typed ``torch.Tensor``/``Optional[torch.Tensor]``, the rest
int/float/bool/Optional), a fake that allocates what the core returns, and
route the public function through it under ``_torch_compiling()`` as
flash_attn_func does. Importing this module imports torch.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import flash_attn as _flash_attn

__all__ = ["flash_attn_forward", "flash_attn_backward"]


@torch.library.custom_op("tilec::flash_attn_forward", mutates_args=())
def flash_attn_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       softmax_scale: Optional[float], causal: bool, window_left: int,
                       window_right: int, softcap: float, alibi_slopes: Optional[torch.Tensor],
                       cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
                       max_seqlen_q: Optional[int], max_seqlen_k: Optional[int],
                       seqused_k: Optional[torch.Tensor], fn: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of the flash_attn functions' core (flash_attn._flash_attn_forward)."""
    return _flash_attn._flash_attn_forward(q, k, v, softmax_scale, causal, window_left, window_right,
                                           softcap, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
                                           max_seqlen_q, max_seqlen_k, seqused_k, fn=fn)


@flash_attn_forward.register_fake
def _flash_attn_forward_fake(q, k, v, softmax_scale, causal, window_left, window_right, softcap,
                             alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                             seqused_k, fn):
    # The core's O(1) layout checks hold for fake tensors too: a bad call
    # fails while tracing, with the eager error.
    _flash_attn._check_qkv(fn, q, k, v, 3 if cu_seqlens_q is not None else 4)
    f32 = dict(dtype=torch.float32, device=q.device)
    # out: a view of a buffer whose rows are padded to a multiple of 8 (the
    # head dims the kernel takes), as the core returns it.
    head_dim = q.shape[-1]
    padded = -(-head_dim // 8) * 8
    if cu_seqlens_q is not None:  # varlen: out (total_q, h, d), lse (h, total_q)
        total_q, heads, _ = q.shape
        out = torch.empty_strided(q.shape, (heads * padded, padded, 1), dtype=q.dtype, device=q.device)
        return out, torch.empty((heads, total_q), **f32)
    batch, seqlen_q, heads, _ = q.shape
    out = torch.empty_strided(q.shape, (seqlen_q * heads * padded, heads * padded, padded, 1),
                              dtype=q.dtype, device=q.device)
    return out, torch.empty((batch, heads, seqlen_q), **f32)


# -- the backward (tilec.flash_bwd), so torch.compile differentiates the op --

@torch.library.custom_op("tilec::flash_attn_backward", mutates_args=())
def flash_attn_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        out: torch.Tensor, lse: torch.Tensor, softmax_scale: Optional[float],
                        causal: bool, window_left: int, window_right: int, softcap: float,
                        alibi_slopes: Optional[torch.Tensor], cu_seqlens_q: Optional[torch.Tensor],
                        cu_seqlens_k: Optional[torch.Tensor], max_seqlen_q: Optional[int],
                        max_seqlen_k: Optional[int], seqused_k: Optional[torch.Tensor], fn: str,
                        deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of flash_attn_forward's out (tilec.flash_bwd._backward)."""
    from . import flash_bwd

    opts = (softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, cu_seqlens_q,
            cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, fn, deterministic)
    return tuple(g.contiguous() for g in flash_bwd._backward(dout, q, k, v, out, lse, opts))


@flash_attn_backward.register_fake
def _flash_attn_backward_fake(dout, q, k, v, out, lse, softmax_scale, causal, window_left,
                              window_right, softcap, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
                              max_seqlen_q, max_seqlen_k, seqused_k, fn, deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    (q, k, v, softmax_scale, causal, window_left, window_right, softcap, alibi_slopes,
     cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, fn) = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k)
    ctx.opts = (softmax_scale, causal, window_left, window_right, softcap, max_seqlen_q,
                max_seqlen_k, fn)


def _backward(ctx, dout, _dlse):
    q, k, v, out, lse, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k = ctx.saved_tensors
    softmax_scale, causal, left, right, softcap, max_seqlen_q, max_seqlen_k, fn = ctx.opts
    dq, dk, dv = flash_attn_backward(dout, q, k, v, out, lse, softmax_scale, causal, left, right,
                                     softcap, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
                                     max_seqlen_q, max_seqlen_k, seqused_k, fn, True)
    return (dq, dk, dv) + (None,) * 12


flash_attn_forward.register_autograd(_backward, setup_context=_setup_context)
