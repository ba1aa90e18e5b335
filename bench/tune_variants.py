#!/usr/bin/env python3
"""Tune strategy.VARIANT_TABLE on a GPU host: time flash_attn_func's variants
(window, softcap, ALiBi; causal and not) at bench_variants' shapes under each
candidate configuration, with the dense kernel of the same shape (the table's
own choice) beside them, so each variant's cost over dense is read off one
table. Kernels compile here through the CLI bundle (TILEC_CLI, as
bench/gpu.sh sets it), all candidates at once in threads (each compile is a
child process), then every call is timed as users call it (median of
CUDA-event-timed calls, bench_flash.median_ms). A wrong result prints '!'.

    python3 bench/tune_variants.py [--head-dim 128] [--iters 30]

Copy the winners into python/tilec/strategy.py's VARIANT_TABLE and record the
run in bench/RESULTS.md.
"""

import argparse
import concurrent.futures
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "python"), str(REPO / "bench")]

from bench_flash import median_ms  # noqa: E402

# (block_m, block_n, num_warps, num_stages, smem_epilogue)
CANDIDATES = [
    (128, 64, 4, 2, False),   # the dense table's d128 kernel
    (128, 64, 8, 2, True),    # VARIANT_TABLE's d128 choice before this tuner (by spills)
    (128, 64, 8, 2, False),
    (128, 128, 8, 2, True),
    (128, 128, 8, 2, False),
    (64, 64, 4, 2, False),
    (128, 32, 4, 2, False),
    (64, 128, 4, 2, False),
]
# More candidates for the window cases only: a 128-row block spans w + 128
# keys (18 blocks of 64 for w = 1024, 1.125x the window's 16); 64 rows span
# w + 64 (17 blocks, 1.0625x) but give each K/V tile half the rows.
WINDOW_CANDIDATES = [
    # tile-skip-warp-blocks' A/B on the table's blocks (windows take
    # warp-blocks=true by default, strategy.with_mask_options): off, with the
    # unmasked body for warps that see every key, without the pruned tests.
    (128, 64, 4, 2, False, "row", "warp-blocks=false"),
    (128, 64, 4, 2, False, "row", "warp-blocks=true"),  # the default (causal windows; others at d > 64)
    (128, 64, 4, 2, False, "row", "warp-blocks=true full-warps=true"),
    (128, 64, 4, 2, False, "row", "warp-blocks=true warp-prune-tests=false"),
    (64, 64, 4, 2, True),
    (64, 64, 4, 1, False),
    (128, 64, 4, 1, False),
    (64, 32, 4, 2, False),
    (64, 64, 2, 2, False),
]

# name -> (batch, seqlen, heads, flash_attn_func options)
CASES = {
    "window1024 causal s8k": (2, 8192, 16, dict(causal=True, window_size=(1024, 0))),
    "window(256,256) s4k": (4, 4096, 16, dict(window_size=(256, 256))),
    "softcap30 causal s4k": (4, 4096, 16, dict(causal=True, softcap=30.0)),
    "softcap30 s4k": (4, 4096, 16, dict(softcap=30.0)),
    "alibi causal s4k": (4, 4096, 16, dict(causal=True, alibi=True)),
    "alibi s4k": (4, 4096, 16, dict(alibi=True)),
}


def visible(s, opts):
    i = torch.arange(s)[:, None]
    j = torch.arange(s)[None, :]
    vis = torch.ones(s, s, dtype=torch.bool)
    left, right = opts.get("window_size", (-1, -1))
    if opts.get("causal"):
        right = 0
    if left >= 0:
        vis &= j >= i - left
    if right >= 0:
        vis &= j <= i + right
    return int(vis.sum())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--only", default=None, help="comma-separated substrings of case names")
    args = parser.parse_args()
    import tilec
    from tilec import flash_attn as fa
    from tilec import strategy

    d = args.head_dim
    dt = torch.bfloat16
    configs = [strategy.FlashConfig(*c) for c in CANDIDATES]
    window_configs = [strategy.FlashConfig(*c) for c in WINDOW_CANDIDATES]

    def configs_for(name):
        return configs + (window_configs if "window" in name else [])
    cases = {n: c for n, c in CASES.items()
             if not args.only or any(s in n for s in args.only.split(","))}

    # Compile every (config, variant) up front, in parallel.
    def flags(opts, seqlen):
        # flash_attn's own option handling picks the kernel (a causal window
        # runs the WINDOW kernel with window_right = 0).
        causal, window, _, _ = fa._mask_mode(bool(opts.get("causal")), *opts.get("window_size", (-1, -1)),
                                             seqlen, seqlen, True if opts.get("alibi") else None)
        return dict(causal=causal, window=window, softcap="softcap" in opts, alibi="alibi" in opts)

    def build(cfg, opts, seqlen):
        f = flags(opts, seqlen)
        cfg = strategy.with_mask_options(cfg, f["causal"], f["window"], d)  # as flash_attn_func's
        kernel = fa.flash_fwd_kernel().specialize(
            DTYPE=tilec.language.bfloat16, HEAD_DIM=d, CAUSAL=f["causal"], WINDOW=f["window"],
            SOFTCAP=f["softcap"], ALIBI=f["alibi"], VARLEN=False, **cfg.constexprs())
        kernel.launcher(device=0)

    jobs = [(cfg, opts, s) for name, (_, s, _, opts) in cases.items() for cfg in configs_for(name)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = {pool.submit(build, cfg, opts, s): (cfg, opts) for cfg, opts, s in jobs}
        failed = set()
        for fut in concurrent.futures.as_completed(futures):
            cfg, opts = futures[fut]
            if fut.exception() is not None:
                failed.add((cfg.tag, str(opts)))
                print(f"compile failed {cfg.tag} {opts}: {str(fut.exception()).splitlines()[0][:200]}")

    print(f"device: {torch.cuda.get_device_name()}  bf16 d{d}; TFLOP/s over visible scores (ms)")
    header = ["case", "dense (table)"] + [c.tag for c in configs]
    if any("window" in n for n in cases):
        header += [c.tag + " (window only)" for c in window_configs]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    saved = dict(strategy.VARIANT_TABLE)
    for name, (b, s, h, opts) in cases.items():
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dt) for _ in range(3))
        call = {kk: vv for kk, vv in opts.items() if kk != "alibi"}
        if opts.get("alibi"):
            call["alibi_slopes"] = torch.rand(h, device="cuda", dtype=torch.float32) * 0.1
        fl = 4 * d * h * b * visible(s, opts)
        dense_opts = {"causal": opts.get("causal", False)}
        cells = [name]
        t = median_ms(lambda: tilec.flash_attn_func(q, k, v, **dense_opts), args.iters, 5)
        cells.append(f"{fl / t / 1e9:.0f} ({t:.3f})")
        ref = None
        for cfg in configs_for(name):
            if (cfg.tag, str(opts)) in failed:
                cells.append("n/a")
                continue
            strategy.VARIANT_TABLE[("sm_80", d)] = cfg
            fa._KERNELS.clear()
            fa._GPU_LAUNCHES.clear()
            fn = lambda: tilec.flash_attn_func(q, k, v, **call)
            out = fn().float()
            if ref is None:
                ref = out
            bad = (out - ref).norm() / ref.norm() > 2e-2 or not torch.isfinite(out).all()
            t = median_ms(fn, args.iters, 5)
            cells.append(f"{fl / t / 1e9:.0f} ({t:.3f})" + (" !" if bad else ""))
        print("| " + " | ".join(cells) + " |", flush=True)
    strategy.VARIANT_TABLE.clear()
    strategy.VARIANT_TABLE.update(saved)
    return 0


if __name__ == "__main__":
    sys.exit(main())
