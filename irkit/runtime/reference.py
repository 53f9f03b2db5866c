"""The numpy reference: the ground truth every backend and every pass is checked against.

Each graph op is evaluated by its semantics (`irkit.dialects.semantics`): floats in float64,
whatever the model's float type; integers exactly, in int64 wrapped to their width; booleans
as bool. Outputs are float64, int64 or bool arrays accordingly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue

from irkit.dialects import graph as g
from irkit.dialects.semantics import IMPLS, wrap
from irkit.dtypes import NUMPY, is_integer, numpy_dtype, reference_dtype
from irkit.errors import IrkitError, expect
from irkit.ir import location_of, model_function
from irkit.limits import check_bytes, element_count
from irkit.runtime.backend import BoundDefaults, Provenance


def check_inputs(fn: func.FuncOp, arrays: Sequence[Any]) -> list[np.ndarray]:
    """The arrays as numpy arrays, after checking their number and shapes against `fn`."""
    args = fn.body.block.args
    names = [a.name_hint or f"#{i}" for i, a in enumerate(args)]
    if len(arrays) != len(args):
        raise IrkitError(
            f"@{fn.sym_name.data} takes {len(args)} input arrays ({', '.join(names)}), got {len(arrays)}"
        )
    out = []
    for name, arg, array in zip(names, args, arrays, strict=True):
        try:
            a = np.asarray(array)
        except ValueError as e:  # ragged nested lists
            raise IrkitError(f"input {name} is not an array: {e}") from None
        if a.dtype.kind not in "biuf" and a.dtype not in NUMPY.values():
            raise IrkitError(f"input {name} must be a numeric array, got dtype {a.dtype}")
        assert isinstance(arg.type, TensorType)
        if a.shape != arg.type.get_shape():
            raise IrkitError(
                f"input {name} has shape {list(a.shape)}, expected {list(arg.type.get_shape())}"
            )
        out.append(a)
    return out


def graph_values(fn: func.FuncOp) -> list[SSAValue]:
    """Every tensor value of a graph function: its arguments and every op result."""
    values: list[SSAValue] = list(fn.body.block.args)
    values += [r for op in fn.walk() for r in op.results if isinstance(r.type, TensorType)]
    return values


def check_footprint(
    fn: func.FuncOp, values: Sequence[SSAValue], itemsize: int | None, what: str
) -> None:
    """Refuse, before allocating, `values` that need more than the memory limit: at
    `itemsize` bytes per element (None: each value's own element type)."""
    sizes = []
    for v in values:
        assert isinstance(v.type, TensorType)
        size = itemsize or numpy_dtype(v.type.element_type).itemsize
        sizes.append((element_count(v.type.get_shape()) * size, v))
    if not sizes:
        return
    total = sum(n for n, _ in sizes)
    _, big = max(sizes, key=lambda s: s[0])
    name = big.name_hint or "a tensor"
    try:
        check_bytes(total, f"@{fn.sym_name.data}'s {what} (largest tensor {name}: {big.type})")
    except IrkitError as e:
        raise IrkitError(e.message, location_of(fn)) from None


def reference(module: ModuleOp, *arrays: Any, stored: bool = False) -> list[np.ndarray]:
    """Evaluate the module's entry function on `arrays` in float64; returns its outputs.

    With `stored`, each op's result is rounded to its declared element type before the ops
    that use it see it: what a program that stores every intermediate at its type computes
    (an unfused lowering), against the default where intermediates keep float64 (what
    fusion, keeping values in registers, approaches). Both are the model's meaning."""
    expect("irkit.reference", "module", module, ModuleOp, "a module (irkit.load's result)")
    fn = model_function(module, graph_level=True)
    check_footprint(fn, graph_values(fn), 8, "float64 reference")
    env: dict[SSAValue, np.ndarray] = {
        arg: _as_reference(a, arg)
        for arg, a in zip(fn.body.block.args, check_inputs(fn, arrays), strict=True)
    }
    with np.errstate(all="ignore"):  # inf and NaN are values here, not errors
        outputs = _evaluate_block(fn.body.block.ops, env, stored)
    if outputs is None:
        raise IrkitError(f"@{fn.sym_name.data} has no func.return")
    return outputs


def _evaluate_block(
    ops: Iterable[Operation], env: dict[SSAValue, np.ndarray], stored: bool = False
) -> list | None:
    """Evaluate ops in order into `env`; the terminator's operands, if one is reached.
    With `stored`, each result is rounded to its element type (see `reference`)."""
    for op in ops:
        if isinstance(op, func.ReturnOp | g.YieldOp):
            return [env[v] for v in op.operands]
        if isinstance(op, g.KernelOp):  # a kernel region computes what its ops compute
            results = _evaluate_block(op.body.block.ops, env, stored)
            assert results is not None, "graph.kernel verifies that it ends with graph.yield"
            env.update(zip(op.results, results, strict=True))
            continue
        impl = IMPLS.get(type(op))
        if impl is None:
            raise IrkitError(
                f"the reference cannot evaluate {op.name}; it evaluates graph-dialect ops only"
            )
        try:
            result = impl(op, [env[v] for v in op.operands])
        except IrkitError as e:  # a value the op is not defined on (a gather index)
            raise IrkitError(e.message, location_of(op)) from None
        t = op.results[0].type
        assert isinstance(t, TensorType)
        element = t.element_type
        value = wrap(np.asarray(result, dtype=reference_dtype(element)), element)
        if stored and not is_integer(element) and numpy_dtype(element) != np.float64:
            value = value.astype(numpy_dtype(element)).astype(np.float64)
        env[op.results[0]] = value
    return None


def _as_reference(array: np.ndarray, arg: SSAValue) -> np.ndarray:
    """An input in the reference's type for its argument: float64, exact int64 or bool."""
    assert isinstance(arg.type, TensorType)
    element = arg.type.element_type
    return wrap(array.astype(reference_dtype(element)), element)


def random_inputs(module: ModuleOp, seed: int = 0) -> list[np.ndarray]:
    """Fresh random arrays for the entry function's arguments, in their element types.

    Float values are uniform in [-1, 1), except arguments that feed an operand whose domain
    is positive (a variance, a log), which are uniform in [0.5, 2). Integers are uniform in
    [-n, n) where they are gather indices of an axis of extent n (the least such, through
    views and casts), else 0 or 1 (the integers models take besides ids are masks and
    segment ids, and positions computed from a mask must stay within their table);
    booleans are fair coins."""
    expect("irkit.random_inputs", "module", module, ModuleOp, "a module (irkit.load's result)")
    expect("irkit.random_inputs", "seed", seed, int, "an integer from 0 to 2^64-1")
    if not 0 <= seed < 2**64:
        raise IrkitError(f"irkit.random_inputs: seed must be from 0 to 2^64-1, got {seed}")
    fn = model_function(module, graph_level=True)
    check_footprint(fn, fn.body.block.args, None, "random inputs")
    rng = np.random.default_rng(seed)
    out = []
    for arg in fn.body.block.args:
        assert isinstance(arg.type, TensorType)
        shape = arg.type.get_shape()
        element = arg.type.element_type
        if is_integer(element):
            out.append(_random_integers(rng, arg, numpy_dtype(element)))
            continue
        positive = any(
            isinstance(u.operation, g.GraphOp) and u.index in u.operation.POSITIVE_OPERANDS
            for u in arg.uses
        )
        values = rng.uniform(0.5, 2.0, shape) if positive else rng.uniform(-1.0, 1.0, shape)
        out.append(values.astype(numpy_dtype(element)))
    return out


def _random_integers(rng: np.random.Generator, arg: SSAValue, dtype: np.dtype) -> np.ndarray:
    assert isinstance(arg.type, TensorType)
    shape = arg.type.get_shape()
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    extents = g.index_extents(arg, scatters=True)
    if extents:
        n = min(extents)
        return rng.integers(-n, n, shape).astype(dtype)
    return rng.integers(0, 2, shape).astype(dtype)


class ReferenceExecutable(Provenance):
    """The reference behind the backend protocol: float64 numpy on the graph module."""

    backend = "reference"

    def __init__(self, module: ModuleOp):
        from irkit.runtime.backend import TensorSpec

        self.module = module
        self.kernels: list = []
        fn = self.entry = model_function(module, graph_level=True)
        self.inputs = []
        for i, a in enumerate(fn.body.block.args):
            assert isinstance(a.type, TensorType)
            shape, dtype = a.type.get_shape(), numpy_dtype(a.type.element_type)
            self.inputs.append(TensorSpec(a.name_hint or f"arg{i}", shape, dtype))
        self.outputs = []
        for i, t in enumerate(fn.function_type.outputs.data):
            assert isinstance(t, TensorType)  # graph level (model_function)
            self.outputs.append(
                TensorSpec(f"out{i}", t.get_shape(), reference_dtype(t.element_type))
            )

    def __call__(self, *arrays: Any, out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        if out is not None:
            from irkit.runtime.backend import check_out

            out = check_out(f"@{self.entry.sym_name.data}", self.outputs, out)
        results = reference(self.module, *arrays)
        if out is not None:
            for o, r in zip(out, results, strict=True):
                np.copyto(o, r)
            return list(out)
        return results

    def bind(self, *arrays: Any) -> _ReferenceBound:
        return _ReferenceBound(self, list(arrays))


class _ReferenceBound(BoundDefaults):
    def __init__(self, exe: ReferenceExecutable, arrays: list):
        self.exe, self.arrays = exe, arrays
        self.outputs = exe(*arrays)

    def run_graph(self) -> None:
        self.outputs = self.exe(*self.arrays)

    def run_kernel(self, index: int) -> None:
        raise IrkitError("the reference backend has no kernels to run one at a time")

    def synchronize(self) -> None:
        pass


class ReferenceBackend:
    """Evaluates graph-level modules in float64 numpy (no lowering, no kernels)."""

    name = "reference"
    default_pipeline = ""
    timer = "perf_counter_ns"

    def available(self) -> tuple[bool, str]:
        return True, f"float64 numpy {np.__version__}"

    def lower(self, module: ModuleOp) -> ModuleOp:
        return module  # it evaluates the graph level

    def fingerprint(self) -> dict[str, Any]:
        return {}

    def ceilings(self) -> None:
        return None

    def compile(self, module: ModuleOp) -> ReferenceExecutable:
        return ReferenceExecutable(module)
