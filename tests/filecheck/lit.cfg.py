# lit configuration for irkit's FileCheck tests: `lit tests/filecheck` (pytest runs it too).
import ctypes.util
import os
import platform
import sys

import lit.formats

config.name = "irkit"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".graph"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py", "Inputs"]
# irkit-opt and filecheck as installed beside the Python that runs lit, ahead of any version
# manager's shims of them (pyenv's cost a bash script and `pyenv exec` per RUN line's tool)
config.environment["PATH"] = os.pathsep.join(
    [os.path.dirname(sys.executable), os.environ.get("PATH", "")]
)
config.environment["PYTHONWARNINGS"] = "ignore"
for tool in ("mlir-opt", "mlir-opt-22"):
    if any(
        os.access(os.path.join(d, tool), os.X_OK)
        for d in os.environ.get("PATH", "").split(os.pathsep)
    ):
        config.available_features.add("mlir-opt")
if sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64"):
    config.available_features.add("irkit-pool")  # irkit.codegen.pool (futex)
if platform.machine() == "x86_64":
    config.available_features.add("x86_64")  # -t asm's host assembly, as x86-64
if ctypes.util.find_library("gomp"):
    config.available_features.add("libgomp")  # the CPU backend's thread pool
