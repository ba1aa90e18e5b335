#!/usr/bin/env python3
"""Host time per call: tilec.flash_attn_func against torch SDPA on a tiny call.

Each call is timed on the host (time.perf_counter_ns around it; kernels are
asynchronous, and the queue is drained every 50 calls outside the timing so
it never fills), median over many calls after a warm-up:

    tilec.flash_attn_func    the public API, as users call it
    tilec launcher only      the prepared launch (launch_fast) with the same args:
                             cuLaunchKernel plus the C++ argument packing
    overhead beyond launch   the difference: what issue 14 bounds (<= 15 us)
    SDPA (FA2) / SDPA        torch.nn.functional.scaled_dot_product_attention

    python3 bench/host_overhead.py                # on a GPU
    python3 bench/host_overhead.py --mock         # anywhere: fake libcuda.so.1
    python3 bench/host_overhead.py --varlen       # flash_attn_varlen_func (b4 s128 packed)

--mock runs the same Python and C++ path on a machine without a GPU:
test/runtime/fake_libcuda.c stands in for the driver (cuLaunchKernel is a
no-op), and CPU tensors pose as CUDA ones (a tensor subclass whose device is
cuda:0; torch.empty/zeros ignore the device). It measures everything but the real
driver call, a little pessimistically (the subclass's device properties are
Python); it needs the _tilec compiler to build the kernel once.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHAPE = dict(batch=1, seqlen=128, heads=1, head_dim=64)


def host_us(fn, iters, sync=None, warmup=200):
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    times = []
    clock = time.perf_counter_ns
    for i in range(iters):
        t0 = clock()
        fn()
        times.append(clock() - t0)
        if sync and i % 50 == 49:
            sync()
    if sync:
        sync()
    return statistics.median(times) / 1e3


def measure(mock, iters, dtype_name, causal, varlen=False):
    import torch

    import tilec
    from tilec import runtime

    dtype = getattr(torch, dtype_name)
    b, s, h, d = SHAPE["batch"], SHAPE["seqlen"], SHAPE["heads"], SHAPE["head_dim"]
    if mock:
        q, k, v = (mock_cuda(torch.randn(b, s, h, d).to(dtype)) for _ in range(3))
        sync = None
    else:
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(3))
        sync = torch.cuda.synchronize
    call = lambda: tilec.flash_attn_func(q, k, v, causal=causal)  # noqa: E731
    if varlen:  # the same tokens as `batch` sequences packed, cu_seqlens on the device
        q, k, v = (torch.randn(b * s, h, d).to(dtype) for _ in range(3))
        q, k, v = (mock_cuda(t) if mock else t.cuda() for t in (q, k, v))
        cu = torch.arange(0, (b + 1) * s, s, dtype=torch.int32)
        cu = mock_cuda(cu) if mock else cu.cuda()
        call = lambda: tilec.flash_attn_varlen_func(q, k, v, cu, cu, s, s, causal=causal)  # noqa: E731
    call()
    # The launcher alone, with the arguments flash_attn_func passes it: caught
    # from one call (whatever the core's key and argument list are).
    caught = []
    launch_on = runtime.launch_on
    runtime.launch_on = lambda device, launch, args, stream, grid=None: caught.append((launch, args, stream))
    try:
        call()
    finally:
        runtime.launch_on = launch_on
    launch, args, stream = caught[0]
    api = "tilec.flash_attn_varlen_func" if varlen else "tilec.flash_attn_func"
    rows = {
        api: host_us(call, iters, sync),
        "tilec launcher only": host_us(lambda: launch(args, stream, None), iters, sync),
    }
    rows["overhead beyond launch"] = rows[api] - rows["tilec launcher only"]
    from tilec import flash_attn

    if flash_attn._native_module():   # the same call with the fast path in Python
        flash_attn.NATIVE_FAST_PATH = False
        try:
            rows[api + ", Python fast path (NATIVE_FAST_PATH off)"] = host_us(call, iters, sync)
        finally:
            flash_attn.NATIVE_FAST_PATH = True
    if varlen:
        flash_attn.CHECK_CUDA_VARLEN_VALUES = True
        rows["with CHECK_CUDA_VARLEN_VALUES (reads cu_seqlens back)"] = host_us(call, iters, sync)
        flash_attn.CHECK_CUDA_VARLEN_VALUES = False
        return rows
    if not mock:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        sdpa = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)  # noqa: E731
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            rows["SDPA (FA2)"] = host_us(sdpa, iters, sync)
        rows["SDPA (default backend)"] = host_us(sdpa, iters, sync)
    return rows


def mock_cuda(t):
    """`t` posing as a CUDA tensor on device 0 (--mock)."""
    return t.as_subclass(_MockCuda())


_mock_class = None


def _MockCuda():
    global _mock_class
    if _mock_class is None:
        import torch

        cuda0 = torch.device("cuda", 0)

        class MockCuda(torch.Tensor):
            __torch_function__ = torch._C._disabled_torch_function_impl
            __module__ = "torch.mock"  # flash_attn tells torch tensors by their module
            is_cuda = property(lambda self: True)
            device = property(lambda self: cuda0)

            def get_device(self):
                return 0

        _mock_class = MockCuda
    return _mock_class


def install_mock():
    """In the child process: torch.empty and torch.zeros ignore the device;
    the current stream and device are 0."""
    import torch

    from tilec import runtime

    def on_host(make):
        return lambda *shape, device=None, **kw: make(*shape, **kw)

    torch.empty, torch.zeros = on_host(torch.empty), on_host(torch.zeros)
    runtime._raw_stream = lambda index: 0
    runtime._current_device = lambda: 0
    try:   # the decode fast path in C++ sees the posing tensors' CPU tensors as CUDA device 0
        import _tilec_fast
    except ImportError:
        pass
    else:
        _tilec_fast.cpu_as_cuda(True)


def spawn_mock(argv):
    cc = next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)
    if cc is None:
        sys.exit("--mock needs a C compiler to build test/runtime/fake_libcuda.c")
    folder = Path(tempfile.mkdtemp(prefix="tilec-fake-cuda."))
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(folder / "libcuda.so.1"),
                    str(REPO / "test" / "runtime" / "fake_libcuda.c")], check=True)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(folder)] + [p for p in [env.get("LD_LIBRARY_PATH")] if p])
    env.pop("FAKE_CUDA_LOG", None)
    env["TILEC_HOST_OVERHEAD_CHILD"] = "1"
    env.setdefault("TILEC_ARCH", "sm_80")
    try:
        return subprocess.run([sys.executable, __file__] + argv, env=env).returncode
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mock", action="store_true", help="no GPU: a fake driver, CPU tensors posing as CUDA")
    parser.add_argument("--iters", type=int, default=5000)
    parser.add_argument("--varlen", action="store_true",
                        help="time flash_attn_varlen_func instead: the batch's sequences packed "
                             "(b4 s128), cu_seqlens on the device; also with its values checked")
    args = parser.parse_args()
    if args.mock and not os.environ.get("TILEC_HOST_OVERHEAD_CHILD"):
        sys.exit(spawn_mock(sys.argv[1:]))
    sys.path.insert(0, str(REPO / "python"))
    if args.mock:
        install_mock()
    if args.varlen:
        SHAPE["batch"] = 4
    b, s, h, d = SHAPE.values()
    where = "fake driver, CPU tensors posing as CUDA (--mock)" if args.mock else "GPU"
    what = "flash_attn_varlen_func, " if args.varlen else ""
    print(f"host time per call, us (median of {args.iters}); {what}b{b} s{s} h{h} d{d}; {where}")
    cases = [("float16", False), ("bfloat16", True)]
    results = [measure(args.mock, args.iters, dt, causal, args.varlen) for dt, causal in cases]
    names = list(results[0])
    print("| call | " + " | ".join(f"{dt} {'causal' if c else 'non-causal'}" for dt, c in cases) + " |")
    print("|---|" + "---:|" * len(cases))
    for name in names:
        print(f"| {name} | " + " | ".join(f"{r[name]:.1f}" for r in results) + " |")


if __name__ == "__main__":
    main()
