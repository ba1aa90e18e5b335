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
own test rule) plus 1e-4 · ‖ref‖. Each kernels case runs deterministic=True
(the table's form) twice, which must be bitwise identical; the pair
(atomic_dq=False); and where its dQᵀ fits (atomic_dq_fits) the fused
atomic-dQ kernel (atomic_dq=True), its ordered form (deterministic_form=
"ordered", twice, bitwise identical) and its serial form (deterministic=True,
atomic_dq=True; twice, bitwise identical; launched --serial-splits key
blocks at a time, default 5, so that every case takes several launches and
a partial last one).
GQA: 8 query heads over 2 KV heads.

Then the variants (unless --no-variants), through the public functions'
autograd, each gradient vs float64 autograd of a reference with the same
options and no worse than twice the same-dtype torch attention: sliding
windows (with and without causal, rows with no key), softcap, ALiBi, their
combinations, varlen (empty sequences, GQA), head dims 40/96/256, f16/bf16;
and dropout (CUDA generator): keep rate, forward and gradients vs float64
with the mask decoded from S_dmask's signs, the same generator state giving
the same bits, S_dmask's layout (FA2's, what upstream's tests decode).

    python3 bench/check_bwd.py [--quick] [--summary FILE] [--no-variants | --only-variants]

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
    parser.add_argument("--no-variants", action="store_true", help="skip the variant and dropout checks")
    parser.add_argument("--only-variants", action="store_true", help="only the variant and dropout checks")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu: the same checks on the "
                        "CPU runner (a dry run of this script without a GPU)")
    parser.add_argument("--serial-splits", type=int, default=5,
                        help="key blocks per launch of the serial form's checks (flash_bwd."
                             "serial_schedule's S; 0: the schedule's own)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: needs a CUDA GPU (or --device cpu)")
    import tilec
    from tilec import flash_bwd, strategy
    from tilec.flash_bwd import _flash_attn_backward, atomic_dq_fits

    if args.serial_splits:  # several launches per serial call (n_base > 0, a partial last one)
        flash_bwd.serial_schedule = lambda *a, **k: args.serial_splits
    art = REPO / "build" / "artifacts"
    head_dims = [64, 128]
    if args.head_dims:
        head_dims = [int(d) for d in args.head_dims.split(",")]
    elif list((art / "extra").glob("flash_bwd_dq*.json")):
        head_dims += [32, 96, 160, 256]
    cases = QUICK_CASES if args.quick else CASES
    lines, failures = [], 0
    torch.manual_seed(0)
    for dtype in (() if args.only_variants else (torch.float16, torch.bfloat16)):
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
                        # the fused kernel with atomic dQ (atomic_dq=True), where its dQᵀ
                        # fits: atomics in no order, and deterministic=True's serial launches
                        # and turns (ordered; each bitwise repeatable); the pair (atomic_dq=False)
                        if atomic_dq_fits(strategy.flash_bwd_config(head_dim=d, causal=causal), d):
                            fused = _flash_attn_backward(dout, q, k, v, out64.to(dtype), lse64.float(),
                                                         scale, causal, deterministic=False,
                                                         atomic_dq=True)
                            bad += [f"atomic_dq {m}" for m in check(name, fused, ref, same, dtype)]
                            for form in ("serial", "ordered"):  # deterministic=True's two
                                runs = [_flash_attn_backward(dout, q, k, v, out64.to(dtype),
                                                             lse64.float(), scale, causal,
                                                             deterministic=True, atomic_dq=True,
                                                             deterministic_form=form)
                                        for _ in range(2)]
                                bad += [f"{form} {m}" for m in check(name, runs[0], ref, same, dtype)]
                                if not all(torch.equal(x, y) for x, y in zip(*runs)):
                                    bad.append(f"{form}: two runs differ (not deterministic)")
                        pair = _flash_attn_backward(dout, q, k, v, out64.to(dtype), lse64.float(),
                                                    scale, causal, atomic_dq=False)
                        bad += [f"pair {m}" for m in check(name, pair, ref, same, dtype)]
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
    if not args.no_variants:
        from tilec import compiler

        if args.device == "cuda" and not compiler.can_compile():
            # The variant and dropout kernels are not among the prebuilt artifacts.
            msg = ("variants and dropout: SKIPPED, no compiler on this host (carry the CLI bundle: "
                   "scripts/bundle.sh -> build/bundle, which bench/gpu.sh unpacks)")
            print(msg)
            lines.append(msg)
            failures += 1
        else:
            failures += check_variants(args.device, lines, args.quick)
    lines.append(f"{failures} failing case(s)")
    print("\n".join(lines))
    if args.summary:
        Path(args.summary).write_text("\n".join(lines) + "\n")
    return 1 if failures else 0


# -- the variants and dropout (issue 18) ------------------------------------

def visible(sq, sk, causal, window, device, alibi=False):
    """flash_attn's mask (bottom right; its option handling: a side >= sk is
    unbounded, causal is right = 0, causal dropped for sq == 1 without ALiBi)."""
    left, right = window
    left, right = (-1 if left >= sk else left), (-1 if right >= sk else right)
    if sq == 1 and not alibi:
        causal = False
    if causal:
        right = 0
    i = torch.arange(sq, device=device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=device)[None, :]
    if left < 0 and right < 0:
        return torch.ones(sq, sk, dtype=torch.bool, device=device)
    return (j >= i - (sk if left < 0 else left)) & (j <= i + (sk if right < 0 else right))


def ref_attention(q, k, v, scale, dtype, causal=False, window=(-1, -1), softcap=0.0, slopes=None,
                  keep=None, p=0.0):
    """Differentiable attention of one batch (b, s, h, d) in `dtype` (f32
    softmax unless float64); keep (b, h, sq, sk) and p: dropout's mask."""
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    kk, vv = (x.repeat_interleave(hq // hk, dim=2) for x in (k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        dist = (torch.arange(sq, device=q.device)[:, None] + (sk - sq)
                - torch.arange(sk, device=q.device)[None, :]).abs().to(s.dtype)
        sl = slopes if slopes.dim() == 2 else slopes[None]
        s = s - sl.to(s.dtype)[:, :, None, None] * dist
    vis = visible(sq, sk, causal, window, q.device, slopes is not None)
    has = vis.any(-1)[:, None]
    s = torch.where(vis & has, s, torch.where(has, float("-inf"), 0.0))
    prob = torch.softmax(s if dtype == torch.float64 else s.float(), -1) * has
    if keep is not None:
        prob = prob * keep / (1 - p)
    return torch.einsum("bhqk,bkhd->bqhd", prob.to(dtype), vv)


def ref_grads(q, k, v, dout, dtype, **kw):
    leaves = [x.detach().to(dtype).requires_grad_() for x in (q, k, v)]
    out = ref_attention(*leaves, dtype=dtype, **kw)
    out.backward(dout.to(dtype))
    return out.detach(), [x.grad for x in leaves]


def tilec_grads(fn, q, k, v, dout, *args, **kw):
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    res = fn(*leaves, *args, **kw)
    out = res[0] if isinstance(res, tuple) else res
    out.backward(dout)
    return res, [x.grad for x in leaves]


VARIANTS = [  # (name, flash_attn_func keywords)
    ("window (64, 0)", dict(window_size=(64, 0))),
    ("window (100, 30)", dict(window_size=(100, 30))),
    ("window (5, 5) causal", dict(window_size=(5, 5), causal=True)),
    ("softcap 30 causal", dict(softcap=30.0, causal=True)),
    ("softcap 2", dict(softcap=2.0, softmax_scale=0.5)),
    ("alibi", dict(alibi=True)),
    ("alibi causal", dict(alibi=True, causal=True)),
    ("window+softcap+alibi", dict(window_size=(48, 16), softcap=10.0, alibi=True)),
]


def check_variants(device, lines, quick=False):
    """Prints one line per case; returns the number of failing cases."""
    import tilec

    failures = 0
    torch.manual_seed(1)

    def report(name, bad, worst):
        nonlocal failures
        failures += bool(bad)
        print(f"{name}: {'ok' if not bad else 'FAIL ' + '; '.join(bad)}", flush=True)
        lines.append(f"variant {name:48} {'ok' if not bad else 'FAIL'} worst rel err {worst:.2e}")

    shapes = [(2, 8, 2, 300, 1000), (2, 4, 4, 1000, 300)] if not quick else [(1, 8, 2, 300, 700)]
    for dtype in (torch.float16, torch.bfloat16):
        for d in (64, 128) if not quick else (128,):
            for vname, kw in VARIANTS:
                for b, hq, hk, sq, sk in shapes:
                    kw = dict(kw)
                    slopes = torch.rand(b, hq, device=device) if kw.pop("alibi", False) else None
                    q, k, v, dout = (torch.randn(b, n, h, d, device=device, dtype=dtype)
                                     for n, h in ((sq, hq), (sk, hk), (sk, hk), (sq, hq)))
                    scale = kw.get("softmax_scale", 1 / math.sqrt(d))
                    ref_kw = dict(scale=scale, causal=kw.get("causal", False),
                                  window=kw.get("window_size", (-1, -1)), softcap=kw.get("softcap", 0.0),
                                  slopes=slopes)
                    name = f"{str(dtype)[6:]} d{d} {vname} b{b} h{hq}/{hk} {sq}x{sk}"
                    try:
                        _, got = tilec_grads(tilec.flash_attn_func, q, k, v, dout, alibi_slopes=slopes,
                                             **kw)
                        _, ref = ref_grads(q, k, v, dout, torch.float64, **ref_kw)
                        _, same = ref_grads(q, k, v, dout, dtype, **ref_kw)
                        bad = check(name, got, ref, same, dtype)
                        worst = max(rel(g, r) for g, r in zip(got, ref) if r.norm() > 0)
                    except Exception as e:  # noqa: BLE001
                        bad, worst = [f"{type(e).__name__}: {e}"], float("nan")
                    report(name, bad, worst)
        # Head dims padded or split (40, 96, 256) with a causal window + softcap.
        for d in (40, 96, 256):
            q, k, v, dout = (torch.randn(1, n, 4, d, device=device, dtype=dtype) for n in (257, 513, 513, 257))
            kw = dict(window_size=(128, 0), softcap=20.0)
            name = f"{str(dtype)[6:]} d{d} window (128, 0) softcap 20 257x513"
            try:
                _, got = tilec_grads(tilec.flash_attn_func, q, k, v, dout, **kw)
                rk = dict(scale=1 / math.sqrt(d), window=(128, 0), softcap=20.0)
                _, ref = ref_grads(q, k, v, dout, torch.float64, **rk)
                _, same = ref_grads(q, k, v, dout, dtype, **rk)
                bad = check(name, got, ref, same, dtype)
                worst = max(rel(g, r) for g, r in zip(got, ref) if r.norm() > 0)
            except Exception as e:  # noqa: BLE001
                bad, worst = [f"{type(e).__name__}: {e}"], float("nan")
            report(name, bad, worst)
        # varlen: empty sequences, seqlen_q != seqlen_k per sequence, GQA, causal + ALiBi.
        for kw in (dict(causal=True), dict(window_size=(32, 8), alibi=True)):
            kw = dict(kw)
            lens_q, lens_k = ([300, 0, 1000, 17], [500, 40, 1000, 0]) if not quick else \
                ([120, 0, 200, 17], [500, 40, 200, 0])
            cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device=device)
            cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device=device)
            slopes = torch.rand(4, 8, device=device) if kw.pop("alibi", False) else None
            q, k, v, dout = (torch.randn(n, h, 128, device=device, dtype=dtype)
                             for n, h in ((sum(lens_q), 8), (sum(lens_k), 2), (sum(lens_k), 2), (sum(lens_q), 8)))
            name = f"{str(dtype)[6:]} d128 varlen {kw} lens q {lens_q} k {lens_k}"
            try:
                _, got = tilec_grads(tilec.flash_attn_varlen_func, q, k, v, dout, cu_q, cu_k,
                                     max(lens_q), max(lens_k), alibi_slopes=slopes, **kw)
                bad, worst = [], 0.0
                for i in range(4):
                    q0, q1, k0, k1 = (int(x) for x in (cu_q[i], cu_q[i + 1], cu_k[i], cu_k[i + 1]))
                    if q1 == q0 or k1 == k0:
                        continue
                    sl = lambda t, a, z: t[a:z][None]  # noqa: E731
                    rk = dict(scale=1 / math.sqrt(128), causal=kw.get("causal", False),
                              window=kw.get("window_size", (-1, -1)),
                              slopes=None if slopes is None else slopes[i:i + 1])
                    args = (sl(q, q0, q1), sl(k, k0, k1), sl(v, k0, k1), sl(dout, q0, q1))
                    _, ref = ref_grads(*args, torch.float64, **rk)
                    _, same = ref_grads(*args, dtype, **rk)
                    mine = [got[0][q0:q1][None], got[1][k0:k1][None], got[2][k0:k1][None]]
                    bad += [f"seq {i} {m}" for m in check(name, mine, ref, same, dtype)]
                    worst = max([worst] + [rel(g, r) for g, r in zip(mine, ref) if r.norm() > 0])
                if got[1][500:540].abs().max() != 0:  # sequence 1 has keys but no query
                    bad.append("dk of a sequence without queries is not 0")
            except Exception as e:  # noqa: BLE001
                bad, worst = [f"{type(e).__name__}: {e}"], float("nan")
            report(name, bad, worst)
        check_dropout(device, dtype, report, quick)
    return failures


def check_dropout(device, dtype, report, quick=False):
    """Dropout on `device` with torch's generator (CUDA: the default CUDA
    generator's seed and Philox offset)."""
    import tilec

    p = 0.17
    for kw in (dict(), dict(causal=True), dict(window_size=(64, 16), alibi=True)):
        kw = dict(kw)
        b, hq, hk, sq, sk, d = (2, 6, 2, 513, 700, 128) if not quick else (1, 4, 2, 130, 200, 128)
        slopes = torch.rand(hq, device=device) if kw.pop("alibi", False) else None
        q, k, v, dout = (torch.randn(b, n, h, d, device=device, dtype=dtype)
                         for n, h in ((sq, hq), (sk, hk), (sk, hk), (sq, hq)))
        name = f"{str(dtype)[6:]} d{d} dropout {p} {kw}{' alibi' if slopes is not None else ''} {sq}x{sk}"
        try:
            torch.manual_seed(11)
            (out, _lse, S), got = tilec_grads(tilec.flash_attn_func, q, k, v, dout, dropout_p=p,
                                              return_attn_probs=True, alibi_slopes=slopes, **kw)
            torch.manual_seed(11)
            (out2, _, S2), got2 = tilec_grads(tilec.flash_attn_func, q, k, v, dout, dropout_p=p,
                                              return_attn_probs=True, alibi_slopes=slopes, **kw)
            (out3, _, _), _ = tilec_grads(tilec.flash_attn_func, q, k, v, dout, dropout_p=p,
                                          return_attn_probs=True, alibi_slopes=slopes, **kw)
            keep = ~torch.signbit(S[..., :sq, :sk])
            vis = visible(sq, sk, kw.get("causal", False), kw.get("window_size", (-1, -1)), device)
            rate = keep[..., vis].float().mean().item()
            rk = dict(scale=1 / math.sqrt(d), causal=kw.get("causal", False),
                      window=kw.get("window_size", (-1, -1)), slopes=slopes, keep=keep, p=p)
            out_ref, ref = ref_grads(q, k, v, dout, torch.float64, **rk)
            out_same, same = ref_grads(q, k, v, dout, dtype, **rk)
            bad = check(name, got, ref, same, dtype)
            err, err_pt = rel(out, out_ref), rel(out_same, out_ref)
            if err > BOUND[dtype] or err > 2 * err_pt + 1e-4:
                bad.append(f"out {err:.2e} (same-dtype torch {err_pt:.2e})")
            if abs(rate - (1 - p)) > 0.01:
                bad.append(f"keep rate {rate:.4f}, expected {1 - p}")
            if not (torch.equal(out, out2) and torch.equal(S, S2)
                    and all(torch.equal(x, y) for x, y in zip(got, got2))):
                bad.append("the same generator state gave different results")
            if torch.equal(out, out3):
                bad.append("the next call drew the same mask (generator offset not advanced)")
            worst = max(rel(g, r) for g, r in zip([out] + got, [out_ref] + ref))
        except Exception as e:  # noqa: BLE001
            bad, worst = [f"{type(e).__name__}: {e}"], float("nan")
        report(name, bad, worst)


if __name__ == "__main__":
    sys.exit(main())
