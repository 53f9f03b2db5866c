"""A backend added in one file: numpy, one call per graph op (or fused graph.kernel region).

This is issue 21's check of the backend protocol (`irkit.runtime.backend.Backend`): a new
backend is its module and one `register_backend` line. Nothing in irkit names it, yet
`irkit.compile`, `run_model`, `attribute` and the CLI run it, check it against the reference
and time it, and the records carry what the backend says of itself (its fingerprint, timer
and ceilings) instead of what irkit assumes of the CPU.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType

import irkit
from irkit.dialects import graph as g
from irkit.dialects.semantics import IMPLS
from irkit.dtypes import numpy_dtype
from irkit.ir import model_function
from irkit.runtime import BACKENDS, register_backend
from irkit.runtime.backend import BoundDefaults, KernelRecord, TensorSpec, check_arrays

NAME = "numpy-ops"


class NumpyOpsBound(BoundDefaults):
    def __init__(self, exe: NumpyOpsExecutable, arrays: list[np.ndarray]):
        self.exe, self.arrays = exe, arrays
        self.env: dict[Any, np.ndarray] = {}
        self.run_graph()

    @property
    def outputs(self) -> list[np.ndarray]:
        return [self.env[v] for v in self.exe.returned]

    def run_graph(self) -> None:
        self.env = dict(zip(self.exe.fn.body.block.args, self.arrays, strict=True))
        for i in range(len(self.exe.groups)):
            self.run_kernel(i)

    def run_kernel(self, index: int) -> None:
        for op in self.exe.groups[index]:
            _evaluate(op, self.env)

    def synchronize(self) -> None:
        pass


def _evaluate(op: Any, env: dict[Any, np.ndarray]) -> None:
    if isinstance(op, g.KernelOp):
        for inner in op.body.block.ops:
            if isinstance(inner, g.YieldOp):
                env.update(zip(op.results, (env[v] for v in inner.operands), strict=True))
            else:
                _evaluate(inner, env)
        return
    result = op.results[0]
    value = IMPLS[type(op)](op, [env[v] for v in op.operands])
    assert isinstance(result.type, TensorType)
    env[result] = np.asarray(value, numpy_dtype(result.type.element_type))


class NumpyOpsExecutable:
    backend = NAME

    def __init__(self, module: ModuleOp):
        self.module = module
        self.fn = model_function(module, graph_level=True)
        ops = [op for op in self.fn.body.block.ops if not isinstance(op, func.ReturnOp)]
        self.groups = [[op] for op in ops]
        ret = self.fn.body.block.last_op
        assert isinstance(ret, func.ReturnOp)
        self.returned = list(ret.operands)
        self.inputs = [
            TensorSpec(a.name_hint or f"arg{i}", a.type.get_shape(),  # type: ignore[attr-defined]
                       numpy_dtype(a.type.element_type))  # type: ignore[attr-defined]
            for i, a in enumerate(self.fn.body.block.args)
        ]  # fmt: skip
        self.outputs = [
            TensorSpec(f"out{i}", v.type.get_shape(), numpy_dtype(v.type.element_type))  # type: ignore[attr-defined]
            for i, v in enumerate(self.returned)
        ]
        self.kernels = [
            KernelRecord(f"k{i}_{op.name.split('.')[-1]}", str(op), str(op), f"{i:016x}",
                         flops=0, min_bytes=0)
            for i, op in enumerate(ops)
        ]  # fmt: skip

    def bind(self, *arrays: Any) -> NumpyOpsBound:
        return NumpyOpsBound(self, check_arrays("numpy-ops", self.inputs, arrays))

    def __call__(self, *arrays: Any, out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        return [o.copy() for o in self.bind(*arrays).outputs]


class NumpyOpsBackend:
    name = NAME
    default_pipeline = "canonicalize,cse,fuse-kernels"
    timer = "perf_counter_ns (numpy, one call per op)"

    def available(self) -> tuple[bool, str]:
        return True, f"numpy {np.__version__}, one call per graph op"

    def lower(self, module: ModuleOp) -> ModuleOp:
        return module  # runs the graph level as it is

    def compile(self, module: ModuleOp) -> NumpyOpsExecutable:
        return NumpyOpsExecutable(module)

    def fingerprint(self) -> dict:
        return {"numpy_ops": {"numpy": np.__version__}}

    def ceilings(self) -> None:
        return None


@pytest.fixture
def toy() -> Any:
    register_backend(NAME, NumpyOpsBackend)
    yield NAME
    BACKENDS.pop(NAME, None)


def test_compile_checks_and_runs_the_toy_backend(toy: str) -> None:
    from irkit.runtime.check import check

    module = irkit.load("examples/transformer_block.graph", {"B": 1, "S": 8, "D": 16, "F": 32})
    exe = irkit.compile(module, backend=toy)
    assert exe.backend == toy and exe.pipeline == NumpyOpsBackend.default_pipeline
    checks, _ = check(exe, module, seed=1)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    assert exe.kernels and all(k.name.startswith("k") for k in exe.kernels)


def test_run_and_attribute_use_what_the_backend_says(toy: str) -> None:
    from irkit.measure.attribution import attribute
    from irkit.measure.run import run_model

    result = run_model("examples/softmax.graph", backend=toy, dims={"R": 4, "C": 8}, budget_s=0.05)
    assert result.passed and result.graph is not None
    assert result.fingerprint["numpy_ops"] == {"numpy": np.__version__}
    assert result.fingerprint_end["numpy_ops"] == {"numpy": np.__version__}
    record = attribute("examples/elementwise_chain.graph", None, toy, "prefix",
                       {"N": 4, "D": 8}, budget_s=0.2).to_json()  # fmt: skip
    assert record["backend"] == toy
    assert record["fingerprint"]["numpy_ops"] == {"numpy": np.__version__}
    assert record["protocol"]["timer"] == NumpyOpsBackend.timer
    assert record["ceilings"] is None


def test_the_cli_runs_a_backend_from_a_plugin(tmp_path) -> None:
    plugin = tmp_path / "toy_plugin.py"
    plugin.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent.parent)!r})\n"
        "from irkit.runtime import register_backend\n"
        "from tests.test_toy_backend import NumpyOpsBackend\n"
        "register_backend('numpy-ops', NumpyOpsBackend)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "irkit.cli.bench", "run", "examples/softmax.graph", "--dim", "R=4",
         "--dim", "C=8", "--backend", NAME, "--budget", "0.05", "-L", str(plugin)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "out0: ok" in done.stdout and "k0_softmax" in done.stdout


REPLAYS: list[int] = []


class ReplayingBound(NumpyOpsBound):
    """A bound program that can replay itself as one recorded launch (as a CUDA graph does):
    here, the same ops, counted."""

    def timed_replay(self):
        def replay() -> None:
            REPLAYS.append(1)
            self.run_graph()

        return replay


class ReplayingExecutable(NumpyOpsExecutable):
    def bind(self, *arrays: Any) -> NumpyOpsBound:
        return ReplayingBound(self, check_arrays("numpy-ops", self.inputs, arrays))


class ReplayingBackend(NumpyOpsBackend):
    def compile(self, module: ModuleOp) -> NumpyOpsExecutable:
        return ReplayingExecutable(module)


def test_attribute_times_replayed_graphs_with_timer_graph() -> None:
    """--timer graph: every program (and the A/A twin) is timed through its replay, and the
    record says so; a backend that cannot replay refuses in one line."""
    from irkit.errors import IrkitError
    from irkit.measure.attribution import attribute

    register_backend(NAME, ReplayingBackend)
    try:
        REPLAYS.clear()
        record = attribute("examples/elementwise_chain.graph", None, NAME, "prefix",
                           {"N": 4, "D": 8}, budget_s=0.2, timer="graph").to_json()  # fmt: skip
        assert REPLAYS and record["protocol"]["graph_replay"] is True
        assert record["protocol"]["timer"].endswith("replayed as one CUDA graph")
    finally:
        BACKENDS.pop(NAME, None)
    with pytest.raises(IrkitError, match="the cpu backend cannot replay a graph"):
        attribute("examples/elementwise_chain.graph", None, "cpu", "prefix", {"N": 4, "D": 8},
                  budget_s=0.2, timer="graph")  # fmt: skip
    with pytest.raises(IrkitError, match="unknown timer"):
        attribute("examples/elementwise_chain.graph", None, "cpu", timer="events")
