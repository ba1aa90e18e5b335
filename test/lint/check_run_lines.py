"""Fails, naming the files, when a .mlir test under the given folder has no RUN: line."""
import pathlib
import sys

root = pathlib.Path(sys.argv[1])
missing = [str(p) for p in sorted(root.rglob("*.mlir"))
           if "Inputs" not in p.parts and "RUN:" not in p.read_text()]
if missing:
    print("lit files without a RUN: line (they never run):\n  " + "\n  ".join(missing))
    sys.exit(1)
print(f"all {len(list(root.rglob('*.mlir')))} .mlir tests have a RUN: line")
