#!/usr/bin/env python3
"""The decode split rule and GPU tile against fixed choices, on the GPU.

For each case of issue 17's table plus mixed cache lengths (uniform in
1k..32k), bf16 d128, one query token, cache_seqlens a tensor (as a server
passes it), the public call's effective bandwidth (K+V bytes / time, GB/s)
at fixed num_splits 1, 2, 4, 8, 16, 32, 64 next to num_splits=0 (the rule),
with the counts the rule would pick at other spread tolerances (1.0 = the
equal-length cost alone, session 7's rule). Per case it prints the sweep,
the best fixed count, the rule's GB/s / best, and a kernel-time breakdown of
the rule's call (torch.profiler: decode, combine, append kernels, us).

    python3 bench/tune_decode.py                          # contiguous, tile 64x64x2
    python3 bench/tune_decode.py --pages 16               # the same on pages of 16
    python3 bench/tune_decode.py --tiles 64x64x2,32x64x2,16x64x2,64x128x1 --cases gqa-b1,mixed
    python3 bench/tune_decode.py --quick                  # 4 cases, splits 1..32

Tiles are GPU_TILE / PAGED_TILE (BLOCK_M x BLOCK_N x stages; python/tilec/flash_decode.py);
the printed tile is the plan's.
The GPU host compiles through the CLI bundle (or prebuilt artifacts).
"""

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT / "bench", ROOT / "python", ROOT / os.environ.get("TILEC_BUILD_DIR", "build") / "python"):
    if str(path) not in sys.path:
        sys.path.append(str(path))

D, HEADS = 128, 32
CASES = {
    "mha-b1": (1, 32, 32768), "mha-b16": (16, 32, 8192),
    "gqa-b1": (1, 8, 32768), "gqa-b1-128k": (1, 8, 131072), "gqa-b16": (16, 8, 8192), "gqa-b64": (64, 8, 4096),
    "mixed-b16": (16, 8, "mixed"), "mixed-b64": (64, 8, "mixed"),
}
GROUPS = {"gqa-b1": ["gqa-b1", "gqa-b1-128k"], "mixed": ["mixed-b16", "mixed-b64"],
          "uniform": ["mha-b1", "mha-b16", "gqa-b1", "gqa-b1-128k", "gqa-b16", "gqa-b64"]}
QUICK = ["mha-b1", "gqa-b1", "gqa-b16", "mixed-b16"]
SPLITS = (1, 2, 4, 8, 16, 32, 64)
TOLERANCES = (1.0, 1.03, 1.05, 1.10)


def kernel_us(fn, calls=10):
    """Mean device time per call of each kernel fn launches (bench_flash's
    kernel_table), named short: decode, combine, append."""
    from bench_flash import kernel_table

    out = {}
    for name, us in kernel_table(fn, calls).items():
        name = name.split("(")[0]
        short = ("decode" if "flash_decode" in name else "combine" if "flash_combine" in name
                 else "append" if "kv_append" in name else name[:24])
        out[short] = out.get(short, 0) + us
    return out


def set_tile(fd, tile):
    """GPU_TILE and PAGED_TILE: `tile` for both, or the module's defaults."""
    if not hasattr(set_tile, "defaults"):
        set_tile.defaults = (fd.GPU_TILE, fd.PAGED_TILE)
    if tile == "default":
        fd.GPU_TILE, fd.PAGED_TILE = set_tile.defaults
    else:
        fd.GPU_TILE = tuple(int(x) for x in tile.lower().split("x"))
        fd.PAGED_TILE = None


def case(name, args, page):
    import torch

    import tilec
    from bench_decode import lengths, paged
    from bench_flash import median_ms
    from tilec import flash_decode as fd

    batch, heads_k, kv = CASES[name]
    lens = lengths(batch, kv)
    cap = max(lens)
    gen = torch.Generator().manual_seed(0)
    dt = torch.bfloat16
    q = torch.randn(batch, 1, HEADS, D, device="cuda", dtype=dt)
    k = torch.randn(batch, cap, heads_k, D, device="cuda", dtype=dt)
    v = torch.randn(batch, cap, heads_k, D, device="cuda", dtype=dt)
    table = None
    if page:
        k, v, table = paged(k, v, lens, page, gen)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    gbytes = 2 * sum(lens) * heads_k * D * 2 / 1e9
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    capacity = -(-cap // page) * page if page else cap

    def call(splits):
        return lambda: tilec.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, block_table=table,
                                                     num_splits=splits)

    picks = {}
    saved = fd._SPREAD_TOLERANCE
    try:
        for tol in TOLERANCES:
            fd._SPREAD_TOLERANCE = tol
            picks[tol] = fd.decode_plan(batch, 1, HEADS, heads_k, D, capacity, page, 0, True, sms,
                                        per_batch=True).num_splits
    finally:
        fd._SPREAD_TOLERANCE = saved
    plan = fd.decode_plan(batch, 1, HEADS, heads_k, D, capacity, page, 0, True, sms, per_batch=True)
    rule, tile = plan.num_splits, (plan.block_m, plan.block_n, plan.num_stages)
    counts = sorted(set(args.splits) | set(picks.values()))
    gbs, per_split = {}, {}
    for s in counts:
        try:
            gbs[s] = gbytes / (median_ms(call(s), args.iters, 3) * 1e-3)
            if args.kernels:
                per_split[s] = kernel_us(call(s), 5)
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"  {name} splits {s}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    auto = gbytes / (median_ms(call(0), args.iters, 3) * 1e-3)
    # Correctness of the rule's call: float32 SDPA per sequence.
    import torch.nn.functional as F

    kc = k if not page else None
    out = call(0)().float()
    err = 0.0
    if kc is not None:
        ref = torch.cat([F.scaled_dot_product_attention(
            q[b:b + 1].transpose(1, 2).float(), kc[b:b + 1, :lens[b]].transpose(1, 2).float(),
            v[b:b + 1, :lens[b]].transpose(1, 2).float(), enable_gqa=True).transpose(1, 2) for b in range(batch)])
        err = ((out - ref).norm() / ref.norm()).item()
    best = max(gbs, key=gbs.get) if gbs else None
    parts = kernel_us(call(0))
    combine = "old" if fd.COMBINE_TILE is None else "x".join(map(str, fd.COMBINE_TILE))
    label = (f"{name} ({batch}, {HEADS}/{heads_k}, {kv}){f' p{page}' if page else ''} tile {'x'.join(map(str, tile))}"
             f" combine {combine}" + (f" chunks {fd.SPLIT_CHUNKS}" if fd.SPLIT_CHUNKS != "length" else "")
             + (" early-refill" if plan.early_refill else ""))
    print(f"{label}: rule {rule} -> {auto:,.0f} GB/s; best fixed {best}: {gbs.get(best, 0):,.0f} "
          f"(rule/best {auto / gbs[best]:.3f})" if best else f"{label}: rule {rule} -> {auto:,.0f}")
    print("    fixed: " + ", ".join(f"{s}: {g:,.0f}" for s, g in gbs.items()))
    print("    rule at tolerance " + ", ".join(f"{t}: {s} ({gbs.get(s, 0):,.0f})" for t, s in picks.items()))
    if per_split:
        print("    decode/combine us by splits: " + ", ".join(
            f"{s}: {k.get('decode', 0):.1f}/{k.get('combine', 0):.1f}" for s, k in per_split.items()))
    print("    kernels us/call: " + ", ".join(f"{n} {us:.1f}" for n, us in parts.items())
          + (f"; rel err vs f32 {err:.1e}" if kc is not None else ""), flush=True)
    torch.cuda.empty_cache()
    return {"case": label, "rule": rule, "auto": auto, "best": best, "best_gbs": gbs.get(best), "gbs": gbs,
            "picks": picks, "kernels": parts, "err": err}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="all", help=f"comma-separated names or groups: {list(CASES)}, "
                        f"{list(GROUPS)}, all")
    parser.add_argument("--tiles", default="default",
                        help="GPU tiles BMxBNxSTAGES, comma-separated, each used for every case (GPU_TILE and "
                             "PAGED_TILE); 'default': the module's (PAGED_TILE for pages of < 64)")
    parser.add_argument("--pages", default="0", help="page sizes, comma-separated (0: contiguous)")
    parser.add_argument("--splits", default=",".join(map(str, SPLITS)))
    parser.add_argument("--chunks", default="length",
                        help="SPLIT_CHUNKS values, comma-separated: length (each sequence cut by its own length), "
                             "capacity (by the capacity: short sequences in fewer programs)")
    parser.add_argument("--early-refill", default="1",
                        help="flash_decode.EARLY_REFILL values, comma-separated: 1 (the K/V ring refills before "
                             "it waits: two blocks in flight through the wait), 0 (session 8's schedule)")
    parser.add_argument("--combines", default="64x32",
                        help="combine tiles SPLITSxD (flash_combine_chunks) or 'old' (flash_combine), comma-separated")
    parser.add_argument("--fused", type=int, choices=(0, 1), default=None,
                        help="flash_decode.FUSED_COMBINE (default: the module's, 1); --combines "
                             "compares combine kernels only with 0")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--kernels", action="store_true",
                        help="also the decode and combine kernel times (torch.profiler) at every split count")
    parser.add_argument("--quick", action="store_true", help=f"cases {QUICK}, splits up to 32")
    parser.add_argument("--dry", action="store_true", help="no GPU: print the rule's picks (132 SMs)")
    args = parser.parse_args()
    names = []
    for c in (QUICK if args.quick else args.cases.split(",")):
        names += list(CASES) if c == "all" else GROUPS.get(c, [c])
    args.splits = tuple(int(s) for s in args.splits.split(",") if s)
    if args.quick:
        args.splits = tuple(s for s in args.splits if s <= 32)
    from tilec import flash_decode as fd

    if args.fused is not None:
        fd.FUSED_COMBINE = bool(args.fused)
    if args.dry:
        from bench_decode import lengths

        for tile in args.tiles.split(","):
            set_tile(fd, tile)
            for page in (int(p) for p in args.pages.split(",")):
                for name in names:
                    batch, heads_k, kv = CASES[name]
                    cap = max(lengths(batch, kv))
                    capacity = -(-cap // page) * page if page else cap
                    picks = {}
                    for tol in TOLERANCES:
                        fd._SPREAD_TOLERANCE = tol
                        picks[tol] = fd.decode_plan(batch, 1, HEADS, heads_k, D, capacity, page, 0, True, 132,
                                                    per_batch=True).num_splits
                    plan = fd.decode_plan(batch, 1, HEADS, heads_k, D, capacity, page, 0, True, 132, per_batch=True)
                    print(f"{name} tile {plan.block_m}x{plan.block_n}x{plan.num_stages} page {page}: "
                          f"splits by tolerance {picks}")
        return 0
    start = time.time()
    rows = []
    for combine, chunks, early in ((c, k, e) for c in args.combines.split(",") for k in args.chunks.split(",")
                                   for e in args.early_refill.split(",")):
        fd.COMBINE_TILE = None if combine == "old" else tuple(int(x) for x in combine.lower().split("x"))
        fd.SPLIT_CHUNKS = chunks
        fd.EARLY_REFILL = early.strip() not in ("0", "false", "False")
        for tile in args.tiles.split(","):
            set_tile(fd, tile)
            for page in (int(p) for p in args.pages.split(",")):
                for name in names:
                    try:
                        rows.append(case(name, args, page))
                    except Exception as e:  # noqa: BLE001
                        print(f"{name} tile {tile} page {page}: FAILED {type(e).__name__}: {e}", flush=True)
    print("\n| case | rule | GB/s | best fixed | GB/s | rule/best | decode us | combine us |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = r["auto"] / r["best_gbs"] if r["best_gbs"] else float("nan")
        print(f"| {r['case']} | {r['rule']} | {r['auto']:,.0f} | {r['best']} | {r['best_gbs'] or 0:,.0f} | "
              f"{ratio:.3f} | {r['kernels'].get('decode', 0):.1f} | {r['kernels'].get('combine', 0):.1f} |")
    print(f"({time.time() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
