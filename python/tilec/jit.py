"""``@tilec.jit``: specialize, compile, cache and launch DSL kernels."""

import functools
import inspect
import re

from . import compiler, frontend
from .strategy import Strategy
from .errors import CompilationError

_DEFAULT = Strategy()

# numpy dtype names of the element types (CPU path).
_NUMPY_DTYPE = {"f16": "float16", "f32": "float32", "i32": "int32", "i64": "int64"}


class LaunchCache(dict):
    """key -> a ready launcher: the one lookup on a public entry point's hot
    path (docs/DESIGN.md, "The launch path").

    The key is whatever selects a kernel at a call (dtype, head dim, variant
    flags, device index, ...), made of hashable Python values the caller has
    at hand; the value is what ``build(key)`` returned on the first miss —
    typically ``Kernel.launcher(device=...)``: the kernel specialized,
    compiled or found prebuilt, its manifest read and validated, its images
    loaded. A hit is one dict lookup (``cache[key]``); nothing is generated,
    hashed or read from disk. Concurrent misses of one key may both build;
    the results are equivalent and the last one stays.
    """

    __slots__ = ("build",)

    def __init__(self, build):
        super().__init__()
        self.build = build

    def __missing__(self, key):
        value = self.build(key)
        self[key] = value
        return value


class JITFunction:
    """A kernel written in the tile language. ``specialize(**constexprs)``
    gives a `Kernel` (MLIR text, compile, launch); calling the JITFunction
    directly with ``grid=``-free arguments is not supported because each set
    of constexprs is a different kernel."""

    def __init__(self, fn, grid, name=None, variant=None, num_warps=None, num_stages=None,
                 smem_epilogue=None, copy_bounds=None, early_refill=None,
                 lowering_options=None):
        # Knobs given as numbers are checked here, at the decorator; a name
        # of a constexpr is checked when the kernel is specialized. None:
        # the strategy record's default (tilec.strategy.Strategy).
        num_warps = _DEFAULT.num_warps if num_warps is None else num_warps
        num_stages = _DEFAULT.num_stages if num_stages is None else num_stages
        smem_epilogue = _DEFAULT.smem_epilogue if smem_epilogue is None else smem_epilogue
        copy_bounds = _DEFAULT.copy_bounds if copy_bounds is None else copy_bounds
        if not isinstance(num_warps, str):
            compiler.check_num_warps(num_warps, f"{fn.__name__}: num_warps")
        if not isinstance(num_stages, str):
            compiler.check_num_stages(num_stages, f"{fn.__name__}: num_stages")
        if not isinstance(smem_epilogue, str):
            compiler.check_flag(smem_epilogue, f"{fn.__name__}: smem_epilogue")
        early_refill = False if early_refill is None else early_refill
        if not isinstance(early_refill, str):
            early_refill = compiler.check_flag(early_refill, f"{fn.__name__}: early_refill")
        self.fn = fn
        self.grid = grid
        self.name = name
        self.variant = variant
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.smem_epilogue = smem_epilogue
        self.copy_bounds = copy_bounds
        self.early_refill = early_refill
        # More tile-to-nvvm options ("warp-blocks=true"), or the name of a
        # constexpr holding them (a per-variant choice of the strategy table).
        self.lowering_options = "" if lowering_options is None else lowering_options
        if not isinstance(self.lowering_options, str):
            raise TypeError(f"{fn.__name__}: lowering_options must be a string, got "
                            f"{type(self.lowering_options).__name__}")
        self._kernels = {}
        functools.update_wrapper(self, fn)

    def _kernel_name(self, constexprs):
        if self.name is None:
            return self.fn.__name__
        if callable(self.name):
            return self.name(**constexprs)
        return self.name.format(**{k: str(v) for k, v in constexprs.items()})

    def _variant(self, constexprs):
        if self.variant is None:
            return None
        if callable(self.variant):
            return dict(self.variant(**constexprs))
        # A dict whose string values naming a constexpr are replaced by its value.
        return {k: constexprs[v] if isinstance(v, str) and v in constexprs else v
                for k, v in self.variant.items()}

    def specialize(self, **constexprs):
        """The kernel for these constexpr values (cached)."""
        # Python functions (score_mod, mask_mod) are keyed by their code and
        # what they capture, not by repr (an address that can be reused).
        key = tuple(sorted((k, frontend.static_key(v)) for k, v in constexprs.items()))
        kernel = self._kernels.get(key)
        if kernel is None:
            # Defaults of constexpr parameters count too: resolve them first.
            sig = inspect.signature(self.fn)
            full = {n: p.default for n, p in sig.parameters.items()
                    if p.default is not inspect.Parameter.empty}
            full.update(constexprs)
            # `name` and `variant` may be the user's functions of the
            # constexprs; a wrong constexpr (DTYPE=3) fails inside them first.
            try:
                name = self._kernel_name(full)
                variant = self._variant(full)
            except Exception as e:
                given = ", ".join(f"{k}={v!r}" for k, v in sorted(constexprs.items()))
                raise TypeError(f"{self.fn.__name__}: the kernel's name/variant could not be formed "
                                f"from the constexprs ({given}): {type(e).__name__}: {e}") from e
            text, params, bound = frontend.generate(self.fn, constexprs, name, self.grid, variant)
            kernel = Kernel(self, name, text, params, bound)
            kernel.num_warps = self._launch_knob("num_warps", self.num_warps, full,
                                                 compiler.check_num_warps)
            kernel.num_stages = self._launch_knob("num_stages", self.num_stages, full,
                                                  compiler.check_num_stages)
            kernel.smem_epilogue = self._launch_knob("smem_epilogue", self.smem_epilogue, full,
                                                     compiler.check_flag)
            kernel.copy_bounds = self._copy_bounds(full)
            kernel.early_refill = self._launch_knob("early_refill", self.early_refill, full,
                                                    compiler.check_flag)
            kernel.lowering_options = self._lowering_options(full)
            self._kernels[key] = kernel
        return kernel

    def _launch_knob(self, what, value, constexprs, check):
        """`num_warps`/`num_stages`/`smem_epilogue` is a value, or the name of
        a constexpr that holds it (a knob the strategy table and the tuner
        set per variant); `check` refuses what the compiler cannot use,
        naming the knob (and the constexpr) and the allowed values."""
        if isinstance(value, str):
            if value not in constexprs:
                raise TypeError(f"{self.fn.__name__}: {what} names the constexpr "
                                f"'{value}', which the kernel does not declare")
            return check(constexprs[value], f"{self.fn.__name__}: {what} (the constexpr {value})")
        return check(value, f"{self.fn.__name__}: {what}")

    def _copy_bounds(self, constexprs):
        """`copy_bounds` is one of compiler.COPY_BOUNDS or, when it is not,
        the name of a constexpr holding one."""
        value = self.copy_bounds
        if value not in compiler.COPY_BOUNDS:
            if value not in constexprs:
                raise TypeError(f"{self.fn.__name__}: copy_bounds must be one of "
                                f"{compiler.COPY_BOUNDS} or name a constexpr, got {value!r}")
            value = constexprs[value]
            if value not in compiler.COPY_BOUNDS:
                raise ValueError(f"{self.fn.__name__}: copy_bounds must be one of "
                                 f"{compiler.COPY_BOUNDS}, got {value!r}")
        return value

    def _lowering_options(self, constexprs):
        """`lowering_options` is the name of a constexpr holding them, or the
        options themselves."""
        value = self.lowering_options
        if value.isidentifier() and value in constexprs:
            value = constexprs[value]
            if not isinstance(value, str):
                raise TypeError(f"{self.fn.__name__}: lowering_options (the constexpr "
                                f"{self.lowering_options}) must be a string, got {value!r}")
        return " ".join(value.split())

    def mlir(self, **constexprs):
        return self.specialize(**constexprs).ir

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self.fn.__name__} is a @tilec.jit kernel: call "
                        f"{self.fn.__name__}.specialize(**constexprs)(*args) to launch it")

    def __repr__(self):
        return f"<tilec.jit {self.fn.__module__}.{self.fn.__qualname__}>"


class Kernel:
    """One specialization: MLIR text, compiled artifacts, launchers."""

    def __init__(self, jit_fn, name, ir, params, constexprs):
        self.jit_fn = jit_fn
        self.name = name
        self.ir = ir
        self.params = params  # [(name, type)] in launch order
        self.constexprs = constexprs
        # JITFunction.specialize sets the knobs that name constexprs.
        self.num_warps = jit_fn.num_warps if isinstance(jit_fn.num_warps, int) else _DEFAULT.num_warps
        self.num_stages = jit_fn.num_stages if isinstance(jit_fn.num_stages, int) else _DEFAULT.num_stages
        self.smem_epilogue = (jit_fn.smem_epilogue if isinstance(jit_fn.smem_epilogue, bool)
                              else _DEFAULT.smem_epilogue)
        self.copy_bounds = (jit_fn.copy_bounds if jit_fn.copy_bounds in compiler.COPY_BOUNDS
                            else _DEFAULT.copy_bounds)
        self.early_refill = getattr(jit_fn, "early_refill", False) is True
        self.lowering_options = _DEFAULT.lowering_options
        self._compiled = {}
        self._launchers = {}
        self._mask = None

    def mask_analysis(self):
        """What tile-split-masked-loops makes of the kernel's masks:
        {"mask": "split" | "dense" | "none", "note": its remark}. "split":
        K/V blocks classified at compile time (skipped, unmasked, masked);
        "dense": the mask is applied in every block that runs (correct,
        slower; the note says what could not be classified, where, and
        whether blocks it hides entirely are still skipped). The same fields
        are in the launch manifest ("mask", "mask_note")."""
        if self._mask is None and not compiler.available():
            # No in-process compiler (a GPU host with the CLI bundle, or only
            # prebuilt artifacts): the compiled kernel's manifest carries the
            # same verdict.
            import json

            with open(self.compile().manifest_path) as f:
                manifest = json.load(f)
            kernels = manifest.get("kernels", [manifest])
            entry = next((k for k in kernels if "mask" in k), manifest)
            self._mask = {"mask": entry.get("mask", "none"), "note": entry.get("mask_note", "")}
        if self._mask is None:
            out = compiler.run_pipeline(self.ir, "builtin.module(tile-split-masked-loops)",
                                        self.source_name)
            kind = re.search(r'tile\.mask = "(\w+)"', out)
            note = re.search(r'tile\.mask_note = "((?:[^"\\]|\\.)*)"', out)
            text = note.group(1) if note else ""
            text = re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), text)
            self._mask = {"mask": kind.group(1) if kind else "none",
                          "note": text.replace("\\\\", "\\")}
        return dict(self._mask)

    @property
    def strategy(self):
        """This kernel's own strategy record (tilec.strategy.Strategy);
        early_refill adds the lowering option early-refill=true."""
        opts = " ".join(o for o in (self.lowering_options,
                                    "early-refill=true" if self.early_refill else "") if o)
        return Strategy(self.num_warps, self.num_stages, self.smem_epilogue, self.copy_bounds, opts)

    def build_options(self):
        """The canonical form (Strategy.key()) of this kernel's own knobs."""
        return self.strategy.key()

    def __repr__(self):
        sig = ", ".join(f"{n}: {t}" for n, t in self.params)
        return f"<tilec.Kernel {self.name}({sig})>"

    @property
    def source_name(self):
        """The MLIR buffer's name: ops carry Python locations, so only a
        malformed-IR error (a tilec bug) would point into this buffer."""
        return f"<generated IR of {self.name}>"

    def verify(self):
        """Parses and verifies the generated IR; raises CompilationError."""
        compiler.parse_and_verify(self.ir, self.source_name)

    def compile(self, arch=None, num_warps=None, run_tile_passes=True, num_stages=None,
                smem_epilogue=None, copy_bounds=None):
        """The compiled artifact (a compiler.Artifact) for `arch` (default:
        $TILEC_ARCH, the current GPU's, else sm_80); cached in memory and on
        disk. Without the compiler extension, a prebuilt artifact of the same
        IR (compiler.find_prebuilt) is used instead."""
        # None means "this kernel's own"; 0 is a value (and refused), not a default.
        strategy = self.strategy.replace(num_warps=num_warps, num_stages=num_stages,
                                         smem_epilogue=smem_epilogue,
                                         copy_bounds=copy_bounds).checked(self.name)
        have_compiler = compiler.can_compile()
        if have_compiler:
            arch = arch or compiler.default_arch()
        key = (arch, strategy, run_tile_passes)
        art = self._compiled.get(key)
        if art is not None:
            return art
        if not have_compiler:
            # No compiler here (a GPU host without LLVM and without the tilec
            # CLI bundle): use artifacts that scripts/build_artifacts.py built
            # from this same IR and options.
            art = compiler.find_prebuilt(self.name, self.ir, arch, strategy.key())
            if art is None:
                compiler.native()  # raises ImportError saying how to build it
        else:
            art = compiler.compile_cached(self.ir, self.source_name, arch=arch, strategy=strategy,
                                          run_tile_passes=run_tile_passes)
            if len(art) != 1:
                raise CompilationError(f"expected one kernel from {self.name}, got {len(art)}")
            art = art[0]
        self._compiled[key] = art
        return art

    # -- GPU -----------------------------------------------------------------

    def launcher(self, arch=None, device=None):
        """The ready launcher of this kernel for `arch` (default: $TILEC_ARCH
        or that of GPU `device`, an index; default the current one):
        ``launch(args, stream, grid=None)`` (runtime.Kernel.prepare), args a
        tuple in parameter order whose dtypes and devices the caller has
        checked. Compiles (or finds the prebuilt artifact) and reads the
        manifest on the first call per (arch, device); a LaunchCache holds
        what it returns."""
        key = (arch, device)
        launch = self._launchers.get(key)
        if launch is None:
            from . import runtime, runtime_support

            runtime_support.require_gpu()
            if arch is None and compiler.can_compile():
                arch = compiler.default_arch(device)
            art = self.compile(arch)
            launch = runtime.Kernel(art.manifest_path).prepare()
            self._launchers[key] = launch
        return launch

    def __call__(self, *args, arch=None, stream=None, grid=None):
        """Launches on CUDA torch tensors (arguments in parameter order) on
        `stream` (None: torch's current stream on the tensors' device; an
        int CUstream; a torch.cuda.Stream)."""
        if not self._launchers:
            from . import runtime_support

            runtime_support.require_gpu()  # before the checks: "no GPU" says more
        device = self.check_args(args)
        launch = self._launchers.get((arch, device)) or self.launcher(arch, device)
        from . import runtime

        if stream is None:
            stream = runtime.raw_stream(device) if device is not None else 0
        elif not isinstance(stream, int):
            stream = runtime.Kernel._stream(stream, None)
        runtime.launch_on(device, launch, args, stream, grid)

    def check_args(self, args, cpu=False):
        """Checks count, kinds, dtypes, devices and strides of `args`,
        raising TypeError/ValueError that name the argument; O(1) per
        argument. Returns the CUDA device index of the tensors (None on the
        CPU or without pointer parameters)."""
        if len(args) != len(self.params):
            names = ", ".join(n for n, _ in self.params)
            raise TypeError(f"{self.name}() takes {len(self.params)} arguments ({names}), got {len(args)}")
        device = owner = None
        for (name, ty), value in zip(self.params, args):
            if isinstance(ty, frontend.PtrTy):
                what = f"{self.name}: argument '{name}'"
                _check_buffer(what, ty.dtype, value, cpu)
                if not cpu:
                    index = value.get_device()
                    if device is None:
                        device, owner = index, name
                    elif index != device:
                        raise ValueError(f"{what}: on cuda:{index}, but '{owner}' is on cuda:{device}")
            elif ty.is_int:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TypeError(f"{self.name}: argument '{name}': expected an int ({ty.name}), "
                                    f"got {type(value).__name__}")
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{self.name}: argument '{name}': expected a float ({ty.name}), "
                                f"got {type(value).__name__}")
        return device

    # -- CPU -----------------------------------------------------------------

    def run_cpu(self, *args, grid, run_tile_passes=True):
        """Runs the kernel on the CPU over numpy arrays (pointer parameters,
        written in place; bf16 as uint16 bit patterns) and Python numbers.
        `grid` is up to three ints."""
        self.check_args(args, cpu=True)
        grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
        if not 1 <= len(grid) <= 3:
            raise ValueError(f"{self.name}: grid has {len(grid)} dimensions; give 1 to 3")
        for axis, g in enumerate(grid):
            if isinstance(g, bool) or not hasattr(g, "__index__") or not 0 <= g < 2**31:
                raise ValueError(f"{self.name}: grid[{axis}] must be an int in [0, 2^31), got {g!r}")
        grid = tuple(g.__index__() for g in grid) + (1,) * (3 - len(grid))
        compiler.run_cpu(self.ir, self.source_name, self.name, args, [t for _, t in self.params],
                         grid, run_tile_passes)


_TORCH_DTYPES = {}


def _torch_dtypes():
    """torch (None when not installed), with _TORCH_DTYPES filled once."""
    try:
        import torch
    except ImportError:
        return None
    if not _TORCH_DTYPES:
        _TORCH_DTYPES.update({"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
                              "i32": torch.int32, "i64": torch.int64})
    return torch


def _check_buffer(what, dtype, value, cpu):
    if cpu:
        import numpy as np

        if not isinstance(value, np.ndarray):
            raise TypeError(f"{what}: expected a numpy array of {dtype.name}, got {type(value).__name__}")
        want = _NUMPY_DTYPE.get(dtype.name)
        if dtype.name == "bf16":
            if value.dtype != np.uint16:
                raise TypeError(f"{what}: bf16 buffers are passed as numpy uint16 (bit patterns), "
                                f"got {value.dtype}")
        elif value.dtype != np.dtype(want):
            raise TypeError(f"{what}: expected a numpy array of {want}, got {value.dtype}")
        if value.strides and value.strides[-1] != value.itemsize and value.size > 1:
            raise ValueError(f"{what}: the last dimension must be contiguous (strides {value.strides})")
        return
    torch = _torch_dtypes()
    if torch is None:
        raise TypeError(f"{what}: expected a torch CUDA tensor, but torch is not installed")
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{what}: expected a torch CUDA tensor of {dtype.name}, got {type(value).__name__}")
    want = _TORCH_DTYPES[dtype.name]
    if value.dtype != want:
        raise TypeError(f"{what}: expected {want}, got {value.dtype}")
    if value.device.type != "cuda":
        raise ValueError(f"{what}: expected a CUDA tensor, got one on {value.device}")
    if value.dim() and value.stride(-1) != 1 and value.shape[-1] > 1:
        raise ValueError(f"{what}: the last dimension must be contiguous (stride {value.stride(-1)})")


def jit(fn=None, *, grid=None, name=None, variant=None, num_warps=None, num_stages=None,
        smem_epilogue=None, copy_bounds=None, early_refill=None,
        lowering_options=None):
    """Marks a tile-language kernel.

    grid: up to three grid expressions over the kernel's integer parameters
      and constexprs (ints, names, + - * /, cdiv(a, b), min, max), e.g.
      ``grid=("cdiv(seqlen_q, BLOCK_M)", "batch * num_heads", 1)``.
    name: the kernel symbol: a str.format pattern over the constexprs or a
      callable taking them as keywords (default: the function's name).
    variant: the ``tile.variant`` dictionary: a dict whose values name
      constexprs (or are literals), or a callable taking the constexprs.
    num_warps: warps per program: an int or the name of a constexpr.
    num_stages: shared-memory buffers per prefetched K/V tile, 1 or 2 (an int
      or the name of a constexpr): 1 is FlashAttention-2's schedule (one
      buffer, refilled behind a barrier mid-iteration), 2 a ring (the next
      tiles load during the whole iteration; one barrier per iteration).
    smem_epilogue: store register tiles holding under 16 bytes of a row per
      thread (the O accumulator) through shared memory, as 16-byte chunks
      along rows (a bool or the name of a constexpr).
    copy_bounds: how global->shared copies respect their view's bounds: "row"
      (each 16-byte chunk copies 16 or 0 bytes by its row, no branch),
      "tile" (one test per tile branches to unchecked or checked copies) or
      "chunk" (every chunk checked), or the name of a constexpr holding one.
    early_refill: with num_stages=2, issue a K/V ring's next copies before
      waiting for the current ones, so two blocks are in flight through the
      wait (tile-insert-waits early-refill; a bool or the name of a
      constexpr; default False). The decode kernels take it as EARLY_REFILL
      (flash_decode.EARLY_REFILL, off: measured no faster on an H200).
    lowering_options: more tile-to-nvvm pipeline options, e.g.
      "warp-blocks=true" (tilec.strategy.Strategy.lowering_options), or the
      name of a constexpr holding them (default none).
    A knob left out (None) takes the strategy record's default
    (tilec.strategy.Strategy: 4 warps, 2 stages, smem_epilogue, "row").
    """
    def wrap(f):
        return JITFunction(f, grid=grid, name=name, variant=variant, num_warps=num_warps,
                           num_stages=num_stages, smem_epilogue=smem_epilogue,
                           copy_bounds=copy_bounds, early_refill=early_refill,
                           lowering_options=lowering_options)

    return wrap(fn) if fn is not None else wrap


__all__ = ["jit", "JITFunction", "Kernel", "LaunchCache"]
