"""pytest plugin for running flash-attention's own test suite against tilec
(bench/upstream_tests.sh loads it with -p): samples the collected tests,
stops starting new ones past a time budget, and writes a summary per test
function with every distinct failure message.

Environment: TILEC_UPSTREAM_SAMPLE (tests to run, default 600; 0 = all),
TILEC_UPSTREAM_SEED (default 0), TILEC_UPSTREAM_BUDGET_S (default 420),
TILEC_UPSTREAM_REPORT (summary file, default upstream-summary.md),
TILEC_UPSTREAM_MAX_SEQLEN (only tests whose seqlen, seqlen_q and seqlen_k
parameters are at most this: small cases for the CPU runner),
TILEC_UPSTREAM_PER_FN (at most this many sampled tests per test function,
so a small sample spans every function),
TILEC_UPSTREAM_SHARD ("i/n": run every n-th test of the sample from the
i-th, so n processes share one sample; each also writes its outcomes to
REPORT.json, and `python3 tilec_upstream_plugin.py merge OUT.md A.json ...`
writes the summary of all of them), TILEC_UPSTREAM_IDS (a file of test names,
one per line, e.g. the failures of an earlier run: only those run, in file
order; the sample settings are then ignored).

Between tests the plugin frees torch's cached GPU memory: shards share one
GPU, and upstream's 128k-key kvcache cases left cached blocks that made the
next shard's allocations fail (session 9 run 5: all 54 failures of 6,000
sampled were CUDA out of memory or its after-effects with 12 shards)."""
import collections
import json
import os
import sys
import random
import re
import time

import pytest

_START = time.monotonic()
_BUDGET = float(os.environ.get("TILEC_UPSTREAM_BUDGET_S", "420"))
_OUTCOMES = {}      # nodeid -> (outcome, message)
_BUDGET_SKIP = "tilec: time budget spent"


def _small(item, limit):
    params = getattr(getattr(item, "callspec", None), "params", {})
    return all(not isinstance(params.get(name), int) or params[name] <= limit
               for name in ("seqlen", "seqlen_q", "seqlen_k"))


def pytest_collection_modifyitems(config, items):
    n = int(os.environ.get("TILEC_UPSTREAM_SAMPLE", "600"))
    config._tilec_collected = len(items)
    ids_file = os.environ.get("TILEC_UPSTREAM_IDS")
    if ids_file:
        with open(ids_file) as f:
            wanted = [line.strip() for line in f if line.strip()]
        by_name = {it.nodeid.split("::")[-1]: it for it in items}
        missing = [w for w in wanted if w not in by_name]
        if missing:
            raise pytest.UsageError(f"TILEC_UPSTREAM_IDS: {len(missing)} names not collected, "
                                    f"e.g. {missing[0]}")
        keep = set(wanted)
        config.hook.pytest_deselected(items=[it for it in items
                                             if it.nodeid.split("::")[-1] not in keep])
        items[:] = [by_name[w] for w in wanted]
        return
    limit = os.environ.get("TILEC_UPSTREAM_MAX_SEQLEN")
    if limit:
        deselected = [it for it in items if not _small(it, int(limit))]
        items[:] = [it for it in items if _small(it, int(limit))]
        config.hook.pytest_deselected(items=deselected)
    per_fn = int(os.environ.get("TILEC_UPSTREAM_PER_FN", "0"))
    if per_fn > 0:
        rng = random.Random(int(os.environ.get("TILEC_UPSTREAM_SEED", "0")) + 2)
        groups = collections.defaultdict(list)
        for i, it in enumerate(items):
            groups[it.originalname].append(i)
        keep = set()
        for idx in groups.values():
            keep.update(rng.sample(idx, min(per_fn, len(idx))))
        config.hook.pytest_deselected(items=[it for i, it in enumerate(items) if i not in keep])
        items[:] = [it for i, it in enumerate(items) if i in keep]
    if 0 < n < len(items):
        keep = set(random.Random(int(os.environ.get("TILEC_UPSTREAM_SEED", "0"))).sample(
            range(len(items)), n))
        deselected = [it for i, it in enumerate(items) if i not in keep]
        items[:] = [it for i, it in enumerate(items) if i in keep]
        config.hook.pytest_deselected(items=deselected)
    # Random order, so a run cut by the time budget still spans every test
    # function (file order would spend it on the first few).
    random.Random(int(os.environ.get("TILEC_UPSTREAM_SEED", "0")) + 1).shuffle(items)
    shard = os.environ.get("TILEC_UPSTREAM_SHARD")
    if shard:
        i, n = (int(x) for x in shard.split("/"))
        config.hook.pytest_deselected(items=[it for j, it in enumerate(items) if j % n != i])
        items[:] = items[i::n]


def pytest_runtest_teardown(item, nextitem):
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


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
    if report.when == "teardown":
        _write_json("?")  # a run killed from outside still leaves what it ran (REPORT.json)


def _write_json(collected):
    report = os.environ.get("TILEC_UPSTREAM_REPORT", "upstream-summary.md")
    with open(report + ".json", "w") as f:
        json.dump({"collected": collected, "seconds": time.monotonic() - _START,
                   "outcomes": _OUTCOMES}, f)


def pytest_sessionfinish(session, exitstatus):
    report = os.environ.get("TILEC_UPSTREAM_REPORT", "upstream-summary.md")
    collected = getattr(session.config, "_tilec_collected", "?")
    _write_json(collected)
    text = summary(_OUTCOMES, collected, time.monotonic() - _START)
    with open(report, "w") as f:
        f.write(text)
    print("\n" + text)


def summary(outcomes, collected, seconds):
    per_fn = collections.defaultdict(collections.Counter)
    reasons = collections.Counter()
    example = {}
    for nodeid, (outcome, msg) in sorted(outcomes.items()):
        fn = nodeid.split("::")[-1].split("[")[0]
        if outcome == "skipped" and msg.endswith(_BUDGET_SKIP):  # pytest prefixes "Skipped: "
            outcome = "not run (budget)"
        per_fn[fn][outcome] += 1
        if outcome == "failed":
            reasons[(fn, msg)] += 1
            example.setdefault((fn, msg), nodeid.split("::")[-1])
    total = collections.Counter()
    for c in per_fn.values():
        total.update(c)
    cols = ("passed", "failed", "skipped", "not run (budget)")
    lines = [f"flash-attention's tests/test_flash_attn.py against tilec: "
             f"{collected} collected, {len(outcomes)} sampled, {seconds:.0f} s", "",
             "| test | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for fn in sorted(per_fn):
        lines.append(f"| {fn} | " + " | ".join(str(per_fn[fn][c]) for c in cols) + " |")
    lines.append("| **all** | " + " | ".join(f"**{total[c]}**" for c in cols) + " |")
    lines += ["", "Failures by message, commonest first (digits shown as N):", ""]
    for (fn, msg), n in reasons.most_common():
        lines.append(f"- {n} x {fn}: `{msg}` (e.g. `{example[(fn, msg)]}`)")
    return "\n".join(lines) + "\n"


def merge(out, paths):
    """One summary of several shards' REPORT.json files (seconds: the longest)."""
    outcomes, collected, seconds = {}, "?", 0.0
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        outcomes.update({k: tuple(v) for k, v in data["outcomes"].items()})
        if data["collected"] != "?":
            collected = data["collected"]
        seconds = max(seconds, data["seconds"])
    text = summary(outcomes, collected, seconds) + f"\n({len(paths)} shards in parallel)\n"
    with open(out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] != "merge":
        sys.exit("usage: tilec_upstream_plugin.py merge OUT.md SHARD.json...")
    merge(sys.argv[2], sys.argv[3:])
