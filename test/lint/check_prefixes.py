"""Fails, naming the file and RUN line, when a FileCheck invocation in a lit test
has no positive directive among its prefixes.

A check file whose prefixes carry only `-NOT` lines passes on empty output: a
crashed tool, an empty pipe or a wrong --input-file all look green. Positive
directives are every FileCheck suffix except -NOT (plain, -NEXT, -SAME, -DAG,
-LABEL, -COUNT-n, -EMPTY).
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
SUFFIXES = ("*.mlir", "*.test")
PREFIX_OPT = re.compile(r"--?check-prefix(?:es)?[= ]([A-Za-z0-9_,-]+)")
CHECK_FILE = re.compile(r"FileCheck\s+(\S+)")


def run_lines(text):
    """RUN lines joined across trailing backslashes."""
    lines, cur = [], ""
    for line in text.splitlines():
        m = re.search(r"RUN:(.*)$", line)
        if not m:
            continue
        part = m.group(1).rstrip()
        if part.endswith("\\"):
            cur += part[:-1] + " "
            continue
        lines.append(cur + part)
        cur = ""
    return lines


def positive(text, prefix):
    pat = re.compile(r"(?<![A-Za-z0-9_-])" + re.escape(prefix) +
                     r"(-NEXT|-SAME|-DAG|-LABEL|-EMPTY|-COUNT-[0-9]+)?:")
    return pat.search(text) is not None


failures, checked = [], 0
for path in sorted(p for s in SUFFIXES for p in root.rglob(s)):
    if "Inputs" in path.parts:
        continue
    text = path.read_text()
    for run in run_lines(text):
        for invocation in run.split("|")[1:] + ([run] if run.lstrip().startswith("FileCheck") else []):
            if "FileCheck" not in invocation:
                continue
            m = CHECK_FILE.search(invocation)
            target = m.group(1) if m else "%s"
            if target == "%s":
                check_text = text
            elif target.startswith("%S/"):
                check_text = (path.parent / target[3:]).read_text()
            else:
                failures.append(f"{path}: cannot resolve FileCheck's check file '{target}' in: {run.strip()}")
                continue
            prefixes = []
            for opt in PREFIX_OPT.findall(invocation):
                prefixes += opt.split(",")
            prefixes = prefixes or ["CHECK"]
            checked += 1
            if not any(positive(check_text, p) for p in prefixes):
                failures.append(f"{path}: FileCheck prefix(es) {','.join(prefixes)} have only -NOT lines "
                                f"(they pass on empty output): {run.strip()}")
if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"all {checked} FileCheck invocations have a positive directive")
