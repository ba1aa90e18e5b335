"""float64 reference for flash_attn 2.x's forward semantics, written from the
semantics (docs: /work/shared/GPU-FACTS.md "flash_attn 2.x semantics" and
flash_attn's csrc option handling), not from tilec's code: plain numpy
softmax with the mask built element by element.

- Bottom-right alignment: query i corresponds to key i + sk - sq.
- causal: j <= i + sk - sq. window (left, right): i + sk - sq - left <= j <=
  i + sk - sq + right. flash_attn's C++ first turns a window side >= sk into
  -1, drops causal when sq == 1 (no ALiBi), sets right = 0 when causal, and
  then gives an unbounded side (-1) of a window the value sk.
- softcap: c * tanh(scale * qk / c); ALiBi: - slope * |i + sk - sq - j| after it.
- Rows with no visible key: out 0, lse +inf.
"""
import numpy as np


def visible(sq, sk, causal=False, window=(-1, -1), has_alibi=False, max_sq=None, max_sk=None):
    """(sq, sk) bool: which keys each query sees. max_sq/max_sk (varlen's
    max_seqlen_q/k, default sq/sk) are what flash_attn compares the options
    with."""
    left, right = window
    max_sq = sq if max_sq is None else max_sq
    max_sk = sk if max_sk is None else max_sk
    if left >= max_sk:
        left = -1
    if right >= max_sk:
        right = -1
    if max_sq == 1 and not has_alibi:
        causal = False
    if causal:
        right = 0
    i = np.arange(sq)[:, None] + (sk - sq)  # the key aligned with query i
    j = np.arange(sk)[None, :]
    if left < 0 and right < 0:
        return np.ones((sq, sk), bool)
    lo = i - (max_sk if left < 0 else left)
    hi = i + (max_sk if right < 0 else right)
    return (j >= lo) & (j <= hi)


def attention(q, k, v, scale, causal=False, window=(-1, -1), softcap=0.0, slopes=None,
              max_sq=None, max_sk=None):
    """One sequence: q (sq, hq, d), k/v (sk, hk, d), slopes (hq,) or None.
    Returns out (sq, hq, d) and lse (hq, sq), float64."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    sq, hq, d = q.shape
    sk, hk = k.shape[:2]
    group = hq // hk
    out = np.zeros((sq, hq, v.shape[-1]))
    lse = np.full((hq, sq), np.inf)
    if sq == 0:
        return out, lse
    vis = visible(sq, sk, causal, window, slopes is not None, max_sq, max_sk)
    dist = np.abs(np.arange(sq)[:, None] + (sk - sq) - np.arange(sk)[None, :])
    for h in range(hq):
        kh = h // group
        s = q[:, h] @ k[:, kh].T * scale
        if softcap > 0:
            s = softcap * np.tanh(s / softcap)
        if slopes is not None:
            s = s - float(slopes[h]) * dist
        for r in range(sq):
            keys = vis[r]
            if not keys.any():
                continue
            row = s[r, keys]
            mx = row.max()
            p = np.exp(row - mx)
            out[r, h] = p @ v[keys, kh] / p.sum()
            lse[h, r] = mx + np.log(p.sum())
    return out, lse


def attention_batch(q, k, v, scale, causal=False, window=(-1, -1), softcap=0.0, slopes=None):
    """(b, s, h, d) inputs; slopes (h,) or (b, h). out (b, sq, hq, d), lse (b, hq, sq)."""
    outs, lses = [], []
    for b in range(q.shape[0]):
        sl = None if slopes is None else (slopes if slopes.ndim == 1 else slopes[b])
        o, l = attention(q[b], k[b], v[b], scale, causal, window, softcap, sl)
        outs.append(o)
        lses.append(l)
    return np.stack(outs), np.stack(lses)


def attention_varlen(q, k, v, cu_q, cu_k, scale, causal=False, window=(-1, -1), softcap=0.0,
                     slopes=None, seqused_k=None, max_sq=None, max_sk=None):
    """Packed (total, h, d) inputs; out (total_q, hq, d), lse (hq, total_q)."""
    out = np.zeros(q.shape[:2] + (v.shape[-1],))
    lse = np.full((q.shape[1], q.shape[0]), np.inf)
    for b in range(len(cu_q) - 1):
        q0, q1 = int(cu_q[b]), int(cu_q[b + 1])
        k0, k1 = int(cu_k[b]), int(cu_k[b + 1])
        if seqused_k is not None:
            k1 = k0 + int(seqused_k[b])
        sl = None if slopes is None else (slopes if slopes.ndim == 1 else slopes[b])
        o, l = attention(q[q0:q1], k[k0:k1], v[k0:k1], scale, causal, window, softcap, sl,
                         max_sq, max_sk)
        out[q0:q1] = o
        lse[:, q0:q1] = l
    return out, lse
