"""flash_attn 2.8's forward API on tilec's DSL flagship kernel
(kernels/flash_fwd.py): flash_attn_func, flash_attn_qkvpacked_func,
flash_attn_kvpacked_func and their varlen forms, with upstream's signatures,
defaults, semantics and return conventions.

CUDA torch tensors launch on the GPU; numpy float16 arrays and torch CPU
tensors run on the CPU through the CPU runner (same kernel, same IR), which
is how the numerics are tested on machines without a GPU.

Every public function calls one core, `_flash_attn_forward`, which returns
(out, lse). Its checks are O(1) (shapes, dtypes, devices, option ranges) and
the kernel is one dict lookup keyed by (dtype, head_dim, switches, arch).
What flash_attn's C++ does to the options is done there too:
- window sizes >= seqlen_k become -1; causal sets window_right = 0; causal
  with seqlen_q == 1 (and no ALiBi) is dropped;
- causal is window (-1, 0) and a window (w, 0) is causal with a left bound
  (CAUSAL + WINDOW: no right bound to test); any other window runs the
  WINDOW kernel, where a -1 side becomes seqlen_k (the mask stays affine);
- softcap > 0 runs softcap * tanh(scale * qk / softcap);
- head dims that are not multiples of 8 are zero-padded and the output sliced.
"""

import math
import sys

from . import kernel_files
from .errors import TilecTypeError, TilecValueError
from . import language as tl
from . import strategy
from .jit import LaunchCache

MAX_HEAD_DIM = 256


def flash_fwd_kernel():
    """The @tilec.jit flagship kernel (kernels/flash_fwd.py)."""
    return kernel_files.load("flash_fwd").flash_fwd


# ---------------------------------------------------------------------------
# Array helpers: numpy arrays, torch CPU tensors, torch CUDA tensors.


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def _strides(t):
    """Strides in elements."""
    if _is_torch(t):
        return tuple(t.stride())
    return tuple(s // t.itemsize for s in t.strides)


def _rows_aligned(t):
    """Every (batch, seq, head) row of a CUDA tensor starts 16-byte aligned."""
    return t.data_ptr() % 16 == 0 and all(
        (stride * t.element_size()) % 16 == 0 for stride in t.stride()[:-1])


def _device(t):
    """'cuda:N', 'cpu' (torch) or 'numpy'."""
    return str(t.device) if _is_torch(t) else "numpy"


def _to_numpy(t):
    """A numpy view of a torch CPU tensor (bf16 as uint16 bit patterns, as
    the CPU runner takes it), or the array itself."""
    if not _is_torch(t):
        return t
    import torch

    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view("uint16")
    return t.numpy()


def _pad_head_dim(t, d):
    """t zero-padded along its last dimension to d (a copy), as flash_attn."""
    if _is_torch(t):
        import torch

        return torch.nn.functional.pad(t, [0, d - t.shape[-1]])
    import numpy as np

    return np.pad(t, [(0, 0)] * (t.ndim - 1) + [(0, d - t.shape[-1])])


def _empty(like, shape, dtype):
    """An empty array (dtype 'same' or 'float32') next to `like`."""
    if _is_torch(like):
        import torch

        dt = like.dtype if dtype == "same" else torch.float32
        return torch.empty(shape, dtype=dt, device=like.device)
    import numpy as np

    return np.empty(shape, dtype=like.dtype if dtype == "same" else np.float32)


_DUMMIES = {}


def _dummy(like, dtype="float32"):
    """A small buffer for the pointer parameters a variant does not read (the
    kernel's signature is the same for every variant)."""
    key = (_device(like), dtype)
    buf = _DUMMIES.get(key)
    if buf is None:
        if _is_torch(like) and like.device.type == "cuda":
            import torch

            buf = torch.zeros(4, dtype=getattr(torch, dtype), device=like.device)
        else:
            import numpy as np

            buf = np.zeros(4, dtype)
        _DUMMIES[key] = buf
    return buf


def _dummy_f32(like):
    """The f32 dummy (alibi); kept for callers written before the int32 ones."""
    return _dummy(like, "float32")


# ---------------------------------------------------------------------------
# Kernel selection: one dict lookup.

_KERNELS = {}


def probs_block_n(head_dim):
    """The key-block width of S_dmask's layout (return_attn_probs with
    dropout): FlashAttention-2's sm80 rule for its dropout kernels, which
    upstream's tests (_get_block_size_n) use to decode it: 128 for head dims
    up to 32, 64 up to 64, 64 for 65..96, 32 for 97..128, 64 above."""
    if head_dim <= 32:
        return 128
    if 96 < head_dim <= 128:
        return 32
    return 64


def _select(dtype, head_dim, causal, window, softcap, alibi, varlen=False, arch="sm_80",
            dropout=False, probs=False):
    """(Kernel, FlashConfig) for a variant; specialized once, then cached.
    probs: False, or S_dmask's block width (RETURN_PROBS)."""
    key = (dtype, head_dim, causal, window, softcap, alibi, varlen, arch, dropout, probs)
    hit = _KERNELS.get(key)
    if hit is None:
        config = strategy.flash_fwd_config(arch=arch, dtype=dtype, head_dim=head_dim, causal=causal,
                                           window=window, softcap=softcap, alibi=alibi,
                                           dropout=dropout)
        kernel = flash_fwd_kernel().specialize(
            DTYPE=tl.float16 if dtype == "float16" else tl.bfloat16, HEAD_DIM=head_dim,
            CAUSAL=causal, WINDOW=window, SOFTCAP=softcap, ALIBI=alibi, VARLEN=varlen,
            **config.constexprs(), **({"DROPOUT": True} if dropout else {}),
            **({"RETURN_PROBS": True, "PROBS_BLOCK_N": probs} if probs else {}))
        hit = _KERNELS[key] = (kernel, config)
    return hit


def grid(config, seqlen_q, heads, batch):
    """The launch grid: (row blocks, heads, batch), as the kernel's manifest
    computes it. Each axis has its own limit (x 2^31 - 1, y and z 65,535),
    so batch * heads may exceed 65,535."""
    return (-(-seqlen_q // config.block_m), heads, batch)


# ---------------------------------------------------------------------------
# The core.

_FN = "flash_attn"


def _check_qkv(fn, q, k, v, rank):
    names, tensors = ("q", "k", "v"), (q, k, v)
    torch_in = _is_torch(q)
    for name, t in zip(names, tensors):
        if not hasattr(t, "shape") or torch_in != _is_torch(t):
            raise TilecTypeError(f"{fn}: '{name}' must be a "
                                 f"{'torch tensor' if torch_in else 'numpy array'} like 'q', got "
                                 f"{type(t).__name__}")
        if len(t.shape) != rank:
            what = "(batch, seqlen, heads, head_dim)" if rank == 4 else "(total_tokens, heads, head_dim)"
            raise TilecValueError(f"{fn}: '{name}' must have rank {rank} {what}, got shape "
                                  f"{tuple(t.shape)}")
    dtypes = [_dtype_name(t) for t in tensors]
    on_gpu = torch_in and q.device.type == "cuda"
    allowed = ("float16", "bfloat16") if torch_in else ("float16",)
    for name, d in zip(names, dtypes):
        if d not in allowed:
            raise TilecTypeError(f"{fn}: '{name}' must be {' or '.join(allowed)}, got {d}")
    if len(set(dtypes)) != 1:
        raise TilecTypeError(f"{fn}: q, k, v must have one dtype, got {', '.join(dtypes)}")
    for name, t in zip(names, tensors):
        if _device(t) != _device(q):
            raise TilecValueError(f"{fn}: '{name}' is on {_device(t)}, 'q' on {_device(q)}")
        if t.shape[-1] > 1 and 0 not in t.shape and _strides(t)[-1] != 1:
            raise TilecValueError(f"{fn}: '{name}' must be contiguous in its last dimension "
                                  f"(strides {_strides(t)})")
    hq, hk = q.shape[-2], k.shape[-2]
    d = q.shape[-1]
    for name, t in (("k", k), ("v", v)):
        if t.shape[-1] != d:
            raise TilecValueError(f"{fn}: '{name}' has head_dim {t.shape[-1]}, 'q' has {d}")
    if v.shape[-2] != hk:
        raise TilecValueError(f"{fn}: 'v' has {v.shape[-2]} heads, 'k' has {hk}")
    if hk == 0 or hq % hk:
        raise TilecValueError(f"{fn}: the number of query heads ({hq}) must be a multiple of the "
                              f"number of key/value heads ({hk})")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise TilecValueError(f"{fn}: head_dim {d} is not supported (1 to {MAX_HEAD_DIM})")
    if k.shape[:-2] != v.shape[:-2]:
        raise TilecValueError(f"{fn}: 'k' {tuple(k.shape)} and 'v' {tuple(v.shape)} differ in "
                              "their leading dimensions")
    return dtypes[0], on_gpu


def _check_options(fn, causal, window_left, window_right, softcap, alibi_slopes, batch, heads, q):
    for side, w in (("left", window_left), ("right", window_right)):
        if isinstance(w, bool) or not isinstance(w, int) and not (hasattr(w, "__index__")):
            raise TilecTypeError(f"{fn}: window_size {side} must be an int, got {w!r}")
        if w < -1:
            raise TilecValueError(f"{fn}: window_size {side} is {w}; it must be >= 0, or -1 for "
                                  "unbounded")
    softcap = float(softcap)
    if math.isnan(softcap) or softcap < 0:
        raise TilecValueError(f"{fn}: softcap must be >= 0 (0 turns it off), got {softcap}")
    if alibi_slopes is not None:
        if _is_torch(alibi_slopes) != _is_torch(q) or not hasattr(alibi_slopes, "shape"):
            raise TilecTypeError(f"{fn}: 'alibi_slopes' must be a "
                                 f"{'torch tensor' if _is_torch(q) else 'numpy array'} like 'q', "
                                 f"got {type(alibi_slopes).__name__}")
        if _dtype_name(alibi_slopes) != "float32":
            raise TilecTypeError(f"{fn}: 'alibi_slopes' must be float32, got "
                                 f"{_dtype_name(alibi_slopes)}")
        shape = tuple(alibi_slopes.shape)
        if shape not in ((heads,), (batch, heads)):
            raise TilecValueError(f"{fn}: 'alibi_slopes' must have shape ({heads},) or ({batch}, "
                                  f"{heads}) (heads,) or (batch, heads), got {shape}")
        if _device(alibi_slopes) != _device(q):
            raise TilecValueError(f"{fn}: 'alibi_slopes' is on {_device(alibi_slopes)}, 'q' on "
                                  f"{_device(q)}")
        if _strides(alibi_slopes)[-1] != 1 and heads > 1:
            raise TilecValueError(f"{fn}: 'alibi_slopes' must be contiguous in its last dimension")
    return softcap


def _flash_attn_forward(q, k, v, softmax_scale, causal, window_left=-1, window_right=-1,
                        softcap=0.0, alibi_slopes=None, cu_seqlens_q=None, cu_seqlens_k=None,
                        max_seqlen_q=None, max_seqlen_k=None, seqused_k=None, fn=_FN,
                        dropout=None, return_probs=False):
    """The forward every public function calls: (out, lse), or (out, lse,
    S_dmask) with return_probs (dropout only).

    Dense: q (b, sq, hq, d), k/v (b, sk, hk, d); out like q, lse (b, hq, sq).
    Varlen (cu_seqlens_q given): q (total_q, hq, d), k/v (total_k, hk, d),
    cu_seqlens_q/k int32 (b + 1,), max_seqlen_q/k ints, seqused_k int32 (b,)
    or None; out like q, lse (hq, total_q). softmax_scale None means
    1/sqrt(d). window -1 is unbounded; softcap 0 is off; alibi_slopes (hq,) or
    (b, hq) f32 or None. Checks are O(1) except varlen's values (cu_seqlens
    non-decreasing, within the tensors and max_seqlen; seqused_k within its
    sequence), read on the host for CPU inputs, for CUDA ones only with
    CHECK_CUDA_VARLEN_VALUES (and never while a CUDA graph is captured).
    dropout: None or (dropout_p, seed, offset) (see _dropout_rng): element
    (b, h, i, j) of P is dropped when tl.rand(seed, offset + ((b·hq + h)·sq
    + i)·sk + j) < dropout_p (sq, sk: the seqlens, varlen's maxima), the kept
    ones scaled by 1/(1 - dropout_p); return_probs adds S_dmask (b, hq,
    sq rounded up to 128, sk rounded up to 128) in q's dtype, FlashAttention-2's
    layout: exp(S - m_j) with m_j the row max over key block j and the later
    ones (blocks of probs_block_n(head_dim) keys; 0 where masked or past the
    seqlens), negated where dropped -- what upstream's tests decode with
    normalize_flash_attn_S.
    """
    if dropout is not None:
        if _torch_compiling():
            raise NotImplementedError(f"{fn}: dropout under torch.compile is not supported (the "
                                      "generator's seed would be traced as a constant); call it "
                                      "eagerly or with dropout_p=0")
        return _dropout_forward(q, k, v, softmax_scale, causal, window_left, window_right, softcap,
                                alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                max_seqlen_k, seqused_k, fn, dropout, return_probs)
    if _torch_compiling():
        # torch.compile/torch.export trace the custom op (tilec/ops.py), whose
        # implementation is this function.
        from . import ops

        return ops.flash_attn_forward(q, k, v, softmax_scale, bool(causal), window_left, window_right,
                                      float(softcap), alibi_slopes, cu_seqlens_q, cu_seqlens_k,
                                      max_seqlen_q, max_seqlen_k, seqused_k, fn)
    if _is_torch(q) and q.is_cuda:
        if cu_seqlens_q is None:
            fast = _gpu_fast_path(q, k, v, softmax_scale, causal, window_left, window_right, softcap,
                                  alibi_slopes)
        else:
            fast = _gpu_varlen_fast_path(q, k, v, softmax_scale, causal, window_left, window_right,
                                         softcap, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                         max_seqlen_k, seqused_k, alibi_slopes)
        if fast is not None:
            return fast
    return _general_forward(q, k, v, softmax_scale, causal, window_left, window_right, softcap,
                            alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            seqused_k, fn)


def _dropout_forward(q, k, v, softmax_scale, causal, window_left, window_right, softcap,
                     alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     seqused_k, fn, dropout, return_probs):
    """The core with dropout: the general path (no fast path), S_dmask on
    request."""
    p, seed, offset = dropout
    if not 0 <= p < 1:
        raise TilecValueError(f"{fn}: dropout_p must be in [0, 1), got {p}")
    return _general_forward(q, k, v, softmax_scale, causal, window_left, window_right, softcap,
                            alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            seqused_k, fn, dropout if p > 0 else None, return_probs)


def _general_forward(q, k, v, softmax_scale, causal, window_left, window_right, softcap,
                     alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     seqused_k, fn, dropout=None, return_probs=False):
    extra = dict(dropout=dropout, return_probs=return_probs)
    varlen = cu_seqlens_q is not None
    if varlen:
        return _varlen_forward(q, k, v, softmax_scale, causal, window_left, window_right, softcap,
                               alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               seqused_k, fn, **extra)
    dtype, on_gpu = _check_qkv(fn, q, k, v, 4)
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_k, heads_k = k.shape[1], k.shape[2]
    if k.shape[0] != batch:
        raise TilecValueError(f"{fn}: 'k' has batch {k.shape[0]}, 'q' has {batch}")
    softcap = _check_options(fn, causal, window_left, window_right, softcap, alibi_slopes,
                             batch, heads, q)
    if 0 in (batch, seqlen_q, heads):
        result = (_empty(q, q.shape, "same"), _lse_fill(_empty(q, (batch, heads, seqlen_q), "f32")))
        return result + (_probs_buffer(q, batch, heads, seqlen_q, seqlen_k),) if return_probs \
            else result
    scale = _scale(fn, softmax_scale, head_dim)
    mode = _mask_mode(causal, window_left, window_right, seqlen_q, seqlen_k, alibi_slopes)
    return _launch(fn, q, k, v, dtype, on_gpu, scale, mode, softcap, alibi_slopes,
                   batch, seqlen_q, seqlen_k, heads, heads_k, head_dim, **extra)


def _scale(fn, softmax_scale, head_dim):
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    if math.isnan(scale):
        raise TilecValueError(f"{fn}: softmax_scale is NaN")
    return scale


def _mask_mode(causal, left, right, seqlen_q, seqlen_k, alibi_slopes):
    """flash_attn's option handling (csrc flash_api.cpp, mha_fwd):
    (causal, window, left, right) for the kernel."""
    left, right = int(left), int(right)
    if left >= seqlen_k:
        left = -1
    if right >= seqlen_k:
        right = -1
    if seqlen_q == 1 and alibi_slopes is None:
        causal = False  # one query row sees every key either way
    if causal:
        right = 0
    if right == 0:  # causal; with a left bound a causal window (its right bound is causal's)
        return True, left >= 0, max(left, 0), 0
    if left < 0 and right < 0:
        return False, False, 0, 0
    # The WINDOW kernel: an unbounded side becomes seqlen_k, as flash_attn does.
    return False, True, seqlen_k if left < 0 else left, seqlen_k if right < 0 else right


def _lse_fill(lse):
    lse[...] = float("inf")
    return lse


def _round128(n):
    return -(-n // 128) * 128


def _probs_buffer(q, batch, heads, seqlen_q, seqlen_k):
    """S_dmask's zeroed buffer (b, h, sq rounded to 128, sk rounded to 128), as upstream's."""
    shape = (batch, heads, _round128(seqlen_q), _round128(seqlen_k))
    if _is_torch(q):
        import torch

        return torch.zeros(shape, dtype=q.dtype, device=q.device)
    import numpy as np

    return np.zeros(shape, q.dtype)


def _launch(fn, q, k, v, dtype, on_gpu, scale, mode, softcap, alibi_slopes,
            batch, seqlen_q, seqlen_k, heads, heads_k, head_dim, varlen=None, dropout=None,
            return_probs=False):
    """Runs the kernel; returns (out, lse). Dense: q (batch, seqlen_q, heads,
    d), lse (batch, heads, seqlen_q). varlen = (cu_seqlens_q, cu_seqlens_k,
    seqused_k or None): q (total_q, heads, d), lse (heads, total_q), and
    seqlen_q/k are the maxima."""
    causal, window, left, right = mode
    padded = -(-head_dim // 8) * 8
    if padded != head_dim:  # rows move in 16-byte vectors: pad as flash_attn does
        q, k, v = (_pad_head_dim(t, padded) for t in (q, k, v))
    # The kernel declares tl.assume(scale > 0) (its FA2 form needs it) and
    # launches check it. Other scales map onto it exactly: softmax(s·QKᵀ) =
    # softmax(|s|·(−Q)Kᵀ), lse too (softcap's tanh is odd, ALiBi does not
    # depend on the scale); for s = 0 every score is 0, as with Q = 0.
    if scale < 0:
        q, scale = -q, -scale
    elif scale == 0:
        q = q.new_zeros(q.shape) if _is_torch(q) else __import__("numpy").zeros_like(q)
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
    o = _empty(q, q.shape[:-1] + (padded,), "same")
    lse = _empty(q, (heads, q.shape[0]) if varlen else (batch, heads, seqlen_q), "f32")
    probs = _probs_buffer(q, batch, heads, seqlen_q, seqlen_k) if return_probs else None
    if seqlen_k == 0 or seqlen_q == 0:  # no key at all: every row is empty
        o[...] = 0
        return (o[..., :head_dim], _lse_fill(lse)) + ((probs,) if return_probs else ())
    slopes = _dummy(q) if alibi_slopes is None else alibi_slopes
    stride_alibi_b = 0 if alibi_slopes is None or len(alibi_slopes.shape) == 1 else _strides(alibi_slopes)[0]
    cu_q, cu_k, used = varlen if varlen else (_dummy(q, "int32"),) * 2 + (None,)
    use_seqused = used is not None
    used = _dummy(q, "int32") if used is None else used
    run_o, run_lse, run_probs = o, lse, probs
    if not on_gpu:
        q, k, v, run_o, run_lse, slopes, cu_q, cu_k, used = (
            _to_numpy(t) for t in (q, k, v, o, lse, slopes, cu_q, cu_k, used))
        run_probs = None if probs is None else _to_numpy(probs)
    sq, sk, sv, so, sl = (_strides(t) for t in (q, k, v, run_o, run_lse))
    if varlen:  # the kernel starts sequence b at row cu_seqlens[b]: its "batch stride" is the row's
        sq, sk, sv, so = ((st[0],) + st for st in (sq, sk, sv, so))
        sl = (1, sl[0])
    args = (q, k, v, run_o, run_lse, seqlen_q, seqlen_k, heads, batch, heads // heads_k,
            sq[0], sq[1], sq[2], sk[0], sk[1], sk[2], sv[0], sv[1], sv[2],
            so[0], so[1], so[2], sl[0], sl[1], scale,
            left, right, softcap if softcap > 0 else 1.0, slopes, stride_alibi_b,
            cu_q, cu_k, used, int(use_seqused))
    if varlen:  # the VARLEN kernel's error record and row counts
        args += (_sequence_errors(q, batch)[1], q.shape[0], k.shape[0])
    if dropout is not None:  # the DROPOUT kernel's extra parameters
        args += tuple(dropout)
    if return_probs:
        args += (run_probs,) + _strides(run_probs)[:3]
    variant = (dtype, padded, causal, window, softcap > 0, alibi_slopes is not None,
               varlen is not None)
    probs_width = probs_block_n(head_dim) if return_probs else False
    # -- dispatch: one launch-cache lookup, one launch (docs/DESIGN.md) -----
    if on_gpu:
        from . import runtime

        device = q.get_device()
        if dropout is None and not return_probs:
            launch = _GPU_LAUNCHES[variant + (device,)]
        else:
            launch = _GPU_LAUNCHES[variant + ("sm_80", dropout is not None, probs_width, device)]
        runtime.launch_on(device, launch, args, runtime.raw_stream(device))
    else:
        kernel, config = _select(*variant, dropout=dropout is not None, probs=probs_width)
        kernel.run_cpu(*args, grid=grid(config, seqlen_q, heads, batch))
    out = o if padded == head_dim else o[..., :head_dim]
    return (out, lse, probs) if return_probs else (out, lse)


def _torch_compiling():
    """True while torch.compile/torch.export traces the caller; cheap and
    False when torch was never imported."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


_EAGER = {}


def _eagerly(public, *args, **kwargs):
    """`public` (a flash_attn function) called with dropout while
    torch.compile traces: run eagerly, outside the graph (a graph break;
    with fullgraph=True dynamo refuses it, naming the reason). Dropout takes
    its seed and offset from torch's generator on the host and advances it,
    which a traced graph would freeze into constants; eagerly every call
    draws fresh ones and the autograd Function (tilec.flash_bwd) gives the
    gradients, so compiled models with attention dropout still train."""
    eager = _EAGER.get(public)
    if eager is None:
        disable = sys.modules["torch"].compiler.disable
        reason = ("tilec: attention dropout draws its seed and offset from torch's generator on "
                  "the host, so it runs eagerly (a graph break); pass dropout_p=0 for one graph")
        try:
            eager = disable(public, reason=reason)
        except TypeError:  # torch before the reason keyword
            eager = disable(public)
        _EAGER[public] = eager
    return eager(*args, **kwargs)


def _build_gpu_launch(key):
    """LaunchCache builder: the kernel of (dtype, head_dim, causal, window,
    softcap, alibi, varlen[, arch, dropout, probs], device index), compiled or
    prebuilt, ready to launch."""
    *variant, device = key
    if len(variant) == 10:
        *variant, dropout, probs = variant
        kernel, _ = _select(*variant, dropout=dropout, probs=probs)
    else:  # the config for the arch the kernel compiles for (Hopper's entries need its shared memory)
        kernel, _ = _select(*variant, arch=compile_arch(device))
    return kernel.launcher(device=device)


def compile_arch(device):
    """The arch a kernel for GPU `device` is compiled for (compiler.default_arch
    where this process can compile, jit.Kernel.launcher's choice), else "sm_80":
    prebuilt artifacts are sm_80 code with sm_80's configurations."""
    from . import compiler

    return compiler.default_arch(device) if compiler.can_compile() else "sm_80"


#: (dtype, padded head_dim, causal, window, softcap, alibi, varlen, device index) -> ready launcher.
_GPU_LAUNCHES = LaunchCache(_build_gpu_launch)
_FAST_DTYPES = {}  # torch dtype -> dtype name, for _gpu_fast_path
_FAST_DUMMIES = {}  # device index -> (f32 dummy, int32 dummy)

#: Run flash_attn_func's and flash_attn_varlen_func's fast paths in C++ (the torch extension _tilec_fast,
#: where it was built for this torch; inputs that need no autograd): the same
#: checks, launcher, buffers and launch as _gpu_fast_path, without the
#: interpreter and the Python-level tensor attribute reads
#: (bench/host_overhead.py). False: Python only.
NATIVE_FAST_PATH = True
_NATIVE = None        # _tilec_fast.forward, or False where there is none
_NUMBERS = (int, float)   # a dropout_p the native paths take when it is 0 (others: the Python checks)
_NATIVE_MODULE = None


def _native_module():
    """The torch extension _tilec_fast (its fast paths in C++), configured
    with tilec.flash_attn and tilec.runtime; False where it is not built or
    was built for another torch than the one imported (its TORCH_VERSION)."""
    global _NATIVE_MODULE
    if _NATIVE_MODULE is None:
        try:
            try:
                from . import _tilec_fast as native
            except ImportError:
                import _tilec_fast as native
        except ImportError:
            native = None
        torch = sys.modules.get("torch")
        if native is not None and torch is not None and native.TORCH_VERSION == torch.__version__:
            from . import runtime

            native.configure(flash_attn=sys.modules[__name__], runtime=runtime)
            _NATIVE_MODULE = native
        else:
            _NATIVE_MODULE = False
    return _NATIVE_MODULE


_NATIVE_VARLEN = None  # _tilec_fast.varlen, or False where there is none


def _native_entry(slot, name):
    """_tilec_fast's function `name`, cached in the module global `slot`
    (None: not looked up yet), or False where there is no extension."""
    entry = globals()[slot]
    if entry is None:
        native = _native_module()
        entry = globals()[slot] = getattr(native, name) if native else False
    return entry


def _native_forward():
    return _native_entry("_NATIVE", "forward")


def _try_native(dense, dropout_p, return_attn_probs, generator, args):
    """(out, lse) from the C++ fast path (_tilec_fast.forward for a dense
    call, .varlen otherwise) for a call it takes: no dropout, attention probs
    or generator, not while torch.compile traces, and what the C++ itself
    accepts (CUDA tensors without autograd, ...); None: the Python paths
    run the call."""
    if not (NATIVE_FAST_PATH and type(dropout_p) in _NUMBERS and not dropout_p and not return_attn_probs
            and generator is None and not _torch_compiling()):
        return None
    if dense:
        native = _NATIVE if _NATIVE is not None else _native_forward()
    else:
        native = _NATIVE_VARLEN if _NATIVE_VARLEN is not None else _native_varlen()
    return native(*args) if native else None


def _native_varlen():
    return _native_entry("_NATIVE_VARLEN", "varlen")


def _fast_alibi(slopes, kind, batch, heads, device):
    """A fast path's stride_alibi_b for ALiBi slopes it takes -- f32 (heads,)
    or (batch, heads), the last dimension contiguous, on the device; 0 for
    no slopes -- or None (the general path then takes the call or names the
    problem)."""
    if slopes is None:
        return 0
    shape = slopes.shape
    if (type(slopes) is not kind or slopes.dtype != sys.modules["torch"].float32
            or slopes.get_device() != device or len(shape) not in (1, 2) or shape[-1] != heads
            or (len(shape) == 2 and shape[0] != batch) or slopes.stride(-1) != 1):
        return None
    return slopes.stride(0) if len(shape) == 2 else 0


def _gpu_fast_path(q, k, v, softmax_scale, causal, window_left, window_right, softcap, alibi_slopes=None):
    """The common dense GPU call in O(1), its checks folded into a few integer
    tests: q, k, v CUDA tensors of one type, f16/bf16, one device, rank 4,
    matching batch/head_dim, heads a multiple of the KV heads, head_dim a
    multiple of 8 up to 256, rows 16-byte aligned, scale > 0, int windows,
    softcap >= 0, ALiBi or not (_fast_alibi). Returns (out, lse), or None for anything else:
    the general path then handles it (padding, copies, scale mapping) or
    raises the error that names the problem. Same kernel and arguments as
    the general path, so the same bits."""
    torch = sys.modules["torch"]
    if not _FAST_DTYPES:
        _FAST_DTYPES.update({torch.float16: "float16", torch.bfloat16: "bfloat16"})
    kind = type(q)
    if type(k) is not kind or type(v) is not kind or type(window_left) is not int \
            or type(window_right) is not int:
        return None
    dt = q.dtype
    dtype = _FAST_DTYPES.get(dt)
    if dtype is None or k.dtype != dt or v.dtype != dt:
        return None
    shape_q, shape_k = q.shape, k.shape
    if len(shape_q) != 4 or len(shape_k) != 4 or v.shape != shape_k:
        return None
    batch, seqlen_q, heads, head_dim = shape_q
    seqlen_k, heads_k = shape_k[1], shape_k[2]
    if (shape_k[0] != batch or shape_k[3] != head_dim or head_dim & 7 or not 8 <= head_dim <= MAX_HEAD_DIM
            or not (batch and seqlen_q and heads and seqlen_k and heads_k) or heads % heads_k
            or window_left < -1 or window_right < -1):
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
    softcap = float(softcap)
    if not scale > 0 or not softcap >= 0:
        return None
    stride_alibi_b = _fast_alibi(alibi_slopes, kind, batch, heads, device)
    if stride_alibi_b is None:
        return None
    causal, window, left, right = _mask_mode(causal, window_left, window_right, seqlen_q, seqlen_k, alibi_slopes)
    dummies = _FAST_DUMMIES.get(device)
    if dummies is None:
        dummies = _FAST_DUMMIES[device] = (_dummy(q, "float32"), _dummy(q, "int32"))
    slopes, ints = dummies
    if alibi_slopes is not None:
        slopes = alibi_slopes
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = q.new_empty((batch, heads, seqlen_q), dtype=torch.float32)
    row = heads * head_dim
    args = (q, k, v, o, lse, seqlen_q, seqlen_k, heads, batch, heads // heads_k,
            sq[0], sq[1], sq[2], sk[0], sk[1], sk[2], sv[0], sv[1], sv[2],
            seqlen_q * row, row, head_dim, heads * seqlen_q, seqlen_q, scale,
            left, right, softcap if softcap > 0 else 1.0, slopes, stride_alibi_b, ints, ints, ints, 0)
    from . import runtime

    launch = _GPU_LAUNCHES[(dtype, head_dim, causal, window, softcap > 0, alibi_slopes is not None, False,
                            device)]
    runtime.launch_on(device, launch, args, runtime.raw_stream(device))
    return o, lse


_CUDA_KEYS = []  # "cuda:N" by device index (_SEQUENCE_BUFFERS' keys)


def _gpu_varlen_fast_path(q, k, v, softmax_scale, causal, window_left, window_right, softcap,
                          cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                          alibi_slopes=None):
    """The common varlen GPU call in O(1), as _gpu_fast_path: q (total_q, hq,
    d), k, v (total_k, hk, d) CUDA f16/bf16 tensors of one type on one device,
    rows 16-byte aligned, head_dim a multiple of 8 up to 256; cu_seqlens_q/k
    (and seqused_k) contiguous int32 CUDA tensors of batch + 1 (batch)
    entries on that device; max_seqlen_q/k positive ints; scale > 0, int
    windows, softcap >= 0, ALiBi or not; CHECK_CUDA_VARLEN_VALUES off (their
    values are not read: no device-to-host copy). Returns (out, lse), or None
    for anything else (the general path then handles it or names the
    problem). Same kernel and arguments as the general path."""
    torch = sys.modules["torch"]
    if CHECK_CUDA_VARLEN_VALUES:
        return None
    if not _FAST_DTYPES:
        _FAST_DTYPES.update({torch.float16: "float16", torch.bfloat16: "bfloat16"})
    kind = type(q)
    if (type(k) is not kind or type(v) is not kind or type(cu_seqlens_q) is not kind
            or type(cu_seqlens_k) is not kind or type(window_left) is not int
            or type(window_right) is not int or type(max_seqlen_q) is not int
            or type(max_seqlen_k) is not int):
        return None
    dt = q.dtype
    dtype = _FAST_DTYPES.get(dt)
    i32 = torch.int32
    if (dtype is None or k.dtype != dt or v.dtype != dt or cu_seqlens_q.dtype != i32
            or cu_seqlens_k.dtype != i32):
        return None
    shape_q, shape_k, shape_cu = q.shape, k.shape, cu_seqlens_q.shape
    if (len(shape_q) != 3 or len(shape_k) != 3 or v.shape != shape_k or len(shape_cu) != 1
            or cu_seqlens_k.shape != shape_cu):
        return None
    total_q, heads, head_dim = shape_q
    total_k, heads_k = shape_k[0], shape_k[1]
    batch = shape_cu[0] - 1
    if (shape_k[2] != head_dim or head_dim & 7 or not 8 <= head_dim <= MAX_HEAD_DIM
            or not (total_q and total_k and heads and heads_k and batch > 0 and max_seqlen_q > 0
                    and max_seqlen_k > 0)
            or heads % heads_k or window_left < -1 or window_right < -1
            or cu_seqlens_q.stride(0) != 1 or cu_seqlens_k.stride(0) != 1):
        return None
    device = q.get_device()
    if (device < 0 or k.get_device() != device or v.get_device() != device
            or cu_seqlens_q.get_device() != device or cu_seqlens_k.get_device() != device):
        return None
    if seqused_k is not None and (type(seqused_k) is not kind or seqused_k.dtype != i32
                                  or seqused_k.shape != (batch,) or seqused_k.get_device() != device
                                  or (batch > 1 and seqused_k.stride(0) != 1)):
        return None
    sq, sk, sv = q.stride(), k.stride(), v.stride()
    if (sq[2] != 1 or sk[2] != 1 or sv[2] != 1
            or (sq[0] | sq[1] | sk[0] | sk[1] | sv[0] | sv[1]) & 7
            or (q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15):
        return None
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    softcap = float(softcap)
    if not scale > 0 or not softcap >= 0:
        return None
    stride_alibi_b = _fast_alibi(alibi_slopes, kind, batch, heads, device)
    if stride_alibi_b is None:
        return None
    causal, window, left, right = _mask_mode(causal, window_left, window_right, max_seqlen_q,
                                             max_seqlen_k, alibi_slopes)
    errors = _SEQUENCE_BUFFERS.get(_CUDA_KEYS[device]) if device < len(_CUDA_KEYS) else None
    if errors is None or errors[2] < batch:
        while len(_CUDA_KEYS) <= device:
            _CUDA_KEYS.append(f"cuda:{len(_CUDA_KEYS)}")
        errors = _sequence_errors(q, batch, _CUDA_KEYS[device])
    if errors[0][0]:  # an earlier call's kernel found bad values
        _raise_sequence_errors("flash_attn_varlen_func")
    dummies = _FAST_DUMMIES.get(device)
    if dummies is None:
        dummies = _FAST_DUMMIES[device] = (_dummy(q, "float32"), _dummy(q, "int32"))
    slopes, ints = dummies
    if alibi_slopes is not None:
        slopes = alibi_slopes
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = q.new_empty((heads, total_q), dtype=torch.float32)
    row = heads * head_dim
    # Sequence b starts at row cu_seqlens[b]: each tensor's batch stride is its row stride.
    args = (q, k, v, o, lse, max_seqlen_q, max_seqlen_k, heads, batch, heads // heads_k,
            sq[0], sq[0], sq[1], sk[0], sk[0], sk[1], sv[0], sv[0], sv[1],
            row, row, head_dim, 1, total_q, scale,
            left, right, softcap if softcap > 0 else 1.0, slopes, stride_alibi_b, cu_seqlens_q, cu_seqlens_k,
            ints if seqused_k is None else seqused_k, int(seqused_k is not None),
            errors[1], total_q, total_k)
    from . import runtime

    launch = _GPU_LAUNCHES[(dtype, head_dim, causal, window, softcap > 0, alibi_slopes is not None, True,
                            device)]
    runtime.launch_on(device, launch, args, runtime.raw_stream(device))
    return o, lse


def _check_index_array(fn, name, t, q, length):
    """cu_seqlens_q/k, seqused_k: int32, 1-D of `length` (None: any), next to q."""
    if not hasattr(t, "shape") or _is_torch(t) != _is_torch(q):
        raise TilecTypeError(f"{fn}: '{name}' must be a "
                             f"{'torch tensor' if _is_torch(q) else 'numpy array'} like 'q', got "
                             f"{type(t).__name__}")
    if _dtype_name(t) != "int32":
        raise TilecTypeError(f"{fn}: '{name}' must be int32, got {_dtype_name(t)}")
    if len(t.shape) != 1 or (length is not None and t.shape[0] != length):
        want = "1-D" if length is None else f"of shape ({length},) (batch + 1)" if name.startswith("cu") \
            else f"of shape ({length},) (batch)"
        raise TilecValueError(f"{fn}: '{name}' must be {want}, got shape {tuple(t.shape)}")
    if _device(t) != _device(q):
        raise TilecValueError(f"{fn}: '{name}' is on {_device(t)}, 'q' on {_device(q)}")
    if t.shape[0] > 1 and _strides(t)[0] != 1:
        raise TilecValueError(f"{fn}: '{name}' must be contiguous (stride {_strides(t)[0]})")


def _host_ints(t):
    if _is_torch(t):
        t = t.detach().cpu().numpy()
    import numpy as np

    return np.asarray(t, dtype=np.int64)


def _check_seqlens(fn, name, cu, total, max_seqlen, what):
    """cu_seqlens values: start at 0, non-decreasing, end inside the tensor;
    no sequence longer than max_seqlen."""
    import numpy as np

    lengths = np.diff(cu)
    if cu[0] != 0:
        raise TilecValueError(f"{fn}: '{name}' must start at 0, got {int(cu[0])}")
    if (lengths < 0).any():
        b = int(np.argmax(lengths < 0))
        raise TilecValueError(f"{fn}: '{name}' must be non-decreasing, but {name}[{b + 1}] = "
                              f"{int(cu[b + 1])} < {name}[{b}] = {int(cu[b])}")
    if cu[-1] > total:
        raise TilecValueError(f"{fn}: '{name}' ends at {int(cu[-1])}, past the {total} tokens of "
                              f"'{what}'")
    if len(lengths) and lengths.max() > max_seqlen:
        b = int(np.argmax(lengths))
        raise TilecValueError(f"{fn}: sequence {b} has {int(lengths[b])} tokens in '{what}', more "
                              f"than max_seqlen_{what} = {max_seqlen}")
    return lengths


def _capturing():
    """Whether the current CUDA stream is being captured into a graph (no
    device-to-host copy may happen then)."""
    import torch

    try:
        return torch.cuda.is_current_stream_capturing()
    except RuntimeError:  # no usable CUDA runtime (tensors posing as CUDA in tests)
        return False


# The values of cu_seqlens_q/k (and seqused_k) are checked on the host
# (non-decreasing, from 0, within the tensors and max_seqlen_q/k) for numpy
# and CPU tensors always; for CUDA tensors only when this is True, because
# reading them back is a device sync per call (and flash_attn does not read
# them either). Off, bad values on the GPU are not caught: rows past
# max_seqlen are not computed, and cu_seqlens past the tensors read and write
# out of bounds, as with flash_attn. Never while a CUDA graph is captured.
CHECK_CUDA_VARLEN_VALUES = False

# Without that check, the VARLEN kernel checks each sequence's values itself
# (kernels/flash_fwd.py sequence_error): a program of a bad sequence touches
# nothing outside q/k/out, writes an error record into a host buffer (pinned
# memory on the GPU, mapped into the device's address space) and exits. The
# host looks at the buffer's flag word before each varlen call -- one read of
# host memory, no synchronization -- and, when it is set, raises the first
# bad sequence's record (the kernel that wrote it has finished by then, or is
# waited for: the error path may synchronize). tilec.check_errors() waits for
# the device and raises the same. Record codes: v0, v1 as the kernel writes them.
SEQUENCE_ERRORS = {
    1: "'cu_seqlens_q' must be non-decreasing, but cu_seqlens_q[{b1}] = {v1} < cu_seqlens_q[{b}] = {v0}",
    2: "'cu_seqlens_q' ends sequence {b} at {v0}, past the {v1} tokens of 'q'",
    3: "sequence {b} has {v0} tokens in 'q', more than max_seqlen_q = {v1}",
    4: "'cu_seqlens_k' must be non-decreasing, but cu_seqlens_k[{b1}] = {v1} < cu_seqlens_k[{b}] = {v0}",
    5: "'cu_seqlens_k' ends sequence {b} at {v0}, past the {v1} tokens of 'k'",
    6: "sequence {b} has {v0} tokens in 'k', more than max_seqlen_k = {v1}",
    7: "seqused_k[{b}] = {v0} is outside 0..{v1} (the keys of sequence {b})",
    8: "cu_seqlens_q[{b}] = {v0} is negative",
    9: "cu_seqlens_k[{b}] = {v0} is negative",
    10: "seqused_k[{b}] = {v0} is more than max_seqlen_k = {v1}",
}
_SEQUENCE_BUFFERS = {}  # _device(q) -> [flags and records (numpy view), launch argument, capacity, owner]
_RETIRED_BUFFERS = []   # (device, entry) outgrown, never freed: a kernel in flight or a captured
                        # CUDA graph may still write it; checked as the others


def _sequence_errors(q, batch, key=None):
    """The error buffer of q's device (entry of _SEQUENCE_BUFFERS) with room
    for `batch` records: 4 int32 flag words, then 4 per sequence."""
    key = key or _device(q)
    entry = _SEQUENCE_BUFFERS.get(key)
    if entry is not None and entry[2] >= batch:
        return entry
    import numpy as np

    if entry is not None:  # outgrown (rare: capacities double)
        _RETIRED_BUFFERS.append((key, entry))
    capacity = max(64, 1 << max(batch - 1, 0).bit_length())
    if key.startswith("cuda"):
        import torch

        try:  # pinned: mapped into every device's address space (UVA), same address
            owner = torch.zeros(4 + 4 * capacity, dtype=torch.int32, pin_memory=True)
        except RuntimeError:  # no CUDA driver: tensors posing as CUDA (tests, host_overhead --mock)
            owner = torch.zeros(4 + 4 * capacity, dtype=torch.int32)
        view, arg = owner.numpy(), owner.data_ptr()
    else:
        owner = view = arg = np.zeros(4 + 4 * capacity, np.int32)
    entry = _SEQUENCE_BUFFERS[key] = [view, arg, capacity, owner]
    return entry


def _raise_sequence_errors(fn, wait=False):
    """Raises the first error record a VARLEN kernel left (and clears it);
    O(1) while there is none. wait: synchronize the devices first."""
    for key, (view, _, _, _) in list(_SEQUENCE_BUFFERS.items()) + _RETIRED_BUFFERS:
        if wait and key.startswith("cuda"):
            sys.modules["torch"].cuda.synchronize(key)  # a CUDA buffer exists: torch is loaded
        if not view[0]:
            continue
        if key.startswith("cuda"):
            sys.modules["torch"].cuda.synchronize(key)  # the record may land after the flag
        records = view[4:].reshape(-1, 4)
        bad = records[:, 3] != 0
        message = "bad sequence values (the record was not found)"
        if bad.any():
            b = int(bad.argmax())
            code, v0, v1 = (int(x) for x in records[b, :3])
            message = SEQUENCE_ERRORS.get(code, "error code {code}").format(b=b, b1=b + 1, v0=v0,
                                                                              v1=v1, code=code)
        view[:] = 0
        raise TilecValueError(f"{fn}: an earlier varlen call on {key} had bad values, found by "
                              f"its kernel: {message} (that sequence's output was not computed)")


def check_errors():
    """Waits for the GPU and raises the first error a varlen kernel found in
    its cu_seqlens / seqused_k values since the last check (a TilecValueError
    naming the sequence and the values); returns None when there was none.
    The next varlen call checks too, without waiting. (Values of CUDA tensors
    are not read on the host unless flash_attn.CHECK_CUDA_VARLEN_VALUES.)"""
    _raise_sequence_errors("tilec.check_errors", wait=True)


def _check_varlen_values(fn, cu_seqlens_q, cu_seqlens_k, seqused_k, total_q, total_k,
                         max_seqlen_q, max_seqlen_k):
    """The values of cu_seqlens (and seqused_k), read on the host: one copy of
    batch + 1 ints (for CUDA tensors a synchronization, so only with
    CHECK_CUDA_VARLEN_VALUES and not while a CUDA graph is captured)."""
    cu_q, cu_k = _host_ints(cu_seqlens_q), _host_ints(cu_seqlens_k)
    _check_seqlens(fn, "cu_seqlens_q", cu_q, total_q, max_seqlen_q, "q")
    # With seqused_k, only the used keys must fit max_seqlen_k.
    len_k = _check_seqlens(fn, "cu_seqlens_k", cu_k, total_k,
                           max_seqlen_k if seqused_k is None else float("inf"), "k")
    if seqused_k is not None:
        used = _host_ints(seqused_k)
        bad = (used < 0) | (used > len_k)
        if bad.any():
            b = int(bad.argmax())
            raise TilecValueError(f"{fn}: seqused_k[{b}] = {int(used[b])} is outside "
                                  f"0..{int(len_k[b])} (the keys of sequence {b})")
        if len(used) and used.max() > max_seqlen_k:
            b = int(used.argmax())
            raise TilecValueError(f"{fn}: seqused_k[{b}] = {int(used[b])} is more than "
                                  f"max_seqlen_k = {max_seqlen_k}")


def _varlen_forward(q, k, v, softmax_scale, causal, window_left, window_right, softcap,
                    alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                    seqused_k, fn, dropout=None, return_probs=False):
    dtype, on_gpu = _check_qkv(fn, q, k, v, 3)
    total_q, heads, head_dim = q.shape
    total_k, heads_k = k.shape[0], k.shape[1]
    if cu_seqlens_k is None:
        raise TilecValueError(f"{fn}: varlen needs both cu_seqlens_q and cu_seqlens_k")
    _check_index_array(fn, "cu_seqlens_q", cu_seqlens_q, q, None)
    if cu_seqlens_q.shape[0] < 1:
        raise TilecValueError(f"{fn}: 'cu_seqlens_q' must have batch + 1 >= 1 entries, got none")
    batch = cu_seqlens_q.shape[0] - 1
    _check_index_array(fn, "cu_seqlens_k", cu_seqlens_k, q, batch + 1)
    if seqused_k is not None:
        _check_index_array(fn, "seqused_k", seqused_k, q, batch)
    for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(value, bool) or not isinstance(value, int) and not hasattr(value, "__index__"):
            raise TilecTypeError(f"{fn}: {name} must be an int, got {value!r}")
        if value < 0:
            raise TilecValueError(f"{fn}: {name} must be >= 0, got {value}")
    max_seqlen_q, max_seqlen_k = int(max_seqlen_q), int(max_seqlen_k)
    softcap = _check_options(fn, causal, window_left, window_right, softcap, alibi_slopes,
                             batch, heads, q)
    scale = _scale(fn, softmax_scale, head_dim)
    _raise_sequence_errors(fn)
    if not on_gpu or (CHECK_CUDA_VARLEN_VALUES and not _capturing()):
        _check_varlen_values(fn, cu_seqlens_q, cu_seqlens_k, seqused_k, total_q, total_k,
                             max_seqlen_q, max_seqlen_k)
    mode = _mask_mode(causal, window_left, window_right, max_seqlen_q, max_seqlen_k, alibi_slopes)
    return _launch(fn, q, k, v, dtype, on_gpu, scale, mode, softcap, alibi_slopes, batch,
                   max_seqlen_q, max_seqlen_k, heads, heads_k, head_dim,
                   varlen=(cu_seqlens_q, cu_seqlens_k, seqused_k), dropout=dropout,
                   return_probs=return_probs)


# ---------------------------------------------------------------------------
# flash_attn 2.8's public forward functions.


def _forward(fn, deterministic, q, k, v, softmax_scale, causal, left, right, softcap, alibi_slopes,
             cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
             seqused_k=None, dropout=None, return_probs=False):
    """The core, or -- for torch inputs that require grad, grad mode on,
    eager -- the core through tilec.flash_bwd's autograd Function (the O(1)
    GPU fast path is inside the core, so it never bypasses autograd). While
    torch.compile traces, the core calls the custom op, whose registered
    autograd is the same backward (tilec/ops.py). Returns (out, lse) or, with
    return_probs, (out, lse, S_dmask)."""
    if (getattr(q, "requires_grad", False) or getattr(k, "requires_grad", False)
            or getattr(v, "requires_grad", False)) and not _torch_compiling():
        from . import flash_bwd

        if flash_bwd.wants_autograd(q, k, v):
            return flash_bwd.flash_attn_autograd(fn, q, k, v, softmax_scale, causal, left, right,
                                                 softcap, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
                                                 max_seqlen_q, max_seqlen_k, seqused_k,
                                                 deterministic, dropout, return_probs)
    return _flash_attn_forward(q, k, v, softmax_scale, causal, left, right, softcap, alibi_slopes,
                               cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                               fn=fn, dropout=dropout, return_probs=return_probs)


def _as_int64(x):
    x = int(x) & ((1 << 64) - 1)
    return x - (1 << 64) if x >= 1 << 63 else x


def _cuda_philox_quads(offset, counters):
    """A CUDA generator's Philox offset and a call's counter count -> (the
    kernels' rng_offset, the generator's next offset). torch's kernels
    (curand_init(seed, thread, offset)) draw counter quads offset/4,
    offset/4 + 1, ... of their threads' subsequences, and an advance by
    `increment` reserves increment/4 quads of every subsequence; the
    dropout kernels draw quads rng_offset .. rng_offset + counters - 1 of
    subsequence 0 (flash_fwd.dropout_keep), so rng_offset = offset/4 and an
    advance by 4·counters keep them inside the reservation: no later torch
    op draws them again."""
    if offset % 4:
        raise TilecValueError(f"the CUDA generator's Philox offset {offset} is not a multiple of 4")
    return offset // 4, offset + 4 * counters


def _dropout_rng(fn, dropout_p, q, generator, counters):
    """None (no dropout) or (dropout_p, seed, offset) for the kernels' Philox
    counters, taken from a generator as flash_attn does (its C++ takes
    at::Generator, default the CUDA one): CUDA inputs use `generator` (a
    CUDA torch.Generator) or the device's default CUDA generator -- its
    seed, and its Philox offset / 4, the generator advanced by 4 per
    counter this call uses (_cuda_philox_quads: torch's reservation of the
    quads it draws), so successive calls get fresh masks and
    torch.manual_seed replays them; CPU tensors draw seed and offset (two int64) from
    `generator` (a CPU torch.Generator) or torch's default CPU generator;
    numpy arrays from numpy's global random state (np.random.seed replays)."""
    try:
        p = float(dropout_p)
    except (TypeError, ValueError):
        raise TilecTypeError(f"{fn}: dropout_p must be a float, got {dropout_p!r}") from None
    if not 0 <= p < 1:
        raise TilecValueError(f"{fn}: dropout_p must be in [0, 1), got {dropout_p!r}")
    if p == 0:
        return None
    if not _is_torch(q):
        if generator is not None:
            raise TilecTypeError(f"{fn}: 'generator' is for torch tensors; numpy inputs draw from "
                                 "numpy's global random state")
        import numpy as np

        seed, offset = (int(x) for x in np.random.randint(-(1 << 63), (1 << 63) - 1, 2,
                                                           dtype=np.int64))
        return p, seed, offset
    import torch

    if _torch_compiling():
        raise NotImplementedError(f"{fn}: dropout under torch.compile is not supported (the "
                                  "generator's seed would be traced as a constant); call it "
                                  "eagerly or with dropout_p=0")
    if q.is_cuda:
        gen = torch.cuda.default_generators[q.get_device()] if generator is None else generator
        if not isinstance(gen, torch.Generator) or gen.device.type != "cuda":
            raise TilecTypeError(f"{fn}: 'generator' must be a CUDA torch.Generator for CUDA "
                                 f"inputs, got {gen!r}")
        if _capturing():
            raise NotImplementedError(f"{fn}: dropout while a CUDA graph is being captured is not "
                                      "supported (the generator's offset is advanced on the host)")
        seed = gen.initial_seed()
        quad, after = _cuda_philox_quads(gen.get_offset(), counters)
        gen.set_offset(after)
        return p, _as_int64(seed), _as_int64(quad)
    gen = torch.default_generator if generator is None else generator
    if not isinstance(gen, torch.Generator) or gen.device.type != "cpu":
        raise TilecTypeError(f"{fn}: 'generator' must be a CPU torch.Generator for CPU tensors, "
                             f"got {gen!r}")
    seed, offset = torch.randint(-(1 << 63), (1 << 63) - 1, (2,), dtype=torch.int64,
                                 generator=gen).tolist()
    return p, seed, offset


def _dense_counters(q, k):
    """Dropout's counters of a dense call: batch·heads·seqlen_q·seqlen_k."""
    sq, sk = tuple(getattr(q, "shape", ())), tuple(getattr(k, "shape", ()))
    return sq[0] * sq[2] * sq[1] * sk[1] if len(sq) == 4 and len(sk) == 4 else 0


def _window(fn, window_size):
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise TilecValueError(f"{fn}: window_size must be a pair (left, right), got "
                              f"{window_size!r}") from None
    return left, right


def _s_dmask(q):
    """S_dmask without dropout: empty, as flash_attn returns it."""
    return _empty(q, (0,), "same")


def _result(fn, result, return_attn_probs, return_lse, q):
    out, lse = result[:2]
    if return_attn_probs:
        return out, lse, result[2] if len(result) == 3 else _s_dmask(q)
    return (out, lse) if return_lse else out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                    return_lse=False, generator=None):
    """softmax(scale · Q·Kᵀ [masked, capped, biased])·V, flash_attn 2.8's
    flash_attn_func: q (batch, seqlen_q, nheads, headdim), k, v (batch,
    seqlen_k, nheads_k, headdim), nheads a multiple of nheads_k (GQA/MQA:
    query head h reads K/V head h // (nheads / nheads_k)); f16 or bf16
    (numpy: f16), headdim up to 256.

    causal is aligned to the bottom right: query i sees keys
    j <= i + seqlen_k - seqlen_q; window_size (left, right) limits query i to
    keys [i + seqlen_k - seqlen_q - left, i + seqlen_k - seqlen_q + right]
    (-1: unbounded). softcap > 0 makes the scores softcap·tanh(s/softcap);
    alibi_slopes (nheads,) or (batch, nheads) f32 adds
    -slope·|i + seqlen_k - seqlen_q - j|. Rows that see no key give 0 and an
    lse of +inf. dropout_p > 0 drops P as FlashAttention-2 does (Philox,
    seed and offset from torch's generator; see _dropout_rng).

    Trainable: torch inputs that require grad get gradients from
    kernels/flash_bwd.py (tilec.flash_bwd; GQA/MQA's dk, dv summed over each
    KV head's query heads), also under torch.compile. deterministic=False
    (the default) lets the backward add dQ with atomics in no fixed order;
    deterministic=True makes the gradients bitwise repeatable run to run
    (tilec.flash_bwd._flash_attn_backward says how). Every
    variant (windows, softcap through its tanh, ALiBi -- no gradient for the
    slopes, as upstream --, varlen, every head dim) has its backward.

    Returns out (like q) or, with return_attn_probs, (out, softmax_lse
    (batch, nheads, seqlen_q) f32, S_dmask), S_dmask empty without dropout as
    upstream. return_lse=True (tilec's own keyword) returns (out, lse).
    """
    if dropout_p and _torch_compiling():
        return _eagerly(
            flash_attn_func, q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
            alibi_slopes, deterministic, return_attn_probs, return_lse=return_lse,
            generator=generator)
    done = _try_native(True, dropout_p, return_attn_probs, generator,
                       (q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes))
    if done is not None:
        return done if return_lse else done[0]
    fn = "flash_attn_func"
    left, right = _window(fn, window_size)
    dropout = _dropout_rng(fn, dropout_p, q, generator, _dense_counters(q, k))
    result = _forward(fn, deterministic, q, k, v, softmax_scale, causal, left, right, softcap,
                      alibi_slopes, dropout=dropout, return_probs=return_attn_probs and bool(dropout))
    return _result(fn, result, return_attn_probs, return_lse, q)


def _varlen_dropout(fn, dropout_p, q, generator, cu_seqlens_q, max_seqlen_q, max_seqlen_k):
    """_dropout_rng of a varlen call: batch·heads·max_seqlen_q·max_seqlen_k counters."""
    batch = max(getattr(cu_seqlens_q, "shape", (1,))[0] - 1, 0)
    heads = q.shape[-2] if hasattr(q, "shape") and len(q.shape) == 3 else 0
    try:
        counters = batch * heads * int(max_seqlen_q) * int(max_seqlen_k)
    except (TypeError, ValueError):
        counters = 0  # the core reports the bad max_seqlen
    return _dropout_rng(fn, dropout_p, q, generator, counters)


def _unpack(fn, packed, axis, count, name):
    if not hasattr(packed, "shape") or len(packed.shape) <= axis or packed.shape[axis] != count:
        shape = tuple(getattr(packed, "shape", ()))
        raise TilecValueError(f"{fn}: '{name}' must have {count} at dimension {axis}, got shape "
                              f"{shape}")
    index = (slice(None),) * axis
    return tuple(packed[index + (i,)] for i in range(count))


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False, *, generator=None):
    """flash_attn_func on qkv (batch, seqlen, 3, nheads, headdim)."""
    if dropout_p and _torch_compiling():
        return _eagerly(
            flash_attn_qkvpacked_func, qkv, dropout_p, softmax_scale, causal, window_size,
            softcap, alibi_slopes, deterministic, return_attn_probs, generator=generator)
    fn = "flash_attn_qkvpacked_func"
    q, k, v = _unpack(fn, qkv, 2, 3, "qkv")
    done = _try_native(True, dropout_p, return_attn_probs, generator,
                       (q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes))
    if done is not None:
        return done[0]
    left, right = _window(fn, window_size)
    dropout = _dropout_rng(fn, dropout_p, q, generator, _dense_counters(q, k))
    result = _forward(fn, deterministic, q, k, v, softmax_scale, causal, left, right, softcap,
                      alibi_slopes, dropout=dropout, return_probs=return_attn_probs and bool(dropout))
    return _result(fn, result, return_attn_probs, False, q)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False, *, generator=None):
    """flash_attn_func on q (batch, seqlen_q, nheads, headdim) and kv
    (batch, seqlen_k, 2, nheads_k, headdim)."""
    if dropout_p and _torch_compiling():
        return _eagerly(
            flash_attn_kvpacked_func, q, kv, dropout_p, softmax_scale, causal, window_size,
            softcap, alibi_slopes, deterministic, return_attn_probs, generator=generator)
    fn = "flash_attn_kvpacked_func"
    k, v = _unpack(fn, kv, 2, 2, "kv")
    done = _try_native(True, dropout_p, return_attn_probs, generator,
                       (q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes))
    if done is not None:
        return done[0]
    left, right = _window(fn, window_size)
    dropout = _dropout_rng(fn, dropout_p, q, generator, _dense_counters(q, k))
    result = _forward(fn, deterministic, q, k, v, softmax_scale, causal, left, right, softcap,
                      alibi_slopes, dropout=dropout, return_probs=return_attn_probs and bool(dropout))
    return _result(fn, result, return_attn_probs, False, q)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None, *,
                           generator=None):
    """flash_attn_func on sequences packed along the first dimension: q
    (total_q, nheads, headdim), k, v (total_k, nheads_k, headdim);
    cu_seqlens_q/k int32 (batch + 1,) the cumulative lengths (sequence b is
    rows cu[b]:cu[b+1]); max_seqlen_q/k ints at least every length. Masks and
    ALiBi are per sequence (bottom right of each). Returns out (total_q,
    nheads, headdim) or (out, softmax_lse (nheads, total_q), S_dmask).
    block_table (batch, pages per sequence) int32: paged K/V as upstream's --
    k, v are (num_pages, page_size, nheads_k, headdim) and sequence b's keys
    are rows 0..len_b - 1 of its pages block_table[b, :], len_b =
    cu_seqlens_k[b + 1] - cu_seqlens_k[b] (see _gather_pages)."""
    if dropout_p and _torch_compiling():
        return _eagerly(
            flash_attn_varlen_func, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
            max_seqlen_k, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
            deterministic, return_attn_probs, block_table, generator=generator)
    if block_table is None:
        done = _try_native(False, dropout_p, return_attn_probs, generator,
                           (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                            causal, window_size, softcap, alibi_slopes))
        if done is not None:
            return done[0]
    fn = "flash_attn_varlen_func"
    seqused_k = None
    if block_table is not None:
        k, v, cu_seqlens_k, seqused_k = _gather_pages(fn, k, v, block_table, cu_seqlens_k,
                                                       max_seqlen_k)
    left, right = _window(fn, window_size)
    dropout = _varlen_dropout(fn, dropout_p, q, generator, cu_seqlens_q, max_seqlen_q, max_seqlen_k)
    result = _forward(fn, deterministic, q, k, v, softmax_scale, causal, left, right, softcap,
                      alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                      seqused_k, dropout=dropout,
                      return_probs=return_attn_probs and bool(dropout))
    return _result(fn, result, return_attn_probs, False, q)


def _gather_pages(fn, k, v, block_table, cu_seqlens_k, max_seqlen_k):
    """Paged K/V for the varlen kernel: (k, v, cu_seqlens_k, seqused_k) with
    each sequence's pages gathered into one padded run of P·n rows (n =
    ceil(max_seqlen_k / P) pages, P the page size): sequence b's keys start at
    row b·P·n and seqused_k = cu_seqlens_k[1:] - cu_seqlens_k[:-1] says how
    many it has. No value is read back to the host (the gather is an index
    on the device), so the call stays asynchronous; it costs one copy of
    batch·n pages of K and V (the kernel itself reads contiguous rows).
    Gradients flow to the page pool through the gather (torch)."""
    if not hasattr(k, "shape") or not hasattr(v, "shape") or len(k.shape) != 4:
        raise TilecValueError(f"{fn}: with block_table, k and v must be (num_pages, page_size, "
                              "nheads_k, headdim), got k of shape "
                              f"{tuple(getattr(k, 'shape', ()))}")
    if tuple(v.shape) != tuple(k.shape):
        raise TilecValueError(f"{fn}: with block_table, v must have k's shape {tuple(k.shape)}, "
                              f"got {tuple(v.shape)}")
    if not hasattr(block_table, "shape") or _is_torch(block_table) != _is_torch(k):
        raise TilecTypeError(f"{fn}: 'block_table' must be a "
                             f"{'torch tensor' if _is_torch(k) else 'numpy array'} like k, got "
                             f"{type(block_table).__name__}")
    if _dtype_name(block_table) != "int32" or len(block_table.shape) != 2:
        raise TilecTypeError(f"{fn}: 'block_table' must be 2-D int32 (batch, pages per sequence), "
                             f"got {_dtype_name(block_table)} of shape {tuple(block_table.shape)}")
    num_pages, page = int(k.shape[0]), int(k.shape[1])
    _check_index_array(fn, "cu_seqlens_k", cu_seqlens_k, k, None)
    batch = int(cu_seqlens_k.shape[0]) - 1
    if int(block_table.shape[0]) != batch:
        raise TilecValueError(f"{fn}: 'block_table' has {block_table.shape[0]} rows, cu_seqlens_k "
                              f"says the batch is {batch}")
    if type(max_seqlen_k) is not int and not hasattr(max_seqlen_k, "__index__"):
        raise TilecTypeError(f"{fn}: 'max_seqlen_k' must be an int, got "
                             f"{type(max_seqlen_k).__name__}")
    n = max(1, -(-int(max_seqlen_k) // page))
    if int(block_table.shape[1]) < n:
        raise TilecValueError(f"{fn}: 'block_table' has {block_table.shape[1]} pages per "
                              f"sequence, max_seqlen_k {max_seqlen_k} needs {n} pages of {page}")
    on_host = not _is_torch(k) or k.device.type == "cpu"
    if (on_host or (CHECK_CUDA_VARLEN_VALUES and not _capturing())) and batch > 0:
        import numpy as np

        lens = _check_seqlens(fn, "cu_seqlens_k", _host_ints(cu_seqlens_k), float("inf"),
                              max_seqlen_k, "k")
        table = _host_ints(block_table[:, :n])
        # Only the pages a sequence's keys occupy must name pages of the pool.
        needed = np.arange(n)[None, :] < -(-lens[:, None] // page)
        bad = needed & ((table < 0) | (table >= num_pages))
        if bad.any():
            b, j = (int(x) for x in np.argwhere(bad)[0])
            raise TilecValueError(f"{fn}: block_table[{b}, {j}] = {int(table[b, j])} is outside "
                                  f"the pool 0..{num_pages - 1}")
    # Entries past a sequence's pages are not used: clamped so that the
    # gather never reads outside the pool (seqused_k hides those rows).
    if _is_torch(k):
        idx = block_table[:, :n].long().clamp(0, num_pages - 1)
        gk, gv = (t[idx].reshape(batch * n * page, *t.shape[2:]) for t in (k, v))
        lens = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).to(block_table.dtype)
        starts = (_arange(cu_seqlens_k, batch + 1) * (n * page)).to(cu_seqlens_k.dtype)
    else:
        import numpy as np

        idx = block_table[:, :n].astype(np.int64).clip(0, num_pages - 1)
        gk, gv = (np.ascontiguousarray(t[idx].reshape(batch * n * page, *t.shape[2:]))
                  for t in (k, v))
        lens = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).astype(np.int32)
        starts = (np.arange(batch + 1, dtype=np.int64) * (n * page)).astype(np.int32)
    return gk, gv, starts, lens


def _arange(like, n):
    torch = sys.modules["torch"]
    return torch.arange(n, device=like.device, dtype=torch.int64)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None,
                                     causal=False, window_size=(-1, -1), softcap=0.0,
                                     alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False, *, generator=None):
    """flash_attn_varlen_func on qkv (total, 3, nheads, headdim)."""
    if dropout_p and _torch_compiling():
        return _eagerly(
            flash_attn_varlen_qkvpacked_func, qkv, cu_seqlens, max_seqlen, dropout_p,
            softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
            return_attn_probs, generator=generator)
    fn = "flash_attn_varlen_qkvpacked_func"
    q, k, v = _unpack(fn, qkv, 1, 3, "qkv")
    done = _try_native(False, dropout_p, return_attn_probs, generator,
                       (q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, softmax_scale, causal,
                        window_size, softcap, alibi_slopes))
    if done is not None:
        return done[0]
    left, right = _window(fn, window_size)
    dropout = _varlen_dropout(fn, dropout_p, q, generator, cu_seqlens, max_seqlen, max_seqlen)
    result = _forward(fn, deterministic, q, k, v, softmax_scale, causal, left, right, softcap,
                      alibi_slopes, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                      dropout=dropout, return_probs=return_attn_probs and bool(dropout))
    return _result(fn, result, return_attn_probs, False, q)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                    dropout_p=0.0, softmax_scale=None, causal=False,
                                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                    deterministic=False, return_attn_probs=False, *, generator=None):
    """flash_attn_varlen_func on q (total_q, nheads, headdim) and kv
    (total_k, 2, nheads_k, headdim)."""
    if dropout_p and _torch_compiling():
        return _eagerly(
            flash_attn_varlen_kvpacked_func, q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
            max_seqlen_k, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
            deterministic, return_attn_probs, generator=generator)
    fn = "flash_attn_varlen_kvpacked_func"
    k, v = _unpack(fn, kv, 1, 2, "kv")
    done = _try_native(False, dropout_p, return_attn_probs, generator,
                       (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                        window_size, softcap, alibi_slopes))
    if done is not None:
        return done[0]
    left, right = _window(fn, window_size)
    dropout = _varlen_dropout(fn, dropout_p, q, generator, cu_seqlens_q, max_seqlen_q, max_seqlen_k)
    result = _forward(fn, deterministic, q, k, v, softmax_scale, causal, left, right, softcap,
                      alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                      dropout=dropout, return_probs=return_attn_probs and bool(dropout))
    return _result(fn, result, return_attn_probs, False, q)


__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
           "flash_attn_varlen_kvpacked_func", "check_errors"]
