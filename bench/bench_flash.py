#!/usr/bin/env python3
"""Forward-attention throughput: tilec against torch's best.

For every <artifacts>/flash_fwd*.json kernel, at 16k tokens per batch
(batch = 16384 / seqlen, hidden 2048, heads = 2048 / head_dim), times

  tilec   tilec.flash_attn_func(q, k, v, causal=...), called as users call it
  tilec launcher  the artifact's kernel through tilec.runtime, arguments prepared
  FA2     torch SDPA restricted to SDPBackend.FLASH_ATTENTION
  cuDNN   torch SDPA restricted to SDPBackend.CUDNN_ATTENTION
  Flex    torch.compile(flex_attention), causal through a block mask

on the same data: tilec takes the (b, s, h, d) tensors, SDPA and Flex their
(b, h, s, d) transposed views. Each time is the median of --iters runs timed
with CUDA events around each call after warmup, the GPU idle before each
(so host work on a call's critical path counts, as a user sees it);
TFLOP/s = 4·b·h·s²·d / t, halved for causal. A second table times small
calls (<= 64k tokens, SMALL_SHAPES) through the public APIs, where per-call
host overhead shows.
tilec's output is then compared with SDPA's; a mismatch marks the tilec
number with '!'. A backend that cannot run a configuration shows n/a.

    python3 bench/bench_flash.py --artifacts build/artifacts [--quick] [--record]
"""

import argparse
import contextlib
import datetime
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from check_flash import BOUND, FlashKernel, find_flash_manifests, load_runtime

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
import tilec  # noqa: E402  (the public API; needs only the runtime extension here)

TOKENS = 16384
HIDDEN = 2048
SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
QUICK_SEQLENS = [2048, 16384]
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"

COLUMNS = ["dtype", "d", "causal", "seqlen", "tilec", "tilec launcher", "FA2", "cuDNN", "Flex",
           "tilec/FA2", "tilec/cuDNN"]
# Calls of <= 64k tokens (issue 14's): (batch, heads, seqlen, head_dim, dtype, causal).
SMALL_SHAPES = [
    (1, 1, 128, 64, "float16", False),
    (8, 32, 1024, 128, "float16", True),
    (4, 16, 4096, 64, "bfloat16", True),
    (1, 24, 3000, 128, "float16", False),
    (2, 16, 8192, 128, "bfloat16", True),
]
SMALL_COLUMNS = ["call", "tilec ms", "tilec launcher ms", "FA2 ms", "cuDNN ms", "tilec TFLOP/s",
                 "FA2 TFLOP/s", "tilec/FA2", "tilec/cuDNN"]


def median_ms(fn, iters, warmup, context=contextlib.nullcontext, busy=True):
    """Median time of fn() in milliseconds, CUDA events around each call.
    busy=True: the GPU is kept busy while the CPU queues the runs, so each
    event pair brackets GPU work only (the kernel's time). busy=False: the
    GPU waits for each call (synchronized between calls), so the host work
    before the launch is on the critical path, as in a user's call."""
    with context():
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        if busy:
            torch.cuda._sleep(50_000_000)
        for start, end in zip(starts, ends):
            start.record()
            fn()
            end.record()
            if not busy:
                end.synchronize()
        torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def kernel_table(fn, reps=5):
    """{kernel name: mean µs per call} over reps calls, from the profiler's
    device-side events (kernels, memsets, copies)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    per = defaultdict(float)
    for e in prof.events():  # the device-side events: kernels, memsets, copies
        if getattr(e.device_type, "name", "") == "CUDA":
            per[e.name] += e.time_range.elapsed_us()
    return {name: t / reps for name, t in per.items()}


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
           "seqlen": seqlen, "tilec": None}

    def launcher():
        fk(q, k, v, o, lse, scale)

    api_out = []

    def api():
        api_out[:] = [tilec.flash_attn_func(q, k, v, softmax_scale=scale, causal=fk.causal)]

    # Each entry: name, a factory of the callable to time, its context.
    candidates = [("tilec launcher", lambda: launcher, contextlib.nullcontext)]
    if not args.tilec_only:  # a tuning run compares the artifacts' kernels, not the API's choice
        candidates.insert(0, ("tilec", lambda: api, contextlib.nullcontext))
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
            ms = median_ms(make(), args.iters, args.warmup, context, busy=False)
            row[name] = flops / (ms * 1e-3) / 1e12
        except Exception as e:  # a backend that cannot run this shape is "n/a"
            row[name] = None
            reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            if (name, reason) not in failures:
                failures.add((name, reason))
                print(f"  {name} n/a at {fk.label()} seqlen {seqlen}: {reason}")

    # What was timed must compute attention: compare tilec's last outputs.
    row["mismatch"] = False
    expected = sdpa().transpose(1, 2).float()
    for name, out in (("tilec", api_out[0] if api_out else None), ("tilec launcher", o)):
        if row[name] is None or out is None:
            continue
        rel = ((out.float() - expected).norm() / expected.norm()).item()
        if not rel < 2 * BOUND[fk.dtype_name]:
            row["mismatch"] = True
            print(f"  warning: {fk.name} ({name}) at seqlen {seqlen}: differs from SDPA "
                  f"(rel {rel:.2e})")
    for other in ("FA2", "cuDNN"):
        if row["tilec"] and row.get(other):
            row[f"tilec/{other}"] = row["tilec"] / row[other]
    if args.tilec_only:
        row["tilec"] = row["tilec launcher"]
    return row


def caught_launch(call):
    """The prepared launch `call` (a tilec.flash_attn_func call) makes, as a
    callable with its arguments bound: the launcher-only figure, whatever the
    core's key and argument list."""
    from tilec import runtime

    caught = []
    launch_on = runtime.launch_on
    runtime.launch_on = lambda device, launch, args, stream, grid=None: caught.append((launch, args, stream))
    try:
        call()
    finally:
        runtime.launch_on = launch_on
    launch, args, stream = caught[0]
    return lambda: launch(args, stream, None)


def bench_small(args, failures):
    """The small-call table: each SMALL_SHAPES call through the public APIs
    (tilec.flash_attn_func, torch SDPA), GPU idle before each call."""
    lines = ["| " + " | ".join(SMALL_COLUMNS) + " |",
             "|---|" + "---:|" * (len(SMALL_COLUMNS) - 1)]
    for batch, heads, seqlen, d, dtype_name, causal in SMALL_SHAPES:
        dtype = getattr(torch, dtype_name)
        q, k, v = (torch.randn(batch, seqlen, heads, d, device="cuda", dtype=dtype) for _ in range(3))
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        scale = d ** -0.5
        api = lambda: tilec.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal)  # noqa: E731
        launcher = None
        try:
            launcher = caught_launch(api)
        except Exception as e:
            print(f"  tilec n/a for {dtype_name} d{d}: {type(e).__name__}: {e}")
        sdpa = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=scale)  # noqa: E731
        calls = {
            "tilec": (api, contextlib.nullcontext),
            "tilec launcher": (launcher, contextlib.nullcontext),
            "FA2": (sdpa, lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)),
            "cuDNN": (sdpa, lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION)),
        }
        ms = {}
        for name, (fn, context) in calls.items():
            try:
                ms[name] = median_ms(fn, args.iters, args.warmup, context, busy=False)
            except Exception as e:
                ms[name] = None
                print(f"  {name} n/a at b{batch} h{heads} s{seqlen} d{d}: {type(e).__name__}: "
                      f"{str(e).splitlines()[0] if str(e) else ''}")
        flops = 4 * batch * heads * seqlen * seqlen * d / (2 if causal else 1)
        tflops = lambda t: flops / (t * 1e-3) / 1e12 if t else None  # noqa: E731
        cell = lambda x, f: "n/a" if x is None else f.format(x)  # noqa: E731
        ratio = lambda a, b: None if not (ms.get(a) and ms.get(b)) else ms[b] / ms[a]  # noqa: E731
        label = f"b{batch} h{heads} s{seqlen} d{d} {'f16' if dtype_name == 'float16' else 'bf16'}" + (
            " causal" if causal else "")
        cells = [label, cell(ms["tilec"], "{:.3f}"), cell(ms["tilec launcher"], "{:.3f}"),
                 cell(ms["FA2"], "{:.3f}"), cell(ms["cuDNN"], "{:.3f}"),
                 cell(tflops(ms["tilec"]), "{:.0f}"), cell(tflops(ms["FA2"]), "{:.0f}"),
                 cell(ratio("tilec", "FA2"), "{:.2f}"), cell(ratio("tilec", "cuDNN"), "{:.2f}")]
        lines.append("| " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    return "\n".join(lines) + "\n"


def format_row(row):
    cells = []
    for column in COLUMNS:
        value = row.get(column)
        if value is None:
            cells.append("n/a")
        elif column in ("tilec", "tilec launcher", "FA2", "cuDNN", "Flex"):
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
    parser.add_argument("--no-small", action="store_true", help="skip the small-call table")
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
    # flash_attn_func finds its kernels among the same artifacts (no compiler here).
    import os

    os.environ.setdefault("TILEC_ARTIFACTS", os.pathsep.join(
        [str(Path(args.artifacts).resolve()), str(Path(args.artifacts).resolve() / "extra")]))
    widths = [5, 3, 6, 6, 7, 14, 7, 7, 7, 9, 11]
    print("  ".join(c.rjust(w) for c, w in zip(COLUMNS, widths)))
    rows, failures = [], set()
    for fk in kernels:
        for seqlen in seqlens:
            row = bench_config(fk, seqlen, flex, args, failures)
            rows.append(row)
            print("  ".join(c.rjust(w) for c, w in zip(format_row(row), widths)), flush=True)

    table = markdown(rows)
    print("\n" + table, end="")
    if not args.no_small and not args.tilec_only:
        print("\nsmall calls (ms per call, GPU idle before each; public APIs):")
        small = bench_small(args, failures)
        print("\n" + small, end="")
        table += "\nSmall calls (<= 64k tokens), ms per call through the public APIs:\n\n" + small
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
