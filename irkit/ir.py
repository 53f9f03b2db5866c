"""IR plumbing shared by every layer: the context with irkit's dialects, verification that
reports the failing op's source location, and module hashing."""

from __future__ import annotations

import hashlib
import io
import re
import weakref
from functools import cache

from xdsl.context import Context
from xdsl.dialects import func, get_all_dialects
from xdsl.dialects.builtin import (
    ContainerType,
    FileLineColLoc,
    MemRefType,
    ModuleOp,
    ShapedType,
    StringAttr,
    SymbolRefAttr,
    TensorType,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from irkit.errors import IrkitError, SourceLocation, one_line


@cache
def _dialect_factories() -> dict:
    from irkit.dialects import IRKIT_DIALECTS
    from irkit.dialects.warp import gpu_dialect

    # `gpu` with MLIR's gpu.shuffle, which xDSL's lacks (irkit's row reductions use it)
    return {**get_all_dialects(), "gpu": gpu_dialect, **IRKIT_DIALECTS}


def make_context() -> Context:
    """A context that knows xDSL's upstream dialects and irkit's (loaded lazily)."""
    ctx = Context()
    for name, factory in _dialect_factories().items():
        ctx.register_dialect(name, factory)
    return ctx


def location_of(op: Operation) -> SourceLocation | None:
    """The op's source location, or its nearest ancestor's."""
    current: Operation | None = op
    while current is not None:
        loc = current.location
        if isinstance(loc, FileLineColLoc):
            return SourceLocation(loc.filename.data, loc.line.data, loc.column.data)
        current = current.parent_op()
    return None


def verify(module: ModuleOp, verified: set[tuple] | None = None) -> None:
    """Verify every op; the first failure becomes an IrkitError at its source location.

    `verified`: keys of functions verified before (by `function_key`, which covers what
    their validity depends on outside them), skipped here; the keys of the functions this
    call verifies are added. Many modules that share most functions (attribution's variants
    share most kernels) are then verified for what differs."""
    if verified is None:
        for op in module.walk():
            _verify_op(op)
        return
    _verify_op(module)
    table = symbol_table(module)
    for top in module.ops:
        key = function_key(top, table)
        if key is not None and key in verified:
            continue
        for op in top.walk():
            _verify_op(op)
        if key is not None:
            verified.add(key)


def holds(module: Operation, kinds: tuple[type[Operation], ...]) -> bool:
    """Whether any op nested in `module` is one of `kinds`: a pass whose patterns all start
    at such ops returns at once without one (xDSL's pattern walker tried every pattern on
    every op: 7-12 ms a pass on a 2000-op chain holding none, against 1 ms for this walk)."""
    return any(isinstance(op, kinds) for op in module.walk())


def _verify_op(op: Operation) -> None:
    """Verify one op (not what it nests); a failure becomes an IrkitError at its location."""
    try:
        op.verify(verify_nested_ops=False)
    except (VerifyException, ValueError) as e:
        msg = one_line(e, type(e).__name__)  # xDSL puts the reason on line 2
        raise IrkitError(f"{op.name}: {msg}", location_of(op)) from None


def symbol_table(module: ModuleOp) -> dict[str, Operation]:
    """The module's top-level ops that have a symbol name, by name."""
    return {
        o.sym_name.data: o
        for o in module.ops
        if isinstance(getattr(o, "sym_name", None), StringAttr)
    }


def function_key(op: Operation, table: dict[str, Operation]) -> tuple | None:
    """What a `func.func`'s validity depends on: its structure, and the top-level ops it
    names in `table` (`symbol_table`): a callee by its type, anything else by its
    structure. None for other ops, and for a function naming a symbol not in the table."""
    if not isinstance(op, func.FuncOp):
        return None
    named: dict[str, object] = {}
    for inner in op.walk():
        for value in (*inner.properties.values(), *inner.attributes.values()):
            if isinstance(value, SymbolRefAttr) and inner is not op:
                target = table.get(value.root_reference.data)
                if target is None:
                    return None
                if value.root_reference.data not in named:
                    named[value.root_reference.data] = (
                        target.function_type
                        if isinstance(target, func.FuncOp)
                        else structure_key(target)
                    )
    return (structure_key(op), tuple(sorted(named.items())))


def to_text(module: Operation, generic: bool = False) -> str:
    out = io.StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    return out.getvalue() + "\n"


def content_hash(module: Operation) -> str:
    """A stable short hash of the generic-form IR (names and locations excluded)."""
    return hashlib.sha256(to_text(module, generic=True).encode()).hexdigest()[:16]


_ATTRIBUTES: dict[Attribute, int] = {}
"""Every attribute `structure_key` has seen, by equality, numbered: xDSL's attribute hashes
are not enough to tell attributes apart (f32 and f64, both without parameters, hash alike)."""


def structure_key(module: Operation) -> tuple[int, int]:
    """A key equal for modules of the same structure: the same ops in the same order, with
    the same operands, result types, properties, attributes, regions, blocks and successors
    (names and locations excluded, as in `content_hash`). For telling IR states apart within
    one process, about 10x faster than `content_hash`: attributes are numbered by equality
    (float attributes compare by their bits) instead of printed. A 64-bit hash of that and
    the op count: two different modules share a key with odds of about n^2 / 2^65 among n
    states."""
    numbers: dict[int, int] = {}  # values and blocks by id: they live through the walk
    number = numbers.setdefault
    seen: dict[int, int] = {}  # attributes by id, then by equality (`_ATTRIBUTES`): an
    equal = _ATTRIBUTES.setdefault  # attribute's hash can be deep (a dense array's values)

    def attribute(a: Attribute) -> int:
        n = seen.get(id(a))
        if n is None:
            n = seen[id(a)] = equal(a, len(_ATTRIBUTES))
        return n

    items: list[object] = []
    count = 0
    for op in module.walk():
        count += 1
        for region in op.regions:
            items.append(tuple((number(id(b), len(numbers)), tuple(number(id(a), len(numbers)) for a in b.args),
                                tuple(attribute(a.type) for a in b.args))
                               for b in region.blocks))  # fmt: skip
        items.append(
            (
                op.name,
                tuple([number(id(v), len(numbers)) for v in op.operands]),
                tuple([attribute(r.type) for r in op.results]),
                tuple([(k, attribute(v)) for k, v in op.properties.items()]),
                tuple([(k, attribute(v)) for k, v in op.attributes.items()]),
                tuple([number(id(b), len(numbers)) for b in op.successors]),
            )
        )
        for r in op.results:
            number(id(r), len(numbers))
    return hash(tuple(items)), count


_SAID_UNCHANGED: list[object] = [None]


def unchanged(by: object) -> None:
    """Said by a pass's `apply` (`by`: the pass) that leaves the module exactly as it found
    it, where it knows so at no cost (nothing matched): MLIR's `markAllAnalysesPreserved`,
    for the IR itself. `apply_pipelines` then skips finding that out (the state key after
    each pass run: half of the main job's 862 pass runs changed nothing, and their keys cost
    as much as the passes). Say it only when sure; silence is always right. Under
    `IRKIT_CHECK_UNCHANGED=1` (the tests) every such word is checked against the key."""
    _SAID_UNCHANGED[0] = by


def apply_saying(p: ModulePass, ctx: Context, module: ModuleOp) -> bool:
    """Run pass `p` on `module`; False where `p` said it changed nothing (`unchanged`), True
    where it may have. A pass that another runs inside its own `apply` speaks for itself
    only: its word is not taken for the pass that ran it."""
    _SAID_UNCHANGED[0] = None
    p.apply(ctx, module)
    said = _SAID_UNCHANGED[0] is p
    _SAID_UNCHANGED[0] = None
    return not said


def shape_of(value: SSAValue) -> tuple[int, ...]:
    """The static shape of a shaped value: a tensor, a memref or a vector."""
    t = value.type
    assert isinstance(t, ShapedType), t
    return tuple(t.get_shape())


def element_type_of(value: SSAValue) -> Attribute:
    """The element type of a shaped value."""
    t = value.type
    assert isinstance(t, ContainerType), t
    return t.get_element_type()


def ssa_name(name: str) -> str:
    """`name` as an SSA name hint xDSL accepts ([A-Za-z0-9_$.-], not starting with a digit):
    an ONNX tensor called `gpu_0/softmax_1` becomes `gpu_0_softmax_1`."""
    cleaned = re.sub(r"\W", "_", name).strip("_")
    return cleaned if cleaned and not cleaned[0].isdigit() else f"v_{cleaned}"


_SOURCES: weakref.WeakKeyDictionary[ModuleOp, tuple[str, str]] = weakref.WeakKeyDictionary()
"""The file and text each module parsed from a file came from, for errors about it as a
whole (xDSL's ops keep no source locations)."""


def remember_source(module: ModuleOp, filename: str, text: str) -> None:
    _SOURCES[module] = (filename, text)


def _where_defined(module: ModuleOp, symbol: str | None) -> str | None:
    """`file:line:col` of `func.func @symbol` in the module's source (the file alone where
    the symbol is None or not found); None for a module built in memory."""
    if module not in _SOURCES:
        return None
    filename, text = _SOURCES[module]
    if symbol is not None:
        m = re.search(rf"func\.func\s+(?:public\s+)?@{re.escape(symbol)}\b", text)
        if m:
            line = text.count("\n", 0, m.start()) + 1
            col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
            return f"{filename}:{line}:{col}"
    return filename


def entry_function(module: ModuleOp) -> func.FuncOp:
    """The model's function: the module's only public `func.func`. An error otherwise
    names the file (and the second public function's line) where the module came from one."""
    public = [
        op
        for op in module.ops
        if isinstance(op, func.FuncOp)
        and not op.is_declaration
        and (op.sym_visibility is None or op.sym_visibility.data == "public")
    ]
    if len(public) != 1:
        names = ", ".join(f"@{f.sym_name.data}" for f in public) or "none"
        where = _where_defined(module, public[1].sym_name.data if len(public) > 1 else None)
        raise IrkitError(
            f"expected exactly one public func.func as the model, found {names} (make the "
            "others private: func.func private @...)"
            if len(public) > 1
            else f"expected exactly one public func.func as the model, found {names}",
            where,
        )
    return public[0]


def model_function(module: ModuleOp, graph_level: bool = False) -> func.FuncOp:
    """The entry function of a model that is to run: `entry_function`, checked to take and
    return only statically shaped tensors (or memrefs) of the element types irkit handles,
    so that an MLIR function over i16 or `tensor<?xf32>` is refused with a clear error
    instead of failing inside a backend. `graph_level`: tensors only (what the reference and
    random inputs need), not loop-level memrefs."""
    from irkit.dtypes import DTYPES
    from irkit.limits import check_extents

    fn = entry_function(module)
    names = [a.name_hint for a in fn.body.block.args]
    kinds = [("argument", names[i] or f"#{i}", t) for i, t in enumerate(fn.function_type.inputs)]
    kinds += [("result", f"#{i}", t) for i, t in enumerate(fn.function_type.outputs)]
    for kind, name, t in kinds:
        problem = _unrunnable(t, DTYPES.values(), check_extents)
        if problem is None and graph_level and not isinstance(t, TensorType):
            problem = "the reference evaluates graph-level models (tensors), not loop-level IR"
        if problem:
            raise IrkitError(
                f"@{fn.sym_name.data}: {kind} {name} has type {t}: {problem}", location_of(fn)
            )
    return fn


def _unrunnable(t: Attribute, dtypes, check_extents) -> str | None:
    if not isinstance(t, TensorType | MemRefType):
        return "irkit runs functions of ranked tensors only"
    if t.element_type not in dtypes:
        return "irkit runs f16, bf16, f32, f64, i64, i32 and i1 tensors"
    return check_extents(t.get_shape())
