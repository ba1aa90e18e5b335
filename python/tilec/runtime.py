"""Launch tilec-compiled kernels on torch tensors.

    from tilec.runtime import Kernel
    attn = Kernel("build/artifacts/flash_fwd_f16_d128.json")
    attn(q, k, v, o, lse, seqlen_q, ..., scale)          # current torch stream

A kernel is the artifact the compiler writes: a launch manifest
``<kernel>.json`` beside ``<kernel>.cubin`` and/or ``<kernel>.ptx``. This
module checks Python arguments against the manifest's parameter list (torch
CUDA tensors for ``ptr`` params, ints for ``i32``/``i64``, floats for ``f32``)
and hands raw values to the native module ``_tilec_runtime``, which launches
through the CUDA driver API.

Importing needs neither torch nor a GPU: manifests parse anywhere, and a
launch without a CUDA driver raises RuntimeError saying why. The file works
as ``tilec.runtime`` and also when loaded by path, with ``_tilec_runtime``
on ``sys.path``.
"""

import math
import numbers
import operator
import os

try:
    from . import _tilec_runtime as _rt
except ImportError:
    try:
        import _tilec_runtime as _rt
    except ImportError as e:
        raise ImportError(
            "tilec.runtime needs the native module _tilec_runtime, which the main "
            "build writes to build/python (or build it alone: `cmake -S lib/runtime "
            "-B build-runtime -G Ninja && cmake --build build-runtime`, giving "
            f"build-runtime/python); put that folder on PYTHONPATH ({e})"
        ) from e

__all__ = ["Kernel", "driver_available", "parse_manifest", "raw_stream", "MAX_GRID"]

driver_available = _rt.driver_available
parse_manifest = _rt.parse_manifest
#: CUDA's grid limits (x, y, z), from the C++ runtime (kMaxGrid).
MAX_GRID = tuple(_rt.MAX_GRID)

# torch dtype attribute names for the manifest's element types.
_TORCH_DTYPE = {
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "i32": "int32",
    "i64": "int64",
}
_INT_RANGE = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1)}
_F32_MAX = 3.4028234663852886e38

_torch_module = None


def _torch():
    """torch, imported on first use; None when it is not installed."""
    global _torch_module
    if _torch_module is None:
        try:
            import torch
        except ImportError:
            _torch_module = False
        else:
            _torch_module = torch
    return _torch_module or None


def _type_name(value):
    return type(value).__name__


class Kernel:
    """A compiled kernel, callable with its parameters in manifest order.

    The manifest is read and validated at construction (no driver needed);
    the module is loaded at the first call.
    """

    def __init__(self, manifest_path):
        self.path = os.fspath(manifest_path)
        self.manifest = _rt.parse_manifest(self.path)
        self.name = self.manifest["kernel"]
        self.params = self.manifest["params"]
        self._launcher = None  # _rt.Kernel, created at the first call

    def prepare(self):
        """The hot path: returns ``launch(args, stream, grid=None)``, the
        native launcher's ``launch_fast`` (args a tuple in manifest order:
        tensors or int addresses for ptr params, ints, floats; stream an int
        CUstream). Each value is checked against its parameter once, in C++
        (kind, range, positivity, alignment); dtypes and devices are the
        caller's to check, once, before the call. Loads the module's images
        now (RuntimeError without a CUDA driver)."""
        if self._launcher is None:
            self._launcher = _rt.load(self.path)
        return self._launcher.launch_fast

    @property
    def loaded_image(self):
        """Which image runs: 'cubin sm_80', 'cubin sm_90' (the manifest's
        "sass" list), 'ptx (JIT for sm_90)'; '' before the first call."""
        return self._launcher.loaded_image if self._launcher is not None else ""

    def __repr__(self):
        sig = ", ".join(f"{p['name']}: {p.get('elem', p['kind'])}" for p in self.params)
        return f"<tilec.runtime.Kernel {self.name}({sig}) from {self.path}>"

    def __call__(self, *args, stream=None, grid=None):
        """Launches with `args` in manifest order.

        stream: None for torch's current stream on the tensors' device, an
        int (a CUstream), or a torch.cuda.Stream. grid: optional (x, y, z)
        overriding the manifest's grid expressions.
        """
        if self._launcher is None:
            # Without a CUDA driver this raises RuntimeError saying why.
            self._launcher = _rt.load(self.path)
        raw, device = self._pack(args)
        stream = self._stream(stream, device)
        torch = _torch()
        if device is not None and device.index != torch.cuda.current_device():
            # The launch uses the current CUDA context: make it the tensors'.
            with torch.cuda.device(device):
                self._launcher.launch(raw, stream, grid)
        else:
            self._launcher.launch(raw, stream, grid)

    def _pack(self, args):
        """Checks `args`; returns (raw values for the launch, CUDA device)."""
        if len(args) != len(self.params):
            names = ", ".join(p["name"] for p in self.params)
            raise TypeError(
                f"{self.name}() takes {len(self.params)} arguments ({names}), "
                f"got {len(args)}"
            )
        raw = []
        device = None
        device_owner = None
        for index, (param, value) in enumerate(zip(self.params, args)):
            what = f"argument '{param['name']}' (param {index})"
            kind = param["kind"]
            if kind == "ptr":
                tensor = self._check_tensor(what, param["elem"], value)
                if device is None:
                    device, device_owner = tensor.device, param["name"]
                elif tensor.device != device:
                    raise ValueError(
                        f"{what}: on {tensor.device}, but '{device_owner}' "
                        f"is on {device}"
                    )
                raw.append(tensor.data_ptr())
            elif kind in _INT_RANGE:
                raw.append(self._check_int(what, kind, value))
            else:  # f32
                raw.append(self._check_float(what, value))
        return raw, device

    @staticmethod
    def _check_tensor(what, elem, value):
        dtype_name = _TORCH_DTYPE[elem]
        expected = f"expected torch.{dtype_name} CUDA tensor"
        torch = _torch()
        if torch is None or not isinstance(value, torch.Tensor):
            hint = " (torch is not installed)" if torch is None else ""
            raise TypeError(f"{what}: {expected}, got {_type_name(value)}{hint}")
        dtype_ok = value.dtype == getattr(torch, dtype_name)
        if not dtype_ok or value.device.type != "cuda":
            error = TypeError if not dtype_ok else ValueError
            raise error(f"{what}: {expected}, got {value.dtype} on {value.device}")
        return value

    @staticmethod
    def _check_int(what, kind, value):
        # bool is an int subclass, but True as a size is a mistake.
        if isinstance(value, bool):
            raise TypeError(f"{what}: expected an int ({kind}), got bool")
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(
                f"{what}: expected an int ({kind}), got {_type_name(value)}"
            ) from None
        low, high = _INT_RANGE[kind]
        if not low <= value <= high:
            raise ValueError(f"{what}: {value} does not fit in {kind}")
        return value

    @staticmethod
    def _check_float(what, value):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{what}: expected a float (f32), got {_type_name(value)}")
        value = float(value)
        if math.isfinite(value) and abs(value) > _F32_MAX:
            raise ValueError(f"{what}: {value} overflows f32")
        return value

    @staticmethod
    def _stream(stream, device):
        if stream is None:
            torch = _torch()
            if torch is None or device is None:
                return 0
            return torch.cuda.current_stream(device).cuda_stream
        if isinstance(stream, int):
            return stream
        cuda_stream = getattr(stream, "cuda_stream", None)
        if cuda_stream is None:
            raise TypeError(
                f"stream: expected None, an int or a torch.cuda.Stream, "
                f"got {_type_name(stream)}"
            )
        return cuda_stream


_raw_stream = None


def raw_stream(device_index):
    """torch's current CUDA stream on `device_index`, as an int CUstream:
    torch's raw getter (what torch.compile's generated code uses), ~10x
    cheaper than torch.cuda.current_stream(); inside CUDA-graph capture it is
    the capturing stream."""
    global _raw_stream
    if _raw_stream is None:
        torch = _torch()
        getter = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
        _raw_stream = getter or (lambda index: torch.cuda.current_stream(index).cuda_stream)
    return _raw_stream(device_index)


_current_device = None


def launch_on(device_index, launch, args, stream, grid=None):
    """Calls ``launch(args, stream, grid)`` (Kernel.prepare) with GPU
    `device_index`'s context current: the launch uses the current CUDA
    context, which torch keeps on its current device; for tensors on another
    device, that device is made current around the launch."""
    global _current_device
    if _current_device is None:
        torch = _torch()
        getter = getattr(getattr(torch, "_C", None), "_cuda_getDevice", None)
        _current_device = getter or (lambda: torch.cuda.current_device() if torch else None)
    if device_index is None or _current_device() == device_index:
        launch(args, stream, grid)
    else:
        with _torch().cuda.device(device_index):
            launch(args, stream, grid)
