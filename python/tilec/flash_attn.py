"""``flash_attn_func`` with flash_attn's API, on tilec's DSL flagship kernel
(kernels/flash_fwd.py).

CUDA torch tensors launch on the GPU; numpy float16 arrays (and uint16
arrays holding bf16 bit patterns) and torch CPU tensors run on the CPU
through the CPU runner (same kernel, same IR), which is how the numerics are
tested on machines without a GPU. Under torch.compile the call is the custom
op tilec::flash_attn_forward (tilec/ops.py).
"""

import importlib.util
import math
import sys
from pathlib import Path

from . import language as tl
from . import strategy
from .jit import LaunchCache
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


def _torch_compiling():
    """True while torch.compile/torch.export traces the caller; cheap and
    False when torch was never imported."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


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
    # numpy has no bf16: uint16 arrays hold its bit patterns (as run_cpu's).
    allowed = ("float16", "bfloat16") if on_gpu else ("float16", "uint16")
    for name, d in zip(names, dtypes):
        if d not in allowed:
            want = "float16 or bfloat16" if on_gpu else "float16 or uint16 (bf16 bit patterns)"
            raise TypeError(f"flash_attn_func: '{name}' must be {want}, got {d}")
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
    return ("bfloat16" if dtypes[0] == "uint16" else dtypes[0]), on_gpu


def _negated(t):
    """-t; for uint16 arrays of bf16 bit patterns, the sign bit flipped."""
    if getattr(t, "dtype", None) is not None and str(t.dtype) == "uint16":
        return t ^ t.dtype.type(0x8000)
    return -t


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
    if _torch_compiling():
        # torch.compile traces the custom op, which runs _flash_attn_forward.
        from . import ops

        out, lse = ops.flash_attn_forward(q, k, v, softmax_scale, bool(causal))
    else:
        out, lse = _flash_attn_forward(q, k, v, softmax_scale, causal)
    return (out, lse) if return_lse else out


def _build_gpu_launch(key):
    """LaunchCache builder: the flagship kernel for (dtype, head_dim,
    causal, device index), compiled or prebuilt, ready to launch."""
    dtype, head_dim, causal, device = key
    config = strategy.flash_fwd_config(head_dim=head_dim, dtype=dtype, causal=causal)
    kernel = flash_fwd_kernel().specialize(
        DTYPE=tl.float16 if dtype == "float16" else tl.bfloat16, HEAD_DIM=head_dim,
        CAUSAL=causal, **config.constexprs())
    return kernel.launcher(device=device)


#: (dtype, head_dim, causal, device index) -> ready launcher (jit.LaunchCache).
_GPU_LAUNCHES = LaunchCache(_build_gpu_launch)


_FAST_DTYPES = {}  # torch dtype -> dtype name, for _gpu_fast_path


def _gpu_fast_path(q, k, v, softmax_scale, causal):
    """The common GPU call in O(1), checks folded into a few integer tests:
    q, k, v CUDA tensors of one type, f16/bf16, one device, rank 4, matching
    batch/heads/head_dim, rows 16-byte aligned, scale > 0. Returns (out,
    lse), or None for anything else: the general path then handles it (copies,
    scale mapping) or raises the error that names the problem. Same kernel,
    same arguments as the general path, so the same bits."""
    torch = sys.modules["torch"]
    if not _FAST_DTYPES:
        _FAST_DTYPES.update({torch.float16: "float16", torch.bfloat16: "bfloat16"})
    kind = type(q)
    if type(k) is not kind or type(v) is not kind:
        return None
    dt = q.dtype
    dtype = _FAST_DTYPES.get(dt)
    if dtype is None or k.dtype != dt or v.dtype != dt:
        return None
    shape_q, shape_k = q.shape, k.shape
    if len(shape_q) != 4 or len(shape_k) != 4 or v.shape != shape_k:
        return None
    batch, seqlen_q, heads, head_dim = shape_q
    if (shape_k[0] != batch or shape_k[2] != heads or shape_k[3] != head_dim or head_dim & 7
            or not 8 <= head_dim <= 256 or not (batch and seqlen_q and heads and shape_k[1])):
        return None
    device = q.get_device()
    if device < 0 or k.get_device() != device or v.get_device() != device:
        return None
    sq, sk, sv = q.stride(), k.stride(), v.stride()
    # Last dimension contiguous; every row 16-byte aligned (2-byte elements).
    if (sq[3] != 1 or sk[3] != 1 or sv[3] != 1
            or (sq[0] | sq[1] | sq[2] | sk[0] | sk[1] | sk[2] | sv[0] | sv[1] | sv[2]) & 7
            or (q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15):
        return None
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    if not scale > 0:
        return None
    seqlen_k = shape_k[1]
    causal = bool(causal)
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = q.new_empty((batch, heads, seqlen_q), dtype=torch.float32)
    row = heads * head_dim
    args = (q, k, v, o, lse, seqlen_q, seqlen_k, heads, batch,
            sq[0], sq[1], sq[2], sk[0], sk[1], sk[2], sv[0], sv[1], sv[2],
            seqlen_q * row, row, head_dim, heads * seqlen_q, seqlen_q, scale)
    from . import runtime

    launch = _GPU_LAUNCHES[(dtype, head_dim, causal, device)]
    runtime.launch_on(device, launch, args, runtime.raw_stream(device))
    return o, lse


def _flash_attn_forward(q, k, v, softmax_scale, causal):
    """The core: (out, lse) for numpy arrays, CUDA or CPU torch tensors.
    softmax_scale None means 1/sqrt(head_dim)."""
    if _is_torch(q) and q.is_cuda:
        fast = _gpu_fast_path(q, k, v, softmax_scale, causal)
        if fast is not None:
            return fast
    elif _is_torch(q):
        from . import ops

        return ops.via_numpy(_flash_attn_forward, q, k, v, softmax_scale, causal)
    dtype, on_gpu = _check(q, k, v)
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_k = k.shape[1]
    causal = bool(causal)
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    # The kernel declares tl.assume(scale > 0) (its FA2 form needs it) and
    # launches check it. Other scales map onto it exactly: softmax(s·QKᵀ) =
    # softmax(|s|·(−Q)Kᵀ), lse too; for s = 0 every score is 0, as with Q = 0.
    if math.isnan(scale):
        raise ValueError("flash_attn_func: softmax_scale is NaN")
    if scale < 0:
        q, scale = _negated(q), -scale
    elif scale == 0:
        if on_gpu:
            q = q.new_zeros(q.shape)
        else:
            import numpy as np

            q = np.zeros_like(q)
        scale = 1.0
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
    # -- dispatch: one launch-cache lookup, one launch (docs/DESIGN.md) -----
    if on_gpu:
        from . import runtime

        device = q.get_device()
        launch = _GPU_LAUNCHES[(dtype, head_dim, causal, device)]
        runtime.launch_on(device, launch, args, runtime.raw_stream(device))
    else:
        config = strategy.flash_fwd_config(head_dim=head_dim, dtype=dtype, causal=causal)
        kernel = flash_fwd_kernel().specialize(
            DTYPE=tl.float16 if dtype == "float16" else tl.bfloat16, HEAD_DIM=head_dim,
            CAUSAL=causal, **config.constexprs())
        kernel.run_cpu(*args, grid=(-(-seqlen_q // config.block_m), batch * heads, 1))
    return o, lse
