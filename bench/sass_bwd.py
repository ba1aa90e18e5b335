#!/usr/bin/env python3
"""Per-loop SASS instruction mix of the backward kernels, on the CPU (no GPU
needed): compiles flash_bwd's fused kernel (dK/dV + atomic dQ) or the pair's
dq / dkdv kernel under a config, assembles it with ptxas for an arch
(default sm_90, what the H200 runs from the sm_80 PTX), disassembles with
cuobjdump and prints ptxas's register/spill line and, for each loop, its
length and the counts that matter for the backward: HMMA (vs the minimum the
matmuls need), LDSM/LDS/STS, RED/ATOM (and their widths), BAR, F2F/F2FP,
MUFU.EX2, LDL/STL.

    python3 bench/sass_bwd.py fused --config 32,64,4,2,0 --warps-n 2
    python3 bench/sass_bwd.py dkdv --config 64,64,4,2,0 --warps-n 2
    python3 bench/sass_bwd.py dq --config 64,64,4,2,0 [--causal] [--dump DIR]
    python3 bench/sass_bwd.py fused ... --serial              (deterministic=True's serial form)
    python3 bench/sass_bwd.py fused ... --ordered             (its form in turns, ORDERED_DQ)
    python3 bench/sass_bwd.py fused --config 64,64,8,1,0 --warps-n 2 --dq-warps-n 2 \
        --head-dim 256 --split 2 --ptx-arch sm_90a --lowering-options region-barriers=true

--split N is the kernel's SPLIT_D (FlashBwdConfig.atomic_split / dkdv_split /
dq_split: N programs per block, each 1/N of the head_dim columns). The PTX
is sm_80's by default (the prebuilt artifacts': 163 KB of shared memory per
block); --ptx-arch sm_90a compiles what the H200 runs in process (227 KB)
and assembles it for sm_90a. The first line also gives the kernel's shared
memory (its manifest's shared_bytes).
"""
import argparse
import re
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "python"), str(REPO / "test" / "python"),
                str(REPO / "test" / "Target" / "Inputs")]

OPS = ["HMMA", "LDSM", "LDS", "STS", "LDG", "LDGSTS", "REDG", "RED", "ATOM", "BAR", "F2FP", "F2F",
       "MUFU.EX2", "FMUL", "FFMA", "FADD", "FSEL", "LDL", "STL", "BRA"]


def op_of(text):
    t = re.sub(r"^@!?U?P\w+\s+", "", text)
    return t.split()[0] if t else ""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kernel", choices=("fused", "dkdv", "dq"))
    p.add_argument("--config", default="32,64,4,2,0",
                   help="block_m,block_n,warps,stages,smem_epilogue (FlashConfig)")
    p.add_argument("--warps-n", type=int, default=1)
    p.add_argument("--dq-warps-n", type=int, default=1, help="fused: the dQᵀ dot's warps_n")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--arch", default=None,
                   help="ptxas arch (default sm_90; sm_90a with --ptx-arch sm_90a)")
    p.add_argument("--ptx-arch", default="sm_80",
                   help="the PTX's arch: sm_80 (prebuilt artifacts, default) or sm_90a (in process)")
    p.add_argument("--split", type=int, default=1, help="SPLIT_D (head_dim split over programs)")
    p.add_argument("--dump", default=None, help="folder to write the .ptx and .sass into")
    p.add_argument("--lowering-options", default="",
                   help="tile-to-nvvm options of the dkdv/fused kernel (e.g. region-barriers=true)")
    p.add_argument("--all-ops", action="store_true", help="print every opcode's count per loop")
    p.add_argument("--serial", action="store_true",
                   help="fused: deterministic=True's serial form (SERIAL_DQ)")
    p.add_argument("--ordered", action="store_true",
                   help="fused: deterministic=True's form in turns (ORDERED_DQ)")
    args = p.parse_args(argv)
    if args.arch is None:
        args.arch = "sm_90a" if args.ptx_arch == "sm_90a" else "sm_90"
    from dataclasses import replace

    from tilec import strategy
    from tilec import flash_bwd as fb
    import loop_spills
    from sass_variants import assemble

    c = [int(x) for x in args.config.split(",")]
    fc = strategy.FlashConfig(c[0], c[1], c[2], c[3], bool(c[4]),
                              lowering_options=args.lowering_options)
    base = strategy.flash_bwd_config(head_dim=args.head_dim, causal=args.causal)
    if args.kernel == "fused":
        cfg = replace(base, atomic=fc, atomic_warps_n=args.warps_n,
                      atomic_dq_warps_n=args.dq_warps_n, atomic_split=args.split)
    elif args.kernel == "dkdv":
        cfg = replace(base, dkdv=fc, dkdv_warps_n=args.warps_n, dkdv_split=args.split)
    else:
        cfg = replace(base, dq=fc, dq_split=args.split)
    saved = dict(strategy.BWD_TABLE)
    strategy.BWD_TABLE[("sm_80", args.head_dim, args.causal)] = cfg
    try:
        kdq, kdkdv, _ = fb.flash_bwd_kernels("bfloat16", args.head_dim, args.causal,
                                             atomic_dq=args.kernel == "fused",
                                             serial=args.serial, ordered=args.ordered)
    finally:
        strategy.BWD_TABLE.clear()
        strategy.BWD_TABLE.update(saved)
    kernel = kdq if args.kernel == "dq" else kdkdv
    art = kernel.compile(args.ptx_arch)
    ptx_text = art.ptx
    info, sass = assemble(ptx_text, args.arch)
    tag = (f"{fc.tag}-wn{args.warps_n}" + (f"-dqwn{args.dq_warps_n}" if args.dq_warps_n != 1 else "")
           + (f"-split{args.split}" if args.split != 1 else ""))
    smem = art.manifest.get("shared_bytes", 0)
    print(f"{kernel.name} {tag} {args.ptx_arch} PTX -> {args.arch}: shared {smem} bytes "
          f"({smem / 1024:.0f} KB) | " + " | ".join(info))
    ptx_red = Counter(m.group(0) for m in re.finditer(r"\bred\.[\w.]+", ptx_text))
    print(f"PTX: {len(ptx_text.splitlines())} lines; " + ", ".join(f"{k} {v}" for k, v in ptx_red.items()))
    if args.dump:
        d = Path(args.dump)
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{kernel.name}.{tag}.ptx").write_text(ptx_text)
        (d / f"{kernel.name}.{tag}.sass").write_text(sass)
    insts = loop_spills.instructions(sass.splitlines())
    print(f"total SASS instructions {len(insts)}")
    for lo, hi in loop_spills.loop_ranges(insts):
        body = [t for a, t in insts if lo <= a <= hi]
        ops = Counter(op_of(t) for t in body)
        counts = {op: sum(n for o, n in ops.items() if o == op or o.startswith(op + "."))
                  for op in OPS}
        print(f"loop 0x{lo:x}-0x{hi:x}: {len(body)} insts  "
              + " ".join(f"{op}={n}" for op, n in counts.items() if n))
        widths = {o: n for o, n in ops.items() if o.startswith(("RED", "ATOM", "BAR", "STS", "LDS", "LDSM"))}
        print("   " + " ".join(f"{o}={n}" for o, n in sorted(widths.items())))
        if args.all_ops:
            print("   " + " ".join(f"{o}={n}" for o, n in ops.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
