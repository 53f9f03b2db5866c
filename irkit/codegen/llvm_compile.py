"""LLVM IR text to host machine code: the O3 pipeline and the object emitter, as functions
of the text and the target's CPU name and features alone.

This module imports nothing of irkit, so that it also runs as a script
(`python -I llvm_compile.py`): a compile worker that reads `(cpu, features, [(text, symbol),
...])` pickled on its standard input and writes `[(object, optimized_hash), ...]` pickled on
its standard output. `irkit.codegen.host.compile_kernels` runs such workers beside its own
process: llvmlite holds one lock around every LLVM call, so one process optimizes and emits
one module at a time, whatever its threads.
"""

from __future__ import annotations

import hashlib
import pickle
import re
import sys

import llvmlite.binding as llvm

OPTIMIZATION = "O3, loop and SLP vectorization, loop unrolling"
"""What `optimize` runs: part of the machine-code cache's key."""


def machine(cpu: str, features: str) -> llvm.TargetMachine:
    """A new O3 target machine for this CPU. Each MCJIT engine gets its own: an engine takes
    its target machine over, and sharing one between engines corrupts memory."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=cpu, features=features, opt=3, codemodel="jitdefault"
    )


def optimize(text: str, cpu: str, features: str) -> llvm.ModuleRef:
    """Parse, verify and optimize LLVM IR with the O3 pipeline for the CPU."""
    module = llvm.parse_assembly(text)
    module.verify()
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    tuning.loop_unrolling = True
    builder = llvm.create_pass_builder(machine(cpu, features), tuning)
    builder.getModulePassManager().run(module, builder)
    return module


def optimized_hash(module: llvm.ModuleRef, symbol: str) -> str:
    """An optimized kernel's identity: its IR after O3, its own symbol and the module's name
    left out (the machine code follows from it and the target)."""
    text = str(module).replace(symbol, "irkit.kernel")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("; ModuleID"))
    names: dict[str, str] = {}  # local values renumbered by first use: names carry no code
    text = _LOCAL.sub(lambda m: names.setdefault(m.group(0), f"%v{len(names)}"), text)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_LOCAL = re.compile(r"%[-a-zA-Z$._0-9]+")


def compile_kernel(text: str, symbol: str, cpu: str, features: str) -> tuple[bytes, str]:
    """A kernel module's machine code and its optimized IR's hash (`optimized_hash`)."""
    optimized = optimize(text, cpu, features)
    return bytes(machine(cpu, features).emit_object(optimized)), optimized_hash(optimized, symbol)


def main() -> None:
    """The compile worker: one batch from standard input, its results to standard output."""
    cpu, features, items = pickle.load(sys.stdin.buffer)
    results = [compile_kernel(text, symbol, cpu, features) for text, symbol in items]
    pickle.dump(results, sys.stdout.buffer)


if __name__ == "__main__":
    main()
