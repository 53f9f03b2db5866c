"""Frontends: model files -> a module of graph-dialect ops.

`load(path)` picks the frontend by extension: `.graph` (irkit's model language), `.mlir`
(MLIR text, parsed by xDSL). Every failure is an IrkitError naming the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from irkit.errors import IrkitError
from irkit.frontend.files import check_model_file, read_text

__all__ = ["FRONTENDS", "check_model_file", "load", "parse_source", "read_text"]

FRONTENDS = (".graph", ".mlir", ".onnx")


def check_dims(function: str, dims: object) -> None:
    """`dims` must map dim names to positive integers (or be None)."""
    if dims is None:
        return
    if not isinstance(dims, Mapping):
        raise IrkitError(f"{function}: dims must be a mapping of dim names to sizes, got {dims!r}")
    for name, size in dims.items():
        if (
            not isinstance(name, str)
            or isinstance(size, bool)
            or not isinstance(size, int)
            or size <= 0
        ):
            raise IrkitError(f"{function}: dims[{name!r}] must be a positive integer, got {size!r}")


def parse_source(
    text: str, filename: str, kind: str, dims: Mapping[str, int] | None = None
) -> ModuleOp:
    """Parse `text` as `kind` ('.graph' or '.mlir'), verified."""
    from irkit.frontend.graph_lang import parse_graph
    from irkit.frontend.mlir import parse_mlir
    from irkit.ir import remember_source, verify
    from irkit.limits import check_model_lines, check_model_ops

    if kind in (".graph", ".mlir"):
        check_model_lines(text, filename)
        check_model_ops(text, filename, kind)
    if kind == ".graph":
        module = parse_graph(text, filename, dims)
    elif kind == ".mlir":
        if dims:
            raise IrkitError(
                "--dim applies to .graph models; an .mlir file has fixed shapes", filename
            )
        module = parse_mlir(text, filename)
    else:
        raise IrkitError(
            f"unknown model format {kind or '(no extension)'!r}; irkit reads {', '.join(FRONTENDS)}",
            filename,
        )
    verify(module)
    remember_source(module, filename, text)
    return module


def load(
    path: str | Path, dims: Mapping[str, int] | None = None, dtype: str | None = None
) -> ModuleOp:
    """Load a model file as a verified module. `dims` overrides named dims of a .graph model,
    or gives symbolic input dims of an .onnx model their sizes; `dtype` ("f16" or "bf16")
    converts every f32 tensor of it to that type (`irkit.frontend.precision`)."""
    from irkit.errors import expect
    from irkit.frontend.precision import check_dtype, convert_floats
    from irkit.ir import verify

    expect("irkit.load", "path", path, str | Path, "a model file path (str or Path)")
    check_dims("irkit.load", dims)
    check_dtype("irkit.load", dtype)
    if Path(path).suffix.lower() == ".onnx":
        from irkit.frontend.onnx import load_onnx

        module = load_onnx(path, dims)
        verify(module)
    else:
        module = parse_source(read_text(path), str(path), Path(path).suffix.lower(), dims)
    if dtype is not None and dtype != "f32":
        verify(convert_floats(module, dtype))
    return module
