"""pytest plugin for running flash-attention's own test suite against tilec
(bench/upstream_tests.sh loads it with -p): samples the collected tests,
stops starting new ones past a time budget, and writes a summary per test
function with every distinct failure message.

Environment: TILEC_UPSTREAM_SAMPLE (tests to run, default 600; 0 = all),
TILEC_UPSTREAM_SEED (default 0), TILEC_UPSTREAM_BUDGET_S (default 420),
TILEC_UPSTREAM_REPORT (summary file, default upstream-summary.md)."""
import collections
import os
import random
import re
import time

import pytest

_START = time.monotonic()
_BUDGET = float(os.environ.get("TILEC_UPSTREAM_BUDGET_S", "420"))
_OUTCOMES = {}      # nodeid -> (outcome, message)
_BUDGET_SKIP = "tilec: time budget spent"


def pytest_collection_modifyitems(config, items):
    n = int(os.environ.get("TILEC_UPSTREAM_SAMPLE", "600"))
    config._tilec_collected = len(items)
    if 0 < n < len(items):
        keep = set(random.Random(int(os.environ.get("TILEC_UPSTREAM_SEED", "0"))).sample(
            range(len(items)), n))
        deselected = [it for i, it in enumerate(items) if i not in keep]
        items[:] = [it for i, it in enumerate(items) if i in keep]
        config.hook.pytest_deselected(items=deselected)
    # Random order, so a run cut by the time budget still spans every test
    # function (file order would spend it on the first few).
    random.Random(int(os.environ.get("TILEC_UPSTREAM_SEED", "0")) + 1).shuffle(items)


def pytest_runtest_setup(item):
    if time.monotonic() - _START > _BUDGET:
        pytest.skip(_BUDGET_SKIP)


def _message(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    if isinstance(report.longrepr, tuple):          # a skip: (file, line, reason)
        text = report.longrepr[2]
    line = text.strip().splitlines()[0] if text.strip() else ""
    return re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", line)[:160]


def pytest_runtest_logreport(report):
    prior = _OUTCOMES.get(report.nodeid)
    if report.when == "call" or report.outcome != "passed":
        if prior is None or prior[0] == "passed":
            _OUTCOMES[report.nodeid] = (report.outcome, "" if report.passed else _message(report))


def pytest_sessionfinish(session, exitstatus):
    per_fn = collections.defaultdict(collections.Counter)
    reasons = collections.Counter()
    for nodeid, (outcome, msg) in _OUTCOMES.items():
        fn = nodeid.split("::")[-1].split("[")[0]
        if outcome == "skipped" and msg.endswith(_BUDGET_SKIP):  # pytest prefixes "Skipped: "
            outcome = "not run (budget)"
        per_fn[fn][outcome] += 1
        if outcome == "failed":
            reasons[(fn, msg)] += 1
    total = collections.Counter()
    for c in per_fn.values():
        total.update(c)
    cols = ("passed", "failed", "skipped", "not run (budget)")
    lines = [f"flash-attention's tests/test_flash_attn.py against tilec: "
             f"{getattr(session.config, '_tilec_collected', '?')} collected, {len(_OUTCOMES)} sampled, "
             f"{time.monotonic() - _START:.0f} s", "",
             "| test | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for fn in sorted(per_fn):
        lines.append(f"| {fn} | " + " | ".join(str(per_fn[fn][c]) for c in cols) + " |")
    lines.append("| **all** | " + " | ".join(f"**{total[c]}**" for c in cols) + " |")
    lines += ["", "Failures by message, commonest first (digits shown as N):", ""]
    for (fn, msg), n in reasons.most_common():
        lines.append(f"- {n} x {fn}: `{msg}`")
    text = "\n".join(lines) + "\n"
    with open(os.environ.get("TILEC_UPSTREAM_REPORT", "upstream-summary.md"), "w") as f:
        f.write(text)
    print("\n" + text)
