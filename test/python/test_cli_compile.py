"""The child-process compile path (compiler_kind() "cli"): the tilec CLI
compiles what the _tilec extension compiles, into the same cache, with the
same errors; tilec run-cpu runs kernels on the CPU the same way.

The CLIs tried: build/bin/tilec (always built) and, when scripts/bundle.sh
has run, the relocatable build/tilec-bundle/bin/tilec."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tilec
from tilec import compiler
from tilec import language as tl
from tilec.flash_attn import flash_fwd_kernel

from flash_reference import attention_batch

ROOT = Path(__file__).resolve().parents[2]
CLIS = [p for p in (ROOT / "build" / "bin" / "tilec", ROOT / "build" / "tilec-bundle" / "bin" / "tilec")
        if p.exists()]
HAVE_NATIVE = compiler.available()
HAVE_CPU = HAVE_NATIVE and getattr(compiler.native(), "has_cpu_runner", False)

pytestmark = pytest.mark.skipif(not CLIS, reason="no tilec CLI built (scripts/build.sh tilec)")
needs_native = pytest.mark.skipif(not HAVE_NATIVE, reason="the _tilec extension is not built")


class Cli:
    def __init__(self, path, children):
        self.path, self.children = path, children


@pytest.fixture(params=CLIS, ids=lambda p: "bundle" if "tilec-bundle" in str(p) else "build")
def cli(request, monkeypatch, tmp_path):
    """Compiles through this CLI, into an empty cache, counting children."""
    monkeypatch.setenv("TILEC_COMPILER", "cli")
    monkeypatch.setenv("TILEC_CLI", str(request.param))
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path / "cli-cache"))
    monkeypatch.setattr(compiler, "_memory_cache", {})
    monkeypatch.setattr(compiler, "_kind", None)
    children = []
    real = subprocess.run

    def run(cmd, *args, **kwargs):
        if cmd[0] == str(request.param) and "--version" not in cmd:
            children.append(cmd)
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(compiler.subprocess, "run", run)
    return Cli(request.param, children)


def files_of(folder):
    return {p.name: p.read_bytes() for p in Path(folder).iterdir()}


@needs_native
@pytest.mark.parametrize("causal", [False, True])
def test_cli_artifacts_are_byte_identical_to_the_extension(cli, causal, tmp_path, monkeypatch):
    kernel = flash_fwd_kernel().specialize(DTYPE=tl.float16, HEAD_DIM=128, CAUSAL=causal)
    (art,) = compiler.compile_cached(kernel.ir, kernel.source_name, arch="sm_80")
    assert compiler.compiler_kind() == "cli" and len(cli.children) == 1
    assert "cli" in compiler.version()
    monkeypatch.setenv("TILEC_COMPILER", "native")
    compiler.reset_compiler_kind()
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path / "native-cache"))
    (want,) = compiler.compile_cached(kernel.ir, kernel.source_name, arch="sm_80")
    assert want.folder != art.folder and len(cli.children) == 1
    got, expected = files_of(art.folder), files_of(want.folder)
    assert sorted(got) == sorted(expected)
    for name in expected:
        assert got[name] == expected[name], f"{name} differs between the CLI and the extension"
    assert f"{kernel.name}.ptx" in got and f"{kernel.name}.json" in got


@needs_native
@pytest.mark.parametrize("ptxas", ["found", "none"])
def test_cli_results_match_the_extension_with_extra_sass_and_options(cli, ptxas, monkeypatch):
    if ptxas == "none":
        monkeypatch.setenv("TILEC_PTXAS", "")  # no cubins: PTX and a manifest naming only it
    kernel = flash_fwd_kernel().specialize(DTYPE=tl.bfloat16, HEAD_DIM=64, CAUSAL=True)
    options = dict(arch="sm_80", num_warps=4, num_stages=1, smem_epilogue=False,
                   copy_bounds="tile", lowering_options="", extra_sass=("sm_90",))
    (got,) = compiler.compile(kernel.ir, kernel.source_name, **options)
    monkeypatch.setenv("TILEC_COMPILER", "native")
    compiler.reset_compiler_kind()
    (want,) = compiler.compile(kernel.ir, kernel.source_name, **options)
    for key in ("name", "ptx", "cubin", "sass", "manifest", "tile_ir", "llvm_ir", "notes"):
        assert got[key] == want[key], key
    if want["cubin"]:
        assert [a for a, _, _ in got["sass"]] == ["sm_90"]
        assert "registers" in got["ptxas_log"]
    if ptxas == "none":
        assert got["cubin"] == b"" and got["sass"] == [] and "no ptxas found" in got["notes"][0]


def test_second_compile_hits_the_cache_without_a_child(cli):
    kernel = flash_fwd_kernel().specialize(DTYPE=tl.float16, HEAD_DIM=64, CAUSAL=False)
    kernel._compiled.clear()  # compiled by an earlier test
    art = kernel.compile("sm_80")
    assert len(cli.children) == 1 and Path(art.manifest_path).exists()
    # A new process: no memory caches, only the disk cache.
    kernel._compiled.clear()
    compiler._memory_cache.clear()
    assert kernel.compile("sm_80").manifest_path == art.manifest_path
    assert len(cli.children) == 1
    # Other options are another kernel: compiled once more.
    kernel.compile("sm_80", num_stages=1)
    assert len(cli.children) == 2


def test_cli_diagnostics_become_compilation_errors(cli):
    bad = "func.func @f(%a: i32) attributes {tile.kernel} {\n  %0 = tile.iota : tensor<8xi64>\n  return\n}\n"
    with pytest.raises(tilec.CompilationError, match=r"tile.iota") as info:
        compiler.compile(bad, "bad.mlir")
    assert info.value.filename == "bad.mlir" and info.value.lineno == 2
    assert len(cli.children) == 1
    # A CLI-side check (not an MLIR diagnostic) loses the "tilec: error: " prefix.
    with pytest.raises(tilec.CompilationError, match=r"^--arch=sm_70 is not supported"):
        compiler.compile(bad, "bad.mlir", arch="sm_70")
    assert len(cli.children) == 2
    # Knobs Python checks itself are refused before any child starts.
    with pytest.raises(ValueError, match=r"num_warps must be a power of two in \[1, 16\], got 3"):
        compiler.compile(bad, "bad.mlir", num_warps=3)
    assert len(cli.children) == 2


def fake_cli(tmp_path, body):
    path = tmp_path / "tilec"
    path.write_text("#!/bin/sh\n"
                    'if [ "$1" = --version ]; then echo "tilec fake"; exit 0; fi\n' + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_crashing_compiler_stays_in_its_child(tmp_path, monkeypatch):
    cli = fake_cli(tmp_path, 'echo "LLVM ERROR: something broke" >&2\nkill -ABRT $$\n')
    monkeypatch.setenv("TILEC_COMPILER", "cli")
    monkeypatch.setenv("TILEC_CLI", str(cli))
    monkeypatch.setattr(compiler, "_kind", None)
    with pytest.raises(tilec.CompilationError, match=r"crashed \(SIGABRT\)") as info:
        compiler.compile("module {}", "crash.mlir")
    assert "LLVM ERROR: something broke" in str(info.value)


def test_a_cli_that_does_not_run_is_no_compiler(tmp_path, monkeypatch):
    """Auto mode without the extension: a CLI that fails --version (e.g. a
    bundle on a too-old glibc) leaves prebuilt artifacts as the fallback."""
    broken = tmp_path / "tilec"
    broken.write_text("#!/bin/sh\necho 'version GLIBC_2.99 not found' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setattr(compiler, "available", lambda: False)
    monkeypatch.setattr(compiler, "_kind", None)
    monkeypatch.delenv("TILEC_COMPILER", raising=False)
    monkeypatch.setenv("TILEC_CLI", str(broken))
    assert compiler.compiler_kind() is None and not compiler.can_compile()
    monkeypatch.setenv("TILEC_COMPILER", "cli")
    compiler.reset_compiler_kind()
    with pytest.raises(ImportError, match=r"does not run: version GLIBC_2.99 not found"):
        compiler.compile("module {}")
    monkeypatch.setenv("TILEC_CLI", str(CLIS[0]))
    monkeypatch.delenv("TILEC_COMPILER")
    compiler.reset_compiler_kind()
    assert compiler.compiler_kind() == "cli"
    # Decided once: a changed environment counts after reset_compiler_kind().
    monkeypatch.setenv("TILEC_COMPILER", "prebuilt")
    assert compiler.compiler_kind() == "cli"
    compiler.reset_compiler_kind()
    assert compiler.compiler_kind() is None
    monkeypatch.setenv("TILEC_COMPILER", "bogus")
    compiler.reset_compiler_kind()
    with pytest.raises(ValueError, match="TILEC_COMPILER must be native, cli, prebuilt or auto"):
        compiler.compiler_kind()


def test_find_cli_prefers_env_then_the_unpacked_bundle(monkeypatch):
    monkeypatch.setenv("TILEC_CLI", "/somewhere/tilec")
    assert compiler.find_cli() == "/somewhere/tilec"
    monkeypatch.delenv("TILEC_CLI")
    bundle = ROOT / "build" / "tilec-bundle" / "bin" / "tilec"
    if bundle.exists():
        assert compiler.find_cli() == str(bundle)


def reference(q, k, v, scale, causal):
    """float64, causal aligned bottom right as flash_attn (rows that see no key are 0)."""
    return attention_batch(q, k, v, scale, causal)[0]


@pytest.mark.parametrize("causal", [False, True])
def test_run_cpu_through_the_cli_matches_float64(cli, causal):
    rng = np.random.default_rng()
    b, sq, sk, h, d = 1, 70, 45, 2, 80
    q, k, v = (rng.standard_normal((b, s, h, d)).astype(np.float16) for s in (sq, sk, sk))
    out = tilec.flash_attn_func(q, k, v, causal=causal)
    ref = reference(q, k, v, d ** -0.5, causal)
    rel = np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref)
    assert rel < 1e-3, rel
    assert any(c[1] == "run-cpu" for c in cli.children)
    if HAVE_CPU:
        os.environ["TILEC_COMPILER"] = "native"  # restored by the fixture's monkeypatch
        compiler.reset_compiler_kind()
        assert np.array_equal(tilec.flash_attn_func(q, k, v, causal=causal), out)


def test_run_cpu_cli_errors_and_negative_strides(cli):
    kernel = flash_fwd_kernel().specialize(HEAD_DIM=64)
    q = np.zeros((1, 8, 2, 64), np.float16)
    o, lse = np.empty_like(q), np.empty((1, 2, 8), np.float32)
    i32 = np.zeros(1, np.int32)
    args = ([q, q, q, o, lse, 8, 8, 2, 1, 1] + [1] * 14 + [-0.5]
            + [-1, -1, 1.0, np.zeros(1, np.float32), 0, i32, i32, i32, 0])
    scale = 24  # its index
    # The kernel assumes scale > 0: the CLI's runner refuses it as the extension's does.
    with pytest.raises(tilec.CompilationError,
                       match=r"argument 24 \(scale\) of @flash_fwd_f16_d64 must be > 0 .*got -0.5"):
        kernel.run_cpu(*args, grid=(1, 2, 1))
    args[0], args[scale] = q[:, ::-1], 0.125
    with pytest.raises(ValueError, match=r"argument 0 has negative strides"):
        compiler.run_cpu(kernel.ir, kernel.source_name, kernel.name, args,
                         [t for _, t in kernel.params], (1, 2, 1))


def test_dump_ir_env_reaches_the_child(cli, tmp_path):
    code = ("import tilec\nfrom tilec.flash_attn import flash_fwd_kernel\n"
            "flash_fwd_kernel().specialize(HEAD_DIM=64).compile('sm_80')\n")
    env = dict(os.environ, TILEC_DUMP_IR="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "IR Dump After" in proc.stderr and "LLVM IR of @flash_fwd_f16_d64" in proc.stderr
