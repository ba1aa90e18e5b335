#!/usr/bin/env python3
"""Host time per call of tilec.flash_attn_with_kvcache (one query token, or a speculative step of 4), by
the CPU-side pieces of the path to the launch:

    fast path          the public call as a serving loop makes it (int32
                       cache_seqlens, contiguous or paged cache): the O(1)
                       path, flash_decode._gpu_fast_path, in C++ where
                       _tilec_fast is built (native: yes/no)
    python fast path   the same with flash_decode.NATIVE_FAST_PATH = False
    general path       the same call through the general path (what every
                       call took before the fast path; checks with no value
                       read-back, CHECK_VALUES's CUDA default)
    launches only      the one or two prepared launches (launch_fast) with
                       the fast path's arguments: cuLaunchKernel plus the
                       C++ argument packing
    beyond launches    fast path − launches only: what the call costs
                       beyond its launches (Python, or C++ with native)

    python3 bench/decode_overhead.py            # on a GPU
    python3 bench/decode_overhead.py --mock     # anywhere: fake libcuda.so.1

--mock is bench/host_overhead.py's: test/runtime/fake_libcuda.c for the
driver, CPU tensors posing as CUDA ones (a little pessimistic: the posing
tensors' device properties are Python). It needs the _tilec compiler.
"""
import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import host_overhead as ho  # noqa: E402

# (batch, heads, heads_k, capacity, page size, new tokens appended, features): issue 17's GQA b1
# and b16 rows, MHA b1, a serving step that appends its token (stored by the decode kernel), the
# same with rotary (f32 tables, NeoX order: a rotary launch first) or with ALiBi slopes and left
# padding (contiguous cache), and a speculative step: 4 query tokens appended (kv_append, then the
# attention; causal).
CASES = [(1, 32, 8, 32768, 0, 0, ""), (1, 32, 8, 32768, 16, 0, ""), (16, 32, 8, 8192, 256, 0, ""),
         (1, 32, 32, 32768, 0, 0, ""), (16, 32, 8, 8192, 16, 1, ""), (16, 32, 8, 8192, 16, 1, "rotary"),
         (16, 32, 8, 8192, 0, 1, "alibi leftpad"), (16, 32, 8, 8192, 16, 4, "")]


def measure(mock, iters):
    import torch

    import tilec
    from tilec import flash_decode as fd, runtime

    rows = []
    for batch, heads, heads_k, cap, page, new, features in CASES:
        make = (lambda *s: ho.mock_cuda(torch.randn(*s).to(torch.bfloat16))) if mock else \
            (lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16))
        seqlen_q = max(new, 1)
        q = make(batch, seqlen_q, heads, 128)
        table = None
        if page:
            width = -(-cap // page)
            k, v = make(batch * width, page, heads_k, 128), make(batch * width, page, heads_k, 128)
            table = torch.randperm(batch * width).view(batch, width).to(torch.int32)
        else:
            k, v = make(batch, cap, heads_k, 128), make(batch, cap, heads_k, 128)
        lens = torch.full((batch,), cap - new, dtype=torch.int32)
        kn = make(batch, new, heads_k, 128) if new else None
        vn = make(batch, new, heads_k, 128) if new else None
        if mock:
            lens = ho.mock_cuda(lens)
            table = ho.mock_cuda(table) if table is not None else None
        else:
            lens = lens.cuda()
            table = table.cuda() if table is not None else None
        extra = {}
        if "rotary" in features:
            angles = torch.rand(cap, 64) * 6.28
            extra.update(rotary_cos=angles.cos(), rotary_sin=angles.sin())
        if "alibi" in features:
            extra["alibi_slopes"] = torch.rand(heads) * 0.3
        if "leftpad" in features:
            extra["cache_leftpad"] = torch.zeros(batch, dtype=torch.int32)
        extra = {name: ho.mock_cuda(t) if mock else t.cuda() for name, t in extra.items()}
        call = lambda: tilec.flash_attn_with_kvcache(q, k, v, k=kn, v=vn, cache_seqlens=lens,  # noqa
                                                     block_table=table, causal=seqlen_q > 1,
                                                     rotary_interleaved=False, **extra)
        sync = None if mock else torch.cuda.synchronize
        call()
        caught = []
        launch_on = runtime.launch_on
        runtime.launch_on = lambda device, launch, args, stream, grid=None: caught.append(
            (launch, args, stream, grid))
        try:
            call()
        finally:
            runtime.launch_on = launch_on

        def launches():
            for launch, args, stream, grid in caught:
                launch(args, stream, grid)

        row = {"case": f"b{batch} {heads}/{heads_k} kv {cap}" + (f" p{page}" if page else "")
               + (f" +{new} appended" if new else "") + (f" sq{seqlen_q}" if seqlen_q > 1 else "")
               + (f" {features}" if features else ""),
               "launches": len(caught)}
        row["fast path"] = ho.host_us(call, iters, sync)
        fd.NATIVE_FAST_PATH = False
        try:
            row["python fast path"] = ho.host_us(call, iters, sync)
        finally:
            fd.NATIVE_FAST_PATH = True
        fast = fd._gpu_fast_path
        fd._gpu_fast_path = lambda *a, **k: None
        try:
            row["general path"] = ho.host_us(call, iters, sync) if not mock else None
        except Exception as e:  # noqa: BLE001 - the mock's CPU tensors cannot take the general path
            print(f"general path n/a ({type(e).__name__}: {e})")
            row["general path"] = None
        finally:
            fd._gpu_fast_path = fast
        row["launches only"] = ho.host_us(launches, iters, sync)
        row["beyond launches"] = row["fast path"] - row["launches only"]
        rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mock", action="store_true", help="no GPU: a fake driver, CPU tensors posing as CUDA")
    parser.add_argument("--iters", type=int, default=3000)
    args = parser.parse_args()
    if args.mock and not os.environ.get("TILEC_HOST_OVERHEAD_CHILD"):
        sys.argv[0] = __file__
        ho.__file__ = __file__           # spawn_mock re-runs this script
        sys.exit(ho.spawn_mock(sys.argv[1:]))
    sys.path.insert(0, str(REPO / "python"))
    if args.mock:
        ho.install_mock()
    where = "fake driver, CPU tensors posing as CUDA (--mock)" if args.mock else "GPU"
    print(f"flash_attn_with_kvcache host time per call, us (median of {args.iters}); bf16 d128, one token; {where}")
    rows = measure(args.mock, args.iters)
    from tilec import flash_decode as fd

    print(f"native (_tilec_fast): {'yes' if fd._native_fast_path() else 'no'}")
    cols = ["case", "launches", "fast path", "python fast path", "general path", "launches only",
            "beyond launches"]
    print("| " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * (len(cols) - 1))
    for r in rows:
        print("| " + " | ".join("n/a" if r[c] is None else f"{r[c]:.1f}" if isinstance(r[c], float) else str(r[c])
                                for c in cols) + " |")


if __name__ == "__main__":
    main()
