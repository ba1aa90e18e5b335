#!/usr/bin/env python3
"""Compiles every kernel scripts/build_artifacts.py builds (the forward table,
the extra head dims, every tuner candidate, the backward kernels, the
flash_attn variants) plus the hand-written kernels/*.mlir (for sm_80 and
sm_90a) to PTX and compares each file's sha256 with the digests recorded in
test/ptx-digests.txt. A change to the GPU lowering that is meant to keep the
generated code shows here as a list of the kernels whose PTX changed.

    scripts/ptx_digests.py            # compare all (several minutes)
    scripts/ptx_digests.py --sample   # compare one kernel of each family (CI)
    scripts/ptx_digests.py --update   # record the current PTX as the reference

Compiles through build_artifacts.main (its compile_into), into a temporary
folder, with ptxas off (TILEC_PTXAS=) and no extra SASS: only the PTX counts.
"""
import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIGESTS = ROOT / "test" / "ptx-digests.txt"
HEADER = ("# sha256 of the PTX of every kernel scripts/build_artifacts.py --tune builds, and of\n"
          "# kernels/*.mlir (mlir-<arch>/). Regenerate with scripts/ptx_digests.py --update,\n"
          "# only when a change is meant to change the generated code (say why in the commit).\n")


def build(out, sample):
    """Writes the PTX of every kernel (or the sample) under `out`."""
    os.environ["TILEC_PTXAS"] = ""  # cubins are not compared; ptxas would double the time
    sys.path.insert(0, str(ROOT / "scripts"))
    import build_artifacts

    argv = ["--out", str(out), "--tune", "--extra-sass", ""] + (["--sample"] if sample else [])
    if build_artifacts.main(argv):
        raise SystemExit("ptx_digests: build_artifacts failed (above)")
    _, compiler = build_artifacts.import_tilec()
    for arch in ("sm_80", "sm_90a"):
        folder = out / f"mlir-{arch}"
        folder.mkdir()
        for path in sorted((ROOT / "kernels").glob("*.mlir")):
            for result in compiler.compile(path.read_text(), str(path), arch=arch):
                (folder / f"{result['name']}.ptx").write_text(result["ptx"])


def digests(out):
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*.ptx"))}


def read_recorded(path):
    recorded = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            digest, name = line.split(maxsplit=1)
            recorded[name] = digest
    return recorded


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true",
                        help="write the current digests to the file instead of comparing")
    parser.add_argument("--sample", action="store_true",
                        help="only one kernel of each family (build_artifacts --sample) and "
                             "kernels/*.mlir; compared against the full file's lines for them")
    parser.add_argument("--digests", type=Path, default=DIGESTS, help=f"default {DIGESTS}")
    args = parser.parse_args(argv)
    if args.update and args.sample:
        parser.error("--update records the full set; run it without --sample")
    with tempfile.TemporaryDirectory(prefix="tilec-ptx-") as tmp:
        build(Path(tmp), args.sample)
        current = digests(Path(tmp))
    if args.update:
        args.digests.write_text(HEADER + "".join(f"{d}  {n}\n" for n, d in sorted(current.items())))
        print(f"ptx_digests: recorded {len(current)} kernels in {args.digests}")
        return 0
    recorded = read_recorded(args.digests)
    changed = sorted(n for n in current if n in recorded and recorded[n] != current[n])
    new = sorted(n for n in current if n not in recorded)
    missing = [] if args.sample else sorted(n for n in recorded if n not in current)
    for title, names in (("PTX changed", changed), ("not recorded", new), ("not built", missing)):
        for name in names:
            print(f"ptx_digests: {title}: {name}")
    same = len(current) - len(changed) - len(new)
    print(f"ptx_digests: {same} of {len(current)} kernels byte-identical"
          + (f", {len(missing)} recorded kernels not built" if missing else ""))
    return 1 if changed or new or missing else 0


if __name__ == "__main__":
    sys.exit(main())
