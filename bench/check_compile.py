#!/usr/bin/env python3
"""Compiling on the GPU host: tilec.flash_attn_func at head dims that
scripts/build_artifacts.py does not prebuild (default 80 and 112), called as
users call it on CUDA tensors, so the package compiles each kernel here --
with the _tilec extension or, on a host without LLVM, the tilec CLI bundle
(scripts/bundle.sh) in a child process -- then launches it. Each variant
(f16/bf16 x causal or not) is checked against a float64 reference on fresh
random inputs (bounds of bench/check_flash.py: ||O - ref||/||ref|| < 2e-3
f16, 1e-2 bf16; |LSE - ref| < 1e-3 max(1, |ref|)), and a second call must
not compile again (the disk cache, $TILEC_CACHE_DIR: a fresh temporary
folder unless --cache-dir is given).

    python3 bench/check_compile.py [--head-dims 80,112] [--dtypes f16,bf16]
    python3 bench/check_compile.py --cpu     # no GPU: the CPU runner, f16

Without a compiler it unpacks build/bundle/tilec-bundle.tar.xz (--bundle)
into build/tilec-bundle first, as bench/gpu.sh does.

Exit status: 0 when every case passes, 1 otherwise, 2 when there is no GPU or
no compiler (neither the extension nor a tilec CLI that runs: set TILEC_CLI).
"""

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BOUND = {"f16": 2e-3, "bf16": 1e-2}
LSE_BOUND = 1e-3
# (batch, heads, seqlen_q, seqlen_k); causal cases use seqlen_q == seqlen_k.
SHAPES = [(2, 3, 333, 333), (1, 4, 1024, 1024), (3, 2, 1, 77)]


def reference(q, k, v, scale, causal):
    import torch

    q, k, v = (x.double().transpose(1, 2) for x in (q, k, v))  # (b, h, s, d)
    s = q @ k.transpose(-1, -2) * scale
    if causal:
        sq, sk = s.shape[-2:]
        keep = torch.arange(sk, device=s.device)[None, :] <= torch.arange(sq, device=s.device)[:, None]
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.softmax(s, dim=-1) @ v
    return o.transpose(1, 2), lse  # (b, s, h, d), (b, h, s)


# Run in a new process over the same $TILEC_CACHE_DIR: every variant again,
# with compiler.compile() made to fail.
CACHED_CHECK = """
import sys, torch, tilec
from tilec import compiler
def refuse(*a, **kw):
    raise AssertionError("compiled again instead of reading the disk cache")
compiler.compile = refuse
n = 0
for d in map(int, sys.argv[1].split(",")):
    for dt in sys.argv[2].split(","):
        for causal in (False, True):
            q = torch.randn(1, 64, 1, d, device=sys.argv[3],
                            dtype=torch.float16 if dt == "f16" else torch.bfloat16)
            if sys.argv[3] == "cpu":
                q = q.numpy()
            tilec.flash_attn_func(q, q, q, causal=causal)
            n += 1
if sys.argv[3] != "cpu":
    torch.cuda.synchronize()
print(f"{n} variants launched, 0 compiles")
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head-dims", default="80,112",
                        help="comma-separated head dims (multiples of 8 up to 256; default 80,112)")
    parser.add_argument("--dtypes", default="f16,bf16", help="f16, bf16 or both (default)")
    parser.add_argument("--cache-dir", help="$TILEC_CACHE_DIR (default: a fresh temporary folder)")
    parser.add_argument("--bundle", default=str(REPO / "build" / "bundle" / "tilec-bundle.tar.xz"),
                        help="with no compiler found, unpack this tilec CLI bundle (scripts/bundle.sh) "
                             "into build/ first (default build/bundle/tilec-bundle.tar.xz)")
    parser.add_argument("--cpu", action="store_true",
                        help="run on the CPU runner over numpy arrays (f16 only; checks this "
                             "script and the compile path on a host without a GPU)")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO / "python"))
    import torch

    import tilec
    from tilec import compiler

    device = "cpu" if args.cpu else "cuda"
    if args.cpu:
        args.dtypes = "f16"
    elif not torch.cuda.is_available():
        print("check_compile: no CUDA GPU", file=sys.stderr)
        return 2
    kind = compiler.compiler_kind()
    bundle = Path(args.bundle)
    if kind is None and bundle.exists():
        # As bench/gpu.sh does: unpack where the package looks for it.
        print(f"unpacking {bundle} into {REPO / 'build'}")
        with tarfile.open(bundle) as tar:
            try:
                tar.extractall(REPO / "build", filter="data")
            except TypeError:  # Python < 3.12
                tar.extractall(REPO / "build")
        compiler.reset_compiler_kind()
        kind = compiler.compiler_kind()
    if kind is None:
        print("check_compile: no compiler here: neither the _tilec extension nor a tilec CLI "
              f"that runs (TILEC_CLI={os.environ.get('TILEC_CLI', '')!r}, found: "
              f"{compiler.find_cli()!r}); scripts/bundle.sh builds one", file=sys.stderr)
        return 2
    cache = args.cache_dir or tempfile.mkdtemp(prefix="tilec-check-compile.")
    os.environ["TILEC_CACHE_DIR"] = cache
    where = compiler.find_cli() if kind == "cli" else "the _tilec extension"
    print(f"compiler: {kind} ({where}; {compiler.version()}), arch {compiler.default_arch()}, "
          f"cache {cache}")

    compiles = []
    real = compiler.compile

    def counting(*a, **kw):
        start = time.time()
        result = real(*a, **kw)
        compiles.append(time.time() - start)
        return result

    compiler.compile = counting
    dtypes = {"f16": torch.float16, "bf16": torch.bfloat16}
    failures = 0
    for head_dim in (int(d) for d in args.head_dims.split(",")):
        for dname in args.dtypes.split(","):
            for causal in (False, True):
                before = len(compiles)
                label = f"d{head_dim} {dname}{' causal' if causal else ''}"
                for i, (b, h, sq, sk) in enumerate(SHAPES):
                    if causal:
                        sk = sq
                    gen = torch.Generator(device=device).manual_seed(int(time.time_ns()) & 0xFFFFFFFF)
                    q, k, v = (torch.randn(b, s, h, head_dim, device=device, generator=gen,
                                           dtype=dtypes[dname]) for s in (sq, sk, sk))
                    try:
                        if args.cpu:
                            out, lse = (torch.from_numpy(t) for t in tilec.flash_attn_func(
                                q.numpy(), k.numpy(), v.numpy(), causal=causal, return_lse=True))
                        else:
                            out, lse = tilec.flash_attn_func(q, k, v, causal=causal, return_lse=True)
                    except Exception as e:  # noqa: BLE001 - report and go on
                        print(f"FAIL {label} b{b} h{h} sq{sq} sk{sk}: {type(e).__name__}: {e}")
                        failures += 1
                        break
                    if not args.cpu:
                        torch.cuda.synchronize()
                    ref, ref_lse = reference(q, k, v, head_dim ** -0.5, causal)
                    err = ((out.double() - ref).norm() / ref.norm()).item()
                    lse_err = ((lse.double() - ref_lse).abs() / ref_lse.abs().clamp(min=1)).max().item()
                    ok = err < BOUND[dname] and lse_err < LSE_BOUND and torch.isfinite(out).all().item()
                    new = len(compiles) - before
                    # The first shape compiles (once); the others reuse it. (The
                    # CPU runner compiles inside run-cpu, outside compile().)
                    ok = ok and (new == 1 or args.cpu)
                    failures += not ok
                    took = f", compiled in {compiles[-1]:.1f}s" if i == 0 and new else ""
                    print(f"{'ok  ' if ok else 'FAIL'} {label} b{b} h{h} sq{sq} sk{sk}: "
                          f"rel err {err:.2e}, lse err {lse_err:.2e}, compiles so far {new}{took}")
    if args.cpu:
        print(f"check_compile: CPU runner, {'all passed' if not failures else f'{failures} FAILED'}")
        return 1 if failures else 0
    # A new process finds every kernel in the disk cache: it must not compile.
    again = subprocess.run([sys.executable, "-c", CACHED_CHECK, args.head_dims, args.dtypes, device],
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                               [str(REPO / "python")] + sys.path[1:])),
                           capture_output=True, text=True)
    cached = again.returncode == 0
    failures += not cached
    print(f"{'ok  ' if cached else 'FAIL'} a second process, same cache: "
          f"{(again.stdout + again.stderr).strip()}")
    print(f"check_compile: {len(compiles)} kernels compiled ({kind}), "
          + ("all passed" if not failures else f"{failures} FAILED"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
