"""The .graph model language -> a `func.func` of graph-dialect ops.

    model mlp
    dim B = 64                       # named dimension; `--dim B=4096` overrides it
    input x  : f32[B, 1024]          # inputs and params become function arguments,
    param w1 : f32[1024, 4096]       # params marked with the `irkit.param` arg attribute
    h = gelu(matmul(x, w1) * 0.5)    # calls are graph ops by name; infix + - * / **
    output y = softmax(h, axis=-1)   # keyword arguments are the op's properties

Scalar literals combine with tensors as rank-0 constants of the tensor's element type.
Keyword values are static: numbers, booleans, strings, lists, dimension names and
arithmetic on them (`shape=[B * 4, -1]`). `reshape(x, shape=[...])` and
`cast(x, dtype=f16)` take the result's shape and element type. Every error names
file:line:col.
"""

from __future__ import annotations

import difflib
import gc
import math
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import lark
import ml_dtypes
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    BoolAttr,
    DenseArrayBase,
    DictionaryAttr,
    FileLineColLoc,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    UnitAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.irdl import VerificationContext
from xdsl.utils.exceptions import VerifyException

from irkit.dialects import graph
from irkit.dtypes import DTYPES, is_bool, is_integer, numpy_dtype
from irkit.errors import IrkitError, SourceLocation
from irkit.limits import INT64_MAX, MAX_NESTING, check_extents
from irkit.loops import PARAM_ATTR

_GRAMMAR = Path(__file__).with_name("graph.lark")
_PARSER = lark.Lark.open(
    str(_GRAMMAR), parser="lalr", propagate_positions=True, maybe_placeholders=False
)

OPS: dict[str, type[graph.GraphOp]] = {
    op.name.removeprefix("graph."): op
    for op in graph.Graph.operations
    if issubclass(op, graph.GraphOp) and op is not graph.ConstantOp
}
"""Op names in the language are the dialect's op names."""

NAME_ATTR = "irkit.name"

_ARITH: dict[str, tuple[type[graph.GraphOp], Callable[[float, float], float]]] = {
    "add": (graph.AddOp, operator.add),
    "sub": (graph.SubOp, operator.sub),
    "mul": (graph.MulOp, operator.mul),
    "div": (graph.DivOp, operator.truediv),
    "pow": (graph.PowOp, operator.pow),
}

Value = SSAValue | float | int  # a tensor, or a scalar literal waiting for a tensor


def parse_graph(
    text: str, filename: str = "<input>", dims: Mapping[str, int] | None = None
) -> ModuleOp:
    """Parse .graph source into a module holding one `func.func`. Raises IrkitError."""
    with _no_gc():  # a parse tree is many small objects: collecting them midway is O(n^2)
        try:
            tree = _PARSER.parse(text)
        except lark.UnexpectedInput as e:
            raise IrkitError(
                _syntax_message(e, text), SourceLocation(filename, e.line, e.column)
            ) from None
        _check_nesting(tree, filename)
        return _Builder(filename, dict(dims or {})).build(tree)


@contextmanager
def _no_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _check_nesting(tree: lark.Tree, filename: str) -> None:
    """Refuse expressions nested deeper than MAX_NESTING before anything recurses over them
    (the walk itself is iterative)."""
    stack: list[tuple[lark.Tree, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise IrkitError(
                f"expression nested more than {MAX_NESTING} levels deep",
                SourceLocation(filename, node.meta.line, node.meta.column),
            )
        stack.extend((c, depth + 1) for c in node.children if isinstance(c, lark.Tree))


def _syntax_message(e: lark.UnexpectedInput, text: str) -> str:
    if isinstance(e, lark.UnexpectedCharacters):
        return f"unexpected character {text[e.pos_in_stream or 0]!r}"
    if isinstance(e, lark.UnexpectedToken):
        token = str(e.token) if len(str(e.token)) <= 40 else str(e.token)[:40] + "..."
        got = "end of file" if e.token.type == "$END" else repr(token)
        expected = sorted(_describe(t) for t in e.expected)
        return f"unexpected {got}; expected {', '.join(expected)}"
    return str(e).splitlines()[0]


def _describe(terminal: str) -> str:
    named = {"NAME": "a name", "NUMBER": "a number", "STRING": "a string", "$END": "end of file"}
    if terminal in named:
        return named[terminal]
    try:
        return repr(_PARSER.get_terminal(terminal).pattern.value)
    except KeyError:
        return terminal


@dataclass
class _Builder:
    filename: str
    overrides: dict[str, int]
    model: str | None = None
    dims: dict[str, int] = field(default_factory=dict)
    env: dict[str, Value] = field(default_factory=dict)
    block: Block = field(default_factory=Block)
    arg_attrs: list[DictionaryAttr] = field(default_factory=list)
    outputs: list[tuple[str, SSAValue]] = field(default_factory=list)

    # --- statements -----------------------------------------------------------------------

    def build(self, tree: lark.Tree) -> ModuleOp:
        for stmt in tree.children:
            getattr(self, stmt.data)(stmt)
        unused = sorted(set(self.overrides) - set(self.dims))
        if unused:
            declared = ", ".join(self.dims) or "none"
            raise IrkitError(
                f"--dim {unused[0]}: the model declares no such dim (declared: {declared})",
                self.filename,
            )
        if not self.outputs:
            first = tree.children[0].meta if tree.children else None
            where = (
                SourceLocation(self.filename, first.line, first.column)
                if first
                else SourceLocation(self.filename, 1, 1)
            )
            raise IrkitError("the model declares no output (write `output NAME = ...`)", where)
        return self._module()

    def _module(self) -> ModuleOp:
        inputs = [a.type for a in self.block.args]
        results = [v.type for _, v in self.outputs]
        self.block.add_op(func.ReturnOp(*(v for _, v in self.outputs)))
        fn = func.FuncOp(
            self.model or Path(self.filename).stem.replace("-", "_") or "main",
            (inputs, results),
            Region(self.block),
            arg_attrs=ArrayAttr(self.arg_attrs),
            res_attrs=ArrayAttr(
                [DictionaryAttr({NAME_ATTR: StringAttr(n)}) for n, _ in self.outputs]
            ),
        )
        fn.location = FileLineColLoc(StringAttr(self.filename), IntAttr(1), IntAttr(1))
        if self.dims:
            fn.attributes["irkit.dims"] = DictionaryAttr(
                {k: IntegerAttr(v, i64) for k, v in self.dims.items()}
            )
        return ModuleOp([fn])

    def model_decl(self, t: lark.Tree) -> None:
        if self.model is not None or self.block.args or self.block.ops:
            self._fail(t, "`model` must come first, and only once")
        self.model = str(t.children[0])

    def dim_decl(self, t: lark.Tree) -> None:
        name, expr = t.children
        if name in self.dims:
            self._fail(t, f"dim {name} is declared twice")
        value = self.overrides.get(str(name), self._static_int(expr, "a dim"))
        if value <= 0:
            self._fail(t, f"dim {name} must be positive, got {value}")
        self.dims[str(name)] = value

    def input_decl(self, t: lark.Tree) -> None:
        self._declare_arg(t, param=False)

    def param_decl(self, t: lark.Tree) -> None:
        self._declare_arg(t, param=True)

    def _declare_arg(self, t: lark.Tree, param: bool) -> None:
        name, ttype = str(t.children[0]), t.children[1]
        self._check_new(t, name)
        dtype_tok, *dim_exprs = ttype.children
        if str(dtype_tok) not in DTYPES:
            self._fail(
                ttype,
                f"unknown element type {str(dtype_tok)!r}; expected one of {', '.join(DTYPES)}",
            )
        shape = [self._static_int(e, "a tensor extent") for e in dim_exprs]
        if any(d <= 0 for d in shape):
            self._fail(ttype, f"tensor extents must be positive, got {shape}")
        problem = check_extents(shape)
        if problem:
            self._fail(ttype, problem)
        arg = self.block.insert_arg(TensorType(DTYPES[str(dtype_tok)], shape), len(self.block.args))
        arg.name_hint = name
        attrs: dict[str, Attribute] = {PARAM_ATTR: UnitAttr()} if param else {}
        self.arg_attrs.append(DictionaryAttr(attrs))
        self.env[name] = arg

    def assign(self, t: lark.Tree) -> None:
        name, expr = str(t.children[0]), t.children[1]
        value = self._expr(expr)
        self._name(value, name)
        self.env[name] = value

    def output_decl(self, t: lark.Tree) -> None:
        name = str(t.children[0])
        if any(n == name for n, _ in self.outputs):
            self._fail(t, f"output {name} is declared twice")
        if len(t.children) > 1:
            value = self._expr(t.children[1])
            self._name(value, name)
            self.env[name] = value
        elif name not in self.env:
            self._fail(t, f"output {name} names no value; write `output {name} = EXPR`")
        value = self.env[name]
        if not isinstance(value, SSAValue):
            self._fail(t, f"output {name} is a scalar literal, not a tensor")
        self.outputs.append((name, value))

    # --- expressions -------------------------------------------------------------------------

    def _expr(self, t: lark.Tree | lark.Token) -> Value:
        if not isinstance(t, lark.Tree):
            self._fail(t, "expected a tensor expression here")
        kind = t.data
        if kind == "number":
            return self._literal(_token(t))
        if kind == "var":
            name = str(t.children[0])
            if name not in self.env:
                self._fail(t, self._unknown_name(name))
            return self.env[name]
        if kind == "neg":
            operand = self._expr(t.children[0])
            if isinstance(operand, SSAValue):
                return self._op(t, graph.NegOp, [operand])
            return self._checked(t, -operand)
        if kind in _ARITH:
            return self._arith(t, kind)
        if kind == "call":
            return self._call(t)
        self._fail(t, "expected a tensor expression here")

    def _arith(self, t: lark.Tree, kind: str) -> Value:
        op_class = _ARITH[kind][0]
        lhs, rhs = (self._expr(c) for c in t.children)
        if not isinstance(lhs, SSAValue) and not isinstance(rhs, SSAValue):
            return self._fold(t, kind, lhs, rhs)
        return self._op(t, op_class, self._tensors(t, [lhs, rhs]))

    def _call(self, t: lark.Tree) -> SSAValue:
        name_tok, *args = t.children
        name = str(name_tok)
        if name not in OPS:
            close = difflib.get_close_matches(name, OPS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            self._fail(t, f"unknown op {name!r}{hint}")
        positional = [
            self._expr(a) for a in args if not (isinstance(a, lark.Tree) and a.data == "kwarg")
        ]
        kwargs: dict[str, tuple[lark.Tree, Any]] = {}
        for a in args:
            if isinstance(a, lark.Tree) and a.data == "kwarg":
                key = str(a.children[0])
                if key in kwargs:
                    self._fail(a, f"keyword argument {key!r} is given twice")
                kwargs[key] = (a, self._static(a.children[1]))
        op_class = OPS[name]
        self._check_arity(t, name, op_class, positional)
        operands = self._tensors(t, positional)
        if op_class is graph.ReshapeOp:
            return self._special(
                t, kwargs, "shape", lambda s: graph.ReshapeOp.build_to(operands[0], _int_list(s))
            )
        if op_class is graph.CastOp:
            return self._special(
                t, kwargs, "dtype", lambda d: graph.CastOp.build_to(operands[0], _dtype(d))
            )
        props = {
            key: self._property(kw, op_class, key, value) for key, (kw, value) in kwargs.items()
        }
        return self._op(t, op_class, operands, props)

    def _special(
        self, t: lark.Tree, kwargs: dict[str, Any], key: str, build: Callable[[Any], Operation]
    ) -> SSAValue:
        extra = sorted(set(kwargs) - {key})
        if key not in kwargs or extra:
            self._fail(t, f"this op takes exactly one keyword argument, `{key}=`")
        kw, value = kwargs[key]
        try:
            op = build(value)
        except (VerifyException, ValueError, TypeError) as e:
            self._fail(kw, str(e))
        return self._insert(t, op)

    def _check_arity(
        self, t: lark.Tree, name: str, op_class: type[graph.GraphOp], positional: list[Value]
    ) -> None:
        operands = op_class.get_irdl_definition().operands
        variadic = any(type(d).__name__.startswith("Var") for _, d in operands)
        names = ", ".join(n for n, _ in operands)
        if (variadic and not positional) or (not variadic and len(positional) != len(operands)):
            want = "one or more" if variadic else str(len(operands))
            self._fail(t, f"{name} takes {want} tensor operand(s) ({names}), got {len(positional)}")

    def _property(
        self, kw: lark.Tree, op_class: type[graph.GraphOp], key: str, value: Any
    ) -> Attribute:
        props = op_class.get_irdl_definition().properties
        if key not in props:
            takes = ", ".join(props) or "no keyword arguments"
            self._fail(
                kw,
                f"{op_class.name.removeprefix('graph.')} has no attribute {key!r} (it takes: {takes})",
            )
        for attr in _candidate_attrs(value):
            try:
                props[key].constr.verify(attr, VerificationContext())
                return attr
            except VerifyException:
                continue
        self._fail(kw, f"attribute {key}={value!r} has the wrong kind of value")

    def _op(
        self,
        t: lark.Tree,
        op_class: type[graph.GraphOp],
        operands: Sequence[SSAValue],
        props: dict[str, Attribute] | None = None,
    ) -> SSAValue:
        try:
            op = op_class.create_inferred(operands, props)
        except VerifyException as e:
            self._fail(t, f"{op_class.name}: {e}")
        return self._insert(t, op)

    def _insert(self, t: lark.Tree, op: Operation) -> SSAValue:
        op.location = FileLineColLoc(
            StringAttr(self.filename), IntAttr(t.meta.line), IntAttr(t.meta.column)
        )
        self.block.add_op(op)
        return op.results[0]

    def _tensors(self, t: lark.Tree, values: Sequence[Value]) -> list[SSAValue]:
        """Scalars become rank-0 constants of the element type of the first tensor that
        is not boolean (a `where`'s condition gives its branches no type), or of the first
        tensor where all are boolean."""
        tensors = [v for v in values if isinstance(v, SSAValue)]
        if not tensors:
            self._fail(t, "an op needs at least one tensor operand, got only scalar literals")
        typed = next((v for v in tensors if not is_bool(graph.element_type_of(v))), tensors[0])
        element_type = graph.element_type_of(typed)
        out = []
        for v in values:
            if not isinstance(v, SSAValue):
                self._check_literal(t, v, element_type)
                v = self._insert(t, graph.ConstantOp.from_values(element_type, [], [float(v)]))
            out.append(v)
        return out

    def _check_literal(self, t: lark.Tree, v: float, element_type: Attribute) -> None:
        if is_integer(element_type):
            info = ml_dtypes.iinfo(numpy_dtype(element_type)) if not is_bool(element_type) else None
            if v != int(v) or (info is None and v not in (0, 1)):
                self._fail(t, f"the literal {v:g} is not a value of {element_type}")
            if info is not None and not info.min <= v <= info.max:
                self._fail(
                    t,
                    f"the literal {v:g} does not fit in {element_type} "
                    f"(range {info.min} to {info.max})",
                )
            return
        largest = float(ml_dtypes.finfo(numpy_dtype(element_type)).max)
        if abs(v) > largest:
            self._fail(
                t, f"the literal {v:g} does not fit in {element_type} (largest finite {largest:g})"
            )

    # --- static values (dims and attributes) -------------------------------------------------

    def _static(self, t: lark.Tree | lark.Token) -> Any:
        if not isinstance(t, lark.Tree):
            self._fail(t, "expected a static value (number, list, string, dim, dtype) here")
        kind = t.data
        if kind == "number":
            return self._literal(_token(t))
        if kind == "string":
            return str(t.children[0])[1:-1]
        if kind == "list":
            return [self._static(c) for c in t.children]
        if kind == "neg":
            return self._checked(t, -self._scalar(t.children[0]))
        if kind in _ARITH:
            lhs, rhs = (self._scalar(c) for c in t.children)
            return self._fold(t, kind, lhs, rhs)
        if kind == "var":
            name = str(t.children[0])
            if name in self.dims:
                return self.dims[name]
            if name in ("true", "false"):
                return name == "true"
            if name in DTYPES:
                return name
            self._fail(t, f"{name!r} is not a dim, dtype, true or false")
        self._fail(t, "expected a static value (number, list, string, dim, dtype) here")

    def _scalar(self, t: lark.Tree) -> int | float:
        value = self._static(t)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self._fail(t, f"expected a number, got {value!r}")
        return value

    def _static_int(self, t: lark.Tree, what: str) -> int:
        value = self._scalar(t)
        if not isinstance(value, int):
            self._fail(t, f"{what} must be an integer, got {value}")
        return value

    # --- scalar arithmetic, bounded as MLIR's int64 and float64 attributes are ---------------

    def _literal(self, tok: lark.Token) -> int | float:
        text = str(tok)
        if any(c in text for c in ".eE"):
            return self._checked(tok, float(text))
        if len(text) > 19:  # int() of a huge digit string is itself slow; it is out of range
            self._fail(tok, f"integer {text[:20]}... is out of the int64 range")
        return self._checked(tok, int(text))

    def _fold(self, t: lark.Tree, kind: str, lhs: int | float, rhs: int | float) -> int | float:
        """`lhs <kind> rhs` on static scalars: exact on integers (a division that leaves no
        remainder stays an integer), refused where it leaves int64 or the finite floats."""
        if kind == "div":
            if rhs == 0:
                self._fail(t, "division by zero")
            if isinstance(lhs, int) and isinstance(rhs, int) and lhs % rhs == 0:
                return self._checked(t, lhs // rhs)
        if kind == "pow":
            return self._checked(t, self._power(t, lhs, rhs))
        try:
            return self._checked(t, _ARITH[kind][1](lhs, rhs))
        except OverflowError:
            return self._fail(t, "the value is out of the float64 range")

    def _power(self, t: lark.Tree, base: int | float, exp: int | float) -> int | float:
        if base == 0 and exp < 0:
            self._fail(t, "zero raised to a negative power")
        if isinstance(base, int) and isinstance(exp, int) and exp >= 0:
            # Bound the size before computing: 2 ** 2 ** 2 ** 2 ** 2 ** 2 would never finish.
            if abs(base) > 1 and exp * math.log2(abs(base)) >= 64:
                self._fail(t, f"{base} ** {exp} is out of the int64 range")
            return base**exp
        try:
            return math.pow(base, exp)
        except ValueError:
            return self._fail(t, f"{base} ** {exp} is not a real number")
        except OverflowError:
            return self._fail(t, f"{base} ** {exp} is out of the float64 range")

    def _checked(self, t: lark.Tree | lark.Token, value: int | float) -> int | float:
        if isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:
            self._fail(t, f"the value {value} is out of the int64 range")
        if isinstance(value, float) and not math.isfinite(value):
            self._fail(t, "the value is out of the float64 range (not finite)")
        return value

    # --- names and errors -------------------------------------------------------------------------

    def _name(self, value: Value, name: str) -> None:
        if isinstance(value, SSAValue) and value.name_hint is None:
            value.name_hint = name

    def _check_new(self, t: lark.Tree, name: str) -> None:
        if name in self.env:
            self._fail(t, f"{name} is already defined")

    def _unknown_name(self, name: str) -> str:
        if name in self.dims:
            return f"{name} is a dim, not a tensor; use it inside a type or an attribute"
        # difflib is quadratic per candidate; over a huge model, look only at similar lengths
        near = [n for n in self.env if abs(len(n) - len(name)) <= 2][:5000]
        close = difflib.get_close_matches(name, near, n=1)
        return f"unknown name {name!r}" + (f"; did you mean {close[0]!r}?" if close else "")

    def _fail(self, t: lark.Tree | lark.Token, message: str) -> NoReturn:
        line, col = (
            (t.line, t.column) if isinstance(t, lark.Token) else (t.meta.line, t.meta.column)
        )
        raise IrkitError(message, SourceLocation(self.filename, line or 0, col or 0))


def _token(t: lark.Tree) -> lark.Token:
    """The one token under a rule such as `number`."""
    token = t.children[0]
    assert isinstance(token, lark.Token), t
    return token


def _candidate_attrs(value: Any) -> list[Attribute]:
    """The attributes a static .graph value could stand for, most specific first."""
    if isinstance(value, bool):
        return [BoolAttr.from_bool(value)]
    if isinstance(value, int):
        return [IntegerAttr(value, i64), FloatAttr(float(value), f64)]
    if isinstance(value, float):
        return [FloatAttr(value, f64)]
    if isinstance(value, str):
        return [StringAttr(value)]
    if isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return [DenseArrayBase.from_list(i64, value)]
    return []


def _int_list(value: Any) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ValueError(f"shape must be a list of integers, got {value!r}")
    return value


def _dtype(value: Any) -> Attribute:
    if value not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {value!r}")
    return DTYPES[value]
