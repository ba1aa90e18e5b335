"""``attn_implementation="tilec"`` for Hugging Face transformers models.

    import tilec.integrations.transformers          # registers "tilec"
    model = LlamaForCausalLM(config)                 # or from_pretrained(...)
    model.set_attn_implementation("tilec")           # or attn_implementation="tilec"

Importing this module registers `tilec_attention_forward` with transformers'
`AttentionInterface` and, for the masks, FlashAttention's mask function (no
mask without padding) under the same name. The function takes the
(batch, heads, seqlen, head_dim) tensors transformers passes, hands
tilec.flash_attn_func (batch, seqlen, heads, head_dim) views of them (no
copies) and returns (out, None) in the (batch, seqlen, heads, head_dim)
layout transformers' flash path returns.

Grouped-query attention: the key/value tensors go to flash_attn_func with
their own number of heads, never repeated (no repeat_kv), so GQA/MQA models
run as soon as the kernel accepts fewer KV heads (issue 15); until then
flash_attn_func refuses them with an error that says so.

Padded batches (a (batch, keys) mask with zeros) run through
flash_attn_varlen_func on the packed valid tokens, as transformers' own
FlashAttention path does; padded query rows come out 0. Not supported
(clear errors): 4-D masks and, where flash_attn_func
still aligns causal top-left, causal attention with fewer queries than
keys; decode steps (one query) are not causal and run.
"""

from __future__ import annotations

import inspect

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

import tilec

__all__ = ["tilec_attention_forward", "NAME"]

NAME = "tilec"

_PARAMS = inspect.signature(tilec.flash_attn_func).parameters
# flash_attn 2.x's API (window_size, softcap, bottom-right causal) arrives
# with the variants (issue 15); these follow flash_attn_func's signature.
_HAS_WINDOW = "window_size" in _PARAMS
_HAS_SOFTCAP = "softcap" in _PARAMS
_HAS_VARLEN = hasattr(tilec, "flash_attn_varlen_func")


def tilec_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                            value: torch.Tensor, attention_mask: torch.Tensor | None,
                            dropout: float = 0.0, scaling: float | None = None,
                            sliding_window: int | None = None, softcap: float | None = None,
                            is_causal: bool | None = None, **kwargs):
    """transformers' attention interface on tilec.flash_attn_func."""
    extra = {}
    if attention_mask is not None and not _HAS_VARLEN:
        raise NotImplementedError(
            "tilec attention: padded batches (an attention mask with padding) need the varlen "
            f"kernel, which tilec does not have yet; mask shape {tuple(attention_mask.shape)}. "
            "Run unpadded batches, or attn_implementation='sdpa'")
    if attention_mask is not None and attention_mask.dim() != 2:
        raise NotImplementedError(
            "tilec attention: takes a (batch, keys) padding mask (FlashAttention's), got one of shape "
            f"{tuple(attention_mask.shape)}; attn_implementation='sdpa' takes 4-D masks")
    if dropout:  # attention_dropout in training: flash_attn's dropout (torch's generator)
        extra["dropout_p"] = float(dropout)
    q_len, kv_len = query.shape[2], key.shape[2]
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(is_causal) and q_len > 1
    if sliding_window is not None and kv_len > sliding_window:
        if not _HAS_WINDOW:
            raise NotImplementedError(f"tilec attention: sliding_window={sliding_window} needs "
                                      "flash_attn_func(window_size=...), which tilec does not have yet")
        # transformers' convention for FlashAttention (integrations/flash_attention.py).
        extra["window_size"] = (sliding_window - 1, sliding_window - 1)
    if softcap:
        if not _HAS_SOFTCAP:
            raise NotImplementedError(f"tilec attention: softcap={softcap} needs "
                                      "flash_attn_func(softcap=...), which tilec does not have yet")
        extra["softcap"] = softcap
    if causal and q_len != kv_len and not _HAS_WINDOW:
        raise NotImplementedError(
            f"tilec attention: causal attention of {q_len} queries over {kv_len} keys needs causal "
            "aligned bottom-right (flash_attn >= 2.1); tilec's is top-left until the variants land")
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    if attention_mask is not None:
        return _padded(q, k, v, attention_mask, scaling, causal, extra), None
    out = tilec.flash_attn_func(q, k, v, softmax_scale=scaling, causal=causal, **extra)
    return out, None


def _padded(q, k, v, mask, scaling, causal, extra):
    """A padded batch through flash_attn_varlen_func, as transformers' own
    FlashAttention path does it: the valid tokens of each sequence packed
    (the mask's last seqlen_q columns mark the queries, its last seqlen_k
    the keys), causal aligned bottom-right per sequence, padded query rows
    0. q (b, sq, hq, d), k/v (b, sk, hk, d); returns (b, sq, hq, d)."""
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_k, heads_k = k.shape[1], k.shape[2]
    keys = mask[:, -seqlen_k:].bool()
    queries = keys[:, -seqlen_q:]

    def pack(valid, t, seqlen, h):
        index = valid.flatten().nonzero().squeeze(1)
        lengths = valid.sum(1, dtype=torch.int32)
        cu = torch.nn.functional.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
        return t.reshape(batch * seqlen, h, head_dim)[index], index, cu, int(lengths.max())

    q_packed, q_index, cu_q, max_q = pack(queries, q, seqlen_q, heads)
    k_packed, k_index, cu_k, max_k = pack(keys, k, seqlen_k, heads_k)
    v_packed = v.reshape(batch * seqlen_k, heads_k, head_dim)[k_index]
    packed = tilec.flash_attn_varlen_func(q_packed, k_packed, v_packed, cu_q, cu_k, max_q, max_k,
                                          softmax_scale=scaling, causal=causal, **extra)
    out = q.new_zeros((batch * seqlen_q, heads, head_dim))
    out[q_index] = packed
    return out.view(batch, seqlen_q, heads, head_dim)


AttentionInterface.register(NAME, tilec_attention_forward)
AttentionMaskInterface.register(NAME, flash_attention_mask)
