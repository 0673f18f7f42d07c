# -*- Python -*-
# lit configuration for Loom: dialect syntax, verifiers, passes, tools.
import os
import shutil
import subprocess

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "LOOM"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test", ".json"]
config.excludes = ["CMakeLists.txt", "README.md", "lit.cfg.py", "lit.site.cfg.py",
                   "Inputs", "Unit", "Fuzz"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.loom_obj_root, "test")

config.environment["FILECHECK_OPTS"] = "-enable-var-scope --allow-unused-prefixes=false"
config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%loom_src", config.loom_src_root))
config.substitutions.append(("%loom_bin", config.loom_tools_dir))
config.substitutions.append(("%examples", os.path.join(config.loom_src_root, "examples")))
config.substitutions.append(("%python", config.python_executable))

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

tool_dirs = [config.loom_tools_dir, config.llvm_tools_dir]
tools = ["loom-opt", "loom-import", "loom-ranks", "loom-compile", "loom-run", "loom-train",
         "mlir-translate"]
llvm_config.add_tool_substitutions(
    [ToolSubst(t, unresolved="ignore") for t in tools], tool_dirs)

# Optional features: tests that need them say `REQUIRES: <feature>`.
if config.mpiexec and os.path.exists(config.mpiexec):
    config.available_features.add("mpi")
    config.substitutions.append(
        ("%mpirun", config.mpiexec + " --allow-run-as-root --oversubscribe"))


def _python_has(module):
    try:
        return subprocess.run([config.python_executable, "-c", "import " + module],
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=60).returncode == 0
    except Exception:
        return False


if _python_has("torch"):
    config.available_features.add("torch")

# Under CI=true nothing a test needs may be missing: a suite that would
# quietly report UNSUPPORTED instead of testing is an error (a GPU is the one
# exception: CI machines have none).
if os.environ.get("CI") == "true":
    _missing = [f for f in ("mpi", "torch") if f not in config.available_features]
    _missing += [t for t in ("loom-compile", "loom-run", "loom-import", "loom-train")
                 if not os.path.exists(os.path.join(config.loom_tools_dir, t))]
    if _missing:
        lit_config.fatal("CI=true but %s missing: the tests that need them "
                         "would be skipped (run scripts/setup.sh)" % ", ".join(_missing))

# Linking for the cuda backend needs it built (no GPU needed).
if config.loom_has_cuda_runtime:
    config.available_features.add("cuda-backend")
# A CUDA test needs both the CUDA backend built and a GPU on this machine.
if config.loom_has_cuda_runtime and shutil.which("nvidia-smi"):
    if subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode == 0:
        config.available_features.add("cuda")
