"""``flash_attn_func`` with flash_attn's API, on tilec's DSL flagship kernel
(kernels/flash_fwd.py).

CUDA torch tensors launch on the GPU; numpy float16 arrays run on the CPU
through the CPU runner (same kernel, same IR), which is how the numerics are
tested on machines without a GPU.
"""

import importlib.util
import math
from pathlib import Path

from . import language as tl
from . import strategy
_flash_module = None


def flash_fwd_kernel():
    """The @tilec.jit flagship kernel (kernels/flash_fwd.py): installed inside
    the package by `pip install .`, else read from the source tree."""
    global _flash_module
    if _flash_module is None:
        here = Path(__file__).resolve().parent
        for path in (here / "kernels" / "flash_fwd.py", here.parents[1] / "kernels" / "flash_fwd.py"):
            if path.exists():
                spec = importlib.util.spec_from_file_location("tilec_kernels_flash_fwd", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                _flash_module = module
                break
        else:
            raise ImportError("kernels/flash_fwd.py not found next to the tilec package")
    return _flash_module.flash_fwd


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _check(q, k, v):
    """Checks shapes, dtypes and layouts; returns (dtype, on_gpu)."""
    names = ("q", "k", "v")
    tensors = (q, k, v)
    on_gpu = _is_torch(q)
    for name, t in zip(names, tensors):
        if on_gpu != _is_torch(t) or not hasattr(t, "shape"):
            raise TypeError(f"flash_attn_func: '{name}' must be a {'torch tensor' if on_gpu else 'numpy array'} "
                            f"like 'q', got {type(t).__name__}")
        if len(t.shape) != 4:
            raise ValueError(f"flash_attn_func: '{name}' must have rank 4 (batch, seqlen, heads, head_dim), "
                             f"got shape {tuple(t.shape)}")
    dtypes = [str(t.dtype).replace("torch.", "") for t in tensors]
    allowed = ("float16", "bfloat16") if on_gpu else ("float16",)
    for name, d in zip(names, dtypes):
        if d not in allowed:
            raise TypeError(f"flash_attn_func: '{name}' must be {' or '.join(allowed)}, got {d}")
    if len(set(dtypes)) != 1:
        raise TypeError(f"flash_attn_func: q, k, v must have one dtype, got {', '.join(dtypes)}")
    bq, sq, hq, dq = q.shape
    for name, t in (("k", k), ("v", v)):
        b, s, h, d = t.shape
        if b != bq:
            raise ValueError(f"flash_attn_func: '{name}' has batch {b}, 'q' has {bq}")
        if h != hq:
            raise ValueError(f"flash_attn_func: '{name}' has {h} heads, 'q' has {hq} "
                             "(grouped-query attention is not supported)")
        if d != dq:
            raise ValueError(f"flash_attn_func: '{name}' has head_dim {d}, 'q' has {dq}")
    if k.shape[1] != v.shape[1]:
        raise ValueError(f"flash_attn_func: 'k' has seqlen {k.shape[1]}, 'v' has {v.shape[1]}")
    if dq % 8 or not 8 <= dq <= 256:
        raise ValueError(f"flash_attn_func: head_dim {dq} is not supported (a multiple of 8 "
                         "from 8 to 256: rows move in 16-byte vectors)")
    if sq == 0 or k.shape[1] == 0 or bq == 0 or hq == 0:
        raise ValueError(f"flash_attn_func: empty input (q {tuple(q.shape)}, k {tuple(k.shape)})")
    for name, t in zip(names, tensors):
        if _strides(t)[-1] != 1:
            raise ValueError(f"flash_attn_func: '{name}' must be contiguous in its last dimension "
                             f"(strides {_strides(t)})")
    if on_gpu:
        for name, t in zip(names, tensors):
            if t.device.type != "cuda":
                raise ValueError(f"flash_attn_func: '{name}' must be a CUDA tensor, got one on {t.device}")
            if t.device != q.device:
                raise ValueError(f"flash_attn_func: '{name}' is on {t.device}, 'q' on {q.device}")
    return dtypes[0], on_gpu


def _rows_aligned(t):
    """Every (batch, seq, head) row of a CUDA tensor starts 16-byte aligned."""
    return t.data_ptr() % 16 == 0 and all(
        (stride * t.element_size()) % 16 == 0 for stride in t.stride()[:3])


def _strides(t):
    """Strides in elements."""
    if _is_torch(t):
        return tuple(t.stride())
    return tuple(s // t.itemsize for s in t.strides)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, *,
                    return_lse=False):
    """softmax(scale · Q·Kᵀ [+ causal mask])·V for q (batch, seqlen_q, heads,
    head_dim) and k, v (batch, seqlen_k, heads, head_dim); f16 or bf16.

    The positional order is flash_attn's (q, k, v, dropout_p, softmax_scale,
    causal), so calls written for flash_attn mean the same here; dropout is
    not implemented and anything but 0 is an error.

    Returns out shaped like q and, with return_lse, the log-sum-exp
    (batch, heads, seqlen_q) in f32. Causal is top-left aligned: query i sees
    keys 0..i. Strides may be arbitrary except the last dimension; on the GPU,
    inputs whose rows are not 16-byte aligned are copied first.
    """
    if dropout_p != 0:
        raise NotImplementedError(f"flash_attn_func: dropout is not implemented (dropout_p="
                                  f"{dropout_p!r}); pass dropout_p=0.0")
    # -- autograd hook (python/tilec/flash_bwd.py) --------------------------
    # torch inputs that require grad, and torch CPU tensors (CPU runner), go
    # through a torch.autograd.Function whose forward calls this function
    # back with detached tensors (no grad inside Function.forward).
    from . import flash_bwd

    if flash_bwd.wants_autograd(q, k, v):
        return flash_bwd.flash_attn_autograd(q, k, v, softmax_scale=softmax_scale, causal=causal,
                                             return_lse=return_lse)
    # -----------------------------------------------------------------------
    dtype, on_gpu = _check(q, k, v)
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_k = k.shape[1]
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    # The kernel declares tl.assume(scale > 0) (its FA2 form needs it) and
    # launches check it. Other scales map onto it exactly: softmax(s·QKᵀ) =
    # softmax(|s|·(−Q)Kᵀ), lse too; for s = 0 every score is 0, as with Q = 0.
    if math.isnan(scale):
        raise ValueError("flash_attn_func: softmax_scale is NaN")
    if scale < 0:
        q, scale = -q, -scale
    elif scale == 0:
        if on_gpu:
            q = q.new_zeros(q.shape)
        else:
            import numpy as np

            q = np.zeros_like(q)
        scale = 1.0
    config = strategy.flash_fwd_config(head_dim=head_dim, dtype=dtype, causal=bool(causal))
    kernel = flash_fwd_kernel().specialize(
        DTYPE=tl.float16 if dtype == "float16" else tl.bfloat16, HEAD_DIM=head_dim,
        CAUSAL=bool(causal), **config.constexprs())
    if on_gpu:
        import torch

        # The kernel moves rows in 16-byte vectors (cp.async, vector loads):
        # every row must start 16-byte aligned. Views that break that (a
        # head_dim slice of a wider buffer, an odd storage offset) are copied.
        # clone, not contiguous(): a contiguous tensor at an odd offset would
        # come back as itself.
        q, k, v = (t if _rows_aligned(t) else t.clone(memory_format=torch.contiguous_format)
                   for t in (q, k, v))
        o = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse = torch.empty((batch, heads, seqlen_q), dtype=torch.float32, device=q.device)
    else:
        import numpy as np

        o = np.empty(q.shape, dtype=q.dtype)
        lse = np.empty((batch, heads, seqlen_q), dtype=np.float32)
    sq, sk, sv, so, sl = (_strides(t) for t in (q, k, v, o, lse))
    args = (q, k, v, o, lse, seqlen_q, seqlen_k, heads, batch,
            sq[0], sq[1], sq[2], sk[0], sk[1], sk[2], sv[0], sv[1], sv[2],
            so[0], so[1], so[2], sl[0], sl[1], scale)
    if on_gpu:
        kernel(*args)
    else:
        kernel.run_cpu(*args, grid=(-(-seqlen_q // config.block_m), batch * heads, 1))
    return (o, lse) if return_lse else o
