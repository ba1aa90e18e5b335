#!/usr/bin/env python3
"""Per-loop SASS instruction counts of flash_fwd's variant kernels, on the
CPU (no GPU needed): compiles a variant under a config for an arch (default
sm_90a, what an H200 runs), assembles it with ptxas, disassembles with
cuobjdump and prints, for each K/V loop, its length and the counts of the
instructions that matter for the variants (I2F, FMUL, FFMA, FADD, MUFU.EX2,
FMNMX, FSEL/FSETP, LDL/STL, HMMA), plus ptxas's register/spill line.

    python3 bench/sass_variants.py alibi causal [--config 128,64,4,2,0] [--arch sm_90a]
    python3 bench/sass_variants.py window causal --config 64,64,4,2,0
"""
import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "python"), str(REPO / "test" / "python"), str(REPO / "test" / "Target" / "Inputs")]

OPS = ["HMMA", "I2F", "I2FP", "FMUL", "FFMA", "FADD", "MUFU.EX2", "FMNMX", "FSEL", "FSETP", "ISETP",
       "SEL", "IMAD", "IADD3", "LDL", "STL", "BRA"]



def assemble(ptx_text, arch):
    """(ptxas's register/spill lines, the SASS listing) of `ptx_text` for
    `arch` (ptxas and cuobjdump from the CUDA toolkit); bench/sass_bwd.py
    uses it too."""
    from test_flash_sass import find_cuobjdump

    with tempfile.TemporaryDirectory() as tmp:
        ptx = Path(tmp) / "k.ptx"
        ptx.write_text(ptx_text)
        ptxas = subprocess.run(["ptxas", f"-arch={arch}", "--verbose", str(ptx), "-o",
                                str(Path(tmp) / "k.cubin")], capture_output=True, text=True)
        if ptxas.returncode:
            raise SystemExit(ptxas.stderr)
        sass = subprocess.run([find_cuobjdump(), "-sass", str(Path(tmp) / "k.cubin")],
                              capture_output=True, text=True, check=True).stdout
    return [l.strip() for l in ptxas.stderr.splitlines() if "registers" in l or "spill" in l], sass

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("switches", nargs="*", help="causal window softcap alibi varlen")
    p.add_argument("--config", default=None, help="block_m,block_n,warps,stages,smem_epilogue")
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dump", default=None, help="folder to write the .ptx and .sass into")
    p.add_argument("--lowering-options", default=None,
                   help="tile-to-nvvm options added to the config's (e.g. warp-blocks=true)")
    args = p.parse_args(argv)
    from tilec import compiler, strategy
    from tilec import language as tl
    from tilec.flash_attn import flash_fwd_kernel
    import loop_spills

    sw = set(args.switches)
    if args.config:
        c = [int(x) for x in args.config.split(",")]
        cfg = strategy.FlashConfig(c[0], c[1], c[2], c[3], bool(c[4]))
    else:
        cfg = strategy.flash_fwd_config("sm_80", "bfloat16", args.head_dim, "causal" in sw,
                                        "window" in sw, "softcap" in sw, "alibi" in sw)
    if args.lowering_options is not None:
        from dataclasses import replace
        cfg = replace(cfg, lowering_options=args.lowering_options)
    kernel = flash_fwd_kernel().specialize(
        DTYPE=tl.bfloat16, HEAD_DIM=args.head_dim, CAUSAL="causal" in sw, WINDOW="window" in sw,
        SOFTCAP="softcap" in sw, ALIBI="alibi" in sw, VARLEN="varlen" in sw, **cfg.constexprs())
    [res] = compiler.compile(kernel.ir, kernel.source_name, arch=args.arch, strategy=cfg.strategy)
    info, sass = assemble(res["ptx"], args.arch)
    print(f"{kernel.name} {cfg.tag} {args.arch}: " + " | ".join(info))
    print(f"PTX: {len(res['ptx'].splitlines())} lines, cvt.rn.f32.s32 {res['ptx'].count('cvt.rn.f32.s32')}")
    if args.dump:
        d = Path(args.dump)
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{kernel.name}.{cfg.tag}.ptx").write_text(res["ptx"])
        (d / f"{kernel.name}.{cfg.tag}.sass").write_text(sass)
    insts = loop_spills.instructions(sass.splitlines())
    total = len(insts)
    print(f"total SASS instructions {total}")
    for lo, hi in loop_spills.loop_ranges(insts):
        body = [t for a, t in insts if lo <= a <= hi]
        counts = {op: sum(1 for t in body if re.search(rf"(^|\s){re.escape(op)}(\.|\s|$)", t))
                  for op in OPS}
        print(f"loop 0x{lo:x}-0x{hi:x}: {len(body)} insts  "
              + " ".join(f"{op}={n}" for op, n in counts.items() if n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
