"""IR plumbing shared by every layer: the context with irkit's dialects, verification that
reports the failing op's source location, and module hashing."""

from __future__ import annotations

import hashlib
import io
from functools import cache

from xdsl.context import Context
from xdsl.dialects import func, get_all_dialects
from xdsl.dialects.builtin import FileLineColLoc, ModuleOp
from xdsl.ir import Operation
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from irkit.errors import IrkitError, SourceLocation, one_line


@cache
def _dialect_factories() -> dict:
    from irkit.universe import IRKIT_DIALECTS

    return {**get_all_dialects(), **IRKIT_DIALECTS}


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


def verify(module: ModuleOp) -> None:
    """Verify every op; the first failure becomes an IrkitError at its source location."""
    for op in module.walk():
        try:
            op.verify(verify_nested_ops=False)
        except (VerifyException, ValueError) as e:
            msg = one_line(e, type(e).__name__)  # xDSL puts the reason on line 2
            raise IrkitError(f"{op.name}: {msg}", location_of(op)) from None


def to_text(module: Operation, generic: bool = False) -> str:
    out = io.StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    return out.getvalue() + "\n"


def content_hash(module: Operation) -> str:
    """A stable short hash of the generic-form IR (names and locations excluded)."""
    return hashlib.sha256(to_text(module, generic=True).encode()).hexdigest()[:16]


def entry_function(module: ModuleOp) -> func.FuncOp:
    """The model's function: the module's only public `func.func`."""
    public = [
        op
        for op in module.ops
        if isinstance(op, func.FuncOp)
        and not op.is_declaration
        and (op.sym_visibility is None or op.sym_visibility.data == "public")
    ]
    if len(public) != 1:
        names = ", ".join(f"@{f.sym_name.data}" for f in public) or "none"
        raise IrkitError(f"expected exactly one public func.func as the model, found {names}")
    return public[0]
