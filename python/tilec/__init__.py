"""tilec: a tile-level compiler for GPU attention kernels.

    import tilec
    from tilec import language as tl

    @tilec.jit(grid=("cdiv(n, BLOCK)", 1, 1))
    def kernel(x: tl.ptr(tl.float32), n: tl.int32, BLOCK: tl.constexpr): ...

    k = kernel.specialize(BLOCK=128)
    print(k.ir)              # tile-dialect MLIR, every op located in this file
    k.compile("sm_80")       # PTX/cubin + launch manifest (cached)
    k(x, n)                  # launch on CUDA torch tensors
    k.run_cpu(x_np, n, grid=(g, 1, 1))   # or on the CPU over numpy arrays

Importing needs neither a GPU nor torch; launching without a GPU raises a
RuntimeError that says so (see ``tilec.gpu_status()``).
"""

from . import language
from .errors import CompilationError, TilecError, TilecTypeError, TilecValueError
from .jit import JITFunction, Kernel, jit
from .runtime_support import gpu_status
from .flash_attn import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                         flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                         flash_attn_varlen_qkvpacked_func, check_errors)
from .flex import flex_attention
from .flash_decode import flash_attn_combine, flash_attn_with_kvcache


__version__ = "0.1.0"
__all__ = ["jit", "JITFunction", "Kernel", "CompilationError", "language", "flash_attn_func",
           "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func",
           "flash_attn_with_kvcache", "flash_attn_combine", "flex_attention", "gpu_status",
           "TilecError", "TilecValueError", "TilecTypeError", "check_errors"]
