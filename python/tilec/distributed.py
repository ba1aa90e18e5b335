"""Context parallelism: ring attention across the ranks of a torch.distributed
group, on tilec's forward and backward kernels.

    import tilec.distributed as td
    # each rank holds its contiguous shard of the sequence, in rank order
    out = td.ring_flash_attn_func(q, k, v, causal=True)
    # or the zigzag layout, which balances causal work across ranks
    q, k, v = (td.zigzag_shard(x, rank, world) for x in (q_full, k_full, v_full))
    out = td.zigzag_ring_flash_attn_func(q, k, v, causal=True)

q, k, v are this rank's shard (batch, seqlen_local, heads, head_dim) with
heads a multiple of k's (GQA/MQA); every rank of the group passes the same
shapes. K/V travel around the ring (rank r sends to r + 1 and receives from
r - 1 with `batch_isend_irecv`) while the attention of the block in hand
runs; the partial outputs merge by their log-sum-exp in f32 with
flash_attn_combine's math. Backward: every block's gradients are recomputed
by tilec's backward from the final out and lse; dQ stays on its rank, dK/dV
(f32) travel around the ring behind their K/V block and arrive back at the
block's owner after a full turn.

Causal masks are over the whole sequence. Plain ring (rank r holds tokens
[r·n, (r + 1)·n)): the block from rank s is full if s < r, the causal
diagonal if s == r, skipped if s > r — so rank r does r + 1 blocks and the
last rank waits on the others. Zigzag (rank r holds chunks r and
2·world − 1 − r of 2·world equal chunks): every step is half a block of work
on every rank — from s < r its first chunk of keys against all local
queries, from s > r all its keys against the second local chunk of queries.

CUDA tensors run on the GPU with NCCL; torch CPU tensors run through the
CPU runner with gloo (how CI tests it). Without an initialised process
group (or with one rank) the call is plain flash attention on the shard.
"""

from __future__ import annotations

import math

__all__ = ["ring_flash_attn_func", "zigzag_ring_flash_attn_func", "zigzag_shard", "zigzag_unshard",
           "zigzag_positions", "ring_shard", "ring_positions"]

_NEG_INF = float("-inf")


# ---------------------------------------------------------------------------
# Layouts: contiguous shards and zigzag shards of a full sequence.


def _check_split(fn, seqlen, parts, what):
    if parts <= 0:
        raise ValueError(f"{fn}: world size must be >= 1, got {parts}")
    if seqlen % parts:
        raise ValueError(f"{fn}: the sequence length {seqlen} must be a multiple of {what} "
                         f"({parts})")


def ring_shard(x, rank, world, dim=1):
    """Rank `rank`'s contiguous shard (seqlen / world tokens along `dim`) of a
    full sequence `x`; the layout ring_flash_attn_func takes."""
    _check_split("ring_shard", x.shape[dim], world, "the world size")
    return x.chunk(world, dim)[rank]


def zigzag_shard(x, rank, world, dim=1):
    """Rank `rank`'s zigzag shard of a full sequence `x`: of 2·world equal
    chunks along `dim`, chunk `rank` followed by chunk 2·world − 1 − rank (a
    new tensor). The sequence length must be a multiple of 2·world."""
    if not 0 <= rank < world:
        raise ValueError(f"zigzag_shard: rank {rank} is outside 0..{world - 1}")
    _check_split("zigzag_shard", x.shape[dim], 2 * world, "2 · world size")
    import torch

    chunks = x.chunk(2 * world, dim)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim)


def zigzag_unshard(shards, dim=1):
    """The full sequence from every rank's zigzag shard (a list in rank
    order, e.g. from torch.distributed.all_gather): the inverse of
    zigzag_shard."""
    import torch

    world = len(shards)
    if world == 0:
        raise ValueError("zigzag_unshard: no shards")
    halves = [s.chunk(2, dim) for s in shards]
    order = [halves[r][0] for r in range(world)] + [halves[r][1] for r in reversed(range(world))]
    return torch.cat(order, dim)


def ring_positions(seqlen, rank, world, device=None):
    """The positions (int64, seqlen / world) of rank `rank`'s contiguous
    shard of a sequence of `seqlen` tokens (position ids for rotary
    embeddings)."""
    import torch

    _check_split("ring_positions", seqlen, world, "the world size")
    n = seqlen // world
    return torch.arange(rank * n, (rank + 1) * n, device=device)


def zigzag_positions(seqlen, rank, world, device=None):
    """The positions (int64, seqlen / world) of rank `rank`'s zigzag shard
    of a sequence of `seqlen` tokens: zigzag_shard(arange(seqlen))."""
    import torch

    _check_split("zigzag_positions", seqlen, 2 * world, "2 · world size")
    c = seqlen // (2 * world)
    first = torch.arange(rank * c, (rank + 1) * c, device=device)
    second = torch.arange((2 * world - 1 - rank) * c, (2 * world - rank) * c, device=device)
    return torch.cat([first, second])


# ---------------------------------------------------------------------------
# The ring: send to rank + 1, receive from rank - 1.


class _Ring:
    """Point-to-point exchanges with the ring neighbours of this rank in
    `group` (None: the default group). `world == 1` when torch.distributed
    is not initialised."""

    def __init__(self, group):
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            if group is not None:
                raise RuntimeError("tilec.distributed: a process group was given but "
                                   "torch.distributed is not initialised")
            self.world, self.rank = 1, 0
            return
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        nxt, prev = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        # P2POp takes global ranks.
        self.send_to = dist.get_global_rank(group, nxt) if group is not None else nxt
        self.recv_from = dist.get_global_rank(group, prev) if group is not None else prev

    def start(self, tensors, tag):
        """Sends `tensors` to the next rank and receives as many like them
        from the previous one; returns (received buffers, requests). The
        sent tensors must not change until the requests complete."""
        import torch
        import torch.distributed as dist

        received = [torch.empty_like(t) for t in tensors]
        ops = []
        for i, (t, r) in enumerate(zip(tensors, received)):
            # Distinct tags keep K/V and dK/dV in flight together apart on
            # gloo (NCCL matches by order and ignores tags).
            ops.append(dist.P2POp(dist.isend, t, self.send_to, self.group, tag=2 * tag + i))
            ops.append(dist.P2POp(dist.irecv, r, self.recv_from, self.group, tag=2 * tag + i))
        return received, dist.batch_isend_irecv(ops)

    @staticmethod
    def wait(pending):
        received, requests = pending
        for req in requests:
            req.wait()
        return received


_KV, _DKV = 0, 1


# ---------------------------------------------------------------------------
# Which part of the block from rank `src` rank `rank` attends to.

_SKIP, _DIAG, _FULL, _KEYS0, _QUERIES1 = range(5)


def _block_kind(src, rank, causal, zigzag):
    """_FULL (all queries, all keys), _DIAG (causal within the block),
    _SKIP, _KEYS0 (zigzag: all queries against the first chunk of keys) or
    _QUERIES1 (zigzag: the second chunk of queries against all keys)."""
    if not causal:
        return _FULL
    if src == rank:
        return _DIAG
    if zigzag:
        return _KEYS0 if src < rank else _QUERIES1
    return _FULL if src < rank else _SKIP


# ---------------------------------------------------------------------------
# The lse merge (flash_attn_combine's math, f32, in place).


def _merge(out, lse, block_out, block_lse):
    """out (b, s, h, d) f32 and lse (b, h, s) f32 (−inf: no key seen yet)
    become the attention over their keys and the block's: with
    m = max(lse, lse_b), lse' = m + log(e^(lse − m) + e^(lse_b − m)) and
    out' = e^(lse − lse')·out + e^(lse_b − lse')·out_b, as
    flash_attn_combine. `block_lse` follows the kernels' convention (+inf for
    rows that saw no key); such rows leave out and lse unchanged. Both may
    be views (the zigzag second half); they are written in place."""
    import torch

    block_lse = torch.where(block_lse == float("inf"), _NEG_INF, block_lse)
    m = torch.maximum(lse, block_lse)
    m = torch.where(m == _NEG_INF, 0.0, m)  # both empty: keep −inf, no NaN
    a, b = torch.exp(lse - m), torch.exp(block_lse - m)
    total = a + b
    safe = torch.where(total > 0, total, 1.0)
    # (b, h, s) weights -> (b, s, h, 1)
    wa = (a / safe).transpose(1, 2).unsqueeze(-1)
    wb = (b / safe).transpose(1, 2).unsqueeze(-1)
    out.mul_(wa).add_(block_out.float() * wb)
    lse.copy_(m + torch.log(total))


# ---------------------------------------------------------------------------
# Forward and backward over the ring.


def _attend(q, k, v, scale, causal, softcap, fn):
    from .flash_attn import _flash_attn_forward

    return _flash_attn_forward(q, k, v, scale, causal, -1, -1, softcap, fn=fn)


def _ring_forward(ring, q, k, v, scale, causal, softcap, zigzag, fn):
    """(out in q's dtype, lse (b, h, s) f32) of this rank's queries against
    the whole sequence's keys."""
    import torch

    b, s, h, d = q.shape
    half = s // 2
    k, v = k.contiguous(), v.contiguous()  # sent as they are: torch.distributed wants contiguous
    out = torch.zeros((b, s, h, d), dtype=torch.float32, device=q.device)
    lse = torch.full((b, h, s), _NEG_INF, dtype=torch.float32, device=q.device)
    for step in range(ring.world):
        pending = ring.start([k, v], _KV) if step + 1 < ring.world else None
        kind = _block_kind((ring.rank - step) % ring.world, ring.rank, causal, zigzag)
        if kind in (_FULL, _DIAG):
            bo, bl = _attend(q, k, v, scale, kind == _DIAG, softcap, fn)
            _merge(out, lse, bo, bl)
        elif kind == _KEYS0:
            bo, bl = _attend(q, k[:, :half], v[:, :half], scale, False, softcap, fn)
            _merge(out, lse, bo, bl)
        elif kind == _QUERIES1:
            bo, bl = _attend(q[:, half:], k, v, scale, False, softcap, fn)
            _merge(out[:, half:], lse[..., half:], bo, bl)
        if pending is not None:
            k, v = ring.wait(pending)
    # Rows that saw no key: +inf, the kernels' convention (out is 0 there).
    lse = torch.where(lse == _NEG_INF, float("inf"), lse)
    return out.to(q.dtype), lse


def _block_backward(dout, q, k, v, out, lse, scale, causal, softcap):
    from .flash_bwd import _flash_attn_backward

    extra = {"softcap": softcap} if softcap else {}
    # causal only on the diagonal, where seqlen_q == seqlen_k: top-left. The
    # pair (atomic_dq=False): no atomics and no dq_accum slices per ring step.
    return _flash_attn_backward(dout, q, k, v, out, lse, scale, causal,
                                causal_offset=0 if causal else None, atomic_dq=False, **extra)


def _ring_backward(ring, dout, q, k, v, out, lse, scale, causal, softcap, zigzag):
    """(dq, dk, dv) of this rank's shard. dK/dV of the block in hand
    accumulate (f32) into the buffer that arrived with it and move on with
    it; after the last step one more hop brings each block's home."""
    import torch

    s = q.shape[1]
    half = s // 2
    k, v = k.contiguous(), v.contiguous()
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dkv = None
    dkv_pending = None
    q1, dout1, out1 = q[:, half:], dout[:, half:], out[:, half:]
    lse1 = lse[..., half:].contiguous() if zigzag and causal else None
    for step in range(ring.world):
        pending = ring.start([k, v], _KV) if step + 1 < ring.world else None
        kind = _block_kind((ring.rank - step) % ring.world, ring.rank, causal, zigzag)
        grads = None
        if kind in (_FULL, _DIAG):
            grads = _block_backward(dout, q, k, v, out, lse, scale, kind == _DIAG, softcap)
            dq.add_(grads[0])
        elif kind == _KEYS0:
            grads = _block_backward(dout, q, k[:, :half], v[:, :half], out, lse, scale, False,
                                    softcap)
            dq.add_(grads[0])
        elif kind == _QUERIES1:
            grads = _block_backward(dout1, q1, k, v, out1, lse1, scale, False, softcap)
            dq[:, half:].add_(grads[0])
        if dkv_pending is None:  # step 0: this rank's own block starts its buffers
            dkv = [torch.zeros(k.shape, dtype=torch.float32, device=k.device) for _ in range(2)]
        else:
            dkv = ring.wait(dkv_pending)
        if grads is not None:
            keys = slice(0, half) if kind == _KEYS0 else slice(None)
            dkv[0][:, keys].add_(grads[1])
            dkv[1][:, keys].add_(grads[2])
        if pending is not None:
            k, v = ring.wait(pending)
        if ring.world > 1:
            dkv_pending = ring.start(dkv, _DKV)
    if dkv_pending is not None:
        dkv = ring.wait(dkv_pending)
    return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


def _autograd_function():
    import torch

    class RingFlashAttnFunc(torch.autograd.Function):
        """out, lse of ring attention; backward around the ring (lse is not
        differentiable)."""

        @staticmethod
        def forward(ctx, q, k, v, ring, scale, causal, softcap, zigzag, fn):
            out, lse = _ring_forward(ring, q, k, v, scale, causal, softcap, zigzag, fn)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.args = (ring, scale, causal, softcap, zigzag)
            ctx.mark_non_differentiable(lse)
            return out, lse

        @staticmethod
        def backward(ctx, dout, _dlse):
            q, k, v, out, lse = ctx.saved_tensors
            ring, scale, causal, softcap, zigzag = ctx.args
            dq, dk, dv = _ring_backward(ring, dout.contiguous(), q, k, v, out, lse, scale, causal,
                                        softcap, zigzag)
            return dq, dk, dv, None, None, None, None, None, None

    return RingFlashAttnFunc


_FUNC = None


def _check(fn, q, k, v, softcap, zigzag):
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: '{name}' must be a torch tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{fn}: '{name}' must have rank 4 (batch, seqlen_local, heads, "
                             f"head_dim), got shape {tuple(t.shape)}")
        if t.device != q.device:
            raise ValueError(f"{fn}: '{name}' is on {t.device}, 'q' on {q.device}")
    if k.shape != v.shape:
        raise ValueError(f"{fn}: 'k' {tuple(k.shape)} and 'v' {tuple(v.shape)} differ")
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise ValueError(f"{fn}: 'k' has shape {tuple(k.shape)}, expected ({q.shape[0]}, "
                         f"seqlen_local, kv_heads, {q.shape[3]})")
    if k.shape[1] != q.shape[1]:
        raise ValueError(f"{fn}: 'q' has {q.shape[1]} tokens, 'k' {k.shape[1]}: each rank's q, k "
                         "and v are the same shard of one sequence")
    if zigzag and q.shape[1] % 2:
        raise ValueError(f"{fn}: a zigzag shard is two equal chunks, so seqlen_local must be even, "
                         f"got {q.shape[1]}")
    softcap = float(softcap)
    if math.isnan(softcap) or softcap < 0:
        raise ValueError(f"{fn}: softcap must be >= 0 (0 turns it off), got {softcap}")
    return softcap


def _ring_attention(fn, q, k, v, causal, softmax_scale, group, softcap, return_lse, zigzag,
                    dropout_p):
    import torch

    if dropout_p:
        raise NotImplementedError(f"{fn}: dropout is not implemented (dropout_p={dropout_p!r})")
    softcap = _check(fn, q, k, v, softcap, zigzag)
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    if math.isnan(scale):
        raise ValueError(f"{fn}: softmax_scale is NaN")
    ring = _Ring(group)
    pad = -d % 8
    if pad:
        # tilec's backward takes head dims that are multiples of 8; zero
        # columns change neither scores nor outputs (flash_attn pads too).
        q, k, v = (torch.nn.functional.pad(t, [0, pad]) for t in (q, k, v))
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if needs_grad:
        global _FUNC
        if _FUNC is None:
            _FUNC = _autograd_function()
        out, lse = _FUNC.apply(q, k, v, ring, scale, bool(causal), softcap, zigzag, fn)
    else:
        with torch.no_grad():
            out, lse = _ring_forward(ring, q, k, v, scale, bool(causal), softcap, zigzag, fn)
    if pad:
        out = out[..., :d]
    return (out, lse) if return_lse else out


_EAGER = None


def _eager_ring_attention(*args):
    """_ring_attention, run eagerly under torch.compile (one graph break):
    the ring's point-to-point exchanges and kernel launches stay outside
    the traced graph."""
    global _EAGER
    if _EAGER is None:
        import torch

        _EAGER = torch.compiler.disable(_ring_attention, recursive=True)
    return _EAGER(*args)


def ring_flash_attn_func(q, k, v, causal=False, softmax_scale=None, group=None, softcap=0.0, *,
                         return_lse=False, dropout_p=0.0, deterministic=False):
    """Attention of this rank's queries over the whole sequence, whose K/V
    are spread over the ranks of `group` (None: the default group) in rank
    order: q (batch, seqlen_local, heads, d), k, v (batch, seqlen_local,
    kv_heads, d), heads a multiple of kv_heads; f16 or bf16; the same shapes
    on every rank. causal masks over the whole sequence (rank r's token i is
    position r·seqlen_local + i). softcap > 0 caps the scores as
    flash_attn_func (its gradients need tilec's softcap backward, branch bwdvar;
    without it the backward raises NotImplementedError).
    Differentiable in q, k, v. Returns out (like q) or, with return_lse,
    (out, lse (batch, heads, seqlen_local) f32, +inf for rows that see no
    key). The backward is deterministic (each ring step's block backward is
    the pair, no atomics; `deterministic` is accepted for flash_attn's
    signature)."""
    return _eager_ring_attention("ring_flash_attn_func", q, k, v, causal, softmax_scale, group, softcap,
                           return_lse, False, dropout_p)


def zigzag_ring_flash_attn_func(q, k, v, causal=False, softmax_scale=None, group=None, softcap=0.0,
                                *, return_lse=False, dropout_p=0.0, deterministic=False):
    """ring_flash_attn_func for zigzag shards (zigzag_shard): rank r holds
    chunks r and 2·world − 1 − r of the sequence cut into 2·world equal
    chunks (seqlen_local even), so causal attention costs every rank the
    same. Non-causal attention does not depend on the key order, so it runs
    the plain ring's schedule on the same shards. Output and lse in the
    same zigzag layout (zigzag_unshard reassembles them)."""
    return _eager_ring_attention("zigzag_ring_flash_attn_func", q, k, v, causal, softmax_scale, group,
                           softcap, return_lse, True, dropout_p)
