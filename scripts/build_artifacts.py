#!/usr/bin/env python3
"""Compiles the flagship DSL kernel (kernels/flash_fwd.py) for every variant
-- f16/bf16 x head_dim 64/128 x causal/non-causal -- into <out>/ as the
runtime's artifact set: <kernel>.json (launch manifest), <kernel>.ptx and
<kernel>.cubin (when ptxas exists), plus <kernel>.irhash (a digest of the
IR and the compile options it was built with), which lets
tilec.flash_attn_func on a GPU host without LLVM find these prebuilt
kernels. This folder is what travels to the GPU machine, where bench/gpu.sh
runs bench/check_flash.py over every flash_fwd* manifest.

    scripts/build_artifacts.py [--arch sm_80] [--out build/artifacts]

Needs the _tilec extension: put <build>/python on PYTHONPATH, or let this
script find it in $TILEC_BUILD_DIR (default build/); or a tilec CLI
($TILEC_CLI, scripts/bundle.sh's build/tilec-bundle), which bench/gpu.sh
uses to build these on a GPU host that has none.
"""
import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def import_tilec():
    build = ROOT / os.environ.get("TILEC_BUILD_DIR", "build")
    for path in (ROOT / "python", build / "python"):
        if str(path) not in sys.path:
            sys.path.append(str(path))
    import tilec
    from tilec import compiler

    return tilec, compiler


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="sm_80", help="sm_80 (default) or sm_90a")
    parser.add_argument("--out", default=str(ROOT / "build" / "artifacts"), help="output folder")
    parser.add_argument("--extra-sass", default=None,
                        help="comma-separated GPUs to also assemble the PTX for (default: sm_90 "
                             "when --arch is sm_8x, since the benchmark's H200 cannot run sm_80 "
                             "machine code and would JIT-compile the PTX; else none; '' for none)")
    parser.add_argument("--num-warps", type=int, default=None,
                        help="override the strategy table's warps per program")
    parser.add_argument("--no-tile-passes", action="store_true",
                        help="skip the target-independent tile passes")
    parser.add_argument("--tune", action="store_true",
                        help="also compile every candidate configuration of tilec.strategy "
                             "into <out>/tune/<config>/ for bench/gpu.sh's tuning run")
    parser.add_argument("--no-extra", action="store_true",
                        help="skip <out>/extra/: head_dims 32, 96, 160 and 256 (the strategy "
                             "table's default config), which bench/gpu.sh checks for "
                             "correctness but does not benchmark")
    parser.add_argument("--no-variants", action="store_true",
                        help="skip <out>/variants/: the kernels of bench/flash_variants.py's GPU "
                             "matrix (GQA, windows, softcap, ALiBi, varlen, odd head dims), which "
                             "bench/check_flash.py --variants runs through the flash_attn API")
    parser.add_argument("--configs", default=None,
                        help="with --tune: only these candidate tags, comma-separated "
                             "(e.g. m128n64w4s2e,m128n64w4s2)")
    parser.add_argument("--sample", action="store_true",
                        help="compile only the first kernel of each family (table, extra head dims, "
                             "tuner candidates, backward table, backward extra, flash_attn variants): "
                             "scripts/ptx_digests.py --sample, the CI subset of the PTX comparison")
    args = parser.parse_args(argv)
    args.sampled = set()

    tilec, compiler = import_tilec()
    from tilec import language as tl
    from tilec.flash_attn import flash_fwd_kernel

    from tilec import strategy

    if args.extra_sass is None:
        args.extra_sass = "sm_90" if args.arch.startswith("sm_8") else ""
    args.extra_sass = [a for a in args.extra_sass.split(",") if a and a != args.arch]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # (folder, config or None for the strategy table's choice)
    plans = [(out, None, (64, 128))]
    if not args.no_extra:
        plans.append((out / "extra", None, (32, 96, 160, 256)))
    if args.tune:
        wanted = set(args.configs.split(",")) if args.configs else None
        known = {c.tag for c in strategy.CANDIDATES}
        if wanted and not wanted <= known:
            parser.error(f"--configs: unknown {sorted(wanted - known)}; candidates are {sorted(known)}")
        plans += [(out / "tune" / c.tag, c, (64, 128)) for c in strategy.CANDIDATES
                  if c.valid() and (wanted is None or c.tag in wanted)]
    failed = 0
    for folder, fixed, head_dims in plans:
        folder.mkdir(parents=True, exist_ok=True)
        failed += build_variants(folder, fixed, head_dims, args, tilec, compiler, tl, strategy,
                                 flash_fwd_kernel)
    # The backward's two kernels (kernels/flash_bwd.py) for the same variants,
    # which tilec.flash_bwd finds here by IR digest on a GPU host without LLVM.
    for folder, fixed, head_dims in [p for p in plans if p[1] is None]:
        failed += build_bwd_variants(folder, head_dims, args, tilec, compiler, tl)
    if not args.no_variants:
        failed += build_flash_variants(out / "variants", args, tilec, compiler)
    print(f"artifacts for {args.arch} in {out}" + (f"; {failed} FAILED" if failed else ""))
    return 1 if failed else 0


def compile_into(out, kernel, args, tilec, compiler, digest_options, family, **knobs):
    """Compiles `kernel` with `knobs` (strategy=, or num_warps=, ...) for
    args.arch and writes its artifacts and IR digest (keyed by
    `digest_options`, the strategy's canonical form Strategy.key(), which the
    GPU host's lookup computes) into `out`; returns the results, or None after
    printing the CompilationError. With --sample, only the first kernel of
    each `family` ("fwd", "bwd", "variants") and top folder under --out is
    compiled; the others return []."""
    if args.sample:
        top = Path(out).resolve().relative_to(Path(args.out).resolve()).parts[:1]
        if (family, top) in args.sampled:
            return []
        args.sampled.add((family, top))
    try:
        results = compiler.compile(kernel.ir, kernel.source_name, arch=args.arch,
                                   run_tile_passes=not args.no_tile_passes,
                                   extra_sass=args.extra_sass, **knobs)
    except tilec.CompilationError as e:
        print(f"{kernel.name}: FAILED\n{e}", file=sys.stderr)
        return None
    for result in results:
        compiler.write_artifacts(result, out, extras=False)
        compiler.write_digest(out, result["name"], kernel.ir, digest_options)
    return results


def build_variants(out, fixed, head_dims, args, tilec, compiler, tl, strategy, flash_fwd_kernel):
    """Every (dtype, head_dim, causal) variant into `out`, with configuration
    `fixed` or the strategy table's."""
    failed = 0
    for dtype in (tl.float16, tl.bfloat16):
        for head_dim in head_dims:
            for causal in (False, True):
                config = fixed or strategy.flash_fwd_config(args.arch, dtype.name, head_dim, causal)
                kernel = flash_fwd_kernel().specialize(DTYPE=dtype, HEAD_DIM=head_dim, CAUSAL=causal,
                                                       **config.constexprs())
                start = time.time()
                record = config.strategy.replace(num_warps=args.num_warps)
                results = compile_into(out, kernel, args, tilec, compiler, record.key(), "fwd",
                                       strategy=record)
                if results is None:
                    failed += 1
                    continue
                for result in results:
                    files = ".json .ptx" + (" .cubin" if result["cubin"] else " (no cubin: ptxas not found)")
                    files += "".join(f" .{arch}.cubin" for arch, _, _ in result.get("sass", ()))
                    print(f"{out.name}/{result['name']} [{config.tag}]: {files} "
                          f"({time.time() - start:.1f}s)")
                    for note in result.get("notes", []):
                        print(f"  note: {note}")
    return failed


def build_bwd_variants(out, head_dims, args, tilec, compiler, tl):
    """flash_bwd_dq_* and flash_bwd_dkdv_* for every (dtype, head_dim, causal),
    with the configuration tilec.flash_bwd would launch."""
    from tilec import strategy
    from tilec.flash_bwd import (_dq_accum_rows, atomic_dq_fits, convert_dq_kernel,
                                 flash_bwd_kernels, preprocess_kernel)

    failed = 0
    for dtype in ("float16", "bfloat16"):
        for head_dim in head_dims:
            converts = set()
            for causal in (False, True):
                kernels = list(flash_bwd_kernels(dtype, head_dim, causal)[:2])
                # the fused atomic-dQ kernel (atomic_dq=True), where its dQᵀ fits
                cfg = strategy.flash_bwd_config(head_dim=head_dim, causal=causal)
                if atomic_dq_fits(cfg, head_dim):
                    kernels.append(flash_bwd_kernels(dtype, head_dim, causal, atomic_dq=True)[1])
                    # deterministic=True's serial form, where the table takes it
                    if cfg.fused and cfg.serial_min_seqlen_k is not None:
                        kernels.append(flash_bwd_kernels(dtype, head_dim, causal, atomic_dq=True,
                                                         serial=True)[1])
                    # and its ordered form (turns), where the table takes that
                    if cfg.fused and cfg.ordered_min_seqlen_k is not None:
                        kernels.append(flash_bwd_kernels(dtype, head_dim, causal, atomic_dq=True,
                                                         ordered=True)[1])
                    if not causal:  # and its preprocess (Delta, lse2)
                        kernels.append(preprocess_kernel(dtype, head_dim))
                    # and its dQ conversion (one per BLOCK_M and R)
                    convert = convert_dq_kernel(dtype, head_dim, _dq_accum_rows(cfg, head_dim),
                                                cfg.atomic.block_m)
                    if convert.name not in converts:
                        converts.add(convert.name)
                        kernels.append(convert)
                for kernel in kernels:
                    start = time.time()
                    results = compile_into(out, kernel, args, tilec, compiler, kernel.build_options(),
                                           "bwd", strategy=kernel.strategy)
                    if results is None:
                        failed += 1
                        continue
                    for result in results:
                        import json

                        info = json.loads((out / f"{result['name']}.json").read_text()).get("ptxas_info") or {}
                        print(f"{out.name}/{result['name']}: {time.time() - start:.1f}s"
                              + (f", {info.get('registers')} registers, spills "
                                 f"{info.get('spill_stores')}/{info.get('spill_loads')} bytes"
                                 if info else ""))
    return failed


def build_flash_variants(out, args, tilec, compiler):
    """The kernels bench/flash_variants.py's cases launch, chosen the way
    tilec.flash_attn chooses them (its _select), into `out`."""
    sys.path.insert(0, str(ROOT / "bench"))
    import flash_variants
    from tilec import flash_attn as fa

    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for dtype, head_dim, causal, window, softcap, alibi, varlen in flash_variants.needed_kernels(fa):
        kernel, config = fa._select(dtype, head_dim, causal, window, softcap, alibi, varlen,
                                    arch=args.arch)
        start = time.time()
        results = compile_into(out, kernel, args, tilec, compiler, kernel.build_options(),
                               "variants", strategy=config.strategy)
        if results is None:
            failed += 1
            continue
        for result in results:
            print(f"{out.name}/{result['name']} [{config.tag}] ({time.time() - start:.1f}s)")
    return failed


if __name__ == "__main__":
    sys.exit(main())
