"""The compiler behind the DSL: the native `_tilec` module, with a disk and
memory cache of compiled kernels, and errors as CompilationError.

Cache key: sha256 of (IR text, arch, options, compiler version). The disk
cache lives in $TILEC_CACHE_DIR (default ~/.cache/tilec); each entry is a
folder holding the runtime's artifact set: <kernel>.json (manifest),
<kernel>.ptx, <kernel>.cubin, plus <kernel>.tile.mlir and <kernel>.ll.
TILEC_DUMP_IR=1 prints the IR after every pass (and bypasses the cache so
there is something to print); TILEC_CRASH_REPRODUCER=<file> writes an MLIR
crash reproducer there when a pass fails.

Without the extension (a GPU host with no LLVM), compile() runs the tilec
CLI in a child process instead (find_cli(): $TILEC_CLI, the relocatable
bundle of scripts/bundle.sh unpacked at <repo>/build/tilec-bundle, or tilec
on PATH) and returns the same results; $TILEC_COMPILER=native|cli forces one
(compiler_kind()).
"""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from .errors import CompilationError, from_diagnostics

_native_module = None
_native_error = None


def native():
    """The `_tilec` extension; raises ImportError saying how to build it."""
    global _native_module, _native_error
    if _native_module is None and _native_error is None:
        try:
            from . import _tilec as mod  # installed by pip
        except ImportError as installed:
            try:
                import _tilec as mod  # build tree: <build>/python on sys.path
            except ImportError as e:
                # Report the installed module's failure (e.g. a missing
                # libMLIR) rather than the fallback's "no module named".
                _native_error = e if isinstance(installed, ModuleNotFoundError) else installed
                mod = None
        _native_module = mod
    if _native_module is None:
        raise ImportError("the tilec compiler extension _tilec is not available: build it with "
                          "`scripts/build.sh _tilec` and put build/python on PYTHONPATH, or "
                          f"`pip install .` ({_native_error}); to compile kernels without it, "
                          "give the tilec CLI in $TILEC_CLI (scripts/bundle.sh builds one that "
                          "runs on any Linux host)")
    return _native_module


def available():
    try:
        native()
        return True
    except ImportError:
        return False


def find_cli():
    """The tilec CLI that compile() runs when the extension is missing:
    $TILEC_CLI, else scripts/bundle.sh's bundle unpacked at
    <repo>/build/tilec-bundle (or <site-packages>/tilec-bundle beside an
    installed package), else `tilec` on PATH; None if there is none."""
    explicit = os.environ.get("TILEC_CLI")
    if explicit:
        return explicit
    here = Path(__file__).resolve()
    for bundle in (here.parents[2] / "build" / "tilec-bundle", here.parents[1] / "tilec-bundle"):
        tool = bundle / "bin" / "tilec"
        if os.access(tool, os.X_OK):
            return str(tool)
    return shutil.which("tilec")


_cli_versions = {}


def _cli_version(path):
    """(id, None) for a CLI that runs: `tilec --version` and a hash of the
    binary, the cache key's compiler id; (None, why) for one that does not
    (missing, or built for a newer glibc)."""
    found = _cli_versions.get(path)
    if found is None:
        try:
            proc = subprocess.run([path, "--version"], capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=120)
            why = None if proc.returncode == 0 and proc.stdout.startswith("tilec ") else (
                (proc.stderr or proc.stdout).strip() or f"exit code {proc.returncode}")
        except (OSError, subprocess.SubprocessError) as e:
            why = str(e)
        if why is None:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            found = (f"{proc.stdout.strip()} cli {h.hexdigest()[:16]}", None)
        else:
            found = (None, f"the tilec CLI {path} does not run: {why}")
        _cli_versions[path] = found
    return found


_kind = None  # (kind or "",) once decided


def compiler_kind():
    """Which compiler compile() runs: "native" (the _tilec extension, in this
    process), "cli" (the tilec CLI, find_cli(), in a child process) or None
    (neither: only prebuilt artifacts, find_prebuilt, can launch).
    $TILEC_COMPILER=native|cli forces one, =prebuilt none; unset (or auto):
    native if the extension imports, else a CLI that runs. Decided once (it
    is on the launch path); reset_compiler_kind() decides again."""
    global _kind
    if _kind is None:
        want = os.environ.get("TILEC_COMPILER", "")
        if want in ("native", "cli"):
            kind = want
        elif want == "prebuilt":
            kind = ""
        elif want not in ("", "auto"):
            raise ValueError(f"TILEC_COMPILER must be native, cli, prebuilt or auto, got {want!r}")
        elif available():
            kind = "native"
        else:
            path = find_cli()
            kind = "cli" if path and _cli_version(path)[0] else ""
        _kind = (kind,)
    return _kind[0] or None


def reset_compiler_kind():
    """Makes compiler_kind() decide again (after $TILEC_COMPILER or
    $TILEC_CLI changed)."""
    global _kind
    _kind = None


def can_compile():
    """Whether compile() has a compiler here (compiler_kind())."""
    return compiler_kind() is not None


def _require_cli():
    path = find_cli()
    if path is None:
        raise ImportError("no tilec CLI to compile with: set $TILEC_CLI, run scripts/bundle.sh "
                          "(build/tilec-bundle/bin/tilec), or put tilec on PATH")
    if _cli_version(path)[0] is None:
        raise ImportError(_cli_version(path)[1])
    return path


_build_id = None


def version():
    """The compiler's version plus an id of this build of the extension (or
    of the CLI), so a rebuilt compiler never serves kernels cached by an
    older one."""
    global _build_id
    if compiler_kind() == "cli":
        return _cli_version(_require_cli())[0]
    if _build_id is None:
        mod = native()
        h = hashlib.sha256()
        with open(mod.__file__, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _build_id = f"{mod.version()} build {h.hexdigest()[:16]}"
    return _build_id


def _call(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except native().Error as e:
        raise from_diagnostics(str(e)) from None


def parse_and_verify(text, source_name="<tilec>"):
    """Parses and verifies MLIR text (with the `_tilec` module, or the
    tile-opt binary when the module is not built)."""
    if available():
        _call(native().parse_and_verify, text, source_name)
        return
    tool = find_tile_opt()
    if tool is None:
        raise ImportError("neither the _tilec extension nor tile-opt is available")
    proc = subprocess.run([tool, "-"], input=text, capture_output=True, text=True)
    if proc.returncode:
        raise from_diagnostics(proc.stderr)


def find_tile_opt():
    if os.environ.get("TILEC_OPT"):
        return os.environ["TILEC_OPT"]
    root = Path(__file__).resolve().parents[2]
    for build in sorted(root.glob("build*")):
        tool = build / "bin" / "tile-opt"
        if tool.exists():
            return str(tool)
    return shutil.which("tile-opt")


def run_pipeline(text, pipeline, source_name="<tilec>"):
    return _call(native().run_pipeline, text, pipeline, source_name)


def default_arch(device=None):
    """$TILEC_ARCH, else the arch of GPU `device` (an index; default the
    current one; arch_for_capability), else sm_80."""
    if os.environ.get("TILEC_ARCH"):
        return os.environ["TILEC_ARCH"]
    try:
        import torch

        if torch.cuda.is_available():
            return arch_for_capability(*torch.cuda.get_device_capability(device))
    except ImportError:
        pass
    return "sm_80"


def arch_for_capability(major, minor=0):
    """The arch tilec compiles for on a GPU of compute capability
    (major, minor): sm_90a on Hopper (9.x); sm_90 on data-center Blackwell
    (10.x: sm_90a code does not run there, plain sm_90 PTX is JIT-compiled
    forward, and it has Hopper's 227 KB of shared memory per block, which
    the strategy tables' sm_90 entries take); sm_80 on the others (8.x, and
    12.x with its 99 KB), whose PTX the driver JIT-compiles for them."""
    if major == 9:
        return "sm_90a"
    if major == 10:
        return "sm_90"
    return "sm_80"


def cache_dir():
    return Path(os.environ.get("TILEC_CACHE_DIR") or Path.home() / ".cache" / "tilec")


class Artifact:
    """One compiled kernel, with its files in a folder the runtime can load."""

    def __init__(self, folder, name):
        self.folder = Path(folder)
        self.name = name

    @property
    def manifest_path(self):
        return str(self.folder / f"{self.name}.json")

    @property
    def manifest(self):
        return json.loads((self.folder / f"{self.name}.json").read_text())

    @property
    def ptx(self):
        return (self.folder / f"{self.name}.ptx").read_text()

    @property
    def cubin(self):
        path = self.folder / f"{self.name}.cubin"
        return path.read_bytes() if path.exists() else b""

    @property
    def tile_ir(self):
        return (self.folder / f"{self.name}.tile.mlir").read_text()

    @property
    def llvm_ir(self):
        return (self.folder / f"{self.name}.ll").read_text()

    def __repr__(self):
        return f"<tilec.Artifact {self.name} in {self.folder}>"


def write_artifacts(kernel, folder, extras=True):
    """Writes one compile() result dict as <name>.json/.ptx/.cubin (and
    <name>.<arch>.cubin for each extra_sass image the manifest lists) into
    `folder`, with extras also <name>.tile.mlir and <name>.ll."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = kernel["name"]
    (folder / f"{name}.json").write_text(kernel["manifest"])
    (folder / f"{name}.ptx").write_text(kernel["ptx"])
    if kernel["cubin"]:
        (folder / f"{name}.cubin").write_bytes(kernel["cubin"])
    for _, file, image in kernel.get("sass", ()):
        (folder / file).write_bytes(image)
    if extras:
        (folder / f"{name}.tile.mlir").write_text(kernel["tile_ir"])
        (folder / f"{name}.ll").write_text(kernel["llvm_ir"])
    return Artifact(folder, name)


# The strategy record and its checks live in strategy.py (one definition);
# these names stay importable from here.
from .strategy import (COPY_BOUNDS, MAX_WARPS, NUM_STAGES, Strategy,  # noqa: E402,F401
                       check_copy_bounds, check_flag, check_num_stages, check_num_warps)


def _strategy(strategy, num_warps, num_stages, smem_epilogue, copy_bounds, lowering_options):
    """`strategy` (default: Strategy()) with the knobs given (not None)
    replacing its fields, checked."""
    base = strategy if strategy is not None else Strategy()
    return base.replace(num_warps=num_warps, num_stages=num_stages, smem_epilogue=smem_epilogue,
                        copy_bounds=copy_bounds, lowering_options=lowering_options).checked()


def compile(text, source_name="<tilec>", arch="sm_80", num_warps=None, run_tile_passes=True,
            num_stages=None, smem_epilogue=None, lowering_options=None, copy_bounds=None,
            extra_sass=(), strategy=None):
    """Compiles MLIR text; returns the list of result dicts (see _tilec.compile).
    strategy: a tilec.strategy.Strategy (default: its defaults); the knobs
    num_warps, num_stages, smem_epilogue, copy_bounds and lowering_options,
    when given, replace its fields (see Strategy). extra_sass: more GPUs to
    assemble the PTX for (("sm_90",) for an sm_80 kernel run on an H100/H200),
    listed in the manifest's "sass" and loaded by the runtime instead of a
    JIT compile of the PTX."""
    if isinstance(extra_sass, str):
        extra_sass = (extra_sass,)
    s = _strategy(strategy, num_warps, num_stages, smem_epilogue, copy_bounds, lowering_options)
    if compiler_kind() == "cli":
        return _compile_cli(text, source_name, arch=arch, strategy=s,
                            run_tile_passes=run_tile_passes,
                            print_ir_after_all=_dump_ir(),
                            crash_reproducer=os.environ.get("TILEC_CRASH_REPRODUCER", ""),
                            extra_sass=list(extra_sass))
    return _call(native().compile, text, source_name, arch=arch, num_warps=s.num_warps,
                 stages=s.num_stages, smem_epilogue=s.smem_epilogue,
                 copy_bounds=s.copy_bounds, lowering_options=s.lowering_options,
                 run_tile_passes=run_tile_passes,
                 print_ir_after_all=_dump_ir(),
                 crash_reproducer=os.environ.get("TILEC_CRASH_REPRODUCER", ""),
                 extra_sass=list(extra_sass))


def _compile_cli(text, source_name, arch, strategy, run_tile_passes, print_ir_after_all,
                 crash_reproducer, extra_sass):
    """_tilec.compile through the tilec CLI in a child process (an LLVM abort
    stays there): the same options as tilec's flags, the same result dicts,
    read back from the files `tilec --emit=all -o DIR --results=FILE` writes;
    a failure raises CompilationError with the CLI's diagnostics."""
    cli = _require_cli()
    with tempfile.TemporaryDirectory(prefix="tilec-cli.") as tmp:
        out, results = Path(tmp) / "out", Path(tmp) / "results.json"
        cmd = [cli, f"--source-name={source_name}", f"--arch={arch}",
               f"--num-warps={strategy.num_warps}", f"--stages={strategy.num_stages}",
               f"--smem-epilogue={'true' if strategy.smem_epilogue else 'false'}",
               f"--copy-bounds={strategy.copy_bounds}",
               f"--lowering-options={strategy.lowering_options}", "--emit=all", "-o", str(out),
               f"--results={results}"]
        if not run_tile_passes:
            cmd.append("--no-tile-passes")
        if print_ir_after_all:
            cmd.append("--mlir-print-ir-after-all")
        if crash_reproducer:
            cmd.append(f"--crash-reproducer={crash_reproducer}")
        if extra_sass:
            cmd.append("--extra-sass=" + ",".join(extra_sass))
        try:
            proc = subprocess.run(cmd, input=text.encode(), capture_output=True)
        except OSError as e:
            raise CompilationError(f"cannot run the tilec CLI {cli}: {e}") from None
        stderr = proc.stderr.decode(errors="replace")
        if print_ir_after_all:
            sys.stderr.write(stderr)
        if proc.returncode:
            raise _cli_error(cli, proc.returncode, stderr, source_name)
        kernels = []
        for entry in json.loads(results.read_bytes()):
            name = entry["name"]
            manifest = (out / f"{name}.json").read_bytes().decode()
            files = json.loads(manifest)
            tile = out / f"{name}.tile.mlir"
            kernels.append({
                "name": name,
                "ptx": (out / f"{name}.ptx").read_bytes().decode(),
                "cubin": (out / files["cubin"]).read_bytes() if files.get("cubin") else b"",
                "sass": [(image["arch"], image["cubin"], (out / image["cubin"]).read_bytes())
                         for image in files.get("sass", ())],
                "manifest": manifest,
                "tile_ir": tile.read_bytes().decode() if tile.exists() else "",
                "llvm_ir": (out / f"{name}.ll").read_bytes().decode(),
                "ptxas_log": entry.get("ptxas_log", ""),
                "notes": entry.get("notes", []),
            })
        return kernels


def _cli_error(cli, returncode, stderr, what):
    """The CompilationError for a failed child `tilec`: its diagnostics as the
    extension would raise them, or, for a crash, the signal and its output."""
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode).name
        except ValueError:
            sig = f"signal {-returncode}"
        return CompilationError(f"the tilec compiler crashed ({sig}) on {what} in a child "
                                f"process ({cli}); its output:\n{stderr.strip()}")
    # The CLI prefixes errors that are not MLIR diagnostics ("tilec: error: ",
    # "run-cpu: "); the extension raises the message itself.
    lines = [re.sub(r"^(tilec: error: |run-cpu: )", "", line) for line in stderr.splitlines()]
    return from_diagnostics("\n".join(lines), fallback=f"the tilec CLI failed (exit code "
                                                       f"{returncode}) on {what}")


def _dump_ir():
    return os.environ.get("TILEC_DUMP_IR", "") not in ("", "0")


_memory_cache = {}


def cache_key(text, arch, strategy, run_tile_passes):
    """The compile cache's key: the compiler, the arch, the strategy record's
    canonical form (Strategy.key(), as in prebuilt digests) and the IR."""
    h = hashlib.sha256()
    for part in (version(), arch, strategy.key(), str(run_tile_passes), text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def compile_cached(text, source_name="<tilec>", arch="sm_80", strategy=None, run_tile_passes=True,
                   **knobs):
    """Like compile(), but returns Artifacts and reuses earlier results from
    memory or from the disk cache. `knobs` (num_warps=, ...) replace fields
    of `strategy` as in compile()."""
    s = _strategy(strategy, knobs.pop("num_warps", None), knobs.pop("num_stages", None),
                  knobs.pop("smem_epilogue", None), knobs.pop("copy_bounds", None),
                  knobs.pop("lowering_options", None))
    if knobs:
        raise TypeError(f"compile_cached: unexpected arguments {sorted(knobs)}")
    key = cache_key(text, arch, s, run_tile_passes)
    if key in _memory_cache and not _dump_ir():
        return _memory_cache[key]
    entry = cache_dir() / key[:2] / key
    index = entry / "kernels.txt"
    if index.exists() and not _dump_ir():
        arts = [Artifact(entry, n) for n in index.read_text().split()]
        if all(Path(a.manifest_path).exists() for a in arts):
            _memory_cache[key] = arts
            return arts
    kernels = compile(text, source_name, arch, run_tile_passes=run_tile_passes, strategy=s)
    # Write to a private folder, then rename: concurrent compilers of the same
    # kernel never see a half-written entry.
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=key[:8] + ".", dir=entry.parent))
    for k in kernels:
        write_artifacts(k, tmp)
    (tmp / "kernels.txt").write_text("\n".join(k["name"] for k in kernels) + "\n")
    try:
        os.replace(tmp, entry)
    except OSError:  # another process won the race (or an old entry is there)
        shutil.rmtree(entry, ignore_errors=True)
        try:
            os.replace(tmp, entry)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    arts = [Artifact(entry, k["name"]) for k in kernels]
    _memory_cache[key] = arts
    return arts


def build_options(num_warps=None, num_stages=None, smem_epilogue=None, copy_bounds=None,
                  lowering_options=None):
    """Strategy(...).key() of these knobs (the rest: the defaults): the
    canonical form a prebuilt artifact's digest is keyed by."""
    return Strategy().replace(num_warps=num_warps, num_stages=num_stages,
                              smem_epilogue=smem_epilogue, copy_bounds=copy_bounds,
                              lowering_options=lowering_options).key()


def ir_digest(text, options=""):
    """Hash of IR text without its locations (which hold absolute paths), so
    prebuilt artifacts match the same kernel checked out elsewhere, and of
    the compile options (build_options) it was built with."""
    h = hashlib.sha256(re.sub(r'loc\("[^"]*":\d+:\d+\)', "", text).encode())
    h.update(b"\0" + options.encode())
    return h.hexdigest()


def write_digest(folder, name, text, options):
    (Path(folder) / f"{name}.irhash").write_text(ir_digest(text, options) + "\n")


def find_prebuilt(name, text, arch=None, options=None):
    """An artifact set for this exact IR and these compile options
    (build_options(); default: the defaults) written by
    scripts/build_artifacts.py, in $TILEC_ARTIFACTS (folders separated by
    ':') or <repo>/build/artifacts (and its extra/ folder of other head
    dims and variants/ folder of flash_attn's variants); None if there is none. Lets a GPU host without LLVM launch DSL
    kernels."""
    folders = os.environ.get("TILEC_ARTIFACTS")
    default = Path(__file__).resolve().parents[2] / "build" / "artifacts"
    folders = folders.split(os.pathsep) if folders else [default, default / "extra",
                                                         default / "variants"]
    digest = ir_digest(text, build_options() if options is None else options)
    for folder in folders:
        folder = Path(folder)
        stamp = folder / f"{name}.irhash"
        if stamp.exists() and stamp.read_text().strip() == digest:
            art = Artifact(folder, name)
            if arch is None or art.manifest.get("arch") == arch:
                return art
    return None


def _byte_bounds(array):
    try:
        from numpy.lib.array_utils import byte_bounds  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy import byte_bounds
    return byte_bounds(array)


def run_cpu(text, source_name, kernel, args, param_types, grid, run_tile_passes=True):
    """Runs `kernel` of `text` on the host; pointer args are numpy arrays
    (written in place), the rest Python numbers, in parameter order. Needs
    the _tilec extension, or else (compiler_kind() "cli") runs
    `tilec run-cpu` in a child process over copies of the arrays."""
    if compiler_kind() == "cli":
        return _run_cpu_cli(text, source_name, kernel, args, param_types, grid, run_tile_passes)
    try:
        mod = native()
    except ImportError as e:
        raise ImportError(f"the CPU runner needs the _tilec extension or a tilec CLI: {e}") from None
    if not getattr(mod, "has_cpu_runner", False):
        raise NotImplementedError("this build of the _tilec extension has no CPU runner "
                                  "(tilec::runOnCPU, lib/CPU)")
    packed = []
    for value, ty in zip(args, param_types):
        kind = "ptr" if str(ty).startswith("!tile.ptr") else str(ty)
        if kind == "ptr":
            if any(stride < 0 for stride in value.strides):
                # Reaches below its first element: the runner checks only
                # buffers addressed from their start, so this one is not.
                packed.append((kind, value.ctypes.data))
                continue
            # The bytes the array reaches from its first element on: the
            # runner refuses (and reports) kernel accesses beyond them.
            _, high = _byte_bounds(value)
            packed.append((kind, (value.ctypes.data, high - value.ctypes.data)))
        else:
            packed.append((kind, value))
    return _call(mod.run_cpu, text, source_name, kernel, packed, tuple(grid), run_tile_passes)


def _run_cpu_cli(text, source_name, kernel, args, param_types, grid, run_tile_passes):
    """run_cpu through `tilec run-cpu`: each array's bytes (from its first
    element to the last it reaches) go to a file the child reads and writes
    back, and are copied back into the array after the run."""
    import ctypes

    cli = _require_cli()
    with tempfile.TemporaryDirectory(prefix="tilec-run-cpu.") as tmp:
        src = Path(tmp) / "kernel.mlir"
        src.write_text(text)
        cmd = [cli, "run-cpu", str(src), "--kernel", kernel, "--source-name", source_name,
               "--grid", ",".join(str(int(g)) for g in grid)]
        if not run_tile_passes:
            cmd.append("--no-tile-passes")
        buffers = []
        for i, (value, ty) in enumerate(zip(args, param_types)):
            if not str(ty).startswith("!tile.ptr"):
                kind = str(ty)
                number = repr(float(value)) if kind.startswith("f") else str(int(value))
                cmd += ["--arg", f"{kind}:{number}"]
                continue
            if any(stride < 0 for stride in value.strides):
                raise ValueError(f"run_cpu: argument {i} has negative strides {value.strides}, "
                                 "which the tilec run-cpu CLI cannot pass; give a copy")
            low, high = _byte_bounds(value)
            path = Path(tmp) / f"arg{i}.bin"
            path.write_bytes(ctypes.string_at(low, high - low))
            buffers.append((path, low, high - low))
            cmd += ["--arg", f"ptr:{path}"]
        proc = subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL)
        if proc.returncode:
            raise _cli_error(cli, proc.returncode, proc.stderr.decode(errors="replace"),
                             f"{kernel} (run-cpu)")
        for path, address, size in buffers:
            data = path.read_bytes()
            if len(data) != size:
                raise RuntimeError(f"tilec run-cpu wrote {len(data)} bytes to {path.name}, "
                                   f"expected {size}")
            ctypes.memmove(address, data, size)


__all__ = ["CompilationError", "Artifact", "compile", "compile_cached", "parse_and_verify",
           "run_pipeline", "run_cpu", "write_artifacts", "default_arch", "cache_dir", "compiler_kind",
           "can_compile", "find_cli", "reset_compiler_kind"]
