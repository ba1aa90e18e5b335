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
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "Inputs", "check_run_lines.py"]

config.substitutions.append(("%tilec_src_root", config.tilec_src_root))
llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP", "PATH"])
llvm_config.use_default_substitutions()

tool_dirs = [config.tilec_tools_dir, config.llvm_tools_dir]
tools = ["tile-opt"]
llvm_config.add_tool_substitutions(tools, tool_dirs)
config.substitutions.append(("%python", config.python_executable))
