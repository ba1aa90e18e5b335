"""The compiler behind the DSL: the native `_tilec` module, with a disk and
memory cache of compiled kernels, and errors as CompilationError.

Cache key: sha256 of (IR text, arch, options, compiler version). The disk
cache lives in $TILEC_CACHE_DIR (default ~/.cache/tilec); each entry is a
folder holding the runtime's artifact set: <kernel>.json (manifest),
<kernel>.ptx, <kernel>.cubin, plus <kernel>.tile.mlir and <kernel>.ll.
TILEC_DUMP_IR=1 prints the IR after every pass (and bypasses the cache so
there is something to print); TILEC_CRASH_REPRODUCER=<file> writes an MLIR
crash reproducer there when a pass fails.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
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
                          f"`pip install .` ({_native_error})")
    return _native_module


def available():
    try:
        native()
        return True
    except ImportError:
        return False


_build_id = None


def version():
    """The compiler's version plus an id of this build of the extension, so
    a rebuilt compiler never serves kernels cached by an older one."""
    global _build_id
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


def default_arch():
    if os.environ.get("TILEC_ARCH"):
        return os.environ["TILEC_ARCH"]
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return "sm_90a" if major >= 9 else "sm_80"
    except ImportError:
        pass
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


COPY_BOUNDS = ("row", "tile", "chunk")
# Warps per program: a power of two up to 16 (tile-partition-warps; the C++
# side refuses other values too). Pipeline stages: 1 or 2 (tile-pipeline).
MAX_WARPS = 16
NUM_STAGES = (1, 2)


def _integer(value, what):
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{what} must be an int, got {value!r}")
    return value.__index__()


def check_num_warps(value, what="num_warps"):
    """`value` as an int if it is a valid number of warps, else a ValueError
    (TypeError for a non-integer) that names it and the allowed values."""
    n = _integer(value, what)
    if n < 1 or n > MAX_WARPS or n & (n - 1):
        raise ValueError(f"{what} must be a power of two in [1, {MAX_WARPS}], got {value!r}")
    return n


def check_num_stages(value, what="num_stages"):
    n = _integer(value, what)
    if n not in NUM_STAGES:
        raise ValueError(f"{what} must be 1 (one shared buffer per K/V tile) or 2 (a ring), "
                         f"got {value!r}")
    return n


def check_flag(value, what):
    if not isinstance(value, bool) and value not in (0, 1):
        raise TypeError(f"{what} must be a bool, got {value!r}")
    return bool(value)


def compile(text, source_name="<tilec>", arch="sm_80", num_warps=4, run_tile_passes=True,
            num_stages=2, smem_epilogue=True, lowering_options="", copy_bounds="row",
            extra_sass=()):
    """Compiles MLIR text; returns the list of result dicts (see _tilec.compile).
    num_stages: shared buffers per prefetched K/V tile (1 or 2, tile-pipeline).
    smem_epilogue: store narrow register tiles (O) through shared memory as
    16-byte chunks. copy_bounds: how global->shared copies respect the view's
    bounds, one of COPY_BOUNDS (convert-tile-to-nvvm's copy-bounds option:
    'row' sizes each 16-byte chunk 16 or 0 by its row, 'tile' branches once
    per tile to unchecked or checked copies, 'chunk' checks every chunk).
    lowering_options: more tile-to-nvvm options, verbatim
    ("skip-unit-rescale=true"), for experiments. extra_sass: more GPUs to
    assemble the PTX for (("sm_90",) for an sm_80 kernel run on an H100/H200),
    listed in the manifest's "sass" and loaded by the runtime instead of a
    JIT compile of the PTX."""
    if isinstance(extra_sass, str):
        extra_sass = (extra_sass,)
    num_warps = check_num_warps(num_warps)
    num_stages = check_num_stages(num_stages)
    smem_epilogue = check_flag(smem_epilogue, "smem_epilogue")
    if copy_bounds not in COPY_BOUNDS:
        raise ValueError(f"copy_bounds must be one of {COPY_BOUNDS}, got {copy_bounds!r}")
    if "copy-bounds=" in lowering_options:
        raise ValueError("pass the copy-bounds mode as copy_bounds=, not in lowering_options "
                         f"({lowering_options!r})")
    options = f"copy-bounds={copy_bounds} {lowering_options}".strip()
    return _call(native().compile, text, source_name, arch=arch, num_warps=num_warps,
                 stages=num_stages, smem_epilogue=bool(smem_epilogue),
                 lowering_options=options,
                 run_tile_passes=run_tile_passes,
                 print_ir_after_all=_dump_ir(),
                 crash_reproducer=os.environ.get("TILEC_CRASH_REPRODUCER", ""),
                 extra_sass=list(extra_sass))


def _dump_ir():
    return os.environ.get("TILEC_DUMP_IR", "") not in ("", "0")


_memory_cache = {}


def cache_key(text, arch, num_warps, run_tile_passes, num_stages=2, smem_epilogue=True,
              copy_bounds="row"):
    h = hashlib.sha256()
    for part in (version(), arch, str(num_warps), str(num_stages), str(bool(smem_epilogue)),
                 copy_bounds, str(run_tile_passes), text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def compile_cached(text, source_name="<tilec>", arch="sm_80", num_warps=4, run_tile_passes=True,
                   num_stages=2, smem_epilogue=True, copy_bounds="row"):
    """Like compile(), but returns Artifacts and reuses earlier results from
    memory or from the disk cache."""
    key = cache_key(text, arch, num_warps, run_tile_passes, num_stages, smem_epilogue, copy_bounds)
    if key in _memory_cache and not _dump_ir():
        return _memory_cache[key]
    entry = cache_dir() / key[:2] / key
    index = entry / "kernels.txt"
    if index.exists() and not _dump_ir():
        arts = [Artifact(entry, n) for n in index.read_text().split()]
        if all(Path(a.manifest_path).exists() for a in arts):
            _memory_cache[key] = arts
            return arts
    kernels = compile(text, source_name, arch, num_warps, run_tile_passes, num_stages,
                      smem_epilogue, copy_bounds=copy_bounds)
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


def build_options(num_warps=4, num_stages=2, smem_epilogue=True, copy_bounds="row",
                  lowering_options=""):
    """The compile options that change a kernel's code, as one canonical
    string: part of a prebuilt artifact's digest, so that two builds of the
    same IR (the tuner's configurations) are told apart."""
    return (f"num_warps={int(num_warps)} num_stages={int(num_stages)} "
            f"smem_epilogue={bool(smem_epilogue)} copy_bounds={copy_bounds} {lowering_options}").strip()


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
    dims); None if there is none. Lets a GPU host without LLVM launch DSL
    kernels."""
    folders = os.environ.get("TILEC_ARTIFACTS")
    default = Path(__file__).resolve().parents[2] / "build" / "artifacts"
    folders = folders.split(os.pathsep) if folders else [default, default / "extra"]
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
    (written in place), the rest Python numbers, in parameter order."""
    mod = native()
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


__all__ = ["CompilationError", "Artifact", "compile", "compile_cached", "parse_and_verify",
           "run_pipeline", "run_cpu", "write_artifacts", "default_arch", "cache_dir"]
