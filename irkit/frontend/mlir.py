"""MLIR text -> module, through xDSL's parser, keeping each op's source location."""

from __future__ import annotations

from xdsl.dialects.builtin import FileLineColLoc, IntAttr, ModuleOp, StringAttr, UnknownLoc
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError

from irkit.errors import IrkitError, SourceLocation
from irkit.ir import make_context


class _LocatingParser(Parser):
    """xDSL's parser, stamping ops that carry no `loc(...)` with where they were written, so
    that a verifier failure can be reported at file:line:col."""

    def parse_operation(self) -> Operation:
        start = self._current_token.span.get_location()
        op = super().parse_operation()
        if isinstance(op.location, UnknownLoc):
            op.location = FileLineColLoc(
                StringAttr(start.file), IntAttr(start.line), IntAttr(start.col)
            )
        return op


def parse_mlir(text: str, filename: str = "<input>") -> ModuleOp:
    """Parse MLIR text (generic or custom syntax). Raises IrkitError on a syntax error."""
    try:
        return _LocatingParser(make_context(), text, filename).parse_module()
    except ParseError as e:
        loc = e.span.get_location()
        msg = e.msg.strip()
        if msg.startswith("in "):  # xDSL says only " in block definition" at a missing '}'
            msg = f"unexpected end of input {msg}"
        raise IrkitError(msg, SourceLocation(loc.file, loc.line, loc.col)) from None
