"""Whether this machine can launch kernels, and why not."""


def gpu_status():
    """(True, "") when a CUDA driver is usable, else (False, reason)."""
    try:
        from . import runtime
    except ImportError as e:
        return False, f"the tilec runtime extension is not available ({e})"
    ok, reason = runtime.driver_available()
    return bool(ok), reason


def require_gpu():
    ok, reason = gpu_status()
    if not ok:
        raise RuntimeError(f"tilec cannot launch kernels on this machine: no usable GPU ({reason}). "
                           "Compiling (Kernel.compile, scripts/build_artifacts.py) and the CPU "
                           "path (Kernel.run_cpu) still work.")
