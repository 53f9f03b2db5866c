"""MLIR text -> module, through xDSL's parser, keeping each op's source location."""

from __future__ import annotations

from xdsl.dialects.builtin import FileLineColLoc, IntAttr, ModuleOp, StringAttr, UnknownLoc
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException

from irkit.errors import IrkitError, SourceLocation, one_line
from irkit.ir import make_context


class _LocatingParser(Parser):
    """xDSL's parser, stamping ops that carry no `loc(...)` with where they were written, so
    that a verifier failure can be reported at file:line:col."""

    def parse_operation(self) -> Operation:
        start = self._current_token.span.get_location()
        self.last_start = start
        op = super().parse_operation()
        if isinstance(op.location, UnknownLoc):
            op.location = FileLineColLoc(
                StringAttr(start.file), IntAttr(start.line), IntAttr(start.col)
            )
        return op


def parse_mlir(text: str, filename: str = "<input>") -> ModuleOp:
    """Parse MLIR text (generic or custom syntax). Raises IrkitError on a syntax error."""
    parser = _LocatingParser(make_context(), text, filename)
    try:
        return parser.parse_module()
    except RecursionError:  # xDSL's parser recurses per nesting level (regions, types)
        raise IrkitError(
            "nested too deeply for the parser (regions, attributes or types)",
            _where(parser, filename),
        ) from None
    except VerifyException as e:  # an op's assembly format checks its types while parsing
        raise IrkitError(
            f"invalid op: {one_line(e, 'its types do not fit its syntax')}",
            _where(parser, filename),
        ) from None
    except ParseError as e:
        loc = e.span.get_location()
        msg = e.msg.strip()
        if msg.startswith("in "):  # xDSL says only " in block definition" at a missing '}'
            msg = f"unexpected end of input {msg}"
        raise IrkitError(msg, SourceLocation(loc.file, loc.line, loc.col)) from None


def _where(parser: _LocatingParser, filename: str) -> SourceLocation | str:
    """The start of the op being parsed when parsing failed (the file when unknown)."""
    loc = getattr(parser, "last_start", None)
    return SourceLocation(loc.file, loc.line, loc.col) if loc is not None else filename
