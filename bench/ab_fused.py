#!/usr/bin/env python3
"""A/B of the fused combine (flash_decode.FUSED_COMBINE): the decode call
with the splits merged inside the decode kernel (one launch) against decode
+ combine kernel (two), same process, same tensors, alternating, bf16 d128
one query token, GQA 32/8 unless said. Prints per case µs and effective
GB/s (K+V bytes / time) of both and the kernel names each launched (so a
case the rule keeps unfused, or one without splits, shows), plus the
rule's split count. Times: median of --iters CUDA-event-timed calls with
the GPU kept busy (bench_flash.median_ms busy=True: kernels and the gap
between them, not the host), best of --rounds alternations.

    python3 bench/ab_fused.py [--iters 100] [--rounds 3] [--trips 8,16]

--trips: also try flash_decode._FUSED_MAX_TRIPS values (how many dependent
L2 round trips the fused merge may take on the GPU before the call keeps the
combine kernel; the 16-row one-warp tile at pages of 16 needs 16).
"""

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT / "python", ROOT / os.environ.get("TILEC_BUILD_DIR", "build") / "python", ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.append(str(path))

from bench_decode import case_tensors  # noqa: E402
from bench_flash import median_ms  # noqa: E402

D, HEADS = 128, 32
# (batch, heads_k, kv, page): page 0 = contiguous
CASES = [(1, 8, 32768, 0), (1, 8, 32768, 16), (1, 8, 131072, 0), (16, 8, 8192, 0),
         (16, 8, "mixed", 0), (16, 8, "mixed", 16), (1, 32, 32768, 0)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trips", default="", help="extra _FUSED_MAX_TRIPS values, comma-separated")
    args = parser.parse_args()

    import tilec
    from tilec import flash_decode as fd, runtime

    names = []
    real = runtime.launch_on

    def spy(device, launch, a, stream, grid=None):
        kernel = getattr(launch, "__self__", launch)
        names.append(getattr(kernel, "name", None) or str(kernel))
        return real(device, launch, a, stream, grid)

    # (label, FUSED_COMBINE, _FUSED_MAX_TRIPS, _FUSED_MAX_SPLITS): both sides
    # of the A/B at any split count, then the module's rule.
    defaults = (fd.FUSED_COMBINE, fd._FUSED_MAX_TRIPS, fd._FUSED_MAX_SPLITS)
    settings = [("two kernels", False, fd._FUSED_MAX_TRIPS, 1 << 30),
                ("fused", True, fd._FUSED_MAX_TRIPS, 1 << 30)]
    settings += [(f"fused trips<={t}", True, int(t), 1 << 30) for t in args.trips.split(",") if t]
    settings += [("default rule", *defaults)]
    print("| case | " + " | ".join(f"{s[0]} µs (GB/s)" for s in settings) + " | launches |")
    print("|---|" + "---:|" * len(settings) + "---|")
    for batch, hk, kv, page in CASES:
        q, k, v, table, seqlens, lens = case_tensors(batch, hk, kv, page)
        gbytes = 2 * sum(lens) * hk * D * 2 / 1e9

        def call():
            return tilec.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, block_table=table)

        best, launched, outs = {}, {}, {}
        for _ in range(args.rounds):
            for label, fused, trips, max_splits in settings:
                fd.FUSED_COMBINE, fd._FUSED_MAX_TRIPS, fd._FUSED_MAX_SPLITS = fused, trips, max_splits
                ms = median_ms(call, args.iters, 5)
                best[label] = min(best.get(label, ms), ms)
                names.clear()
                runtime.launch_on = spy
                outs[label] = call().float()
                runtime.launch_on = real
                launched[label] = "+".join(n.split("_bf16")[0] + ("[fused]" if "_fused" in n else "")
                                           for n in names)
        base = outs["two kernels"]
        for label, o in outs.items():
            rel = ((o - base).norm() / base.norm()).item()
            if not rel < 1e-2:
                print(f"  warning: {label} differs from two kernels (rel {rel:.2e})")
        case = f"b{batch} {HEADS}/{hk} kv {kv}" + (f" p{page}" if page else "")
        cells = [f"{best[s[0]] * 1e3:.1f} ({gbytes / (best[s[0]] * 1e-3):,.0f})" for s in settings]
        print(f"| {case} | " + " | ".join(cells) + " | " + "; ".join(f"{s[0]}: {launched[s[0]]}" for s in settings)
              + " |", flush=True)
    fd.FUSED_COMBINE, fd._FUSED_MAX_TRIPS, fd._FUSED_MAX_SPLITS = defaults


if __name__ == "__main__":
    main()
