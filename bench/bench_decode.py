#!/usr/bin/env python3
"""Decode attention bandwidth: tilec.flash_attn_with_kvcache against torch's
best, one query token, bf16, head_dim 128 (issue 17's table).

Effective bandwidth = bytes of K and V the call must read (2 · Σ cache
lengths · kv_heads · d · 2 bytes) / time. Per case, in the same run:

  tilec        flash_attn_with_kvcache, num_splits=0 (the heuristic), contiguous cache
  tilec p16    the same cache in pages of 16 (shuffled block table)
  tilec p256   pages of 256
  FA2          torch SDPA restricted to SDPBackend.FLASH_ATTENTION (enable_gqa for GQA)
  cuDNN        torch SDPA restricted to SDPBackend.CUDNN_ATTENTION
  Flex         torch.compile(flex_attention) (enable_gqa), where it runs

tilec's bandwidth columns run with tilec.flash_decode.CHECK_VALUES off (no
read-back of cache_seqlens, so no device sync per call, as a serving loop
would); "host us" is the host time per call so (GPU kept busy), "wall us
(checked)" the wall time per call of back-to-back calls with the check on
(each waits for the previous kernels).
The peers get one length per batch (they have no per-sequence lengths), so
the mixed-length rows (lengths uniform in 1k..32k, paged) have tilec only.
Also: the device copy ceiling (a 2 GiB device-to-device copy, read + write
bytes / time), a num_splits sweep against the heuristic's choice, and the
host time per call (wall clock of back-to-back calls, GPU queue kept busy).
Each time is the median of --iters CUDA-event-timed runs after warmup; a
tilec output that differs from a float32 SDPA reference is marked '!'.

The GPU host needs no LLVM: compile the kernels the cases launch here,

    python3 bench/bench_decode.py --build build/artifacts/decode

carry build/artifacts, then there

    TILEC_ARTIFACTS=build/artifacts/decode python3 bench/bench_decode.py [--quick] [--record]

(or carry the tilec CLI bundle, scripts/bundle.sh, and let it compile there).
"""

import argparse
import contextlib
import datetime
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "RESULTS.md"
for path in (ROOT / "python", ROOT / os.environ.get("TILEC_BUILD_DIR", "build") / "python"):
    if str(path) not in sys.path:
        sys.path.append(str(path))

from bench_flash import median_ms  # noqa: E402  (the GPU kept busy: kernel time, busy=True)

D = 128
HEADS = 32
# (batch, heads_k, kv length or "mixed"), issue 17's table plus mixed lengths.
CASES = [
    (1, 32, 32768), (16, 32, 8192),
    (1, 8, 32768), (1, 8, 131072), (16, 8, 8192), (64, 8, 4096),
    (16, 8, "mixed"), (64, 8, "mixed"),
]
QUICK = [(1, 32, 32768), (1, 8, 32768), (16, 8, 8192), (16, 8, "mixed")]
PAGES = (16, 256)
SWEEP = (1, 2, 4, 8, 16, 32, 64, 128)
H200_SMS = 132


def lengths(batch, kv, seed=0):
    if kv != "mixed":
        return [kv] * batch
    import random

    rng = random.Random(seed)
    return [rng.randint(1024, 32768) for _ in range(batch)]


def kernels_for(batch, heads_k, kv):
    """The (decode kernel, combine kernel) specializations the cases launch:
    every split count of the sweep and the heuristic's, contiguous and paged."""
    from tilec import flash_decode as fd

    lens = lengths(batch, kv)
    cap = max(lens)
    out = []
    for page in (0,) + PAGES:
        capacity = -(-cap // page) * page if page else cap
        for splits in (0,) + SWEEP:
            plan = fd.decode_plan(batch, 1, HEADS, heads_k, D, capacity, page, splits, True, H200_SMS)
            out.append(fd.decode_kernel().specialize(**plan.constexprs(
                "bfloat16", paged=bool(page), per_batch=True)))
    out.append(fd.combine_kernel().specialize(**fd.combine_constexprs("bfloat16", D)))
    return out


def build(folder, arch, extra_sass):
    """Compiles every kernel the cases use into `folder` (manifest, PTX,
    cubin, IR digest) for find_prebuilt on the GPU host."""
    from tilec import compiler

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    seen, failed = set(), 0
    for case in CASES:
        for kernel in kernels_for(*case):
            if kernel.name in seen:
                continue
            seen.add(kernel.name)
            start = time.time()
            try:
                results = compiler.compile(kernel.ir, kernel.source_name, arch=arch,
                                           num_warps=kernel.num_warps, num_stages=kernel.num_stages,
                                           smem_epilogue=kernel.smem_epilogue,
                                           copy_bounds=kernel.copy_bounds, extra_sass=extra_sass)
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"{kernel.name}: FAILED\n{e}", file=sys.stderr)
                failed += 1
                continue
            for result in results:
                compiler.write_artifacts(result, folder, extras=False)
                compiler.write_digest(folder, result["name"], kernel.ir, kernel.build_options())
            print(f"{kernel.name} ({time.time() - start:.1f}s)")
    print(f"{len(seen) - failed} kernels in {folder}" + (f"; {failed} FAILED" if failed else ""))
    return 1 if failed else 0




def host_us(fn, iters=200, busy=True):
    """Wall-clock microseconds per call of back-to-back calls. busy: the GPU
    is kept busy meanwhile, so this is host time alone (for calls that do
    not sync); else a call that syncs also waits for the previous one's
    kernels, and this is the wall time per call of a decode loop."""
    import torch

    fn()
    torch.cuda.synchronize()
    if busy:
        torch.cuda._sleep(200_000_000)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / iters * 1e6


def copy_ceiling():
    """Device copy bandwidth (read + write bytes / time), GB/s."""
    import torch

    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = median_ms(lambda: b.copy_(a), 20, 3)
    return 2 * n / (ms * 1e-3) / 1e9


def paged(k, v, lens, page, gen):
    """The contiguous caches k, v (b, cap, hk, d) as a pool of shuffled pages."""
    import torch

    batch, cap, hk, d = k.shape
    width = -(-cap // page)
    perm = torch.randperm(batch * width, generator=gen).to(k.device)
    table = perm.view(batch, width).to(torch.int32)
    kp = torch.empty(batch * width, page, hk, d, dtype=k.dtype, device=k.device)
    vp = torch.empty_like(kp)
    pad = width * page - cap
    kf = torch.nn.functional.pad(k, (0, 0, 0, 0, 0, pad)).view(batch * width, page, hk, d)
    vf = torch.nn.functional.pad(v, (0, 0, 0, 0, 0, pad)).view(batch * width, page, hk, d)
    kp[perm] = kf
    vp[perm] = vf
    return kp, vp, table


def bench_case(batch, heads_k, kv, args, flex, failures):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import tilec

    gen = torch.Generator().manual_seed(0)
    lens = lengths(batch, kv)
    cap = max(lens)
    dt = torch.bfloat16
    q = torch.randn(batch, 1, HEADS, D, device="cuda", dtype=dt)
    k = torch.randn(batch, cap, heads_k, D, device="cuda", dtype=dt)
    v = torch.randn(batch, cap, heads_k, D, device="cuda", dtype=dt)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    gbytes = 2 * sum(lens) * heads_k * D * 2 / 1e9
    label = f"b{batch} {HEADS}/{heads_k} kv {kv}"
    row = {"case": label}

    def bw(ms):
        return gbytes / (ms * 1e-3)

    # Reference: float32 attention, per sequence (lengths differ).
    ref = torch.empty(batch, 1, HEADS, D, device="cuda")
    for b in range(batch):
        kb = k[b:b + 1, :lens[b]].transpose(1, 2).float()
        vb = v[b:b + 1, :lens[b]].transpose(1, 2).float()
        ref[b:b + 1] = F.scaled_dot_product_attention(q[b:b + 1].transpose(1, 2).float(), kb, vb,
                                                      enable_gqa=True).transpose(1, 2)

    def tilec_call(kc, vc, table=None, splits=0):
        return lambda: tilec.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=table,
                                                     num_splits=splits)

    variants = [("tilec", (k, v, None))]
    for page in PAGES:
        variants.append((f"tilec p{page}", paged(k, v, lens, page, gen)))
    row["mismatch"] = []
    for name, (kc, vc, table) in variants:
        try:
            fn = tilec_call(kc, vc, table)
            row[name] = bw(median_ms(fn, args.iters, args.warmup))
            out = fn().float()
            rel = ((out - ref).norm() / ref.norm()).item()
            if not rel < 2e-2:
                row["mismatch"].append(name)
                print(f"  warning: {name} at {label}: differs from float32 SDPA (rel {rel:.2e})")
        except Exception as e:  # noqa: BLE001
            row[name] = None
            print(f"  {name} failed at {label}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    if kv != "mixed" and not args.tilec_only:
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

        def sdpa():
            return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=heads_k != HEADS)

        peers = [("FA2", sdpa, lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)),
                 ("cuDNN", sdpa, lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION))]
        if flex is not None:
            peers.append(("Flex", lambda: flex(qt, kt, vt, enable_gqa=heads_k != HEADS),
                          contextlib.nullcontext))
        for name, fn, context in peers:
            try:
                row[name] = bw(median_ms(fn, args.iters, args.warmup, context))
            except Exception as e:  # noqa: BLE001
                row[name] = None
                reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                if (name, reason) not in failures:
                    failures.add((name, reason))
                    print(f"  {name} n/a at {label}: {reason}")
    best_peer = max((row.get(p) or 0) for p in ("FA2", "cuDNN", "Flex"))
    row["tilec/best"] = row["tilec"] / best_peer if row.get("tilec") and best_peer else None

    # The split heuristic against fixed counts (contiguous cache).
    from tilec import flash_decode as fd

    plan = fd.decode_plan(batch, 1, HEADS, heads_k, D, cap, 0, 0, True, torch.cuda.get_device_properties(
        0).multi_processor_count)
    row["auto"] = plan.num_splits
    if not args.no_sweep:
        sweep = {}
        for s in SWEEP:
            try:
                sweep[s] = bw(median_ms(tilec_call(k, v, None, s), max(5, args.iters // 4), 2))
            except Exception:  # noqa: BLE001
                pass
        if sweep:
            best = max(sweep, key=sweep.get)
            row["best fixed"] = f"{best}: {sweep[best]:,.0f}"
    try:
        row["host us"] = host_us(tilec_call(k, v))
        fd.CHECK_VALUES = True
        row["wall us (checked)"] = host_us(tilec_call(k, v), busy=False)
    except Exception:  # noqa: BLE001
        row.setdefault("host us", None)
    finally:
        fd.CHECK_VALUES = False
    return row


COLUMNS = ["case", "tilec", "tilec p16", "tilec p256", "FA2", "cuDNN", "Flex", "tilec/best",
           "auto", "best fixed", "host us", "wall us (checked)"]


def fmt(row, column):
    value = row.get(column)
    if value is None:
        return "n/a"
    if column in ("tilec", "tilec p16", "tilec p256", "FA2", "cuDNN", "Flex"):
        return f"{value:,.0f}" + ("!" if column in row["mismatch"] else "")
    if column == "tilec/best":
        return f"{value:.2f}"
    if column.endswith(" us") or column.startswith("wall us"):
        return f"{value:.0f}"
    return str(value)


def markdown(rows, ceiling):
    lines = [f"Effective bandwidth, GB/s (K+V bytes / time); device copy ceiling {ceiling:,.0f} GB/s.",
             "", "| " + " | ".join(COLUMNS) + " |",
             "|" + "|".join("---" if c == "case" else "---:" for c in COLUMNS) + "|"]
    lines += ["| " + " | ".join(fmt(r, c) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", metavar="DIR", help="compile the kernels into DIR and exit (no GPU)")
    parser.add_argument("--arch", default="sm_80")
    parser.add_argument("--extra-sass", default="sm_90")
    parser.add_argument("--quick", action="store_true", help=f"cases {QUICK} only")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no-flex", action="store_true")
    parser.add_argument("--no-sweep", action="store_true", help="skip the num_splits sweep")
    parser.add_argument("--tilec-only", action="store_true")
    parser.add_argument("--record", action="store_true", help="append the table to bench/RESULTS.md")
    args = parser.parse_args()
    if args.build:
        return build(args.build, args.arch, [a for a in args.extra_sass.split(",") if a])

    import torch

    flex = None
    if not args.no_flex:
        try:
            import torch._dynamo
            from torch.nn.attention.flex_attention import flex_attention

            for name in ("recompile_limit", "cache_size_limit"):   # one graph per case
                if hasattr(torch._dynamo.config, name):
                    setattr(torch._dynamo.config, name, 1000)
            flex = torch.compile(flex_attention, dynamic=False)
        except Exception as e:  # noqa: BLE001
            print(f"Flex n/a: {e}")
    from tilec import flash_decode

    flash_decode.CHECK_VALUES = False
    ceiling = copy_ceiling()
    print(f"device copy ceiling: {ceiling:,.0f} GB/s")
    rows, failures = [], set()
    for case in QUICK if args.quick else CASES:
        rows.append(bench_case(*case, args, flex, failures))
        print("  " + " | ".join(fmt(rows[-1], c) for c in COLUMNS), flush=True)
    table = markdown(rows, ceiling)
    print(table)
    if args.record:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        with RESULTS.open("a") as f:
            f.write(f"\n## Decode {stamp} — {torch.cuda.get_device_name()}, torch {torch.__version__}, "
                    f"bf16 d{D}, one query token, {args.iters} runs (bench/bench_decode.py)\n\n" + table)
    bad = [r["case"] for r in rows if r["mismatch"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
