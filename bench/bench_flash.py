#!/usr/bin/env python3
"""Forward-attention throughput: tilec against torch's best.

For every <artifacts>/flash_fwd*.json kernel, at 16k tokens per batch
(batch = 16384 / seqlen, hidden 2048, heads = 2048 / head_dim), times

  tilec   the compiled kernel, through tilec.runtime
  FA2     torch SDPA restricted to SDPBackend.FLASH_ATTENTION
  cuDNN   torch SDPA restricted to SDPBackend.CUDNN_ATTENTION
  Flex    torch.compile(flex_attention), causal through a block mask

on the same data: tilec takes the (b, s, h, d) tensors, SDPA and Flex their
(b, h, s, d) transposed views. Each time is the median of --iters runs timed
with CUDA events after warmup; TFLOP/s = 4·b·h·s²·d / t, halved for causal.
tilec's output is then compared with SDPA's; a mismatch marks the tilec
number with '!'. A backend that cannot run a configuration shows n/a.

    python3 bench/bench_flash.py --artifacts build/artifacts [--quick] [--record]
"""

import argparse
import contextlib
import datetime
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from check_flash import BOUND, FlashKernel, find_flash_manifests, load_runtime

TOKENS = 16384
HIDDEN = 2048
SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
QUICK_SEQLENS = [2048, 16384]
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"

COLUMNS = ["dtype", "d", "causal", "seqlen", "tilec", "FA2", "cuDNN", "Flex",
           "tilec/FA2", "tilec/cuDNN"]


def median_ms(fn, iters, warmup, context=contextlib.nullcontext):
    """Median GPU time of fn() in milliseconds."""
    with context():
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        # Keep the GPU busy while the CPU queues the runs, so that each event
        # pair brackets GPU work only, not launch overhead.
        torch.cuda._sleep(50_000_000)
        for start, end in zip(starts, ends):
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


class Flex:
    """torch.compile(flex_attention); one compiled graph per shape."""

    def __init__(self):
        import torch._dynamo
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        config = torch._dynamo.config
        # Every (dtype, head_dim, seqlen, mask) is a recompile of the same
        # function; the default limit (8) would silently fall back to eager.
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(config, name):
                setattr(config, name, 1000)
        for name in ("accumulated_recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(config, name):
                setattr(config, name, 10000)
        self.create_block_mask = create_block_mask
        self.compiled = torch.compile(flex_attention, dynamic=False)

    def prepare(self, q, k, v, scale, causal):
        """A callable running flex attention on (b, h, s, d) tensors."""
        block_mask = None
        if causal:
            def causal_mask(b, h, q_idx, kv_idx):
                return q_idx >= kv_idx

            block_mask = self.create_block_mask(
                causal_mask, None, None, q.shape[2], k.shape[2], device=q.device
            )
        return lambda: self.compiled(q, k, v, block_mask=block_mask, scale=scale)


def bench_config(fk, seqlen, flex, args, failures):
    """One table row (a dict) for kernel `fk` at `seqlen`."""
    d = fk.head_dim
    batch, heads = TOKENS // seqlen, HIDDEN // d
    q, k, v = (torch.randn(batch, seqlen, heads, d, device="cuda", dtype=fk.dtype)
               for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(batch, heads, seqlen, device="cuda", dtype=torch.float32)
    scale = d ** -0.5
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

    def sdpa():
        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=fk.causal, scale=scale)

    row = {"dtype": fk.dtype_name, "d": d, "causal": "yes" if fk.causal else "no",
           "seqlen": seqlen}

    def tilec():
        fk(q, k, v, o, lse, scale)

    # Each entry: name, a factory of the callable to time, its context.
    candidates = [("tilec", lambda: tilec, contextlib.nullcontext)]
    if not args.tilec_only:
        candidates += [
            ("FA2", lambda: sdpa, lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)),
            ("cuDNN", lambda: sdpa, lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION)),
        ]
    if flex is not None and not args.tilec_only:
        candidates.append(("Flex", lambda: flex.prepare(qt, kt, vt, scale, fk.causal),
                           contextlib.nullcontext))
    flops = 4 * batch * heads * seqlen * seqlen * d / (2 if fk.causal else 1)
    for name, make, context in candidates:
        try:
            ms = median_ms(make(), args.iters, args.warmup, context)
            row[name] = flops / (ms * 1e-3) / 1e12
        except Exception as e:  # a backend that cannot run this shape is "n/a"
            row[name] = None
            reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            if (name, reason) not in failures:
                failures.add((name, reason))
                print(f"  {name} n/a at {fk.label()} seqlen {seqlen}: {reason}")

    # What was timed must compute attention: compare tilec's last output.
    row["mismatch"] = False
    if row["tilec"] is not None:
        expected = sdpa().transpose(1, 2).float()
        rel = ((o.float() - expected).norm() / expected.norm()).item()
        if not rel < 2 * BOUND[fk.dtype_name]:
            row["mismatch"] = True
            print(f"  warning: {fk.name} at seqlen {seqlen}: tilec differs from SDPA "
                  f"(rel {rel:.2e})")
    for other in ("FA2", "cuDNN"):
        if row["tilec"] and row.get(other):
            row[f"tilec/{other}"] = row["tilec"] / row[other]
    return row


def format_row(row):
    cells = []
    for column in COLUMNS:
        value = row.get(column)
        if value is None:
            cells.append("n/a")
        elif column in ("tilec", "FA2", "cuDNN", "Flex"):
            cells.append(f"{value:.1f}" + ("!" if column == "tilec" and row["mismatch"] else ""))
        elif column.startswith("tilec/"):
            cells.append(f"{value:.2f}")
        else:
            cells.append(str(value))
    return cells


def markdown(rows):
    lines = ["| " + " | ".join(COLUMNS) + " |",
             "|" + "|".join("---" if c in ("dtype", "causal") else "---:" for c in COLUMNS) + "|"]
    lines += ["| " + " | ".join(format_row(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def record(table, args):
    """Appends the table, dated, to bench/RESULTS.md."""
    if not RESULTS.exists():
        RESULTS.write_text(
            "# Flash-attention forward benchmarks\n\n"
            "TFLOP/s at 16k tokens per batch (batch = 16384 / seqlen, hidden 2048, "
            "heads = 2048 / d); median of CUDA-event-timed runs after warmup. FA2 and "
            "cuDNN are torch SDPA backends, Flex is torch.compile(flex_attention). "
            "'!' marks a tilec output that differed from SDPA. Written by "
            "`bench/bench_flash.py --record`.\n"
        )
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = (f"\n## {stamp} — {torch.cuda.get_device_name()}, torch {torch.__version__}, "
              f"CUDA {torch.version.cuda}, {args.iters} runs\n\n")
    with RESULTS.open("a") as f:
        f.write(header + table)
    print(f"appended to {RESULTS}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifacts", default="build/artifacts",
                        help="folder of compiled kernels (default: build/artifacts)")
    parser.add_argument("--quick", action="store_true",
                        help=f"seqlens {QUICK_SEQLENS} only")
    parser.add_argument("--filter", help="only kernels whose name contains this")
    parser.add_argument("--iters", type=int, default=50, help="timed runs (default 50)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed runs first (default 10)")
    parser.add_argument("--no-flex", action="store_true",
                        help="skip FlexAttention (its compiles take most of the time)")
    parser.add_argument("--tilec-only", action="store_true",
                        help="time tilec alone (tuning runs compare configurations, not peers)")
    parser.add_argument("--record", action="store_true", help=f"append the table to {RESULTS}")
    parser.add_argument("--summary", help="also write the table to this file")
    parser.add_argument("--plot", help="also draw the table as grouped bars into this PNG "
                                       "(bench/plot_results.py)")
    args = parser.parse_args()
    if args.iters < 50:
        parser.error("--iters must be at least 50")

    paths = find_flash_manifests(args.artifacts, args.filter)
    if not torch.cuda.is_available():
        print("error: torch sees no CUDA device")
        return 2
    runtime = load_runtime()
    kernels = [FlashKernel(runtime, p) for p in paths]
    kernels.sort(key=lambda k: (k.dtype_name, k.head_dim, k.causal))
    flex = None if args.no_flex else Flex()
    seqlens = QUICK_SEQLENS if args.quick else SEQLENS

    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  "
          f"(TFLOP/s; {args.iters} timed runs, median)\n")
    widths = [5, 3, 6, 6, 7, 7, 7, 7, 9, 11]
    print("  ".join(c.rjust(w) for c, w in zip(COLUMNS, widths)))
    rows, failures = [], set()
    for fk in kernels:
        for seqlen in seqlens:
            row = bench_config(fk, seqlen, flex, args, failures)
            rows.append(row)
            print("  ".join(c.rjust(w) for c, w in zip(format_row(row), widths)), flush=True)

    table = markdown(rows)
    print("\n" + table, end="")
    if args.summary:
        Path(args.summary).write_text(table)
    if args.record:
        record(table, args)
    if args.plot:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import plot_results

        plot_results.plot(plot_results.last_table(table), args.plot,
                          f"Attention forward, {torch.cuda.get_device_name()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
