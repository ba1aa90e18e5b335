# lit configuration for tilec. Every tool a test calls is substituted here
# and listed in check-tilec's DEPENDS.
import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "TILEC"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.tilec_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "Inputs", "check_run_lines.py", "check_prefixes.py", "check_setup_plan.py"]

config.substitutions.append(("%tilec_src_root", config.tilec_src_root))
config.substitutions.append(("%tilec_tools_dir", config.tilec_tools_dir))
llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP", "PATH"])
llvm_config.use_default_substitutions()

tool_dirs = [config.tilec_tools_dir, config.llvm_tools_dir]
tools = ["tile-opt", "tilec-layout", "tilec"]
llvm_config.add_tool_substitutions(tools, tool_dirs)
config.substitutions.append(("%python", config.python_executable))
# The DSL frontend parses grid expressions with the runtime extension
# (<build>/python/_tilec_runtime).
llvm_config.with_environment("PYTHONPATH", os.path.join(config.tilec_obj_root, "python"),
                             append_path=True)

# The CUDA toolkit is optional: tests that assemble PTX say `REQUIRES: ptxas`,
# tests that read SASS `REQUIRES: cuobjdump`. tilec finds ptxas the same way
# (lib/Target/Ptxas.cpp), so both see the same toolkit.
import glob
import shutil
import subprocess

llvm_config.with_system_environment(["CUDA_HOME", "TILEC_PTXAS"])
# `not` at the start of a RUN line (lit substitutes it only after a pipe).
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)


def _find_ptxas():
    if "TILEC_PTXAS" in os.environ:
        path = os.environ["TILEC_PTXAS"]
        return path if path and os.access(path, os.X_OK) else None
    for root in [os.environ.get("CUDA_HOME"), "/usr/local/cuda"]:
        if root and os.access(os.path.join(root, "bin", "ptxas"), os.X_OK):
            return os.path.join(root, "bin", "ptxas")
    return shutil.which("ptxas")


if _find_ptxas():
    config.available_features.add("ptxas")


def _find_cuobjdump():
    # The pip wheel nvidia-cuda-cuobjdump puts it under site-packages/nvidia;
    # -sass also needs nvdisasm (nvidia-cuda-nvdisasm) beside it.
    # lit may run under another Python than the project's, so ask that one.
    candidates = [shutil.which("cuobjdump")]
    try:
        roots = subprocess.run(
            [config.python_executable, "-c", "import nvidia; print('\\n'.join(nvidia.__path__))"],
            capture_output=True, text=True, timeout=60).stdout.split()
    except (OSError, subprocess.SubprocessError):
        roots = []
    for root in roots:
        candidates += sorted(glob.glob(os.path.join(root, "*", "bin", "cuobjdump")))
    for path in candidates:
        if path and os.access(path, os.X_OK):
            folder = os.path.dirname(path)
            if os.access(os.path.join(folder, "nvdisasm"), os.X_OK) or shutil.which("nvdisasm"):
                return path
    return None


_cuobjdump = _find_cuobjdump()
if _cuobjdump:
    config.available_features.add("cuobjdump")
    config.substitutions.append(("%cuobjdump", _cuobjdump))
