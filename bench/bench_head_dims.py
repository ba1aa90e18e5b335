#!/usr/bin/env python3
"""Forward, backward and forward+backward at any head dim, through the
public API, beside torch SDPA's FLASH (FA2) and CUDNN backends in the same
run. bench_flash.py and bench_bwd.py time the head dims the strategy tables
were tuned at (64, 128); users also run 32, 80, 96, 192, 256, and a table
entry missing there shows up here.

At 16k tokens per batch (batch = 16384 / seqlen, heads = max(1, 2048 //
head_dim)), bf16 by default, for each (head dim, causal, seqlen):

  fwd   tilec.flash_attn_func(q, k, v) vs SDPA forward
  bwd   tilec.flash_bwd._flash_attn_backward with flash_attn's default
        (deterministic=False) vs SDPA's backward on a retained graph
  f+b   flash_attn_func + autograd.grad, as training runs it

Kernels are compiled first, in threads (one child process each through the
CLI bundle), at a tiny shape; every time is then the median of CUDA-event
timed calls (bench_flash.median_ms, busy GPU). Outputs and gradients are
compared with FA2's (relative error < 1e-2, '!' otherwise). TFLOP/s by
flash_attn's convention: forward 4·b·h·s²·d (halved when causal), backward
2.5x, forward+backward 3.5x.

    python3 bench/bench_head_dims.py [--head-dims 32,96,192,256] [--seqlens 4096]
        [--fwd-configs "128,64,4,2,0;128,64,8,2,0"]

--fwd-configs also times the forward under each candidate FlashConfig
(block_m, block_n, num_warps, num_stages, smem_epilogue) put in
strategy.TABLE for the row's (head dim, causal), at --fwd-config-dims (default:
the head dims TABLE has no entry of their own for). A candidate's output must match FA2's too.
"""

import argparse
import concurrent.futures
import sys
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "python"), str(REPO / "bench")]

from bench_bwd import sdpa_runs  # noqa: E402
from bench_flash import median_ms  # noqa: E402

TOKENS = 16384
HIDDEN = 2048
PEERS = (("FA2", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION))
COLUMNS = ["d", "causal", "seqlen", "tilec fwd", "FA2 fwd", "cuDNN fwd", "tilec bwd", "FA2 bwd",
           "cuDNN bwd", "tilec f+b", "FA2 f+b", "cuDNN f+b", "fwd/FA2", "bwd/FA2", "f+b/FA2"]


def rel(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def warm(d, causal, dtype):
    """Compiles (d, causal)'s forward and backward kernels at a tiny shape."""
    import tilec
    q, k, v = (torch.randn(1, 256, 2, d, device="cuda", dtype=dtype, requires_grad=True)
               for _ in range(3))
    o = tilec.flash_attn_func(q, k, v, causal=causal)
    torch.autograd.grad(o, (q, k, v), torch.ones_like(o))


def warm_candidate(cfg, d, causal, dtype):
    """Compiles the forward under candidate config `cfg` (no launch)."""
    import tilec
    from tilec import flash_attn as fa
    from tilec import strategy
    cfg = strategy.with_mask_options(cfg, causal, False, d)
    fa.flash_fwd_kernel().specialize(
        DTYPE=getattr(tilec.language, str(dtype)[6:]), HEAD_DIM=d, CAUSAL=causal, WINDOW=False,
        SOFTCAP=False, ALIBI=False, VARLEN=False, **cfg.constexprs()).launcher(device=0)


def with_table(d, causal, cfg, fn):
    """fn() with cfg as strategy.TABLE's entry for (d, causal), both arch
    families (an sm_90 entry would win on an H200), the kernel caches
    cleared before and after."""
    from tilec import flash_attn as fa
    from tilec import strategy
    keys = [(family, d, causal) for family in ("sm_80", "sm_90")]
    saved = {key: strategy.TABLE.get(key) for key in keys}
    try:
        for key in keys:
            strategy.TABLE[key] = cfg
        fa._KERNELS.clear()
        fa._GPU_LAUNCHES.clear()
        return fn()
    finally:
        for key, old in saved.items():
            strategy.TABLE.pop(key, None)
            if old is not None:
                strategy.TABLE[key] = old
        fa._KERNELS.clear()
        fa._GPU_LAUNCHES.clear()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--head-dims", default="32,64,96,128,192,256")
    p.add_argument("--seqlens", default="4096")
    p.add_argument("--causal", default="0,1")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--no-bwd", action="store_true", help="forward only")
    p.add_argument("--fwd-configs", default="",
                   help="';'-separated forward candidates block_m,block_n,warps,stages,epilogue")
    p.add_argument("--fwd-config-dims", default=None,
                   help="head dims the candidates are timed at (default: those TABLE has no "
                        "entry of their own for)")
    p.add_argument("--summary", default=None, help="also write the markdown table here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("error: needs a CUDA GPU")
    import tilec
    from tilec.flash_bwd import _flash_attn_backward

    dtype = getattr(torch, args.dtype)
    dims = [int(x) for x in args.head_dims.split(",")]
    masks = [bool(int(x)) for x in args.causal.split(",")]
    seqlens = [int(x) for x in args.seqlens.split(",")]
    from tilec import strategy
    candidates = [strategy.FlashConfig(*(int(x) for x in c.split(",")[:4]), bool(int(c.split(",")[4])))
                  for c in args.fwd_configs.split(";") if c.strip()]
    columns = COLUMNS + [f"fwd {c.tag}" for c in candidates]
    cand_dims = ({int(x) for x in args.fwd_config_dims.split(",")} if args.fwd_config_dims else
                 {d for d in dims if not any(("sm_80", d, c) in strategy.TABLE for c in masks)})
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        jobs = {pool.submit(warm, d, c, dtype): (d, c) for d in dims for c in masks}
        jobs.update({pool.submit(warm_candidate, cfg, d, c, dtype): (d, c, cfg.tag)
                     for d in dims for c in masks for cfg in candidates if d in cand_dims})
        for fut in concurrent.futures.as_completed(jobs):
            if fut.exception() is not None:  # compiled again (and reported) below
                print(f"warm-up {jobs[fut]}: "
                      f"{str(fut.exception()).splitlines()[0][:200]}", flush=True)
    print(f"device: {torch.cuda.get_device_name()}, {args.dtype}, 16k tokens; TFLOP/s", flush=True)
    rows = []
    for d in dims:
        for causal in masks:
            for s in seqlens:
                b, h = max(1, TOKENS // s), max(1, HIDDEN // d)
                q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(4))
                scale = d ** -0.5
                fl = 4 * b * h * s * s * d / (2 if causal else 1)
                tf = lambda ms, mult: mult * fl / (ms * 1e-3) / 1e12  # noqa: E731
                row = {"d": d, "causal": "yes" if causal else "no", "seqlen": s, "mark": ""}
                theirs_out = None
                out, lse = tilec.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal,
                                                 return_lse=True)
                row["tilec fwd"] = tf(median_ms(
                    lambda: tilec.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal),
                    args.iters, args.warmup), 1)
                mine = None
                if not args.no_bwd:
                    mine = _flash_attn_backward(dout, q, k, v, out, lse, scale, causal,
                                                deterministic=False)
                    row["tilec bwd"] = tf(median_ms(
                        lambda: _flash_attn_backward(dout, q, k, v, out, lse, scale, causal,
                                                     deterministic=False),
                        args.iters, args.warmup), 2.5)
                    leaves = [x.clone().requires_grad_() for x in (q, k, v)]

                    def f_b():
                        o = tilec.flash_attn_func(*leaves, softmax_scale=scale, causal=causal)
                        torch.autograd.grad(o, leaves, dout)
                    row["tilec f+b"] = tf(median_ms(f_b, args.iters, args.warmup), 3.5)
                for label, backend in PEERS:
                    got = sdpa_runs(backend, q, k, v, dout, scale, causal)
                    if got is None:
                        continue
                    bwd, fwd_bwd, grads, fwd, theirs = got
                    row[f"{label} fwd"] = tf(median_ms(fwd, args.iters, args.warmup), 1)
                    if not args.no_bwd:
                        row[f"{label} bwd"] = tf(median_ms(bwd, args.iters, args.warmup), 2.5)
                        row[f"{label} f+b"] = tf(median_ms(fwd_bwd, args.iters, args.warmup), 3.5)
                    if label == "FA2":
                        theirs_out = theirs
                        worst = rel(out, theirs)
                        if mine is not None:
                            worst = max([worst] + [rel(g, r) for g, r in zip(mine, grads)])
                        if not worst < 1e-2:
                            row["mark"] = "!"
                            print(f"  mismatch d{d} causal={causal} s{s}: rel {worst:.2e}")
                for cfg in candidates:
                    if d not in cand_dims:
                        continue
                    try:
                        got = with_table(d, causal, cfg, lambda: (
                            tilec.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal),
                            median_ms(lambda: tilec.flash_attn_func(q, k, v, softmax_scale=scale,
                                                                    causal=causal),
                                      args.iters, args.warmup)))
                    except Exception as e:  # noqa: BLE001 (a candidate that does not build is n/a)
                        print(f"  {cfg.tag} d{d}: {str(e).splitlines()[0][:160]}")
                        continue
                    row[f"fwd {cfg.tag}"] = tf(got[1], 1)
                    if theirs_out is not None and not rel(got[0], theirs_out) < 1e-2:
                        row["mark"] = "!"
                        print(f"  mismatch {cfg.tag} d{d} causal={causal}")
                for kind in ("fwd", "bwd", "f+b"):
                    if row.get(f"tilec {kind}") and row.get(f"FA2 {kind}"):
                        row[f"{kind}/FA2"] = row[f"tilec {kind}"] / row[f"FA2 {kind}"]
                rows.append(row)
                print("  ".join(f"{c}={cell(row, c)}" for c in columns), flush=True)
                del q, k, v, dout, out, lse
                torch.cuda.empty_cache()
    table = "\n".join(["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
                      + ["| " + " | ".join(cell(r, c) for c in columns) + " |" for r in rows])
    print(table)
    if args.summary:
        Path(args.summary).write_text(table + "\n")
    return 1 if any(r["mark"] for r in rows) else 0


def cell(row, c):
    x = row.get(c)
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:.2f}x" if "/" in c else f"{x:.1f}" + (row["mark"] if c.startswith("tilec") else "")
    return str(x)


if __name__ == "__main__":
    sys.exit(main())
