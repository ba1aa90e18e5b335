#!/usr/bin/env python3
"""A/B of a decode module setting, same process, same tensors, alternating,
bf16 d128, one query token, GQA 32/8 unless said:

  --knob PRIOR_WAIT    programmatic dependent launch (flash_decode.PRIOR_WAIT:
                       the append, decode and combine kernels wait for the
                       kernel before them with tl.wait_prior_kernels and are
                       launched so that they may start while it finishes)
                       against plain stream order (the default knob)
  --knob FUSED_APPEND  one new token stored by the decode kernel itself
                       (flash_decode.FUSED_APPEND) against a kv_append
                       launch first; every case appends a token

Per case and setting, µs per call (and effective GB/s, K+V bytes / time):
  call    median of --iters CUDA-event-timed calls, GPU kept busy (as
          bench_decode: the call's kernels and the gaps between them)
  x10     median of event pairs around 10 back-to-back calls, per call (the
          next call's kernels may start early too; host-bound where the
          call's host time exceeds its GPU time)
  graph   10 calls captured in a CUDA graph, replayed, per call
best of --rounds alternations. "+append" cases append one new token (k, v)
per call first.

    python3 bench/ab_decode.py [--knob PRIOR_WAIT|FUSED_APPEND] [--iters 100] [--rounds 3]
"""

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT / "python", ROOT / os.environ.get("TILEC_BUILD_DIR", "build") / "python", ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.append(str(path))

from bench_decode import case_tensors  # noqa: E402
from bench_flash import median_ms  # noqa: E402

D, HEADS = 128, 32
# (batch, heads_k, kv, page, append): page 0 = contiguous
CASES = [(1, 8, 32768, 0, False), (1, 8, 32768, 16, False), (1, 8, 32768, 0, True), (1, 8, 131072, 0, False),
         (16, 8, 8192, 0, False), (16, 8, "mixed", 16, False), (1, 32, 32768, 0, False), (16, 32, 8192, 0, False)]


def per_call_x10(torch, call, iters):
    ms = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            call()
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end) / 10)
    return statistics.median(ms)


def per_call_graph(torch, call, iters):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(10):
            call()
    return per_call_x10(torch, graph.replay, iters) / 10


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--knob", default="PRIOR_WAIT", choices=("PRIOR_WAIT", "FUSED_APPEND"))
    args = parser.parse_args()
    import torch

    import tilec
    from tilec import flash_decode as fd

    default = getattr(fd, args.knob)
    settings = {"PRIOR_WAIT": [("in order", False), ("programmatic", True)],
                "FUSED_APPEND": [("kv_append", False), ("fused append", True)]}[args.knob]
    cases = CASES if args.knob == "PRIOR_WAIT" else list(dict.fromkeys((b, hk, kv, page, True)
                                                                       for b, hk, kv, page, _ in CASES))
    print("| case | " + " | ".join(f"{s} call / x10 / graph µs" for s, _ in settings) + " | GB/s (call) |")
    print("|---|" + "---:|" * len(settings) + "---:|")
    for batch, hk, kv, page, append in cases:
        q, k, v, table, seqlens, lens = case_tensors(batch, hk, kv, page, extra=1 if append else 0)
        kn = torch.randn(batch, 1, hk, D, device="cuda", dtype=torch.bfloat16) if append else None
        vn = torch.randn_like(kn) if append else None
        gbytes = 2 * sum(lens) * hk * D * 2 / 1e9

        def call():
            # The same slot each call (cache_seqlens is not advanced): the same work every time.
            return tilec.flash_attn_with_kvcache(q, k, v, k=kn, v=vn, cache_seqlens=seqlens, block_table=table)

        best, outs = {}, {}
        for _ in range(args.rounds):
            for label, on in settings:
                setattr(fd, args.knob, on)
                times = (median_ms(call, args.iters, 5), per_call_x10(torch, call, args.iters // 5),
                         per_call_graph(torch, call, args.iters // 5))
                best[label] = tuple(min(a, b) for a, b in zip(best.get(label, times), times))
                outs[label] = call().float()
        setattr(fd, args.knob, default)
        if not torch.equal(*outs.values()):
            print("  warning: the two settings' outputs differ")
        case = f"b{batch} {HEADS}/{hk} kv {kv}" + (f" p{page}" if page else "") + (" +append" if append else "")
        cells = [" / ".join(f"{t * 1e3:.1f}" for t in best[s]) for s, _ in settings]
        rates = " / ".join(f"{gbytes / (best[s][0] * 1e-3):,.0f}" for s, _ in settings)
        print(f"| {case} | " + " | ".join(cells) + f" | {rates} |", flush=True)


if __name__ == "__main__":
    main()
