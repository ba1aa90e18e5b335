"""The product's own DSL kernels (kernels/<name>.py) as Python modules: installed
inside the package by `pip install .` (python/CMakeLists.txt), else read from
the source tree. Loaded once per name."""

import importlib.util
from pathlib import Path

_modules = {}


def load(name):
    """The module of kernels/<name>.py; ImportError naming the file if absent."""
    module = _modules.get(name)
    if module is None:
        here = Path(__file__).resolve().parent
        for path in (here / "kernels" / f"{name}.py", here.parents[1] / "kernels" / f"{name}.py"):
            if path.exists():
                spec = importlib.util.spec_from_file_location(f"tilec_kernels_{name}", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                break
        else:
            raise ImportError(f"kernels/{name}.py not found next to the tilec package")
        _modules[name] = module
    return module
