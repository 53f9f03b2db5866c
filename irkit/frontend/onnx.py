"""ONNX frontend: an .onnx file -> a module of graph-dialect ops.

The onnx package does the reading and the checking: `onnx.load` (with external data),
`onnx.checker.check_model`, and `onnx.shape_inference.infer_shapes` in strict mode, after
symbolic input dims are fixed from `dims` (`--dim N=8`). Nodes are then mapped one by one
through `CONVERTERS` (op type -> converter; `irkit/frontend/onnx_ops.py`), which knows the
opset differences (attribute vs input forms of axes, Softmax before and after opset 13).

Values known at import time are folded: initializers, Constant nodes, Shape of a static
tensor, and any node whose inputs are all known (evaluated by onnx's own reference
implementation, so shape subgraphs like Shape -> Gather -> Concat -> Reshape disappear).
Float initializers that reach a graph op become `graph.constant`s (the weights are part of
the model); integer ones are only ever consumed at import (shapes, axes, pads).

Every failure is one IrkitError naming the file, and the node (name, op type, domain,
opset) where one is involved.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    ModuleOp,
    StringAttr,
)
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from irkit.dialects import graph as g
from irkit.dtypes import DTYPES, dense_attr
from irkit.errors import IrkitError
from irkit.frontend.files import check_model_file
from irkit.frontend.onnx_common import ONNX_DTYPES
from irkit.frontend.onnx_quantize import EIGHT_BIT, dequantize_constant
from irkit.ir import element_type_of, shape_of, ssa_name

DEFAULT_DOMAINS = ("", "ai.onnx")


class Unsupported(IrkitError):
    """A node or attribute combination irkit does not import (a documented limit)."""


def read_model(path: str | Path) -> onnx.ModelProto:
    """onnx.load with one-line errors for a missing, non-ONNX, truncated or incomplete file."""
    p = check_model_file(path)
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as e:  # protobuf's DecodeError and friends
        raise IrkitError(f"not an ONNX model (cannot decode it: {_short(e)})", str(path)) from None
    if not model.graph.node and not model.graph.output:
        raise IrkitError("not an ONNX model (no graph in the file)", str(path))
    try:
        onnx.load_external_data_for_model(model, str(p.parent))
    except (OSError, onnx.checker.ValidationError) as e:
        missing = [
            f"'{_location(t)}' (tensor '{t.name}')"
            for t in model.graph.initializer
            if t.data_location == TensorProto.EXTERNAL and not (p.parent / _location(t)).is_file()
        ]
        where = missing[0] if missing else _short(e)
        raise IrkitError(f"external data file missing or unreadable: {where}", str(path)) from None
    return model


def _location(t: onnx.TensorProto) -> str:
    """Where an externally stored tensor says its data lives (relative to the model)."""
    return next((e.value for e in t.external_data if e.key == "location"), "?")


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:200] or type(e).__name__


def fix_input_dims(model: onnx.ModelProto, dims: Mapping[str, int], path: str) -> None:
    """Give every symbolic or unknown input dim a size from `dims`, or fail saying which."""
    initializers = {i.name for i in model.graph.initializer}
    used = set()
    for inp in model.graph.input:
        if inp.name in initializers:
            continue
        for i, d in enumerate(inp.type.tensor_type.shape.dim):
            if d.HasField("dim_value"):
                continue
            name = d.dim_param if d.HasField("dim_param") else None
            if name and name in dims:
                d.Clear()
                d.dim_value = dims[name]
                used.add(name)
                continue
            what = f"dynamic dim '{name}'" if name else f"unknown dim #{i}"
            hint = f"--dim {name}=SIZE" if name else "a static shape in the model"
            raise IrkitError(f"input '{inp.name}' has a {what}; give {hint}", path)
    unknown = set(dims) - used
    if unknown:
        raise IrkitError(f"--dim {sorted(unknown)[0]}: no model input has such a dim", path)


def load_onnx(path: str | Path, dims: Mapping[str, int] | None = None) -> ModuleOp:
    """Import an ONNX model file as a verified-to-be graph module (see the module doc)."""
    return import_model(read_model(path), str(path), dims)


def import_model(
    model: onnx.ModelProto,
    where: str,
    dims: Mapping[str, int] | None = None,
    bind: Mapping[str, np.ndarray] | None = None,
) -> ModuleOp:
    """Import an in-memory ModelProto; `where` names it in errors. The proto is not changed.

    `bind` fixes graph inputs to values at import (they become initializers): irkit has no
    run-time shapes, so an axes or shape input must be known when the model is compiled."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for name, value in (bind or {}).items():
        kept = [i for i in model.graph.input if i.name != name]
        if len(kept) == len(model.graph.input):
            raise IrkitError(f"cannot bind '{name}': the model has no such input", where)
        del model.graph.input[:]
        model.graph.input.extend(kept)
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    fix_input_dims(model, dims or {}, where)
    _check_opsets(model, where)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise IrkitError(f"invalid ONNX model: {_short(e)}", where) from None
    # The exporter's intermediate shapes may name symbolic dims the inputs no longer have
    # (--dim fixed them): shapes are inferred anew from the inputs.
    del model.graph.value_info[:]
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as e:  # InferenceError
        raise IrkitError(f"ONNX shape inference failed: {_short(e)}", where) from None
    return OnnxImporter(model, where).run()


def _check_opsets(model: onnx.ModelProto, where: str) -> None:
    """Refuse an opset newer than the installed onnx knows: its operators' meaning (and
    shape inference) is not known here, so importing it could silently change them."""
    known = onnx.defs.onnx_opset_version()
    for o in model.opset_import:
        if o.domain in DEFAULT_DOMAINS and o.version > known:
            raise IrkitError(
                f"the model imports ONNX opset {o.version}, newer than onnx {onnx.__version__} "
                f"knows (up to {known}); re-export it at opset {known} or older, or upgrade onnx",
                where,
            )
        if o.domain in DEFAULT_DOMAINS and o.version < 1:
            raise IrkitError(f"the model imports ONNX opset {o.version}; opsets start at 1", where)


class OnnxImporter:
    """Walks an (inferred) ONNX graph in order, building graph-dialect ops."""

    def __init__(self, model: onnx.ModelProto, path: str):
        self.model = model
        self.graph = model.graph
        self.path = path
        self.opset = next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), 1)
        self.values: dict[str, SSAValue] = {}
        self.consts: dict[str, np.ndarray] = {
            i.name: numpy_helper.to_array(i) for i in self.graph.initializer
        }
        self.block = Block()
        self.node: onnx.NodeProto | None = None

    # --- the walk ------------------------------------------------------------------------

    def run(self) -> ModuleOp:
        from irkit.frontend.onnx_ops import CONVERTERS

        args = [i for i in self.graph.input if i.name not in self.consts]
        for inp in args:
            t = inp.type.tensor_type
            dtype = self._dtype(t.elem_type, f"input '{inp.name}'")
            shape = [d.dim_value for d in t.shape.dim]
            if 0 in shape:
                raise self.unsupported(
                    f"input '{inp.name}' is empty (shape {shape}); irkit needs non-empty tensors"
                )
            arg = self.block.insert_arg(g.tensor(DTYPES[dtype], shape), len(self.block.args))
            arg.name_hint = ssa_name(inp.name)
            self.values[inp.name] = arg
        for node in self.graph.node:
            self.node = node
            if node.domain not in DEFAULT_DOMAINS:
                raise self.unsupported(f"custom domain '{node.domain}' is not supported")
            if self._fold(node):
                continue
            convert = CONVERTERS.get(node.op_type)
            if convert is None:
                raise self.unsupported("this op is not supported")
            try:
                outs = convert(self, node)
            except VerifyException as e:
                if "the result would be empty" in str(e):  # a documented limit, not a bad file
                    raise self.unsupported(str(e)) from None
                raise self.error(str(e)) from None
            for name, value in zip(node.output, outs, strict=False):
                if name:
                    self.values[name] = value
                    if value.name_hint is None:
                        value.name_hint = ssa_name(name)
        self.node = None
        return self._module()

    def _module(self) -> ModuleOp:
        outputs = [self.tensor(o.name) for o in self.graph.output]
        self.block.add_op(func.ReturnOp(*outputs))
        name = ssa_name(self.graph.name or Path(self.path).stem) or "main"
        fn = func.FuncOp(
            name,
            ([a.type for a in self.block.args], [v.type for v in outputs]),
            Region(self.block),
            arg_attrs=ArrayAttr([DictionaryAttr({})] * len(self.block.args)),
            res_attrs=ArrayAttr(
                [DictionaryAttr({"irkit.name": StringAttr(o.name)}) for o in self.graph.output]
            ),
        )
        return ModuleOp([fn])

    def _fold(self, node: onnx.NodeProto) -> bool:
        """Evaluate `node` now if everything it reads is known; True if it was."""
        if node.op_type in ("Shape", "Size") and node.input[0] in self.values:
            shape = np.array(self.shape(node.input[0]), dtype=np.int64)
            self.consts[node.output[0]] = _shape_op(node, shape)
            return True
        inputs = [n for n in node.input if n]
        if node.op_type != "Constant" and (not inputs or not all(n in self.consts for n in inputs)):
            return False
        if node.op_type in ("RandomUniform", "RandomNormal", "Bernoulli"):
            return False
        if node.op_type == "DequantizeLinear" and str(self.consts[inputs[0]].dtype) in EIGHT_BIT:
            return False  # an 8-bit weight kept in its bytes (`irkit.frontend.onnx_quantize`)
        if node.op_type in NUMPY_FOLDS:  # where onnx's reference implementation is wrong
            folded_here = NUMPY_FOLDS[node.op_type](node, [self.consts[n] for n in inputs])
            if folded_here is not None:
                self.consts[node.output[0]] = folded_here
                return True
        from onnx.reference import ReferenceEvaluator

        outputs = [o for o in node.output if o]
        graph = helper.make_graph(
            [node],
            "fold",
            [],
            [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
            [numpy_helper.from_array(self.consts[n], n) for n in dict.fromkeys(inputs)],
        )
        folded = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # onnx's kernels warn on overflowing casts
                results = ReferenceEvaluator(folded).run(None, {})
        except Exception as e:
            raise self.error(f"cannot fold this constant node: {_short(e)}") from None
        self.consts.update(zip(outputs, (np.asarray(r) for r in results), strict=True))
        return True

    # --- what converters use ----------------------------------------------------------------

    def tensor(self, name: str) -> SSAValue:
        """The graph value called `name`; a known float array becomes a graph.constant."""
        if name in self.values:
            return self.values[name]
        if name in self.consts:
            array = self.consts[name]
            dtype = _array_dtype(array)
            if dtype is None:
                raise self.unsupported(
                    f"'{name}' is a {array.dtype} tensor; irkit's element types are f16, bf16, "
                    "f32, f64, i64, i32 and bool"
                )
            array = _in_range(self, name, array, dtype)
            if array.size == 0:
                raise self.unsupported(
                    f"'{name}' is empty (shape {list(array.shape)}); irkit's tensors have positive extents"
                )
            op = g.ConstantOp.create_inferred([], {"value": _dense(array, DTYPES[dtype])})
            self.block.add_op(op)
            self.values[name] = op.results[0]
            op.results[0].name_hint = ssa_name(name)
            return op.results[0]
        raise self.error(f"input '{name}' is not defined before this node")

    def const(self, name: str, what: str) -> np.ndarray:
        """An input that must be known at import time (axes, shapes, pads)."""
        if name in self.consts:
            return self.consts[name]
        raise self.unsupported(f"{what} ('{name}') must be a constant; it is computed at run time")

    def shape(self, name: str) -> tuple[int, ...]:
        if name in self.consts:
            return tuple(self.consts[name].shape)
        return shape_of(self.tensor(name))

    def op(self, cls: type[g.GraphOp], *operands: SSAValue, **props: Attribute) -> SSAValue:
        new = cls.create_inferred(list(operands), props)
        self.block.add_op(new)
        return new.results[0]

    def add_op(self, op: g.GraphOp) -> SSAValue:
        self.block.add_op(op)
        return op.results[0]

    def scalar(self, value: float, like: SSAValue) -> SSAValue:
        dtype = element_type_of(like)
        return self.add_op(g.ConstantOp.from_values(dtype, (), [float(value)]))

    def where(self) -> str:
        n = self.node
        if n is None:
            return self.path
        label = f"'{n.name}'" if n.name else f"#{list(self.graph.node).index(n)}"
        domain = n.domain or "ai.onnx"
        return f"{self.path}: node {label} ({n.op_type}, domain {domain}, opset {self.opset})"

    def error(self, message: str) -> IrkitError:
        return IrkitError(message, self.where())

    def unsupported(self, message: str) -> Unsupported:
        return Unsupported(message, self.where())

    def _dtype(self, elem_type: int, what: str) -> str:
        if elem_type not in ONNX_DTYPES:
            name = TensorProto.DataType.Name(elem_type)
            raise self.unsupported(
                f"{what} has element type {name}; irkit's element types are f16, bf16, f32, "
                "f64, i64, i32 and bool"
            )
        return ONNX_DTYPES[elem_type]


def _gather_elements(node: onnx.NodeProto, arrays: list[np.ndarray]) -> np.ndarray:
    """GatherElements: onnx 1.23's reference implementation fails on an axis longer than
    64 ("cannot reshape array of size 1", BERT's position ids)."""
    data, indices = arrays
    axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 0)
    axis %= data.ndim
    wrapped = np.where(indices < 0, indices + data.shape[axis], indices)
    return np.take_along_axis(data, wrapped, axis=axis)


NUMPY_FOLDS = {"GatherElements": _gather_elements, "DequantizeLinear": dequantize_constant}
"""Ops folded with numpy rather than onnx's reference implementation (each says why; None
from one: onnx's to fold)."""


def _shape_op(node: onnx.NodeProto, shape: np.ndarray) -> np.ndarray:
    if node.op_type == "Size":
        return np.array(int(np.prod(shape)), dtype=np.int64)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return shape[attrs.get("start", 0) : attrs.get("end", len(shape))]


_ARRAY_DTYPES = {
    "float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int64": "i64",
    "int32": "i32", "bool": "i1", "int8": "i32", "int16": "i32", "uint8": "i32",
    "uint16": "i32", "uint32": "i64", "uint64": "i64", "float8_e4m3fn": "f8e4m3",
    "float8_e5m2": "f8e5m2",
}  # fmt: skip
"""The graph type a constant of each numpy type becomes (narrow integers widen exactly)."""


def _array_dtype(array: np.ndarray) -> str | None:
    return _ARRAY_DTYPES.get(str(array.dtype))


def _in_range(im: OnnxImporter, name: str, array: np.ndarray, dtype: str) -> np.ndarray:
    """A uint64 constant must fit in i64: irkit's integers are signed."""
    if array.dtype == np.uint64 and array.size and int(array.max()) > np.iinfo(np.int64).max:
        raise im.unsupported(
            f"'{name}' holds {int(array.max())}, beyond i64 (irkit's integers are signed)"
        )
    return array


def _dense(array: np.ndarray, element_type: Attribute) -> DenseIntOrFPElementsAttr[Any]:
    if array.dtype.kind in "biu":
        return dense_attr(g.tensor(element_type, array.shape), array)
    return dense_attr(g.tensor(element_type, array.shape), np.asarray(array, np.float64))
