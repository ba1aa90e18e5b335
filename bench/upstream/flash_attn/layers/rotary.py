"""apply_rotary_emb with flash_attn.layers.rotary's signature, in torch."""
import torch


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0,
                     cu_seqlens=None, max_seqlen=None):
    """Rotate the first rotary_dim = 2 * cos.shape[-1] features of x
    ((batch, seqlen, heads, d), or (total, heads, d) with cu_seqlens) by the
    angle of each token's position (its index in its sequence plus
    seqlen_offsets, an int or one per sequence). interleaved: pairs (0,1),
    (2,3), ... (GPT-J); else halves (GPT-NeoX)."""
    rd = 2 * cos.shape[-1]
    if cu_seqlens is not None:
        lens = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
        seq = torch.repeat_interleave(torch.arange(len(lens), device=x.device), lens)
        pos = torch.arange(x.shape[0], device=x.device) - cu_seqlens.long()[seq]
        if torch.is_tensor(seqlen_offsets):
            pos = pos + seqlen_offsets.long()[seq]
        else:
            pos = pos + seqlen_offsets
        c, s = cos[pos][:, None], sin[pos][:, None]            # (total, 1, rd/2)
    else:
        pos = torch.arange(x.shape[1], device=x.device)[None]
        offs = seqlen_offsets.long()[:, None] if torch.is_tensor(seqlen_offsets) else seqlen_offsets
        pos = (pos + offs).expand(x.shape[0], -1)
        c, s = cos[pos][:, :, None], sin[pos][:, :, None]      # (b, s, 1, rd/2)
    xf = x[..., :rd].float()
    c, s = c.float(), s.float()
    if interleaved:
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
        rot = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    else:
        x1, x2 = xf[..., : rd // 2], xf[..., rd // 2:]
        rot = torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)
    out = x if inplace else x.clone()
    out[..., :rd] = rot.to(x.dtype)
    return out
