#!/usr/bin/env bash
# Tuning run on a GPU host: every configuration that
# `scripts/build_artifacts.py --tune` compiled into build/artifacts/tune/<config>/
# is checked for correctness (quick cases) and timed alone; the table at the
# end gives TFLOP/s per (variant, seqlen) and configuration. Copy the winners
# into python/tilec/strategy.py's TABLE and record the run in bench/RESULTS.md.
#
#   bash bench/tune.sh            (after bench/gpu.sh built the runtime)
#
# TILEC_TUNE_ARGS: bench_flash.py arguments (default --quick: seqlens 2k and
# 16k; e.g. "--filter d128" for all six seqlens of the head_dim-128 kernels).
set -euo pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
TUNE=${TILEC_ARTIFACTS:-build/artifacts}/tune
BUILD=build-gpu
[ -d "$TUNE" ] || { echo "error: no $TUNE: run scripts/build_artifacts.py --tune first" >&2; exit 2; }
if [ ! -d "$BUILD/python" ]; then
  cmake -S lib/runtime -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$(command -v python3)" >/dev/null
  cmake --build "$BUILD" >/dev/null
fi
export PYTHONPATH="$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
rm -rf "$BUILD/tune"  # a warm machine keeps the last run's tables
mkdir -p "$BUILD/tune"
for dir in "$TUNE"/*/; do
  config=$(basename "$dir")
  echo "=== $config"
  python3 bench/check_flash.py --artifacts "$dir" --quick > "$BUILD/tune/$config.check" 2>&1 \
    && echo "correct" || { echo "INCORRECT:"; tail -5 "$BUILD/tune/$config.check"; }
  # shellcheck disable=SC2086  # a list of words
  python3 bench/bench_flash.py --artifacts "$dir" ${TILEC_TUNE_ARGS---quick} --tilec-only \
    --summary "$BUILD/tune/$config.md" > "$BUILD/tune/$config.log" 2>&1 || echo "bench failed"
done
python3 - "$BUILD/tune" <<'PY'
import pathlib, sys
folder = pathlib.Path(sys.argv[1])
table = {}
for md in sorted(folder.glob("*.md")):
    lines = md.read_text().splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    # The candidate's own kernel: the launcher column (the public API's
    # column runs the strategy table's choice, not the candidate).
    column = header.index("tilec launcher") if "tilec launcher" in header else 4
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        key = tuple(cells[:4])
        table.setdefault(key, {})[md.stem] = cells[column]
configs = sorted({c for row in table.values() for c in row})
print("\n| dtype | d | causal | seqlen | " + " | ".join(configs) + " | best |")
print("|---|---:|---|---:|" + "---:|" * (len(configs) + 1))
for key, row in table.items():
    vals = {c: float(row[c].rstrip("!")) if row.get(c, "n/a").rstrip("!") not in ("n/a", "") else 0.0
            for c in configs}
    best = max(vals, key=vals.get)
    print("| " + " | ".join(key) + " | " + " | ".join(row.get(c, "n/a") for c in configs)
          + f" | {best} |")
PY
