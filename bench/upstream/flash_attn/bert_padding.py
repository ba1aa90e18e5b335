"""unpad_input/pad_input with flash_attn.bert_padding's signatures, in torch."""
import torch
import torch.nn.functional as F


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """(b, s, ...) and a (b, s) mask -> (tokens, ...), indices, cu_seqlens,
    max_seqlen, seqlens. unused_mask marks tokens that are allocated but not
    attended (upstream: they are kept in the packed tensor, counted in
    seqlens_in_batch but not in cu_seqlens' used lengths)."""
    all_masks = attention_mask if unused_mask is None else attention_mask + unused_mask
    seqlens_in_batch = all_masks.sum(dim=-1, dtype=torch.int32)
    used_seqlens_in_batch = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(all_masks.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = int(seqlens_in_batch.max())
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return flat[indices], indices, cu_seqlens, max_seqlen_in_batch, used_seqlens_in_batch


def pad_input(hidden_states, indices, batch, seqlen):
    """(tokens, ...) -> (batch, seqlen, ...), zeros where no token was."""
    out = torch.zeros(batch * seqlen, *hidden_states.shape[1:], dtype=hidden_states.dtype,
                      device=hidden_states.device)
    out[indices] = hidden_states
    return out.reshape(batch, seqlen, *hidden_states.shape[1:])
