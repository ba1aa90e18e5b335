"""Tests of the tilec runtime: the native module _tilec_runtime and
python/tilec/runtime.py.

Run from the repository root after building lib/runtime:

    cmake -S lib/runtime -B build-runtime -G Ninja && cmake --build build-runtime
    PYTHONPATH=build-runtime/python python3 -m pytest -q test/runtime

Without a GPU, the CUDA paths run against fake_libcuda.c, a stand-in driver
that logs every call (built here with the C compiler). With torch and a GPU,
the last tests launch a real PTX kernel.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

try:
    import _tilec_runtime
except ImportError as e:  # reported by the `rt` fixture, so every test says why
    _tilec_runtime = None
    _IMPORT_ERROR = e

try:
    import torch
except ImportError:
    torch = None


@pytest.fixture(scope="session")
def rt():
    if _tilec_runtime is None:
        pytest.fail(
            f"cannot import _tilec_runtime ({_IMPORT_ERROR}); build lib/runtime "
            "and put its python folder on PYTHONPATH"
        )
    return _tilec_runtime


@pytest.fixture(scope="session")
def runtime(rt):
    """python/tilec/runtime.py, loaded by path (independent of tilec/__init__)."""
    spec = importlib.util.spec_from_file_location(
        "tilec_runtime_under_test", REPO / "python" / "tilec" / "runtime.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def no_driver_here(rt):
    ok, reason = rt.driver_available()
    if ok or not reason.startswith("no CUDA driver: dlopen"):
        pytest.skip(f"libcuda.so.1 loads on this machine ({reason or 'usable'})")


# A fake PTX module: one entry point whose .param list fixes the byte size of
# each argument (the fake driver reads them like the real one does).
PTX = """\
.version 7.0
.target sm_80
.address_size 64
.visible .entry k(
\t.param .u64 k_param_0,
\t.param .u32 k_param_1,
\t.param .u32 k_param_2,
\t.param .u64 k_param_3,
\t.param .f32 k_param_4
)
{
\tret;
}
"""

BASE_MANIFEST = {
    "kernel": "k",
    "arch": "sm_80",
    "ptx": "k.ptx",
    "block": [128, 1, 1],
    "shared_bytes": 0,
    "grid": ["cdiv(n, 128)", "stride", "1"],
    "params": [
        {"name": "x", "kind": "ptr", "elem": "f32"},
        {"name": "n", "kind": "i32"},
        {"name": "off", "kind": "i32"},
        {"name": "stride", "kind": "i64"},
        {"name": "a", "kind": "f32"},
    ],
}


def write_manifest(folder, manifest=None, name="k", ptx=PTX, cubin=None, arch=None, sass=None):
    """Writes <name>.json (+ the PTX/cubin it names) into `folder`; `sass`
    maps more archs to cubin bytes (the manifest's "sass" list)."""
    manifest = dict(BASE_MANIFEST if manifest is None else manifest)
    if arch is not None:
        manifest["arch"] = arch
    if ptx is not None:
        (folder / f"{name}.ptx").write_text(ptx)
        manifest["ptx"] = f"{name}.ptx"
    else:
        manifest.pop("ptx", None)
    if cubin is not None:
        (folder / f"{name}.cubin").write_bytes(cubin)
        manifest["cubin"] = f"{name}.cubin"
    if sass:
        manifest["sass"] = []
        for sass_arch, image in sass.items():
            (folder / f"{name}.{sass_arch}.cubin").write_bytes(image)
            manifest["sass"].append({"arch": sass_arch, "cubin": f"{name}.{sass_arch}.cubin"})
    path = folder / f"{name}.json"
    path.write_text(json.dumps(manifest))
    return path


# --- module and driver --------------------------------------------------------


def test_module_imports(rt):
    for name in ("load", "driver_available", "parse_manifest", "eval_grid", "Kernel"):
        assert hasattr(rt, name)


def test_driver_unavailable_reports_dlopen_failure(rt):
    no_driver_here(rt)
    ok, reason = rt.driver_available()
    assert ok is False
    assert reason.startswith("no CUDA driver: dlopen(libcuda.so.1) failed: ")
    assert "libcuda.so.1" in reason[len("no CUDA driver: dlopen(libcuda.so.1) failed: "):]


def test_load_without_driver_raises(rt, tmp_path):
    no_driver_here(rt)
    path = write_manifest(tmp_path)
    with pytest.raises(RuntimeError, match=r"^no CUDA driver: dlopen\(libcuda.so.1\) failed: "):
        rt.load(str(path))


# --- grid expressions ---------------------------------------------------------


@pytest.mark.parametrize(
    "exprs, values, expected",
    [
        (["cdiv(seqlen_q, 64)", "batch * num_heads", "1"],
         {"seqlen_q": 1000, "batch": 2, "num_heads": 3}, (16, 6, 1)),
        (["cdiv(s, 64)", "1", "1"], {"s": 64}, (1, 1, 1)),
        (["cdiv(s, 64)", "1", "1"], {"s": 65}, (2, 1, 1)),
        (["7 / 2", "(1 + 2) * 3", "10 - 3 - 2"], {}, (3, 9, 5)),
        (["min(a, 3)", "max(a, 3)", "min(max(a, 1), 2)"], {"a": 5}, (3, 5, 2)),
        (["-(-7) / 2", "-7 / -2", "2 - -1"], {}, (3, 3, 3)),
        (["a + b * c", "(a + b) * c", "a * b - c"], {"a": 2, "b": 3, "c": 4}, (14, 20, 2)),
        # A name is a function only when followed by '('.
        (["min", "min(min, 2)", "1"], {"min": 4}, (4, 2, 1)),
        (["  cdiv( n ,\t128 ) ", "1", "1"], {"n": 129}, (2, 1, 1)),
        ([str(2**31 - 1), "65535", "65535"], {}, (2**31 - 1, 65535, 65535)),
    ],
)
def test_eval_grid(rt, exprs, values, expected):
    assert rt.eval_grid(exprs, values) == expected


def test_floor_division_rounds_down(rt):
    # -7 / 2 is -4 (floor), so the whole expression is 10 - 4 = 6, not 7.
    assert rt.eval_grid(["10 + -7 / 2", "1", "1"], {}) == (6, 1, 1)
    assert rt.eval_grid(["cdiv(-7, 2) + 10", "1", "1"], {}) == (7, 1, 1)


@pytest.mark.parametrize(
    "exprs, values, message",
    [
        (["x", "1", "1"], {"a": 1},
         "grid[0] 'x': unknown name 'x' (integer parameters: a) at column 1"),
        (["cdiv(a, b)", "1", "1"], {"a": 1, "b": 0},
         "grid[0] 'cdiv(a, b)' (a=1, b=0): division by zero"),
        (["1", "a / 0", "1"], {"a": 1}, "grid[1] 'a / 0' (a=1): division by zero"),
        (["1", "1", "a - 2"], {"a": 1},
         "grid[2] 'a - 2' (a=1) = -1, outside the launchable range [1, 65535]"),
        (["0", "1", "1"], {}, "grid[0] '0' = 0, outside the launchable range [1, 2147483647]"),
        (["1", "65536", "1"], {}, "outside the launchable range [1, 65535]"),
        (["a * a", "1", "1"], {"a": 2**62}, "int64 overflow"),
        (["(a", "1", "1"], {"a": 1}, "expected ')' at column 3"),
        (["a +", "1", "1"], {"a": 1}, "expected a number, a name or '('"),
        (["", "1", "1"], {}, "empty expression"),
        (["pow(2, 3)", "1", "1"], {}, "unknown function 'pow' (known: cdiv, min, max)"),
        (["2 % 3", "1", "1"], {}, "unexpected '%'"),
        (["1", "1"], {}, "a grid has 3 expressions, got 2"),
        (["99999999999999999999", "1", "1"], {}, "integer literal out of int64 range"),
        (["(" * 100 + "1" + ")" * 100, "1", "1"], {}, "too deeply nested"),
    ],
)
def test_eval_grid_errors(rt, exprs, values, message):
    with pytest.raises(ValueError) as info:
        rt.eval_grid(exprs, values)
    assert message in str(info.value)


# --- manifests ----------------------------------------------------------------


def test_parse_manifest_returns_whole_document(rt, tmp_path):
    manifest = dict(BASE_MANIFEST, variant={"dtype": "f16", "causal": True, "x": [1, 2.5, None]})
    path = write_manifest(tmp_path, manifest)
    parsed = rt.parse_manifest(str(path))
    assert parsed["variant"] == {"dtype": "f16", "causal": True, "x": [1, 2.5, None]}
    assert parsed["params"][0] == {"name": "x", "kind": "ptr", "elem": "f32"}
    assert parsed["grid"] == BASE_MANIFEST["grid"]


def mutated(**changes):
    manifest = json.loads(json.dumps(BASE_MANIFEST))
    for key, value in changes.items():
        if value is None:
            manifest.pop(key, None)
        else:
            manifest[key] = value
    return manifest


def with_param(index, **fields):
    manifest = mutated()
    param = dict(manifest["params"][index])
    for key, value in fields.items():
        if value is None:
            param.pop(key, None)
        else:
            param[key] = value
    manifest["params"][index] = param
    return manifest


@pytest.mark.parametrize(
    "manifest, message",
    [
        (mutated(kernel=None), 'the document lacks the required key "kernel"'),
        (mutated(kernel=3), "kernel must be a string, got an integer"),
        (mutated(block=[128, 1]), "block must have 3 entries, got 2"),
        (mutated(block=[0, 1, 1]), "block[0] = 0 is outside [1, 1024]"),
        (mutated(block=[64, 32, 1]), "block has 2048 threads; CUDA allows at most 1024"),
        (mutated(block=[128.0, 1, 1]), "block[0] must be an integer, got a number"),
        (mutated(shared_bytes=-1), "shared_bytes = -1 is outside [0, 4294967295]"),
        (mutated(grid="1"), "grid must be an array, got a string"),
        (mutated(grid=["cdiv(n, 128)", "heads", "1"]),
         "grid[1] 'heads': unknown name 'heads' (integer parameters: n, off, stride)"),
        (mutated(grid=["x", "1", "1"]), "unknown name 'x'"),  # a ptr param
        (mutated(grid=[1.5, 1, 1]), "grid[0] must be a string or an integer, got a number"),
        (mutated(params={}), "params must be an array, got an object"),
        (with_param(1, kind="f64"), 'params[1].kind must be one of ptr, i32, i64, f32, got "f64"'),
        (with_param(0, elem=None), 'params[0] (x) is a ptr but has no "elem"'),
        (with_param(0, elem="f8"), 'params[0].elem must be one of f16, bf16, f32, i32, i64, got "f8"'),
        (with_param(1, elem="f32"), 'params[1] (n) has "elem" but is not a ptr'),
        (with_param(2, name="n"), 'params[2].name "n" is used by an earlier param'),
        (with_param(1, name=None), 'params[1] lacks the required key "name"'),
        (with_param(4, positive="yes"), "params[4].positive must be a bool, got a string"),
        (with_param(0, positive=True), 'params[0] (x) is a ptr and cannot be "positive"'),
        (with_param(0, align=12), "params[0].align must be a power-of-two byte count on a ptr"),
        (with_param(1, align=16), "params[1].align must be a power-of-two byte count on a ptr"),
        (with_param(0, align=0), "params[0].align = 0 is outside [1, 1048576]"),
        (mutated(sass={}), "sass must be an array, got an object"),
        (mutated(sass=[{"arch": "sm_90"}]), 'sass[0] must be an object with "arch" and "cubin"'),
        (mutated(sass=["sm_90"]), 'sass[0] must be an object with "arch" and "cubin"'),
        (mutated(sass=[{"arch": 90, "cubin": "k.sm_90.cubin"}]),
         "sass[0].arch must be a string, got an integer"),
        (mutated(sass=[{"arch": "", "cubin": "k.sm_90.cubin"}]),
         'sass[0].arch must name a GPU like "sm_90", got ""'),
        (mutated(sass=[{"arch": "compute_90", "cubin": "k.sm_90.cubin"}]),
         'sass[0].arch must name a GPU like "sm_90", got "compute_90"'),
        # More digits than an int holds: std::stoi threw and ended the process.
        (mutated(sass=[{"arch": "sm_99999999999", "cubin": "k.sm_90.cubin"}]),
         'sass[0].arch must name a GPU like "sm_90", got "sm_99999999999"'),
        (mutated(arch="sm_90", sass=[{"arch": "sm_90", "cubin": "k.sm_90.cubin"}]),
         'sass[0].arch is the main cubin\'s arch "sm_90"'),
        (mutated(sass=[{"arch": "sm_90", "cubin": "a.cubin"}, {"arch": "sm_90", "cubin": "b.cubin"}]),
         'sass[1].arch "sm_90" is listed twice'),
        (mutated(sass=[{"arch": "sm_90", "cubin": ""}]), "sass[0].cubin must not be empty"),
        (mutated(programmatic_launch="yes"), "programmatic_launch must be a bool, got a string"),
    ],
)
def test_manifest_errors(rt, tmp_path, manifest, message):
    path = write_manifest(tmp_path, manifest)
    with pytest.raises(ValueError) as info:
        rt.parse_manifest(str(path))
    assert str(info.value).startswith(f"manifest {path}: ")
    assert message in str(info.value)


def test_manifest_positive_param(rt, tmp_path):
    """tl.assume(a > 0) in the kernel: the manifest marks the param."""
    path = write_manifest(tmp_path, with_param(4, positive=True))
    assert rt.parse_manifest(str(path))["params"][4] == {"name": "a", "kind": "f32", "positive": True}
    path = write_manifest(tmp_path, with_param(0, positive=False))  # false is no claim
    assert rt.parse_manifest(str(path))["params"][0]["positive"] is False


def test_manifest_needs_an_image(rt, tmp_path):
    path = write_manifest(tmp_path, ptx=None)
    with pytest.raises(ValueError, match='names neither a "cubin" nor a "ptx" file'):
        rt.parse_manifest(str(path))


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"kernel": "k",\n "block": [1, 2,]}', ":2:17: invalid JSON: expected a value, found ']'"),
        ('{"kernel": "k"', ":1:15: invalid JSON: expected ',' or '}', found end of input"),
        ('{"a": 1, "a": 2}', ':1:10: invalid JSON: duplicate key "a"'),
        ("[1] x", ":1:5: invalid JSON: unexpected text after the JSON value"),
        ('{"s": "\\q"}', "invalid escape in string"),
        ("[01]", "expected ',' or ']', found '1'"),
        ("// comment\n{}", ":1:1: invalid JSON: expected a value, found '/'"),
        ("[1]", "manifest {path}: the document must be a JSON object"),
    ],
)
def test_manifest_json_errors(rt, tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        rt.parse_manifest(str(path))
    assert message.replace("{path}", str(path)) in str(info.value)
    assert str(path) in str(info.value)


def test_json_strings_and_numbers(rt, tmp_path):
    manifest = mutated(variant={
        "s": "\u00e9\\\"\t\ud83d\ude00", "big": 2**63, "neg": -12, "e": 1.5e3, "t": True,
    })
    path = tmp_path / "k.json"
    (tmp_path / "k.ptx").write_text(PTX)
    path.write_text(json.dumps(manifest, ensure_ascii=True))
    variant = rt.parse_manifest(str(path))["variant"]
    assert variant == {"s": "\u00e9\\\"\t\U0001F600", "big": float(2**63), "neg": -12,
                       "e": 1500.0, "t": True}


def test_missing_manifest(rt, tmp_path):
    path = tmp_path / "nope.json"
    with pytest.raises(ValueError, match=f"manifest {path}: cannot read: No such file"):
        rt.parse_manifest(str(path))


def test_missing_image_is_reported_before_the_driver(rt, tmp_path):
    path = write_manifest(tmp_path)
    (tmp_path / "k.ptx").unlink()
    with pytest.raises(ValueError, match=r"manifest .*k\.json: ptx .*k\.ptx: cannot read: No such file"):
        rt.load(str(path))


# --- tilec.runtime: argument checking ----------------------------------------


class FakeLauncher:
    """Stands in for _tilec_runtime.Kernel: records what would be launched."""

    def __init__(self):
        self.calls = []

    def launch(self, args, stream, grid):
        self.calls.append((args, stream, grid))


SCALAR_MANIFEST = {
    "kernel": "scalars",
    "ptx": "scalars.ptx",
    "block": [32, 1, 1],
    "grid": ["n", "1", "1"],
    "params": [
        {"name": "n", "kind": "i32"},
        {"name": "big", "kind": "i64"},
        {"name": "scale", "kind": "f32"},
    ],
}

FLASH_LIKE = {
    "kernel": "flash_fwd_f16_d64",
    "ptx": "flash.ptx",
    "block": [128, 1, 1],
    "grid": ["cdiv(seqlen_q, 64)", "1", "1"],
    "params": [
        {"name": "q", "kind": "ptr", "elem": "f16"},
        {"name": "lse", "kind": "ptr", "elem": "f32"},
        {"name": "seqlen_q", "kind": "i32"},
        {"name": "scale", "kind": "f32"},
    ],
}


def fake_kernel(runtime, tmp_path, manifest):
    path = write_manifest(tmp_path, manifest, name=manifest["kernel"])
    kernel = runtime.Kernel(path)
    kernel._launcher = FakeLauncher()
    return kernel


def test_kernel_reads_manifest_without_driver(runtime, tmp_path):
    kernel = runtime.Kernel(write_manifest(tmp_path, FLASH_LIKE, name="flash"))
    assert kernel.name == "flash_fwd_f16_d64"
    assert [p["name"] for p in kernel.params] == ["q", "lse", "seqlen_q", "scale"]
    assert "flash_fwd_f16_d64(q: f16, lse: f32, seqlen_q: i32, scale: f32)" in repr(kernel)


def test_kernel_call_without_driver_raises_runtime_error(rt, runtime, tmp_path):
    no_driver_here(rt)
    kernel = runtime.Kernel(write_manifest(tmp_path, SCALAR_MANIFEST, name="scalars"))
    with pytest.raises(RuntimeError, match="no CUDA driver: dlopen"):
        kernel(1, 2, 3.0)


def test_scalar_arguments_are_passed_through(runtime, tmp_path):
    kernel = fake_kernel(runtime, tmp_path, SCALAR_MANIFEST)
    kernel(7, -(2**63), 0.5)
    kernel(7, 2**63 - 1, 2, stream=1234, grid=(1, 2, 3))
    assert kernel._launcher.calls == [
        ([7, -(2**63), 0.5], 0, None),
        ([7, 2**63 - 1, 2.0], 1234, (1, 2, 3)),
    ]


@pytest.mark.parametrize(
    "args, error, message",
    [
        ((1, 2), TypeError, "scalars() takes 3 arguments (n, big, scale), got 2"),
        ((1.0, 2, 3.0), TypeError, "argument 'n' (param 0): expected an int (i32), got float"),
        ((True, 2, 3.0), TypeError, "argument 'n' (param 0): expected an int (i32), got bool"),
        ((2**31, 2, 3.0), ValueError, "argument 'n' (param 0): 2147483648 does not fit in i32"),
        ((-(2**31) - 1, 2, 3.0), ValueError, "argument 'n' (param 0): -2147483649 does not fit in i32"),
        ((1, 2**63, 3.0), ValueError, "argument 'big' (param 1): 9223372036854775808 does not fit in i64"),
        ((1, "2", 3.0), TypeError, "argument 'big' (param 1): expected an int (i64), got str"),
        ((1, 2, "3"), TypeError, "argument 'scale' (param 2): expected a float (f32), got str"),
        ((1, 2, 1e39), ValueError, "argument 'scale' (param 2): 1e+39 overflows f32"),
    ],
)
def test_scalar_argument_errors(runtime, tmp_path, args, error, message):
    kernel = fake_kernel(runtime, tmp_path, SCALAR_MANIFEST)
    with pytest.raises(error) as info:
        kernel(*args)
    assert str(info.value) == message
    assert kernel._launcher.calls == []


def test_infinities_pass_as_f32(runtime, tmp_path):
    kernel = fake_kernel(runtime, tmp_path, SCALAR_MANIFEST)
    kernel(1, 2, float("-inf"))
    assert kernel._launcher.calls[0][0][2] == float("-inf")


def test_stream_must_be_int_or_stream(runtime, tmp_path):
    kernel = fake_kernel(runtime, tmp_path, SCALAR_MANIFEST)
    with pytest.raises(TypeError, match="stream: expected None, an int or a torch.cuda.Stream, got str"):
        kernel(1, 2, 3.0, stream="s")


def test_pointer_argument_must_be_a_tensor(runtime, tmp_path):
    kernel = fake_kernel(runtime, tmp_path, FLASH_LIKE)
    with pytest.raises(TypeError) as info:
        kernel(0x1000, 0x2000, 5, 1.0)
    assert str(info.value).startswith(
        "argument 'q' (param 0): expected torch.float16 CUDA tensor, got int"
    )
    if torch is None:
        assert str(info.value).endswith("(torch is not installed)")


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_pointer_argument_dtype_and_device(runtime, tmp_path):
    kernel = fake_kernel(runtime, tmp_path, FLASH_LIKE)
    lse = torch.zeros(4)
    with pytest.raises(TypeError) as info:
        kernel(torch.zeros(4), lse, 5, 1.0)
    assert str(info.value) == (
        "argument 'q' (param 0): expected torch.float16 CUDA tensor, got torch.float32 on cpu"
    )
    with pytest.raises(ValueError) as info:
        kernel(torch.zeros(4, dtype=torch.float16), lse, 5, 1.0)
    assert str(info.value) == (
        "argument 'q' (param 0): expected torch.float16 CUDA tensor, got torch.float16 on cpu"
    )
    assert kernel._launcher.calls == []


# --- the CUDA paths, against a fake libcuda.so.1 -------------------------------


@pytest.fixture(scope="session")
def fake_cuda_dir(tmp_path_factory):
    cc = next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)
    if cc is None:
        pytest.skip("no C compiler to build fake_libcuda.c")
    folder = tmp_path_factory.mktemp("fake_cuda")
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-o", str(folder / "libcuda.so.1"), str(HERE / "fake_libcuda.c")],
        check=True,
    )
    return folder


def run_fake(rt, fake_cuda_dir, tmp_path, body, env=None):
    """Runs `body` in a subprocess whose libcuda.so.1 is the fake; returns
    (stdout lines, the fake driver's call log)."""
    log = tmp_path / "cuda.log"
    script = "import _tilec_runtime as rt\n" + textwrap.dedent(body)
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [str(fake_cuda_dir)] + [p for p in [os.environ.get("LD_LIBRARY_PATH")] if p]
    )
    full_env["FAKE_CUDA_LOG"] = str(log)
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(rt.__file__).parent)] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], env=full_env, capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    return proc.stdout.splitlines(), calls


def launches(calls):
    return [c for c in calls if c.startswith("launch ")]


def test_fake_driver_launch_packs_parameters(rt, fake_cuda_dir, tmp_path):
    path = write_manifest(tmp_path)
    out, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        print(rt.driver_available())
        k = rt.load({str(path)!r})
        print(k.grid([0x7f0000001000, 1000, -5, 6, 1.5]))
        k.launch([0x7f0000001000, 1000, -5, 6, 1.5], 0xabc)
        k.launch([0x7f0000001000, 1, 0, 1, 2], 0, (3, 2, 1))
    """)
    assert out == ["(True, '')", "(8, 6, 1)"]
    assert launches(calls) == [
        "launch k grid=8,6,1 block=128,1,1 shared=0 stream=0xabc params"
        " 8:0x7f0000001000 4:0x3e8 4:0xfffffffb 8:0x6 4:0x3fc00000",
        "launch k grid=3,2,1 block=128,1,1 shared=0 stream=0x0 params"
        " 8:0x7f0000001000 4:0x1 4:0x0 8:0x1 4:0x40000000",
    ]
    # No context was current: the pointer's context is made current, once;
    # the PTX is loaded once; 48 KiB or less needs no shared-memory opt-in.
    assert calls.count("cuCtxSetCurrent") == 1
    assert "cuDevicePrimaryCtxRetain" not in calls
    assert calls.count("load ptx") == 1
    assert not [c for c in calls if c.startswith("cuFuncSetAttribute")]


@pytest.mark.parametrize("early, env, expected", [
    (True, {}, " attr=6:1"),                  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    (True, {"TILEC_PDL": "0"}, ""),           # the A/B switch: plain stream order
    (False, {}, ""),
    (None, {}, ""),                           # no key: a kernel that does not wait
])
def test_fake_driver_programmatic_launch(rt, fake_cuda_dir, tmp_path, early, env, expected):
    """A kernel whose manifest says "programmatic_launch" (it waits for the
    kernel before it: tl.wait_prior_kernels) goes through cuLaunchKernelEx
    with programmatic stream serialization; every other launch is plain."""
    path = write_manifest(tmp_path, BASE_MANIFEST if early is None else mutated(programmatic_launch=early))
    _, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        rt.load({str(path)!r}).launch([0x7f0000001000, 1, 0, 1, 1.0], 0xabc)
    """, env)
    assert launches(calls) == [f"launch{expected} k grid=1,1,1 block=128,1,1 shared=0 stream=0xabc params"
                               " 8:0x7f0000001000 4:0x1 4:0x0 8:0x1 4:0x3f800000"]


def test_fake_driver_primary_context_without_pointer_context(rt, fake_cuda_dir, tmp_path):
    path = write_manifest(tmp_path)
    _, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        rt.load({str(path)!r}).launch([0x10, 1, 0, 1, 1.0], 0)
    """)
    assert "cuDevicePrimaryCtxRetain" in calls
    assert len(launches(calls)) == 1


def test_fake_driver_large_shared_memory_opt_in(rt, fake_cuda_dir, tmp_path):
    path = write_manifest(tmp_path, mutated(shared_bytes=100000))
    _, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        k = rt.load({str(path)!r})
        k.launch([0x7f0000001000, 1, 0, 1, 1.0], 0)
        k.launch([0x7f0000001000, 1, 0, 1, 1.0], 0)
    """)
    assert calls.count("cuFuncSetAttribute 8 100000") == 1
    assert [c.split(" params")[0] for c in launches(calls)] == [
        "launch k grid=1,1,1 block=128,1,1 shared=100000 stream=0x0"
    ] * 2


def test_fake_driver_shared_memory_beyond_device(rt, fake_cuda_dir, tmp_path):
    path = write_manifest(tmp_path, mutated(shared_bytes=300000))
    out, _ = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        try:
            rt.load({str(path)!r}).launch([0x7f0000001000, 1, 0, 1, 1.0], 0)
        except RuntimeError as e:
            print(e)
    """)
    assert out == [
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) failed: CUDA_ERROR_INVALID_VALUE "
        "(invalid argument): kernel 'k' asks for 300000 bytes of dynamic shared memory; "
        "the device allows 232448 per block (less the kernel's static shared memory)"
    ]


def test_fake_driver_modules_are_cached_per_manifest(rt, fake_cuda_dir, tmp_path):
    path = write_manifest(tmp_path)
    _, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        a = rt.load({str(path)!r})
        b = rt.load({str(path)!r})
        for k in (a, b, a):
            k.launch([0x7f0000001000, 1, 0, 1, 1.0], 0)
        # A recompiled kernel at the same path is a new module.
        open({str(tmp_path / "k.ptx")!r}, "a").write("// v2\\n")
        rt.load({str(path)!r}).launch([0x7f0000001000, 1, 0, 1, 1.0], 0)
    """)
    assert calls.count("load ptx") == 2
    assert len(launches(calls)) == 4


def test_fake_driver_cubin_preferred(rt, fake_cuda_dir, tmp_path):
    path = write_manifest(tmp_path, arch="sm_90", cubin=b"\x7fELF arch=sm_90 " + PTX.encode())
    _, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        rt.load({str(path)!r}).launch([0x7f0000001000, 1, 0, 1, 1.0], 0)
    """)
    assert "load cubin" in calls and "load ptx" not in calls
    assert len(launches(calls)) == 1


def test_fake_driver_falls_back_to_ptx(rt, fake_cuda_dir, tmp_path):
    # The manifest claims the device's arch but the driver rejects the image.
    path = write_manifest(tmp_path, arch="sm_90", cubin=b"\x7fELF arch=sm_80 " + PTX.encode())
    _, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        rt.load({str(path)!r}).launch([0x7f0000001000, 1, 0, 1, 1.0], 0)
    """)
    assert calls.index("load cubin") < calls.index("load ptx")
    assert len(launches(calls)) == 1


def test_fake_driver_skips_cubin_for_another_major(rt, fake_cuda_dir, tmp_path):
    # An sm_80 cubin cannot run on the sm_90 device: the PTX is JIT-compiled
    # without a failing load first (compute-sanitizer reports those).
    path = write_manifest(tmp_path, arch="sm_80", cubin=b"\x7fELF arch=sm_80 " + PTX.encode())
    out, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        k = rt.load({str(path)!r})
        print(repr(k.loaded_image))
        k.launch([0x7f0000001000, 1, 0, 1, 1.0], 0)
        print(k.loaded_image)
    """)
    assert "load cubin" not in calls and "load ptx" in calls
    assert len(launches(calls)) == 1
    assert out == ["''", "ptx (JIT for sm_90)"]


def cubin_for(arch):
    """A fake cubin the fake driver loads only when `arch` is sm_90."""
    return f"\x7fELF arch={arch} ".encode("latin-1") + PTX.encode()


def loaded_image(rt, fake_cuda_dir, tmp_path, **manifest):
    """Writes a manifest (write_manifest's arguments), launches it once on
    the fake sm_90 device; returns (the image it reports, the driver calls)."""
    path = write_manifest(tmp_path, **manifest)
    out, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        k = rt.load({str(path)!r})
        k.launch([0x7f0000001000, 1, 0, 1, 1.0], 0)
        print(k.loaded_image)
    """)
    assert len(launches(calls)) == 1
    return out, calls


def test_fake_driver_loads_sass_for_the_device(rt, fake_cuda_dir, tmp_path):
    # An sm_80 kernel that also carries sm_90 machine code (tilec
    # --extra-sass=sm_90) runs it on the sm_90 device: no JIT, no failed load.
    out, calls = loaded_image(rt, fake_cuda_dir, tmp_path, arch="sm_80", cubin=cubin_for("sm_80"),
                              sass={"sm_100": cubin_for("sm_100"), "sm_90": cubin_for("sm_90")})
    assert calls.count("load cubin") == 1 and "load ptx" not in calls
    assert out == ["cubin sm_90"]


def test_fake_driver_main_cubin_for_the_device_wins(rt, fake_cuda_dir, tmp_path):
    # The fake device is sm_90 and so is the main cubin: it is loaded and the
    # "sass" images are never tried; a second kernel from the same manifest
    # (a module-cache hit) reports the same image.
    path = write_manifest(tmp_path, arch="sm_90", cubin=cubin_for("sm_90"),
                          sass={"sm_100": cubin_for("sm_100")})
    out, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        for k in (rt.load({str(path)!r}), rt.load({str(path)!r})):
            k.launch([0x7f0000001000, 1, 0, 1, 1.0], 0)
            print(k.loaded_image)
    """)
    assert calls.count("load cubin") == 1 and "load ptx" not in calls
    assert out == ["cubin sm_90", "cubin sm_90"]


def test_fake_driver_rejected_sass_falls_back_to_ptx(rt, fake_cuda_dir, tmp_path):
    # The manifest says sm_90 but the image is not loadable there.
    out, calls = loaded_image(rt, fake_cuda_dir, tmp_path, arch="sm_80", cubin=cubin_for("sm_80"),
                              sass={"sm_90": cubin_for("sm_89")})
    assert calls.index("load cubin") < calls.index("load ptx")
    assert out == ["ptx (JIT for sm_90)"]


def test_fake_driver_sass_for_other_gpus_only_jits(rt, fake_cuda_dir, tmp_path):
    out, calls = loaded_image(rt, fake_cuda_dir, tmp_path, arch="sm_80", cubin=cubin_for("sm_80"),
                              sass={"sm_100": cubin_for("sm_100")})
    assert "load cubin" not in calls and "load ptx" in calls
    assert out == ["ptx (JIT for sm_90)"]


def test_fake_driver_sass_without_ptx_fails_clearly(rt, fake_cuda_dir, tmp_path):
    path = write_manifest(tmp_path, arch="sm_80", ptx=None, cubin=cubin_for("sm_80"),
                          sass={"sm_100": cubin_for("sm_100")})
    out, _ = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        try:
            rt.load({str(path)!r}).launch([0x7f0000001000, 1, 0, 1, 1.0], 0)
        except RuntimeError as e:
            print(e)
    """)
    assert len(out) == 1 and "no image runs on this sm_90 device and no PTX to JIT" in out[0]


def test_fake_driver_wrong_cubin_without_ptx(rt, fake_cuda_dir, tmp_path):
    path = write_manifest(tmp_path, ptx=None, cubin=b"\x7fELF arch=sm_80 " + PTX.encode())
    out, _ = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        try:
            rt.load({str(path)!r}).launch([0x7f0000001000, 1, 0, 1, 1.0], 0)
        except RuntimeError as e:
            print(e)
    """)
    assert out == [
        "cuModuleLoadDataEx failed: CUDA_ERROR_NO_BINARY_FOR_GPU (no kernel image is available "
        f"for execution on the device) loading cubin {tmp_path / 'k.cubin'} (built for sm_80, "
        "device is sm_90); the manifest names no PTX to JIT"
    ]


def test_fake_driver_ptx_jit_error_carries_log(rt, fake_cuda_dir, tmp_path):
    path = write_manifest(tmp_path, arch="sm_90", ptx=PTX + "SYNTAX_ERROR\n",
                          cubin=b"\x7fELF arch=sm_80 k")
    out, _ = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        try:
            rt.load({str(path)!r}).launch([0x7f0000001000, 1, 0, 1, 1.0], 0)
        except RuntimeError as e:
            print(e)
    """)
    assert out == [
        "cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed) "
        f"JIT-compiling PTX {tmp_path / 'k.ptx'} for sm_90; the cubin {tmp_path / 'k.cubin'} was "
        "rejected before: CUDA_ERROR_NO_BINARY_FOR_GPU (no kernel image is available for "
        "execution on the device)",
        "JIT error log:",
        "ptxas application ptx input, line 1; fatal   : Parsing error near 'SYNTAX_ERROR'",
    ]


def test_fake_driver_kernel_not_in_module(rt, fake_cuda_dir, tmp_path):
    path = write_manifest(tmp_path, mutated(kernel="other"))
    out, _ = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        try:
            rt.load({str(path)!r}).launch([0x7f0000001000, 1, 0, 1, 1.0], 0)
        except RuntimeError as e:
            print(e)
    """)
    assert out == [
        "cuModuleGetFunction failed: CUDA_ERROR_NOT_FOUND (named symbol not found) looking up "
        f"kernel 'other' from manifest {path}"
    ]


def test_fake_driver_launch_argument_errors(rt, fake_cuda_dir, tmp_path):
    path = write_manifest(tmp_path)
    out, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        k = rt.load({str(path)!r})
        for args in ([1, 2], [1.5, 1, 0, 1, 1.0], [1, 2**31, 0, 1, 1.0], [1, 1, 0, 2**63, 1.0],
                     [1, 1, 0, 1, "x"], [1, True, 0, 1, 1.0], [-1, 1, 0, 1, 1.0],
                     [1, 1, 0, 1, 1e39], [1, 1, 0, 1.0, 1.0], [1, 0, 0, 1, 1.0]):
            try:
                k.launch(args, 0)
            except (TypeError, ValueError) as e:
                print(type(e).__name__, e)
    """)
    assert out == [
        "TypeError kernel 'k' takes 5 arguments (x, n, off, stride, a), got 2",
        "TypeError argument 'x' (param 0, ptr to f32): expected a device pointer, got a real",
        "ValueError argument 'n' (param 1, i32): 2147483648 does not fit in i32",
        "ValueError argument 'stride' (param 3, i64): 9223372036854775808 does not fit in 64 bits",
        "TypeError argument 'a' (param 4, f32): expected an int or a float, got str",
        "TypeError argument 'n' (param 1, i32): got a bool",
        "ValueError argument 'x' (param 0, ptr to f32): -1 is not a 64-bit device address",
        "ValueError argument 'a' (param 4, f32): 1e+39 overflows f32",
        "TypeError argument 'stride' (param 3, i64): expected an integer, got a real",
        "ValueError manifest {path}: grid[0] 'cdiv(n, 128)' (n=0) = 0, outside the launchable range [1, 2147483647] (CUDA's limit for gridDim.x)".format(path=path),
    ]
    assert launches(calls) == []


def test_fake_driver_launch_fast_packs_like_launch(rt, fake_cuda_dir, tmp_path):
    # The hot path (Kernel.launch_fast, a tuple; tensors give their address
    # through data_ptr()) packs the same bytes and grid as launch().
    path = write_manifest(tmp_path)
    _, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        class Tensor:
            def data_ptr(self):
                return 0x7f0000001000
        k = rt.load({str(path)!r})
        k.launch([0x7f0000001000, 1000, -5, 6, 1.5], 0xabc)
        k.launch_fast((Tensor(), 1000, -5, 6, 1.5), 0xabc)
        k.launch_fast((0x7f0000001000, 1000, -5, 6, 1.5), 0xabc, None)
        k.launch_fast((0x7f0000001000, 1, 0, 1, 2), 0, (3, 2, 1))
    """)
    first = ("launch k grid=8,6,1 block=128,1,1 shared=0 stream=0xabc params"
             " 8:0x7f0000001000 4:0x3e8 4:0xfffffffb 8:0x6 4:0x3fc00000")
    assert launches(calls) == [first, first, first,
                               "launch k grid=3,2,1 block=128,1,1 shared=0 stream=0x0 params"
                               " 8:0x7f0000001000 4:0x1 4:0x0 8:0x1 4:0x40000000"]


def test_fake_driver_launch_fast_argument_errors(rt, fake_cuda_dir, tmp_path):
    # Every value is checked against its parameter once, in C++, with the
    # messages launch() gives; nothing is launched.
    path = write_manifest(tmp_path)
    out, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        k = rt.load({str(path)!r})
        for args in ((1, 2), (object(), 1, 0, 1, 1.0), (16, 2**31, 0, 1, 1.0), (16, True, 0, 1, 1.0),
                     (16, 1, 0, 1, "x"), (16, 1, 0, 1, 1e39), (16, 0, 0, 1, 1.0)):
            try:
                k.launch_fast(args, 0)
            except (TypeError, ValueError) as e:
                print(type(e).__name__, e)
        try:
            k.launch_fast((16, 1, 0, 1, 1.0), 0, (1, 65536, 1))
        except ValueError as e:
            print(e)
    """)
    assert out == [
        "TypeError kernel 'k' takes 5 arguments (x, n, off, stride, a), got 2",
        "TypeError argument 'x' (param 0, ptr to f32): expected a tensor (an object with data_ptr()) "
        "or an int address, got object",
        "ValueError argument 'n' (param 1, i32): 2147483648 does not fit in i32",
        "TypeError argument 'n' (param 1, i32): got a bool",
        "TypeError argument 'a' (param 4, f32): expected an int or a float, got str",
        "ValueError argument 'a' (param 4, f32): 1e+39 overflows f32",
        "ValueError manifest {path}: grid[0] 'cdiv(n, 128)' (n=0) = 0, outside the launchable range "
        "[1, 2147483647] (CUDA's limit for gridDim.x)".format(path=path),
        "grid override (1, 65536, 1): dimension 1 must be in [1, 65535] (CUDA's limit for gridDim.y)",
    ]
    assert launches(calls) == []


# The flagship grid (m_blocks, heads, batch): batch * heads may exceed 65,535
# (a large-batch decode); only each axis has a hardware limit.
GRID_MANIFEST = dict(BASE_MANIFEST, grid=["cdiv(n, 128)", "heads", "batch"], params=[
    {"name": "x", "kind": "ptr", "elem": "f32"},
    {"name": "n", "kind": "i32"},
    {"name": "heads", "kind": "i32"},
    {"name": "batch", "kind": "i64"},
    {"name": "a", "kind": "f32"},
])


def test_fake_driver_grid_batch_times_heads_beyond_65535(rt, fake_cuda_dir, tmp_path):
    path = write_manifest(tmp_path, GRID_MANIFEST)
    out, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        k = rt.load({str(path)!r})
        print(rt.MAX_GRID)
        k.launch_fast((0x7f0000001000, 1, 32, 2200, 1.0), 0)     # 70,400 (batch, head) pairs
        k.launch([0x7f0000001000, 128, 65535, 65535, 1.0], 0)    # both axes at their limit
        for heads, batch in ((65536, 1), (1, 70400)):
            try:
                k.launch_fast((0x7f0000001000, 1, heads, batch, 1.0), 0)
            except ValueError as e:
                print(e)
    """)
    assert out == [
        "(2147483647, 65535, 65535)",
        f"manifest {path}: grid[1] 'heads' (heads=65536) = 65536, outside the launchable range "
        "[1, 65535] (CUDA's limit for gridDim.y)",
        f"manifest {path}: grid[2] 'batch' (batch=70400) = 70400, outside the launchable range "
        "[1, 65535] (CUDA's limit for gridDim.z)",
    ]
    assert [c.split(" params")[0] for c in launches(calls)] == [
        "launch k grid=1,32,2200 block=128,1,1 shared=0 stream=0x0",
        "launch k grid=1,65535,65535 block=128,1,1 shared=0 stream=0x0",
    ]


def test_fake_driver_rejects_values_a_positive_param_rules_out(rt, fake_cuda_dir, tmp_path):
    """The kernel was compiled relying on tl.assume(x > 0): a launch with
    x <= 0 (or NaN, or a positive double that rounds to 0.0f) never reaches
    the driver."""
    manifest = with_param(4, positive=True)
    for index in (2, 3):  # off (i32), stride (i64)
        manifest["params"][index]["positive"] = True
    path = write_manifest(tmp_path, manifest)
    out, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        k = rt.load({str(path)!r})
        for args in ([1, 1, 5, 6, -0.5], [1, 1, 5, 6, 0.0], [1, 1, 5, 6, float("nan")],
                     [1, 1, 5, 6, 1e-50], [1, 1, 5, 6, -1], [1, 1, 0, 6, 1.0], [1, 1, 5, -3, 1.0]):
            try:
                k.launch(args, 0)
            except ValueError as e:
                print(e)
        k.launch([0x7f0000001000, 1, 5, 6, 0.125], 0)
        print(k.grid([1, 1, 5, 6, 2]))
    """)
    assume = "must be > 0 (the kernel was compiled with tl.assume({0} > 0)), got "
    assert out == [
        "argument 'a' (param 4, f32): " + assume.format("a") + "-0.5",
        "argument 'a' (param 4, f32): " + assume.format("a") + "0",
        "argument 'a' (param 4, f32): " + assume.format("a") + "nan",
        "argument 'a' (param 4, f32): " + assume.format("a") + "1e-50",
        "argument 'a' (param 4, f32): " + assume.format("a") + "-1",
        "argument 'off' (param 2, i32): " + assume.format("off") + "0",
        "argument 'stride' (param 3, i64): " + assume.format("stride") + "-3",
        "(1, 6, 1)",
    ]
    assert [c.split(" params")[0] for c in launches(calls)] == [
        "launch k grid=1,6,1 block=128,1,1 shared=0 stream=0x0"
    ]


def test_fake_driver_rejects_pointers_below_the_kernels_access_width(rt, fake_cuda_dir, tmp_path):
    """The manifest says the kernel moves 16 bytes at a time through x (cp.async,
    16-byte stores): a pointer not 16-byte aligned is refused before the
    driver (on the GPU it would fault as a misaligned address)."""
    path = write_manifest(tmp_path, with_param(0, align=16))
    out, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        k = rt.load({str(path)!r})
        try:
            k.launch([0x7f0000001002, 1, 5, 6, 0.5], 0)
        except ValueError as e:
            print(e)
        k.launch([0x7f0000001010, 1, 5, 6, 0.5], 0)
    """)
    assert out == ["argument 'x' (param 0, ptr to f32): the kernel reads or writes it 16 bytes "
                   "at a time, so it must be 16-byte aligned; got 0x7f0000001002"]
    assert len(launches(calls)) == 1


def test_fake_driver_cuinit_failure(rt, fake_cuda_dir, tmp_path):
    path = write_manifest(tmp_path)
    out, _ = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        print(rt.driver_available())
        try:
            rt.load({str(path)!r})
        except RuntimeError as e:
            print(e)
    """, env={"FAKE_CUDA_INIT_ERROR": "100"})
    reason = "no usable CUDA driver: cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)"
    assert out == [str((False, reason)), reason]


# --- a real GPU ---------------------------------------------------------------

# y[i] = a * x[i * stride] + 1, staged through dynamic shared memory (each
# thread writes the value its mirror thread reads). PTX ISA 7.0 so that any
# driver from CUDA 11 on can JIT it.
AXPB_PTX = """\
.version 7.0
.target sm_80
.address_size 64

.extern .shared .align 16 .b8 buf[];

.visible .entry axpb_smem(
\t.param .u64 axpb_smem_param_0,
\t.param .u64 axpb_smem_param_1,
\t.param .u32 axpb_smem_param_2,
\t.param .u64 axpb_smem_param_3,
\t.param .f32 axpb_smem_param_4
)
{
\t.reg .pred \t%p<3>;
\t.reg .f32 \t%f<8>;
\t.reg .b32 \t%r<16>;
\t.reg .b64 \t%rd<12>;

\tld.param.u64 \t%rd1, [axpb_smem_param_0];
\tld.param.u64 \t%rd2, [axpb_smem_param_1];
\tld.param.u32 \t%r7, [axpb_smem_param_2];
\tld.param.u64 \t%rd3, [axpb_smem_param_3];
\tld.param.f32 \t%f3, [axpb_smem_param_4];
\tmov.u32 \t%r1, %ntid.x;
\tmov.u32 \t%r8, %ctaid.x;
\tmul.lo.s32 \t%r2, %r8, %r1;
\tmov.u32 \t%r3, %tid.x;
\tadd.s32 \t%r4, %r2, %r3;
\tsetp.ge.s32 \t%p1, %r4, %r7;
\tmov.f32 \t%f7, 0f00000000;
\t@%p1 bra \t$L__BB0_2;
\tcvta.to.global.u64 \t%rd4, %rd2;
\tcvt.s64.s32 \t%rd5, %r4;
\tmul.lo.s64 \t%rd6, %rd5, %rd3;
\tshl.b64 \t%rd7, %rd6, 2;
\tadd.s64 \t%rd8, %rd4, %rd7;
\tld.global.f32 \t%f7, [%rd8];
$L__BB0_2:
\tshl.b32 \t%r9, %r3, 2;
\tmov.u32 \t%r10, buf;
\tadd.s32 \t%r11, %r10, %r9;
\tst.shared.f32 \t[%r11], %f7;
\tbar.sync \t0;
\tnot.b32 \t%r12, %r3;
\tadd.s32 \t%r5, %r1, %r12;
\tadd.s32 \t%r6, %r2, %r5;
\tsetp.ge.s32 \t%p2, %r6, %r7;
\t@%p2 bra \t$L__BB0_4;
\tshl.b32 \t%r13, %r5, 2;
\tadd.s32 \t%r15, %r10, %r13;
\tld.shared.f32 \t%f5, [%r15];
\tfma.rn.f32 \t%f6, %f5, %f3, 0f3F800000;
\tcvta.to.global.u64 \t%rd9, %rd1;
\tmul.wide.s32 \t%rd10, %r6, 4;
\tadd.s64 \t%rd11, %rd9, %rd10;
\tst.global.f32 \t[%rd11], %f6;
$L__BB0_4:
\tret;
}
"""

AXPB_MANIFEST = {
    "kernel": "axpb_smem",
    "arch": "sm_80",
    "block": [128, 1, 1],
    # Above 48 KiB, so the launch needs the opt-in attribute.
    "shared_bytes": 64 * 1024,
    "grid": ["cdiv(n, 128)", "1", "1"],
    "params": [
        {"name": "y", "kind": "ptr", "elem": "f32"},
        {"name": "x", "kind": "ptr", "elem": "f32"},
        {"name": "n", "kind": "i32"},
        {"name": "stride", "kind": "i64"},
        {"name": "a", "kind": "f32"},
    ],
}

needs_gpu = pytest.mark.skipif(
    torch is None or not torch.cuda.is_available(), reason="needs torch and a CUDA GPU"
)


def check_axpb(runtime, path, stream=None):
    kernel = runtime.Kernel(path)
    n, stride = 1000, 3
    x = torch.randn(n * stride, device="cuda")
    y = torch.full((n,), float("nan"), device="cuda")
    if stream is not None:
        stream.wait_stream(torch.cuda.current_stream())
    kernel(y, x, n, stride, 2.5, stream=stream)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, 2.5 * x[::stride] + 1, rtol=1e-6, atol=1e-6)


@needs_gpu
def test_gpu_ptx_launch(runtime, tmp_path):
    path = write_manifest(tmp_path, AXPB_MANIFEST, name="axpb", ptx=AXPB_PTX)
    check_axpb(runtime, path)
    check_axpb(runtime, path, stream=torch.cuda.Stream())


@needs_gpu
def test_gpu_cubin_and_fallback(runtime, tmp_path):
    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    if not os.access(ptxas, os.X_OK):
        pytest.skip("ptxas not found")
    major, minor = torch.cuda.get_device_capability()
    (tmp_path / "axpb.ptx").write_text(AXPB_PTX)
    # One cubin for this GPU, one it cannot run (forcing the PTX fallback).
    other = "sm_80" if major != 8 else "sm_90"
    for arch, name in ((f"sm_{major}{minor}", "native"), (other, "other")):
        subprocess.run([ptxas, f"-arch={arch}", str(tmp_path / "axpb.ptx"),
                        "-o", str(tmp_path / f"{name}.cubin")], check=True)
        manifest = dict(AXPB_MANIFEST, arch=arch, cubin=f"{name}.cubin", ptx="axpb.ptx")
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(manifest))
        check_axpb(runtime, path)


@needs_gpu
def test_gpu_errors_name_the_argument(runtime, tmp_path):
    kernel = runtime.Kernel(write_manifest(tmp_path, AXPB_MANIFEST, name="axpb", ptx=AXPB_PTX))
    x = torch.randn(10, device="cuda")
    with pytest.raises(TypeError, match=r"argument 'y' \(param 0\): expected torch.float32 CUDA "
                                        r"tensor, got torch.float16 on cuda:0"):
        kernel(x.half(), x, 10, 1, 1.0)


# --- flash_attn_func's hot path, against the fake driver ------------------------


def test_fake_driver_flash_attn_hot_path_is_one_lookup_and_one_launch(rt, fake_cuda_dir, tmp_path):
    # CPU tensors pose as CUDA ones (bench/host_overhead.py --mock). After the
    # first call, a call generates no IR, hashes nothing, reads no file and
    # does not look for a prebuilt artifact: those are made to raise, and the
    # compiler made to look absent (a GPU host's case, where every call used
    # to re-derive the prebuilt artifact).
    if torch is None:
        pytest.skip("torch is not installed")
    try:
        import _tilec  # noqa: F401
    except ImportError:
        pytest.skip("the _tilec compiler is not built (it compiles the kernel once here)")
    out, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        import sys
        sys.path[:0] = [{str(REPO / "python")!r}, {str(REPO / "bench")!r}]
        import host_overhead as mock
        mock.install_mock()
        import builtins, hashlib, re, torch
        import tilec
        from tilec import compiler, frontend
        q, k, v = (mock.mock_cuda(torch.randn(2, 100, 3, 64).half()) for _ in range(3))
        tilec.flash_attn_func(q, k, v, causal=True)
        saved = [(m, n, getattr(m, n)) for m, n in [
            (compiler, "find_prebuilt"), (compiler, "compile_cached"), (compiler, "compile"),
            (frontend, "generate"), (hashlib, "sha256"), (re, "sub"), (re, "compile"), (builtins, "open")]]
        def forbidden(*a, **kw):
            raise AssertionError("called on the hot path")
        for m, n, _ in saved:
            setattr(m, n, forbidden)
        for name in ("available", "can_compile"):  # as on a GPU host without LLVM (prebuilt artifacts)
            if hasattr(compiler, name):
                saved.append((compiler, name, getattr(compiler, name)))
                setattr(compiler, name, lambda: False)
        out, lse = tilec.flash_attn_func(q, k, v, causal=True, return_lse=True)
        for m, n, f in saved:
            setattr(m, n, f)
        print(tuple(out.shape), out.dtype, tuple(lse.shape), lse.dtype)
        tilec.flash_attn_func(q, k, v, softmax_scale=0.5)  # another key: a miss, which may compile
    """, env={"TILEC_ARCH": "sm_80", "TILEC_CACHE_DIR": str(tmp_path / "cache")})
    assert out == ["(2, 100, 3, 64) torch.float16 (2, 3, 100) torch.float32"]
    names = [c.split()[1] for c in launches(calls)]
    assert names == ["flash_fwd_f16_d64_causal", "flash_fwd_f16_d64_causal", "flash_fwd_f16_d64"], calls
    # grid (cdiv(100, BLOCK_M), batch * heads) today; (m_blocks, heads, batch) once variants land.
    assert all(" block=" in c for c in launches(calls))


def test_fake_driver_dsl_grid_heads_batch_from_the_compiler(rt, fake_cuda_dir, tmp_path):
    # A DSL kernel with the flagship's new grid shape (m_blocks, heads, batch):
    # the compiler's manifest loads and a launch of 32 heads x 2,200 batches
    # (70,400 programs per m block) goes through.
    try:
        import _tilec  # noqa: F401
    except ImportError:
        pytest.skip("the _tilec compiler is not built")
    # The frontend reads the kernel's source: it lives in a file.
    (tmp_path / "grid_kernel.py").write_text(textwrap.dedent("""
        import tilec
        from tilec import language as tl

        @tilec.jit(grid=("cdiv(n, BLOCK)", "heads", "batch"))
        def fill(x: tl.ptr(tl.float32), n: tl.int32, heads: tl.int32, batch: tl.int32,
                 BLOCK: tl.constexpr = 16):
            xv = tl.view(x + (tl.program_id(2) * heads + tl.program_id(1)) * n, (n,), (1,))
            tl.store(xv, (tl.program_id(0) * BLOCK,), tl.zeros((BLOCK,), tl.float32))
    """))
    out, calls = run_fake(rt, fake_cuda_dir, tmp_path, f"""
        import sys
        sys.path[:0] = [{str(REPO / "python")!r}, {str(tmp_path)!r}]
        from grid_kernel import fill
        kernel = fill.specialize(BLOCK=16)
        art = kernel.compile("sm_80")
        k = rt.load(art.manifest_path)
        print(k.manifest["grid"])
        k.launch_fast((0x7f0000001000, 40, 32, 2200), 0)
        if {torch is not None!r}:  # tilec.Kernel.__call__ on a tensor posing as CUDA
            sys.path.insert(0, {str(REPO / "bench")!r})
            import host_overhead as mock, torch
            mock.install_mock()
            x = mock.mock_cuda(torch.zeros(2200 * 32 * 40))
            kernel(x, 40, 32, 2200)
            try:
                kernel(x, 40, 32, 70000)
            except ValueError as e:
                print(e)
    """, env={"TILEC_CACHE_DIR": str(tmp_path / "cache"), "TILEC_ARCH": "sm_80"})
    assert out[0] == "['cdiv(n, 16)', 'heads', 'batch']"
    grids = [c.split(" block=")[0] for c in launches(calls)]
    assert grids == ["launch fill grid=3,32,2200"] * (1 if torch is None else 2)
    if torch is not None:
        assert out[1].endswith("grid[2] 'batch' (batch=70000) = 70000, outside the launchable range "
                               "[1, 65535] (CUDA's limit for gridDim.z)")
