"""tilec's entry points as torch custom ops, so torch.compile traces them.

    torch.ops.tilec.flash_attn_forward(q, k, v, softmax_scale, causal) -> (out, lse)

``tilec.flash_attn_func`` calls the op only while torch.compile (or
torch.export) traces it (``torch.compiler.is_compiling()``); eager calls go
straight to the core, because a Python custom op's dispatch costs ~12 µs
per call, most of the per-call budget. The op's real implementation is that
same core (`flash_attn._flash_attn_forward`): CUDA tensors launch on torch's
current stream (so CUDA-graph capture records the launch), CPU tensors run
through the CPU runner (`via_numpy`). The fake implementation gives the
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

import numpy as np
import torch

from . import flash_attn as _flash_attn

__all__ = ["flash_attn_forward", "via_numpy"]


@torch.library.custom_op("tilec::flash_attn_forward", mutates_args=())
def flash_attn_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       softmax_scale: Optional[float], causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of flash_attn_func (softmax_scale None: 1/sqrt(head_dim))."""
    return _flash_attn._flash_attn_forward(q, k, v, softmax_scale, causal)


@flash_attn_forward.register_fake
def _flash_attn_forward_fake(q, k, v, softmax_scale, causal):
    batch, seqlen_q, heads, _ = q.shape
    # The core allocates out contiguous (like q, in q's shape) and lse
    # (batch, heads, seqlen_q) f32 contiguous.
    return (torch.empty(q.shape, dtype=q.dtype, device=q.device),
            torch.empty((batch, heads, seqlen_q), dtype=torch.float32, device=q.device))


# -- torch CPU tensors through the CPU runner -----------------------------------


def _to_numpy(t):
    t = t.detach()
    if t.dtype == torch.bfloat16:
        # numpy has no bf16: the CPU runner takes its bit patterns as uint16.
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _to_torch(x):
    if isinstance(x, np.ndarray):
        if x.dtype == np.uint16:
            return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(x)
    if isinstance(x, tuple):
        return tuple(_to_torch(y) for y in x)
    if isinstance(x, list):
        return [_to_torch(y) for y in x]
    return x


def via_numpy(fn, *args, **kwargs):
    """Runs `fn` with every torch CPU tensor argument replaced by a numpy
    view of it (bf16 as uint16 bit patterns, as Kernel.run_cpu takes them)
    and turns numpy arrays in its result back into torch tensors (uint16 as
    bf16): how torch CPU tensors reach the CPU runner. Tensors on other
    devices are refused with an error naming both devices."""
    devices = {a.device for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)}
    if devices - {torch.device("cpu")}:
        names = ", ".join(sorted(str(d) for d in devices))
        raise ValueError(f"tilec: tensors of one call must be on one device, got {names}")
    convert = lambda a: _to_numpy(a) if isinstance(a, torch.Tensor) else a  # noqa: E731
    result = fn(*(convert(a) for a in args), **{k: convert(a) for k, a in kwargs.items()})
    return _to_torch(result)
