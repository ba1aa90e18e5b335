#!/usr/bin/env python3
"""Mutates the flagship DSL kernel's constexprs (kernels/flash_fwd.py) and
compiles each variant for sm_80 in a child Python process:

  ok        compiled
  refused   tilec.CompilationError, ValueError or TypeError naming the problem
  bug       any other exception (a KeyError, ZeroDivisionError, ... escaping
            the frontend), printed with its traceback's last line
  crash     the child died of a signal (the issue's NUM_WARPS=0 SIGFPE)
  timeout   over --timeout seconds

Deterministic by seed. Exit status 1 on a bug, crash or timeout.

  nice -n 19 test/fuzz/fuzz_constexprs.py --iterations 100 --seed 1
"""

import argparse
import collections
import json
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

VALUES = {
    "NUM_WARPS": [0, 1, 2, 3, 4, 8, 16, 32, -1, 4.0, True, "4", None],
    "NUM_STAGES": [0, 1, 2, 3, -1, 2.5, "2"],
    "BLOCK_M": [0, 1, 16, 32, 48, 64, 96, 128, 256, 4096, -64, 64.0],
    "BLOCK_N": [0, 8, 16, 24, 32, 64, 128, 256, 8192, -16],
    "HEAD_DIM": [0, 1, 8, 16, 32, 63, 64, 80, 96, 100, 128, 160, 256, 1024, -64],
    "CAUSAL": [False, True, 0, 1, 2, "yes"],
    "SMEM_EPILOGUE": [False, True, 0, 1, "x", 2],
    "COPY_BOUNDS": ["row", "tile", "chunk", "x", 0],
    "DTYPE": ["f16", "bf16", "f32", "i32", 3],
}

CHILD = r"""
import json, sys, traceback
sys.path.insert(0, {kernels!r})
import tilec
from tilec import language as tl
from tilec.flash_attn import flash_fwd_kernel
cx = json.loads(sys.argv[1])
dtypes = {{"f16": tl.float16, "bf16": tl.bfloat16, "f32": tl.float32, "i32": tl.int32}}
if isinstance(cx.get("DTYPE"), str):
    cx["DTYPE"] = dtypes[cx["DTYPE"]]
try:
    flash_fwd_kernel().specialize(**cx).compile("sm_80")
    print("RESULT ok")
except (tilec.CompilationError, ValueError, TypeError) as e:
    print("RESULT refused", type(e).__name__, str(e).splitlines()[0][:200])
except Exception as e:
    print("RESULT bug", type(e).__name__, str(e)[:200], "|", traceback.format_exc().splitlines()[-3].strip())
"""


def mutant(rng):
    keys = rng.sample(sorted(VALUES), rng.choice([1, 1, 2, 3]))
    return {k: rng.choice(VALUES[k]) for k in keys}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--out", help="write summary.json here")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "python"), str(ROOT / "build" / "python"), os.environ.get("PYTHONPATH", "")]))
    code = CHILD.format(kernels=str(ROOT / "kernels"))
    counts = collections.Counter()
    findings = []
    seen = set()
    for i in range(args.iterations):
        cx = mutant(random.Random(f"{args.seed}:{i}"))
        key = json.dumps(cx, sort_keys=True)
        if key in seen:
            counts["repeat"] += 1
            continue
        seen.add(key)
        try:
            proc = subprocess.run([sys.executable, "-c", code, key], capture_output=True, text=True,
                                  timeout=args.timeout, env=env)
            line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
            if proc.returncode < 0 or line is None:
                outcome, detail = "crash", f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
            else:
                outcome, _, detail = line[len("RESULT "):].partition(" ")
        except subprocess.TimeoutExpired:
            outcome, detail = "timeout", ""
        counts[outcome] += 1
        if outcome not in ("ok", "refused"):
            findings.append({"mutant": i, "constexprs": cx, "outcome": outcome, "detail": detail})
        print(f"[{i}] {outcome} {key} {detail[:160]}", flush=True)
    print("fuzz-constexprs: seed %d: %s" % (args.seed, ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "summary.json").write_text(json.dumps(
            {"seed": args.seed, "outcomes": counts, "findings": findings}, indent=1))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
