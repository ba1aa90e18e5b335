"""The PTX comparison: every kernel scripts/build_artifacts.py --tune builds
and kernels/*.mlir compile to PTX whose sha256 is the one recorded in
test/ptx-digests.txt (scripts/ptx_digests.py). A lowering refactor must keep
it; a change meant to change the code regenerates the file with
`scripts/ptx_digests.py --update` and says why in its commit.

The full set (about 300 kernels) takes about 1.5 minutes here;
TILEC_PTX_SAMPLE=1 compares one kernel of each family instead."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tilec import compiler

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not compiler.available(), reason="the _tilec extension is not built")
def test_ptx_matches_recorded_digests():
    sample = ["--sample"] if os.environ.get("TILEC_PTX_SAMPLE") == "1" else []
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "ptx_digests.py"), *sample],
                         capture_output=True, text=True, env=dict(os.environ), timeout=900)
    report = [line for line in run.stdout.splitlines() if line.startswith("ptx_digests:")]
    assert run.returncode == 0, "\n".join(report) + "\n" + run.stderr[-3000:]
    assert report and "byte-identical" in report[-1], run.stdout[-3000:]
