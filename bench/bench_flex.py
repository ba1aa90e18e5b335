#!/usr/bin/env python3
"""tilec.flex_attention against torch.compile(flex_attention) on the same
score_mod / mask_mod (plain Python, written once below with torch functions:
torch's FlexAttention runs them as they are, tilec traces them into its kernel).

Cases (bf16, head_dim 128, 16k tokens per batch, 16 heads), the issue-15 peers:
  causal          s4k
  sliding window  1024 keys, causal, s8k
  softcap 30      causal, s4k

Columns, each the median of --iters calls timed with CUDA events after warmup:
  tilec       tilec.flex_attention(q, k, v, score_mod=, mask_mod=) (what users call;
              no block mask: the compiler classifies blocks from mask_mod)
  Flex        torch.compile(flex_attention)(q, k, v, score_mod=, block_mask=)
  Flex+mask   the same plus create_block_mask(mask_mod, ...) in every call (what
              a new sequence length costs FlexAttention)
  SDPA        torch SDPA's FLASH backend, dense causal (no score_mod, no window):
              context only
TFLOP/s count the visible scores: 4 * b * h * d * (visible (q, k) pairs).
tilec's output is compared with Flex's; a mismatch (||a - b|| / ||b|| > 2e-2,
bf16) marks the tilec number with '!'. The mask verdict ("split" / "dense")
is printed per case.

    python3 bench/bench_flex.py [--iters 50] [--quick]
    python3 bench/bench_flex.py --prebuild DIR   # on a build host: compile the
        kernels into DIR; then TILEC_ARTIFACTS=DIR on a GPU host without LLVM
"""

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "build" / "python")]

import torch  # noqa: E402

import tilec  # noqa: E402
from tilec import flex  # noqa: E402

TOKENS = 16384
HEADS = 16
HEAD_DIM = 128
WINDOW = 1024
SOFTCAP = 30.0


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)


def softcap(score, b, h, q_idx, kv_idx):
    return SOFTCAP * torch.tanh(score / SOFTCAP)


def visible_causal(s):
    return s * (s + 1) // 2


def visible_window(s):
    w = min(WINDOW, s)
    return w * (w + 1) // 2 + (s - w) * w


CASES = [  # name, seqlen, score_mod, mask_mod, visible pairs
    ("causal", 4096, None, causal, visible_causal(4096)),
    ("window1024", 8192, None, sliding_window, visible_window(8192)),
    ("softcap30", 4096, softcap, causal, visible_causal(4096)),
]


def median_ms(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def prebuild(folder, arch):
    from tilec import compiler

    folder = Path(folder)
    for name, _, score_mod, mask_mod, _ in CASES:
        kernel = flex.specialize(HEAD_DIM, "bfloat16", score_mod, mask_mod)
        results = compiler.compile(kernel.ir, kernel.source_name, arch=arch, num_warps=kernel.num_warps,
                                   num_stages=kernel.num_stages, smem_epilogue=kernel.smem_epilogue,
                                   copy_bounds=kernel.copy_bounds,
                                   extra_sass=["sm_90"] if arch.startswith("sm_8") else [])
        for result in results:
            compiler.write_artifacts(result, folder, extras=False)
            compiler.write_digest(folder, result["name"], kernel.ir, kernel.build_options())
        print(f"{name}: {kernel.name} -> {folder} (mask {kernel.mask_analysis()['mask']})")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="10 iterations")
    parser.add_argument("--prebuild", metavar="DIR", help="compile the kernels into DIR and exit")
    parser.add_argument("--arch", default="sm_80", help="with --prebuild (default sm_80, + sm_90 SASS)")
    args = parser.parse_args()
    if args.prebuild:
        return prebuild(args.prebuild, args.arch)
    if not torch.cuda.is_available():
        print("bench_flex: no CUDA GPU", file=sys.stderr)
        return 1
    if args.quick:
        args.iters, args.warmup = 10, 3
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    compiled = torch.compile(flex_attention)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, bf16 d{HEAD_DIM}, "
          f"{HEADS} heads, {TOKENS} tokens per batch; ms (TFLOP/s over visible scores)")
    print("| case | seqlen | mask | tilec | Flex | Flex+mask | SDPA causal | tilec/Flex |")
    print("|---|---|---|---|---|---|---|---|")
    for name, s, score_mod, mask_mod, visible in CASES:
        b = max(1, TOKENS // s)
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(b, HEADS, s, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=g)
                   for _ in range(3))

        def rate(ms, pairs=visible):
            return f"{ms:.3f} ({4 * b * HEADS * HEAD_DIM * pairs / ms / 1e9:.0f})"

        block_mask = create_block_mask(mask_mod, b, HEADS, s, s, device="cuda")
        ours = lambda: tilec.flex_attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod)  # noqa: E731
        theirs = lambda: compiled(q, k, v, score_mod=score_mod, block_mask=block_mask)  # noqa: E731

        def theirs_with_mask():
            bm = create_block_mask(mask_mod, b, HEADS, s, s, device="cuda")
            return compiled(q, k, v, score_mod=score_mod, block_mask=bm)

        out, ref = ours(), theirs()
        err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
        t_ours = median_ms(ours, args.iters, args.warmup)
        t_flex = median_ms(theirs, args.iters, args.warmup)
        t_flex_mask = median_ms(theirs_with_mask, args.iters, args.warmup)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            t_sdpa = median_ms(lambda: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True), args.iters, args.warmup)
        verdict = flex.mask_analysis(HEAD_DIM, score_mod, mask_mod, "bfloat16")["mask"]
        mark = "!" if err > 2e-2 else ""
        print(f"| {name} | {s} | {verdict} | {rate(t_ours)}{mark} | {rate(t_flex)} | {rate(t_flex_mask)} | "
              f"{rate(t_sdpa, visible_causal(s))} | {t_flex / t_ours:.2f}x |")
        if mark:
            print(f"  tilec differs from Flex: relative error {err:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
