#!/usr/bin/env python3
"""Correctness of tilec's flash-attention backward on a GPU.

For f16/bf16 x head_dim (64, 128 and, with artifacts/extra, 32 96 160 256) x
causal, on fresh random inputs:

  kernels   tilec.flash_bwd._flash_attn_backward(dout, q, k, v, out, lse)
            from a float64 forward's out and lse (causal bottom-right, as
            flash_attn; seqlen_q != seqlen_k both ways, rows with no key)
  autograd  tilec.flash_attn_func(q, k, v).backward(dout) (the forward's
            own out/lse; causal cases with seqlen_q == seqlen_k)

Each gradient is compared with torch autograd of a float64 naive attention:
‖g − ref‖/‖ref‖ < 2e-3 (f16) or 1.5e-2 (bf16), and no worse than twice the
error of the same naive attention computed in the input dtype (flash_attn's
own test rule) plus 1e-4 · ‖ref‖. Each kernels case also runs twice and
must be bitwise identical (no atomics), and for head_dim <= 128 through the
fused atomic-dQ kernel (atomic_dq=True). GQA: 8 query heads over 2 KV heads.

    python3 bench/check_bwd.py [--quick] [--summary FILE]

Needs torch with CUDA and the prebuilt kernels (scripts/build_artifacts.py
writes flash_bwd_* next to flash_fwd_*; $TILEC_ARTIFACTS or build/artifacts).
Exit status: 0 when every case passes, 1 otherwise.
"""

import argparse
import math
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

BOUND = {torch.float16: 2e-3, torch.bfloat16: 1.5e-2}
# (batch, q heads, kv heads, seqlen_q, seqlen_k)
CASES = [(2, 2, 2, 17, 17), (1, 2, 2, 1000, 1000), (2, 2, 2, 300, 1000), (2, 2, 2, 1000, 300),
         (1, 8, 2, 513, 513), (1, 2, 2, 1, 257), (1, 1, 1, 4096, 4096)]
QUICK_CASES = [(2, 2, 2, 17, 17), (2, 2, 2, 300, 1000), (2, 2, 2, 1000, 300), (1, 8, 2, 513, 513)]


def naive(q, k, v, scale, causal, dtype, causal_offset=None):
    """out and lse of softmax(scale·qkᵀ)·v computed in `dtype` (GQA by
    repeating K/V heads; all-masked rows give 0)."""
    q, k, v = (x.to(dtype) for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    k, v = (x.repeat_interleave(group, dim=2) for x in (k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    sq, sk = s.shape[-2:]
    if causal:
        offset = sk - sq if causal_offset is None else causal_offset
        visible = torch.arange(sk, device=s.device)[None, :] <= torch.arange(sq, device=s.device)[:, None] + offset
        s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s.float(), -1)
    p = torch.nan_to_num(torch.exp(s.float() - lse[..., None])).to(dtype)
    return torch.einsum("bhqk,bkhd->bqhd", p, v), lse


def grads(q, k, v, dout, scale, causal, dtype, causal_offset=None):
    leaves = [x.detach().to(dtype).requires_grad_() for x in (q, k, v)]
    out, lse = naive(*leaves, scale, causal, dtype, causal_offset)
    out.backward(dout.to(dtype))
    return out.detach(), lse.detach(), [x.grad for x in leaves]


def rel(x, ref):
    return ((x.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def check(name, got, ref, same_dtype, dtype):
    """Failure messages for the gradients `got` (dq, dk, dv)."""
    bad = []
    for n, g, r, p in zip(("dq", "dk", "dv"), got, ref, same_dtype):
        if not torch.isfinite(g).all():
            bad.append(f"{n} non-finite")
            continue
        if r.norm() == 0:
            if g.abs().max() > 1e-2:
                bad.append(f"{n} max {g.abs().max():.1e}, reference 0")
            continue
        err, err_pt = rel(g, r), rel(p, r)
        if err > BOUND[dtype] or err > 2 * err_pt + 1e-4:
            bad.append(f"{n} {err:.2e} (bound {BOUND[dtype]:.0e}, same-dtype torch {err_pt:.2e})")
    return bad


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--head-dims", default=None, help="comma-separated (default 64,128 and "
                        "the extra ones when artifacts/extra has flash_bwd kernels)")
    parser.add_argument("--summary", default=None)
    parser.add_argument("--device", default="cuda", help="cuda, or cpu: the same checks on the "
                        "CPU runner (a dry run of this script without a GPU)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: needs a CUDA GPU (or --device cpu)")
    import tilec
    from tilec.flash_bwd import _flash_attn_backward

    art = REPO / "build" / "artifacts"
    head_dims = [64, 128]
    if args.head_dims:
        head_dims = [int(d) for d in args.head_dims.split(",")]
    elif list((art / "extra").glob("flash_bwd_dq*.json")):
        head_dims += [32, 96, 160, 256]
    cases = QUICK_CASES if args.quick else CASES
    lines, failures = [], 0
    torch.manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16):
        for d in head_dims:
            for causal in (False, True):
                worst = 0.0
                for b, hq, hk, sq, sk in cases:
                    dev = args.device
                    q = torch.randn(b, sq, hq, d, device=dev, dtype=dtype)
                    k = torch.randn(b, sk, hk, d, device=dev, dtype=dtype)
                    v = torch.randn(b, sk, hk, d, device=dev, dtype=dtype)
                    dout = torch.randn(b, sq, hq, d, device=dev, dtype=dtype)
                    scale = 1 / math.sqrt(d)
                    out64, lse64, ref = grads(q, k, v, dout, scale, causal, torch.float64)
                    _, _, same = grads(q, k, v, dout, scale, causal, dtype)
                    name = f"{str(dtype)[6:]} d{d} causal={causal} b{b} h{hq}/{hk} {sq}x{sk}"
                    try:
                        got = _flash_attn_backward(dout, q, k, v, out64.to(dtype), lse64.float(),
                                                   scale, causal)
                        again = _flash_attn_backward(dout, q, k, v, out64.to(dtype), lse64.float(),
                                                     scale, causal)
                        if dev == "cuda":
                            torch.cuda.synchronize()
                        bad = check(name, got, ref, same, dtype)
                        if not all(torch.equal(x, y) for x, y in zip(got, again)):
                            bad.append("two runs differ (not deterministic)")
                        worst = max([worst] + [rel(g, r) for g, r in zip(got, ref) if r.norm() > 0])
                        if 32 < d <= 128:  # the fused kernel with atomic dQ (atomic_dq=True)
                            fused = _flash_attn_backward(dout, q, k, v, out64.to(dtype), lse64.float(),
                                                         scale, causal, deterministic=False,
                                                         atomic_dq=True)
                            bad += [f"atomic_dq {m}" for m in check(name, fused, ref, same, dtype)]
                        # The autograd path with the forward's own out/lse
                        # (bottom-right causal, GQA: as the reference).
                        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
                        tilec.flash_attn_func(*leaves, softmax_scale=scale, causal=causal).backward(dout)
                        bad += [f"autograd {m}" for m in
                                check(name, [x.grad for x in leaves], ref, same, dtype)]
                    except Exception as e:  # noqa: BLE001 - reported per case
                        bad = [f"{type(e).__name__}: {e}"]
                    status = "ok" if not bad else "FAIL " + "; ".join(bad)
                    failures += bool(bad)
                    print(f"{name}: {status}", flush=True)
                lines.append(f"{str(dtype)[6:]:9} d{d:<4} causal={causal!s:5} worst rel err {worst:.2e}")
    lines.append(f"{failures} failing case(s)")
    print("\n".join(lines))
    if args.summary:
        Path(args.summary).write_text("\n".join(lines) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
