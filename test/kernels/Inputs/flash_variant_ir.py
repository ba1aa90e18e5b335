"""Prints the tile IR of kernels/flash_fwd.py specialized with NAME=VALUE
arguments (Python literals), e.g. `flash_variant_ir.py WINDOW=True`. Needs the
tilec package's frontend (python/ of the source tree) and the runtime
extension, whose parser renders grid expressions (lit puts <build>/python on
PYTHONPATH)."""
import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
from tilec.flash_attn import flash_fwd_kernel  # noqa: E402

constexprs = {}
for arg in sys.argv[1:]:
    name, value = arg.split("=", 1)
    constexprs[name] = ast.literal_eval(value)
print(flash_fwd_kernel().specialize(**constexprs).ir)
