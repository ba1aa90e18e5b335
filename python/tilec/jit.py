"""``@tilec.jit``: specialize, compile, cache and launch DSL kernels."""

import functools
import inspect

from . import compiler, frontend
from .errors import CompilationError

# numpy dtype names of the element types (CPU path).
_NUMPY_DTYPE = {"f16": "float16", "f32": "float32", "i32": "int32", "i64": "int64"}


class JITFunction:
    """A kernel written in the tile language. ``specialize(**constexprs)``
    gives a `Kernel` (MLIR text, compile, launch); calling the JITFunction
    directly with ``grid=``-free arguments is not supported because each set
    of constexprs is a different kernel."""

    def __init__(self, fn, grid, name=None, variant=None, num_warps=4, num_stages=2,
                 smem_epilogue=True, copy_bounds="row"):
        self.fn = fn
        self.grid = grid
        self.name = name
        self.variant = variant
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.smem_epilogue = smem_epilogue
        self.copy_bounds = copy_bounds
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
        key = tuple(sorted((k, repr(v)) for k, v in constexprs.items()))
        kernel = self._kernels.get(key)
        if kernel is None:
            # Defaults of constexpr parameters count too: resolve them first.
            sig = inspect.signature(self.fn)
            full = {n: p.default for n, p in sig.parameters.items()
                    if p.default is not inspect.Parameter.empty}
            full.update(constexprs)
            name = self._kernel_name(full)
            text, params, bound = frontend.generate(self.fn, constexprs, name, self.grid,
                                                    self._variant(full))
            kernel = Kernel(self, name, text, params, bound)
            kernel.num_warps = self._launch_knob("num_warps", self.num_warps, full)
            kernel.num_stages = self._launch_knob("num_stages", self.num_stages, full)
            kernel.smem_epilogue = bool(self._launch_knob("smem_epilogue", self.smem_epilogue, full))
            kernel.copy_bounds = self._copy_bounds(full)
            self._kernels[key] = kernel
        return kernel

    def _launch_knob(self, what, value, constexprs):
        """`num_warps`/`num_stages` is an int, or the name of a constexpr that
        holds it (a knob the strategy table and the tuner set per variant)."""
        if isinstance(value, str):
            if value not in constexprs:
                raise TypeError(f"{self.fn.__name__}: {what} names the constexpr "
                                f"'{value}', which the kernel does not declare")
            return int(constexprs[value])
        return int(value)

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
        self.num_warps = jit_fn.num_warps if isinstance(jit_fn.num_warps, int) else 4
        self.num_stages = jit_fn.num_stages if isinstance(jit_fn.num_stages, int) else 2
        self.smem_epilogue = jit_fn.smem_epilogue if isinstance(jit_fn.smem_epilogue, bool) else True
        self.copy_bounds = jit_fn.copy_bounds if jit_fn.copy_bounds in compiler.COPY_BOUNDS else "row"
        self._compiled = {}
        self._launchers = {}

    def build_options(self):
        """compiler.build_options() of this kernel's own knobs."""
        return compiler.build_options(self.num_warps, self.num_stages, self.smem_epilogue,
                                      self.copy_bounds)

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
        num_warps = num_warps or self.num_warps
        num_stages = num_stages or self.num_stages
        smem_epilogue = self.smem_epilogue if smem_epilogue is None else bool(smem_epilogue)
        copy_bounds = copy_bounds or self.copy_bounds
        if not compiler.can_compile():
            # No compiler here (a GPU host without LLVM and without the tilec
            # CLI bundle): use artifacts that scripts/build_artifacts.py built
            # from this same IR and options.
            options = compiler.build_options(num_warps, num_stages, smem_epilogue, copy_bounds)
            art = compiler.find_prebuilt(self.name, self.ir, arch, options)
            if art is None:
                compiler.native()  # raises ImportError saying how to build it
            return art
        arch = arch or compiler.default_arch()
        key = (arch, num_warps, num_stages, smem_epilogue, copy_bounds, run_tile_passes)
        art = self._compiled.get(key)
        if art is None:
            art = compiler.compile_cached(self.ir, self.source_name, arch=arch,
                                          num_warps=num_warps, run_tile_passes=run_tile_passes,
                                          num_stages=num_stages, smem_epilogue=smem_epilogue,
                                          copy_bounds=copy_bounds)
            if len(art) != 1:
                raise CompilationError(f"expected one kernel from {self.name}, got {len(art)}")
            art = art[0]
            self._compiled[key] = art
        return art

    # -- GPU -----------------------------------------------------------------

    def __call__(self, *args, arch=None, stream=None, grid=None):
        """Launches on CUDA torch tensors (arguments in parameter order)."""
        from . import runtime_support

        runtime_support.require_gpu()
        self.check_args(args)
        art = self.compile(arch)
        launcher = self._launchers.get(art.manifest_path)
        if launcher is None:
            from . import runtime

            launcher = runtime.Kernel(art.manifest_path)
            self._launchers[art.manifest_path] = launcher
        launcher(*args, stream=stream, grid=grid)

    def check_args(self, args, cpu=False):
        """Checks count, kinds, dtypes, devices and strides of `args`,
        raising TypeError/ValueError that name the argument."""
        if len(args) != len(self.params):
            names = ", ".join(n for n, _ in self.params)
            raise TypeError(f"{self.name}() takes {len(self.params)} arguments ({names}), got {len(args)}")
        for (name, ty), value in zip(self.params, args):
            what = f"{self.name}: argument '{name}'"
            if isinstance(ty, frontend.PtrTy):
                _check_buffer(what, ty.dtype, value, cpu)
            elif ty.is_int:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TypeError(f"{what}: expected an int ({ty.name}), got {type(value).__name__}")
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{what}: expected a float ({ty.name}), got {type(value).__name__}")

    # -- CPU -----------------------------------------------------------------

    def run_cpu(self, *args, grid, run_tile_passes=True):
        """Runs the kernel on the CPU over numpy arrays (pointer parameters,
        written in place; bf16 as uint16 bit patterns) and Python numbers.
        `grid` is up to three ints."""
        self.check_args(args, cpu=True)
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        compiler.run_cpu(self.ir, self.source_name, self.name, args, [t for _, t in self.params],
                         grid, run_tile_passes)


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
    try:
        import torch
    except ImportError:
        raise TypeError(f"{what}: expected a torch CUDA tensor, but torch is not installed") from None
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{what}: expected a torch CUDA tensor of {dtype.name}, got {type(value).__name__}")
    want = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
            "i32": torch.int32, "i64": torch.int64}[dtype.name]
    if value.dtype != want:
        raise TypeError(f"{what}: expected {want}, got {value.dtype}")
    if value.device.type != "cuda":
        raise ValueError(f"{what}: expected a CUDA tensor, got one on {value.device}")
    if value.dim() and value.stride(-1) != 1 and value.shape[-1] > 1:
        raise ValueError(f"{what}: the last dimension must be contiguous (stride {value.stride(-1)})")


def jit(fn=None, *, grid=None, name=None, variant=None, num_warps=4, num_stages=2,
        smem_epilogue=True, copy_bounds="row"):
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
    """
    def wrap(f):
        return JITFunction(f, grid=grid, name=name, variant=variant, num_warps=num_warps,
                           num_stages=num_stages, smem_epilogue=smem_epilogue,
                           copy_bounds=copy_bounds)

    return wrap(fn) if fn is not None else wrap


__all__ = ["jit", "JITFunction", "Kernel"]
