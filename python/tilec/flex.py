"""``tilec.flex_attention``: torch's FlexAttention API on tilec's DSL kernel
(kernels/flex_fwd.py), with score_mod / mask_mod traced into the kernel.

    out = tilec.flex_attention(q, k, v, score_mod=softcap, mask_mod=causal)

q is (batch, heads, seqlen_q, head_dim), k and v (batch, kv_heads, seqlen_k,
head_dim), as torch.nn.attention.flex_attention takes them. ``score_mod(score,
b, h, q_idx, kv_idx)`` and ``mask_mod(b, h, q_idx, kv_idx)`` are plain Python
functions: operators, ``tl.*`` (or ``torch.where``/``torch.exp``/...), calls
of other plain functions, closures over numbers, and 1-D index tensors
(document ids) indexed by q_idx / kv_idx. They are inlined into the kernel
when it is specialized; tile-split-masked-loops then classifies K/V blocks
from the mask at compile time, so there is no block mask to build
(``mask_mod=`` takes the mask directly; a ``block_mask`` from
``create_block_mask`` is accepted for its mask_mod) and no recompilation when
sequence lengths change. A mask the compiler cannot classify is applied in
every block (correct, slower) and the compiler says so: a MaskWarning at the
first call, ``mask_analysis(...)``, and the launch manifest's "mask".

CUDA tensors run on the GPU; numpy float16 arrays and torch CPU tensors
(float16, bfloat16) through the CPU runner. Rows that see no key give out 0
and lse -inf, as FlexAttention does.
"""

import math
import warnings

from . import frontend, strategy
from . import kernel_files
from . import language as tl
from .flash_attn import _is_torch, _rows_aligned, _strides



def flex_fwd_kernel():
    """The @tilec.jit kernel of kernels/flex_fwd.py."""
    return kernel_files.load("flex_fwd").flex_fwd


def _check(query, key, value, enable_gqa):
    names = ("query", "key", "value")
    tensors = (query, key, value)
    on_torch = _is_torch(query)
    for name, t in zip(names, tensors):
        if on_torch != _is_torch(t) or not hasattr(t, "shape"):
            raise TypeError(f"flex_attention: '{name}' must be a {'torch tensor' if on_torch else 'numpy array'} "
                            f"like 'query', got {type(t).__name__}")
        if len(t.shape) != 4:
            raise ValueError(f"flex_attention: '{name}' must have rank 4 (batch, heads, seqlen, head_dim), "
                             f"got shape {tuple(t.shape)}")
    dtypes = [str(t.dtype).replace("torch.", "") for t in tensors]
    on_gpu = on_torch and query.device.type == "cuda"
    allowed = ("float16", "bfloat16") if on_torch else ("float16",)
    for name, d in zip(names, dtypes):
        if d not in allowed:
            raise TypeError(f"flex_attention: '{name}' must be {' or '.join(allowed)}, got {d}")
    if len(set(dtypes)) != 1:
        raise TypeError(f"flex_attention: query, key, value must have one dtype, got {', '.join(dtypes)}")
    bq, hq, sq, dq = query.shape
    bk, hk, sk, dk = key.shape
    if tuple(value.shape[:3]) != (bk, hk, sk):
        raise ValueError(f"flex_attention: 'value' has shape {tuple(value.shape)}, 'key' {tuple(key.shape)}: "
                         "batch, heads and seqlen must match")
    if bk != bq:
        raise ValueError(f"flex_attention: 'key' has batch {bk}, 'query' has {bq}")
    if dk != dq or value.shape[3] != dq:
        raise ValueError(f"flex_attention: head dims differ (query {dq}, key {dk}, value {value.shape[3]}); "
                         "tilec needs one head_dim")
    if hk != hq:
        if not enable_gqa:
            raise ValueError(f"flex_attention: 'key' has {hk} heads, 'query' has {hq}: pass enable_gqa=True "
                             "for grouped-query attention")
        if hk == 0 or hq % hk:
            raise ValueError(f"flex_attention: query heads ({hq}) must be a multiple of key/value heads ({hk})")
    if dq % 8 or not 8 <= dq <= 256:
        raise ValueError(f"flex_attention: head_dim {dq} is not supported (a multiple of 8 from 8 to 256)")
    if 0 in (bq, hq, sq, sk):
        raise ValueError(f"flex_attention: empty input (query {tuple(query.shape)}, key {tuple(key.shape)})")
    for name, t in zip(names, tensors):
        if _strides(t)[-1] != 1:
            raise ValueError(f"flex_attention: '{name}' must be contiguous in its last dimension "
                             f"(strides {_strides(t)})")
        if on_torch and t.device != query.device:
            raise ValueError(f"flex_attention: '{name}' is on {t.device}, 'query' on {query.device}")
    return dtypes[0], on_torch, on_gpu


class MaskWarning(UserWarning):
    """The compiler could not classify a mask_mod's blocks: the mask is
    applied in every block that runs (correct, slower)."""


def _warn_if_dense(kernel):
    """Warns once per kernel when tile-split-masked-loops left its mask dense
    (needs the compiler extension; silent without it)."""
    try:
        report = kernel.mask_analysis()
    except ImportError:
        return
    if report["mask"] == "dense":
        warnings.warn(MaskWarning(f"flex_attention: {report['note']}"), stacklevel=3)


def _mask_mod_of(block_mask, mask_mod):
    if block_mask is None:
        return mask_mod
    bm_mod = getattr(block_mask, "mask_mod", None)
    if bm_mod is None or not callable(bm_mod):
        raise TypeError(f"flex_attention: block_mask must be a BlockMask from create_block_mask "
                        f"(with a mask_mod), got {type(block_mask).__name__}")
    if mask_mod is not None and mask_mod is not bm_mod:
        raise ValueError("flex_attention: pass mask_mod= or block_mask=, not two different masks")
    # create_block_mask's default mask (noop_mask) keeps everything.
    return None if getattr(bm_mod, "__name__", "") == "noop_mask" else bm_mod


def specialize(head_dim, dtype="float16", score_mod=None, mask_mod=None):
    """The kernels/flex_fwd.py kernel for these mods (cached by their code
    and captured values)."""
    config = strategy.flash_fwd_config(head_dim=head_dim, dtype=dtype, causal=mask_mod is not None)
    return flex_fwd_kernel().specialize(
        DTYPE=tl.float16 if dtype == "float16" else tl.bfloat16, HEAD_DIM=head_dim,
        SCORE_MOD=score_mod, MASK_MOD=mask_mod, **config.constexprs())


def mask_analysis(head_dim=128, score_mod=None, mask_mod=None, dtype="float16"):
    """What tile-split-masked-loops made of the mask: {"mask": "split"
    (blocks classified at compile time: skipped / unmasked / masked) or
    "dense" (the mask is applied in every block that runs), "note": the
    compiler's remark when dense} (the launch manifest's "mask" and
    "mask_note")."""
    return specialize(head_dim, dtype, score_mod, mask_mod).mask_analysis()


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None,
                   enable_gqa=False, return_lse=False, kernel_options=None, *,
                   mask_mod=None, return_aux=None):
    """softmax(score_mod(scale·Q·Kᵀ) masked by mask_mod)·V, FlexAttention's
    semantics (torch.nn.attention.flex_attention.flex_attention).

    query (B, Hq, Sq, D), key/value (B, Hkv, Sk, D); Hq == Hkv unless
    enable_gqa (query head h reads KV head h // (Hq // Hkv)). mask_mod= (a
    tilec extension) or block_mask=create_block_mask(mask_mod, ...) give the
    mask; kernel_options are torch's Triton knobs and are ignored. Returns
    out shaped like query and, with return_lse, the natural-log logsumexp
    (B, Hq, Sq) in float32.
    """
    if return_aux is not None:
        raise NotImplementedError("flex_attention: return_aux is not supported; use return_lse=True")
    for name, fn in (("score_mod", score_mod), ("mask_mod", mask_mod)):
        if fn is not None and not callable(fn):
            raise TypeError(f"flex_attention: {name} must be a function, got {type(fn).__name__}")
    mask_mod = _mask_mod_of(block_mask, mask_mod)
    dtype, on_torch, on_gpu = _check(query, key, value, enable_gqa)
    batch, heads, seqlen_q, head_dim = query.shape
    kv_heads, seqlen_k = key.shape[1], key.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    if math.isnan(scale):
        raise ValueError("flex_attention: scale is NaN")
    # The kernel needs scale > 0; score_mod sees scale·q·kᵀ, which (−q, |s|)
    # gives exactly for s < 0 and (0, 1) for s = 0.
    if scale < 0:
        query, scale = -query, -scale
    elif scale == 0:
        query = query * 0
        scale = 1.0
    kernel = specialize(head_dim, dtype, score_mod, mask_mod)
    if mask_mod is not None and not getattr(kernel, "_flex_checked", False):
        kernel._flex_checked = True
        _warn_if_dense(kernel)
    # This call's tensors (the cached kernel may have been traced from an
    # earlier closure holding other document ids of the same dtype).
    captured = frontend.captured_tensors(frontend.constexpr_functions(
        {"SCORE_MOD": score_mod, "MASK_MOD": mask_mod}))
    if on_gpu:
        import torch

        query, key, value = (t if _rows_aligned(t) else t.clone(memory_format=torch.contiguous_format)
                             for t in (query, key, value))
        o = torch.empty(query.shape, dtype=query.dtype, device=query.device)
        lse = torch.empty((batch, heads, seqlen_q), dtype=torch.float32, device=query.device)
        extra = []
        for t in captured:
            if not _is_torch(t) or t.device != query.device:
                raise ValueError(f"flex_attention: a tensor the mods capture ({tuple(t.shape)}, "
                                 f"{t.dtype}) must be a torch tensor on {query.device}")
            extra += [t.contiguous(), int(t.shape[0])]
    else:
        import numpy as np

        if on_torch:  # torch CPU tensors run through numpy (bf16 as uint16 bit patterns)
            import torch

            def host(t):
                t = t.detach().contiguous()
                return t.view(torch.uint16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
            query, key, value = (host(t) for t in (query, key, value))
        o = np.empty(query.shape, dtype=query.dtype)
        lse = np.empty((batch, heads, seqlen_q), dtype=np.float32)
        extra = []
        for t in captured:
            t = t.detach().cpu().numpy() if _is_torch(t) else t
            extra += [np.ascontiguousarray(t), int(t.shape[0])]
    sq, sk, sv, so, sl = (_strides(t) for t in (query, key, value, o, lse))
    args = (query, key, value, o, lse, seqlen_q, seqlen_k, heads, batch, heads // kv_heads,
            sq[0], sq[1], sq[2], sk[0], sk[1], sk[2], sv[0], sv[1], sv[2],
            so[0], so[1], so[2], sl[0], sl[1], scale, *extra)
    if on_gpu:
        kernel(*args)
    else:
        kernel.run_cpu(*args, grid=(-(-seqlen_q // kernel.constexprs["BLOCK_M"]), batch * heads, 1))
        if on_torch:
            import torch

            o = torch.from_numpy(o)
            o = o.view(torch.bfloat16) if dtype == "bfloat16" else o
            lse = torch.from_numpy(lse)
    return (o, lse) if return_lse else o


__all__ = ["flex_attention", "mask_analysis", "flex_fwd_kernel", "MaskWarning"]
