"""The fuzzer's classification of a child's death (test/fuzz/fuzz_tile_opt.py),
on stack dumps as LLVM's signal handler prints them: the short fuzz run in
lit fails only on crash-in-tilec, so that class must be right."""

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import fuzz_tile_opt as fuzz  # noqa: E402

HANDLER = """Stack dump:
0.\tProgram arguments: build/bin/tile-opt -
{pretty}
 #0 0x00007f2f268b8786 llvm::sys::PrintStackTrace(llvm::raw_ostream&, int) (/usr/lib/llvm-22/lib/libLLVM.so.22.1+0x4eb8786)
 #1 0x00007f2f268b5fd3 llvm::sys::RunSignalHandlers() (/usr/lib/llvm-22/lib/libLLVM.so.22.1+0x4eb5fd3)
 #2 0x00007f2f2145a050 (/lib/x86_64-linux-gnu/libc.so.6+0x3c050)
{frames}
#20 0x0000563a5549bbe0 main (build/bin/tile-opt+0x3bbe0)
#21 0x0000563a5549bad1 _start (build/bin/tile-opt+0x3bad1)
"""


def crash(frames, pretty="1.\tRunning pass 'ConvertTileToNVVM' on module", rc=-11):
    text = HANDLER.format(pretty=pretty, frames="\n".join(
        f" #{i + 3} 0x00005561f8513be0 {fn} ({module}+0x3bbe0)" for i, (fn, module) in enumerate(frames)))
    return fuzz.classify(subprocess.CompletedProcess(["tile-opt"], rc, "", text), "build/bin/tile-opt")


def test_frame_in_the_tool_binary_is_tilec():
    assert crash([("(anonymous namespace)::KernelLowering::run()", "build/bin/tile-opt"),
                  ("mlir::detail::OpToOpPassAdaptor::run()", "/usr/lib/llvm-22/lib/libMLIR.so.22.1")]) \
        == "crash-in-tilec"


def test_crash_in_a_pass_of_mlir_is_mlir():
    assert crash([("mlir::applyPatternsGreedily()", "/usr/lib/llvm-22/lib/libMLIR.so.22.1")]) \
        == "crash-in-mlir"


def test_mlir_parser_crash_even_under_a_tilec_parse_hook():
    assert crash([("mlir::detail::Parser::parseDenseArrayAttr(mlir::Type)", "/usr/lib/llvm-22/lib/libMLIR.so.22.1"),
                  ("mlir::tile::ViewOp::parse()", "build/bin/tile-opt")],
                 pretty="1.\tMLIR Parser: custom op parser 'tile.view'") == "crash-in-mlir-parser"


def test_tilec_parse_hook_crashing_itself_is_tilec():
    assert crash([("mlir::tile::ViewOp::parse()", "build/bin/tile-opt"),
                  ("mlir::detail::Parser::parseOperation()", "/usr/lib/llvm-22/lib/libMLIR.so.22.1")],
                 pretty="1.\tMLIR Parser: custom op parser 'tile.view'") == "crash-in-tilec"


def test_exit_codes_without_a_crash():
    ok = subprocess.CompletedProcess(["tile-opt"], 0, "", "")
    diag = subprocess.CompletedProcess(["tile-opt"], 1, "", "<stdin>:1:1: error: nope\n")
    assert fuzz.classify(ok, "tile-opt") == "ok"
    assert fuzz.classify(diag, "tile-opt") == "diagnostic"


def test_mutants_are_deterministic_by_seed():
    import random
    corpus = fuzz.load_corpus()
    a = fuzz.Mutator(random.Random("5:3"), corpus).mutate(corpus[0][1])
    b = fuzz.Mutator(random.Random("5:3"), corpus).mutate(corpus[0][1])
    assert a == b
