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

tilec's calls take the O(1) GPU fast path (no read-back of cache_seqlens:
value checks are opt-in on CUDA); "host us" is the host time per call so
(GPU kept busy), "wall us (checked)" the wall time per call of back-to-back
calls with the opt-in check on (CHECK_VALUES = True: each call syncs).
"auto" is num_splits_rule's count (num_splits=0), "fa2" flash_attn 2's rule
for the same call, "sweep" the best fixed count of the sweep and its GB/s
(the whole sweep is printed as it runs).

Knobs for a GPU session: --pages 16,32,64,256 (the paged columns), --tile
BMxBNxSTAGES (the GPU tile, default 64x64x2; e.g. 16x64x2: one warp,
three programs per SM), --sweep-page P (sweep the split count on pages of
P instead of the contiguous cache), --no-sweep.
The peers get one length per batch (they have no per-sequence lengths), so
the mixed-length rows (lengths uniform in 1k..32k, paged) have tilec only.
Also: the device copy ceiling (a 2 GiB device-to-device copy, read + write
bytes / time), a num_splits sweep against the heuristic's choice, and the
host time per call (wall clock of back-to-back calls, GPU queue kept busy).
Each time is the median of --iters CUDA-event-timed runs after warmup; a
tilec output that differs from a float32 SDPA reference is marked '!'.

The GPU host needs no LLVM: compile the kernels the cases launch here,

    python3 bench/bench_decode.py --build build/artifacts/decode [--pages ...] [--tile ...]

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


def kernels_for(batch, heads_k, kv, pages=PAGES):
    """The (decode kernel, combine kernel) specializations the cases launch:
    every split count of the sweep and the rule's, contiguous and paged."""
    from tilec import flash_decode as fd

    lens = lengths(batch, kv)
    cap = max(lens)
    out = []
    for page in (0,) + tuple(pages):
        capacity = -(-cap // page) * page if page else cap
        fa2 = fd.num_splits_heuristic(batch * heads_k, 2 * H200_SMS, max(1, -(-capacity // 128)))
        fused = fd.FUSED_COMBINE
        for splits in (0, fa2) + SWEEP:
            for fd.FUSED_COMBINE in (True, False):        # both sides of the A/B (--fused, ab_fused.py)
                plan = fd.decode_plan(batch, 1, HEADS, heads_k, D, capacity, page, splits, True, H200_SMS,
                                      per_batch=True)
                kernel = fd.decode_kernel().specialize(**plan.constexprs(
                    "bfloat16", paged=bool(page), per_batch=True))
                if kernel.name not in {k.name for k in out}:
                    out.append(kernel)
        fd.FUSED_COMBINE = fused
    out.append(fd.combine_kernel().specialize(**fd.combine_constexprs("bfloat16", D)))
    return out


def build(folder, arch, extra_sass, pages=PAGES):
    """Compiles every kernel the cases use into `folder` (manifest, PTX,
    cubin, IR digest) for find_prebuilt on the GPU host."""
    from tilec import compiler

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    seen, failed = set(), 0
    for case in CASES:
        for kernel in kernels_for(*case, pages=pages):
            if kernel.name in seen:
                continue
            seen.add(kernel.name)
            start = time.time()
            try:
                results = compiler.compile(kernel.ir, kernel.source_name, arch=arch,
                                           num_warps=kernel.num_warps, num_stages=kernel.num_stages,
                                           smem_epilogue=kernel.smem_epilogue,
                                           copy_bounds=kernel.copy_bounds,
                                           lowering_options=kernel.strategy.lowering_options,
                                           extra_sass=extra_sass)
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


def case_tensors(batch, heads_k, kv, page, extra=0, heads=HEADS):
    """One case's CUDA tensors, bf16 d128, seed 0: q (batch, 1, heads, D),
    the cache (contiguous, or shuffled pages of `page`) with room for
    `extra` more keys, its block table or None, cache_seqlens (int32) and
    the lengths as a list."""
    import torch

    gen = torch.Generator().manual_seed(0)
    lens = lengths(batch, kv)
    q = torch.randn(batch, 1, heads, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(batch, max(lens) + extra, heads_k, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    table = None
    if page:
        k, v, table = paged(k, v, lens, page, gen)
    return q, k, v, table, torch.tensor(lens, dtype=torch.int32, device="cuda"), lens


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
    caches = {0: (k, v, None)}
    for page in args.pages:
        caches[page] = paged(k, v, lens, page, gen)
        variants.append((f"tilec p{page}", caches[page]))
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

    # The split rule against fixed counts (the contiguous cache, or pages of --sweep-page).
    from tilec import flash_decode as fd

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    page = args.sweep_page
    capacity = -(-cap // page) * page if page else cap
    plan = fd.decode_plan(batch, 1, HEADS, heads_k, D, capacity, page, 0, True, sms, per_batch=True)
    row["auto"] = plan.num_splits
    row["fa2"] = fd.num_splits_heuristic(batch * heads_k * plan.m_blocks, 2 * sms, max(1, -(-capacity // 128)))
    if not args.no_sweep:
        kc, vc, table = caches.get(page) or paged(k, v, lens, page, gen)
        sweep = {}
        for s in sorted(set(SWEEP) | {row["auto"], row["fa2"]}):
            try:
                sweep[s] = bw(median_ms(tilec_call(kc, vc, table, s), max(5, args.iters // 4), 2))
            except Exception as e:  # noqa: BLE001
                print(f"  sweep {s} failed at {label}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        if sweep:
            best = max(sweep, key=sweep.get)
            row["sweep"] = f"{best}: {sweep[best]:,.0f}"
            print(f"  sweep {label}{f' p{page}' if page else ''} (GB/s by num_splits; rule {row['auto']}, "
                  f"fa2 {row['fa2']}): " + ", ".join(f"{s}: {g:,.0f}" for s, g in sweep.items()))
    try:
        row["host us"] = host_us(tilec_call(k, v))
        fd.CHECK_VALUES = True
        row["wall us (checked)"] = host_us(tilec_call(k, v), busy=False)
    except Exception:  # noqa: BLE001
        row.setdefault("host us", None)
    finally:
        fd.CHECK_VALUES = None
    return row


COLUMNS = ["case", "tilec", "tilec p16", "tilec p256", "FA2", "cuDNN", "Flex", "tilec/best",
           "auto", "fa2", "sweep", "host us", "wall us (checked)"]


def columns(pages):
    return COLUMNS[:2] + [f"tilec p{p}" for p in pages] + COLUMNS[4:]


def fmt(row, column):
    value = row.get(column)
    if value is None:
        return "n/a"
    if column in ("tilec", "FA2", "cuDNN", "Flex") or column.startswith("tilec p"):
        return f"{value:,.0f}" + ("!" if column in row["mismatch"] else "")
    if column == "tilec/best":
        return f"{value:.2f}"
    if column.endswith(" us") or column.startswith("wall us"):
        return f"{value:.0f}"
    return str(value)


def _early_refill():
    from tilec import flash_decode

    return flash_decode.EARLY_REFILL


def markdown(rows, ceiling, pages, tile, paged_tile=None):
    cols = columns(pages)
    lines = [f"Effective bandwidth, GB/s (K+V bytes / time); device copy ceiling {ceiling:,.0f} GB/s; "
             f"GPU tile {'x'.join(map(str, tile))} (BLOCK_M x BLOCK_N x stages)"
             + (" early refill" if _early_refill() else "")
             + (f", {'x'.join(map(str, paged_tile))} for pages of < 64" if paged_tile else "") + ".",
             "", "| " + " | ".join(cols) + " |",
             "|" + "|".join("---" if c == "case" else "---:" for c in cols) + "|"]
    lines += ["| " + " | ".join(fmt(r, c) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main():
    global D  # --head-dim sets the module's head_dim for every case
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
    parser.add_argument("--pages", default=",".join(map(str, PAGES)),
                        help="page sizes of the paged columns (comma-separated; '' for none)")
    parser.add_argument("--sweep-page", type=int, default=0, help="sweep num_splits on pages of this size")
    parser.add_argument("--tile", default=None, help="GPU tile BLOCK_MxBLOCK_NxSTAGES for every case "
                        "(default: GPU_TILE 64x64x2, PAGED_TILE 16x64x2 for pages of < 64)")
    parser.add_argument("--paged-tile", default=None, help="PAGED_TILE (pages of < 64 keys), or 'none'")
    parser.add_argument("--early-refill", type=int, choices=(0, 1), default=None,
                        help="flash_decode.EARLY_REFILL (default: the module's, 1): the K/V ring refills "
                             "before it waits")
    parser.add_argument("--fused", type=int, choices=(0, 1), default=None,
                        help="flash_decode.FUSED_COMBINE (default: the module's, 1): split calls merge "
                             "inside the decode kernel instead of a combine launch")
    parser.add_argument("--head-dim", type=int, default=D,
                        help=f"head_dim of every case (default {D}, issue 17's table)")
    args = parser.parse_args()
    args.pages = tuple(int(p) for p in args.pages.split(",") if p)
    D = args.head_dim
    from tilec import flash_decode

    if args.fused is not None:
        flash_decode.FUSED_COMBINE = bool(args.fused)

    if args.tile:
        bm, bn, st = (int(x) for x in args.tile.lower().split("x"))
        flash_decode.GPU_TILE = (bm, bn, st)
        flash_decode.PAGED_TILE = None
        flash_decode.WIDE_GPU_TILE = None
    if args.paged_tile:
        flash_decode.PAGED_TILE = (None if args.paged_tile == "none" else
                                   tuple(int(x) for x in args.paged_tile.lower().split("x")))
    if args.early_refill is not None:
        flash_decode.EARLY_REFILL = bool(args.early_refill)
    if args.build:
        return build(args.build, args.arch, [a for a in args.extra_sass.split(",") if a],
                     args.pages + ((args.sweep_page,) if args.sweep_page else ()))

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
    ceiling = copy_ceiling()
    print(f"device copy ceiling: {ceiling:,.0f} GB/s")
    rows, failures = [], set()
    for case in QUICK if args.quick else CASES:
        rows.append(bench_case(*case, args, flex, failures))
        print("  " + " | ".join(fmt(rows[-1], c) for c in columns(args.pages)), flush=True)
    table = markdown(rows, ceiling, args.pages, flash_decode.GPU_TILE, flash_decode.PAGED_TILE)
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
