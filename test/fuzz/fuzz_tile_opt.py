#!/usr/bin/env python3
"""A mutation fuzzer for tile-opt and tilec.

Takes the kernels (kernels/*.mlir) and the lit inputs (test/**/*.mlir, split
at `// -----`), mutates them (numbers, tokens, attributes, op names, types,
lines, pass options) and runs each mutant in a child process, with a time
and a memory limit, through parse+verify and then one pipeline: tile-optimize,
tile-to-nvvm, tile-to-cpu, or tilec's whole compile to PTX (LLVM-dialect
inputs: tilec --from-llvm-dialect). Each run is classified:

  ok                   exit 0
  diagnostic           exit 1 with an `error:` and no crash
  crash-in-tilec       a signal / abort with a frame of tilec's own code (the
                       tool binary, which links tilec's dialect and passes
                       statically) on the stack
  crash-in-mlir-parser a signal inside MLIR's parser (libMLIR), no tilec frame
  crash-in-mlir        a signal elsewhere in libMLIR / libLLVM
  timeout              over --timeout seconds, and over twice that when rerun
                       (a first timeout that then finishes is counted as
                       timeout-then-<outcome>: CPU starvation, not a hang)

Deterministic by seed: mutant i depends only on (--seed, i) and the corpus,
so `--only I` replays one. Crash reproducers (mutant text + command) go to
--out. Exit status 1 when a crash in tilec's code was found (or, with
--fail-on-any-crash, any crash that is not a known MLIR bug).

  test/fuzz/fuzz_tile_opt.py --iterations 40 --seed 1          # the test
  nice -n 19 test/fuzz/fuzz_tile_opt.py --seconds 3600 --seed 7 --out DIR
"""

import argparse
import collections
import json
import os
import random
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# MLIR 22 bugs this repository cannot fix (README, known limits): a crash
# whose stack matches is "known", not a finding.
KNOWN_MLIR_BUGS = {
    "array<index: ...> dense array (mlir::detail::Parser::parseDenseArrayAttr segfault)":
        re.compile(r"parseDenseArrayAttr"),
    "%x#<huge> result number (the parser allocates that many results: out of memory)":
        re.compile(r"out of memory|std::bad_alloc|Allocation failed"),
    "nvvm.mma.sync with a negative shape or mismatched operand types (NVVM::MmaOp::verify aborts)":
        re.compile(r"NVVM::MmaOp::verify"),
}

INTERESTING = [0, 1, -1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256,
               1000, 1023, 1024, 4096, 65535, 65536, 2**31 - 1, -2**31, 2**32, 2**63 - 1]
TYPES = ["f16", "bf16", "f32", "f64", "i1", "i8", "i32", "i64", "index"]
PIPELINES = {
    "tile-optimize": "builtin.module(tile-optimize)",
    "tile-to-nvvm": "builtin.module(tile-optimize,tile-to-nvvm{arch=sm_80})",
    "tile-to-nvvm-raw": "builtin.module(tile-to-nvvm)",
    "tile-to-cpu": "builtin.module(tile-to-cpu)",
}
OPTION_VALUES = {"num-warps": [0, 1, 2, 3, 4, 8, 16, 32, -1], "stages": [0, 1, 2, 3, -1],
                 "copy-bounds": ["row", "tile", "chunk", "x"], "lazy-rescale": ["true", "false"],
                 "xor-ring-phases": ["auto", "trans", "non-trans", "all", "none", "x"],
                 "arch": ["sm_80", "sm_90a", "sm_70"]}
TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|%[\w$.#-]+|@[\w$.-]+|#[\w.]+|!?[a-z_]+(?:\.[a-z_0-9]+)+'
                   r'|-?\d+\.\d+(?:[eE][-+]?\d+)?|-?0x[0-9a-fA-F]+|-?\d+|[A-Za-z_][\w$-]*|\S')
NUMBER = re.compile(r'(?<![\w%#@.])-?\d+(?![\w.])')
OPNAME = re.compile(r'\b(?:tile|arith|math|scf|func|llvm|nvvm|cf|memref|tensor)\.[a-z_.]+\b')
ATTR = re.compile(r'\b([a-z_][\w.]*) = ("(?:[^"\\\n]|\\.)*"|[^,}\n]+)')


def load_corpus():
    """(name, text, is_llvm) chunks: every kernel and lit input, comment
    lines dropped (RUN/CHECK lines only slow the parser down)."""
    files = sorted((ROOT / "kernels").glob("*.mlir")) + sorted((ROOT / "test").rglob("*.mlir"))
    corpus = []
    for f in files:
        if "fuzz" in f.parts:
            continue
        text = f.read_text()
        for i, chunk in enumerate(re.split(r"^// -----.*$", text, flags=re.M)):
            body = "\n".join(l for l in chunk.splitlines() if not l.lstrip().startswith("//"))
            if not body.strip() or ("func" not in body):
                continue
            is_llvm = "llvm.func" in body and "func.func" not in body
            corpus.append((f"{f.relative_to(ROOT)}#{i}", body + "\n", is_llvm))
            # Inputs that are valid as written reach the passes after a small
            # mutation; the invalid ones (expected-error cases) mostly stop
            # at the verifier. Valid ones are drawn four times as often.
            if "expected-error" not in chunk and "error:" not in chunk:
                corpus.extend([corpus[-1]] * 3)
    return corpus


class Mutator:
    def __init__(self, rng, corpus):
        self.rng = rng
        text = "\n".join(c[1] for c in corpus)
        self.opnames = sorted(set(OPNAME.findall(text)))
        self.strings = sorted(set(re.findall(r'"(?:[^"\\\n]|\\.)*"', text)))[:500]
        self.tokens = sorted(set(TOKEN.findall(text)))

    def number(self, s):
        spots = list(NUMBER.finditer(s))
        if not spots:
            return s, "no number"
        m = self.rng.choice(spots)
        old = int(m.group())
        new = self.rng.choice([self.rng.choice(INTERESTING), old + 1, old - 1, old * 2, old // 2, -old])
        return s[:m.start()] + str(new) + s[m.end():], f"number {old} -> {new} at {m.start()}"

    def token(self, s):
        spots = list(TOKEN.finditer(s))
        if not spots:
            return s, "no token"
        i = self.rng.randrange(len(spots))
        m = spots[i]
        kind = self.rng.choice(["delete", "duplicate", "replace", "swap"])
        if kind == "delete":
            return s[:m.start()] + s[m.end():], f"delete token {m.group()!r}"
        if kind == "duplicate":
            return s[:m.end()] + " " + m.group() + s[m.end():], f"duplicate token {m.group()!r}"
        if kind == "replace":
            t = self.rng.choice(self.tokens)
            return s[:m.start()] + t + s[m.end():], f"token {m.group()!r} -> {t!r}"
        if i + 1 < len(spots):
            n = spots[i + 1]
            return (s[:m.start()] + n.group() + s[m.end():n.start()] + m.group() + s[n.end():],
                    f"swap tokens {m.group()!r} {n.group()!r}")
        return s, "no swap"

    def attribute(self, s):
        spots = list(ATTR.finditer(s))
        if not spots:
            return s, "no attribute"
        m = self.rng.choice(spots)
        kind = self.rng.choice(["drop", "value", "string"])
        if kind == "drop":
            return s[:m.start()] + s[m.end():], f"drop attribute {m.group(1)}"
        if kind == "string" and self.strings:
            v = self.rng.choice(self.strings)
        else:
            v = self.rng.choice(["0", "-1", "true", "unit", '"x"', "[]", "{}", "array<i64: 0>",
                                 "dense<0> : tensor<2xi32>", str(self.rng.choice(INTERESTING)) + " : i64",
                                 '["1", "1"]', '["x", "y", "z"]'])
        return s[:m.start(2)] + v + s[m.end(2):], f"attribute {m.group(1)} = {v}"

    def opname(self, s):
        spots = list(OPNAME.finditer(s))
        if not spots or not self.opnames:
            return s, "no op"
        m = self.rng.choice(spots)
        new = self.rng.choice(self.opnames)
        return s[:m.start()] + new + s[m.end():], f"op {m.group()} -> {new}"

    def type(self, s):
        spots = list(re.finditer(r'\b(?:f16|bf16|f32|f64|i1|i8|i32|i64|index)\b|\b\d+x(?=\d|[a-z])', s))
        if not spots:
            return s, "no type"
        m = self.rng.choice(spots)
        if m.group().endswith("x"):
            new = f"{self.rng.choice([0, 1, 2, 3, 8, 16, 24, 48, 64, 128, 256, 1024, 8192])}x"
        else:
            new = self.rng.choice(TYPES)
        return s[:m.start()] + new + s[m.end():], f"type {m.group()} -> {new}"

    def retype_all(self, s):
        """Every use of one element type or one dimension size at once, so
        the mutant still type-checks and reaches the passes."""
        if self.rng.random() < 0.5:
            have = sorted(set(re.findall(r'\b(?:f16|bf16|f32|i32|i64)\b', s)))
            if not have:
                return s, "no type"
            old, new = self.rng.choice(have), self.rng.choice(TYPES)
            return re.sub(rf'\b{old}\b', new, s), f"every {old} -> {new}"
        have = sorted(set(re.findall(r'\b(\d+)x(?=\d|[a-z])', s)))
        if not have:
            return s, "no shape"
        old = self.rng.choice(have)
        new = str(self.rng.choice([1, 2, 8, 16, 32, 48, 64, 128, 256, 512, 4096]))
        return re.sub(rf'\b{old}x(?=\d|[a-z])', new + "x", re.sub(rf'x{old}\b', "x" + new, s)), \
            f"every dimension {old} -> {new}"

    def line(self, s):
        lines = s.splitlines()
        if len(lines) < 3:
            return s, "no line"
        i = self.rng.randrange(1, len(lines) - 1)
        kind = self.rng.choice(["delete", "duplicate", "swap"])
        if kind == "delete":
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        else:
            j = self.rng.randrange(1, len(lines) - 1)
            lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines) + "\n", f"{kind} line {i + 1}"

    def mutate(self, s):
        notes = []
        # Mostly one mutation of the kinds that keep the text parseable, so
        # that most mutants reach the passes; token and line edits test the
        # parser and verifiers.
        for _ in range(self.rng.choice([1, 1, 1, 1, 1, 2, 2, 3])):
            fn = self.rng.choice([self.number] * 6 + [self.token, self.line, self.opname, self.type] +
                                 [self.attribute] * 2 + [self.retype_all] * 4)
            s, note = fn(s)
            notes.append(note)
        return s, notes


def pass_pipeline(rng):
    """A pipeline, sometimes with mutated tile-to-nvvm options."""
    name = rng.choice(["tile-optimize", "tile-to-nvvm", "tile-to-nvvm", "tile-to-nvvm-raw",
                       "tile-to-cpu", "tilec"])
    if name.startswith("tile-to-nvvm") and rng.random() < 0.3:
        key = rng.choice(sorted(OPTION_VALUES))
        value = rng.choice(OPTION_VALUES[key])
        body = "tile-optimize," if name == "tile-to-nvvm" else ""
        return name + f"{{{key}={value}}}", f"builtin.module({body}tile-to-nvvm{{{key}={value}}})"
    return name, PIPELINES.get(name)


def limit_memory(mb):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (mb << 20, mb << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def run(cmd, text, timeout, memory_mb):
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=timeout,
                              preexec_fn=limit_memory(memory_mb), errors="replace")
    except subprocess.TimeoutExpired:
        return "timeout", "", time.monotonic() - start
    return classify(proc, cmd[0]), proc.stderr, time.monotonic() - start


FRAME = re.compile(r"^\s*#\d+ 0x[0-9a-f]+ (?P<fn>.*?) \((?P<module>[^()]*?)\+0x[0-9a-f]+\)\s*$")


def frames(stderr):
    return [(m["fn"], m["module"]) for m in map(FRAME.match, stderr.splitlines()) if m]


def classify(proc, tool):
    crashed = proc.returncode < 0 or proc.returncode >= 128 or "Stack dump:" in proc.stderr \
        or "LLVM ERROR" in proc.stderr
    if not crashed:
        if proc.returncode == 0:
            return "ok"
        return "diagnostic" if "error" in proc.stderr else "failure-without-diagnostic"
    stack = frames(proc.stderr)
    tool_name = os.path.basename(tool)
    # Skip the signal handler's own frames (libLLVM's PrintStackTrace, libc).
    body = [f for f in stack if not re.search(r"PrintStackTrace|RunSignalHandlers|SignalHandler", f[0])
            and "libc.so" not in f[1]]
    # Generic support code (fatal-error reporting, containers, abort) is
    # skipped: the innermost frame of real work decides whose crash it is
    # (the 1-hour run's "tilec" crashes were MLIR's NVVM::MmaOp::verify
    # growing a SmallVector past its size, called from tilec's driver).
    body = [f for f in body if not re.search(
        r"^(llvm::(report_fatal_error|report_bad_alloc_error|SmallVector|llvm_unreachable)|abort|raise"
        r"|__pthread|std::__throw|__cxa)", f[0])
        and not (f[0] == "" and "libLLVM" in f[1])]
    ours = [f for f in body if os.path.basename(f[1]) == tool_name
            and f[0] not in ("main", "_start") and "__libc" not in f[0]]
    innermost = body[0] if body else ("", "")
    parsing = "MLIR Parser" in proc.stderr
    out_of_memory = "out of memory" in proc.stderr or "bad_alloc" in proc.stderr
    # The innermost frame decides: MLIR's parser failing (or running out of
    # memory) while parsing is MLIR's, even when a tilec parse hook called it.
    if parsing and (out_of_memory or "libMLIR" in innermost[1]):
        return "crash-in-mlir-parser"
    if os.path.basename(innermost[1]) == tool_name:
        return "crash-in-tilec"
    return "crash-in-mlir"


def signature(outcome, stderr):
    """A crash's identity: its class and innermost few named frames."""
    names = [fn for fn, module in frames(stderr)
             if fn and not re.search(r"PrintStackTrace|RunSignalHandlers|SignalHandler", fn)][:4]
    msg = next((l for l in stderr.splitlines() if "LLVM ERROR" in l or "Assertion" in l), "")
    return f"{outcome}: {msg.strip()[:120]} | " + " <- ".join(n[:80] for n in names)


def known(stderr):
    return next((name for name, pat in KNOWN_MLIR_BUGS.items() if pat.search(stderr)), None)


def one(i, args, corpus, tools):
    rng = random.Random(f"{args.seed}:{i}")
    name, text, is_llvm = corpus[rng.randrange(len(corpus))]
    mutator = Mutator(rng, [(name, text, is_llvm)])
    mutant, notes = mutator.mutate(text)
    if is_llvm:
        steps = [("tilec-ptx", [tools["tilec"], "--from-llvm-dialect", "--emit=ptx", "-o", "-", "-"])]
    else:
        steps = [("parse", [tools["tile-opt"], "-"])]
        label, pipeline = pass_pipeline(rng)
        if label == "tilec":
            steps.append(("tilec", [tools["tilec"], "--emit=ptx", "-o", "-", "-"]))
        else:
            steps.append((label, [tools["tile-opt"], "-", f"--pass-pipeline={pipeline}", "-o", "/dev/null"]))
    results = []
    for label, cmd in steps:
        outcome, stderr, secs = run(cmd, mutant, args.timeout, args.memory_mb)
        if outcome == "timeout":
            # On a loaded machine a niced child can starve past the limit:
            # a real hang also hangs a second time, with twice as long.
            outcome, stderr, secs = run(cmd, mutant, 2 * args.timeout, args.memory_mb)
            if outcome != "timeout":
                outcome = "timeout-then-" + outcome
        results.append((label, cmd, outcome, stderr, secs))
        if outcome != "ok":
            break
    return name, notes, mutant, results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=0, help="mutants to run (0: until --seconds)")
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long")
    ap.add_argument("--only", type=int, help="run only mutant I (replay)")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per child process")
    ap.add_argument("--memory-mb", type=int, default=4096, help="address-space limit per child")
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin"), help="folder of tile-opt and tilec")
    ap.add_argument("--out", help="folder for reproducers and the summary (summary.json)")
    ap.add_argument("--fail-on-any-crash", action="store_true",
                    help="exit 1 on any crash that is not a known MLIR bug (default: tilec's only)")
    ap.add_argument("--print-mutant", action="store_true", help="with --only: print the mutant")
    args = ap.parse_args()
    if not args.iterations and not args.seconds and args.only is None:
        ap.error("give --iterations, --seconds or --only")
    tools = {t: str(Path(args.bin) / t) for t in ("tile-opt", "tilec")}
    for t in tools.values():
        if not os.access(t, os.X_OK):
            sys.exit(f"fuzz: {t} not found (build it, or pass --bin)")
    corpus = load_corpus()
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)

    counts = collections.Counter()
    crashes = {}
    start = time.monotonic()
    indices = [args.only] if args.only is not None else None
    i = 0
    while True:
        if indices is not None:
            if not indices:
                break
            i = indices.pop()
        elif (args.iterations and i >= args.iterations) or \
                (args.seconds and time.monotonic() - start >= args.seconds):
            break
        name, notes, mutant, results = one(i, args, corpus, tools)
        if args.print_mutant:
            print(mutant)
        label, cmd, outcome, stderr, secs = results[-1]
        counts[outcome] += 1
        counts[f"{label}:{outcome}"] += 1
        if outcome.startswith(("crash", "timeout")) or outcome == "failure-without-diagnostic":
            sig = signature(outcome, stderr) if outcome.startswith("crash") else f"{outcome}: {label}"
            entry = crashes.setdefault(sig, {"outcome": outcome, "known": known(stderr) if outcome.startswith("crash") else None,
                                             "count": 0, "first": i, "input": name, "mutations": notes,
                                             "step": label, "command": " ".join(cmd),
                                             "stderr_tail": stderr[-3000:]})
            entry["count"] += 1
            if out and entry["count"] == 1:
                (out / f"mutant-{i}.mlir").write_text(mutant)
                entry["reproducer"] = str(out / f"mutant-{i}.mlir")
            print(f"[{i}] {outcome} ({label}) {name} {notes}" + (f" known: {entry['known']}" if entry["known"] else ""),
                  flush=True)
        i += 1

    elapsed = time.monotonic() - start
    tilec_crashes = [s for s, e in crashes.items() if e["outcome"] == "crash-in-tilec"]
    unknown = [s for s, e in crashes.items() if e["outcome"].startswith("crash") and not e["known"]]
    summary = {"seed": args.seed, "iterations": sum(v for k, v in counts.items() if ":" not in k),
               "seconds": round(elapsed, 1), "outcomes": dict(sorted(counts.items())),
               "crashes": crashes}
    print(f"fuzz: seed {args.seed}, {summary['iterations']} mutants in {elapsed:.0f} s: " +
          ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if ":" not in k))
    for sig, e in crashes.items():
        print(f"  {e['count']}x {sig}" + (f"  [known: {e['known']}]" if e["known"] else "") +
              f"  (first: mutant {e['first']} of {e['input']})")
    if out:
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
    if tilec_crashes or (args.fail_on_any_crash and unknown):
        print(f"fuzz: FAILED: {len(tilec_crashes)} crash(es) in tilec's code"
              + (f", {len(unknown)} unknown crash(es)" if args.fail_on_any_crash else ""))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
