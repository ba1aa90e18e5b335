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


#: The SM count assumed without a GPU to ask (an H100/H200: 132).
DEFAULT_SMS = 132


def sm_count(device):
    """The multiprocessor count of CUDA device `device` (torch's device
    properties), or DEFAULT_SMS where there is none to ask."""
    try:
        import torch

        return torch.cuda.get_device_properties(device).multi_processor_count
    except Exception:  # noqa: BLE001 - no GPU to ask: the H200's count
        return DEFAULT_SMS
