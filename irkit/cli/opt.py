"""irkit-opt: the pass-pipeline driver, in the manner of mlir-opt and xdsl-opt.

    irkit-opt FILE [-p PIPELINE] [-o OUT] [-t TARGET] [--dim NAME=VALUE ...]

Reads .graph and .mlir (stdin is MLIR), runs the pipeline with verification after every
pass, and prints the result for the target (MLIR by default). It is xDSL's opt driver with
irkit's frontends, passes and targets, and with errors as one line each.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.printer import Printer
from xdsl.utils.arg_spec import parse_spec
from xdsl.xdsl_opt_main import VersionAction, xDSLOptMain

from irkit.cli.common import (
    OneLineArgumentParser,
    add_plugin_option,
    check_output,
    debug_level,
    dtype_option,
    parse_dim,
    run_main,
    write_output,
)
from irkit.errors import IrkitError
from irkit.frontend import FRONTENDS, load, parse_source, read_text
from irkit.frontend.precision import convert_floats
from irkit.ir import make_context, verify
from irkit.pipelines import PIPELINES, apply_passes, available_passes, parse_passes


class IrkitOptMain(xDSLOptMain):
    """xDSL's opt driver with irkit's frontends, passes, targets and one-line errors."""

    version_format = "irkit-opt (xDSL {xdsl_version})"

    def __init__(self, args: Sequence[str] | None = None):
        # Not super().__init__: xDSL builds its own ArgumentParser, whose errors are two
        # lines; this is the same sequence with a one-line parser.
        self.available_frontends = {}
        self.available_passes = {}
        self.available_targets = {}
        self.ctx = make_context()
        self.register_all_frontends()
        self.register_all_passes()
        self.register_all_targets()
        parser = OneLineArgumentParser(
            prog="irkit-opt", description=__doc__.splitlines()[0], conflict_handler="resolve"
        )
        self.register_all_arguments(parser)
        self.args = parser.parse_args(args=args)
        if parse_spec(self.args.target).name not in self.available_targets:
            parser.error(
                f"argument -t/--target: unknown target '{self.args.target}' (choose from {', '.join(self.available_targets)})"
            )
        self.ctx.allow_unregistered = self.args.allow_unregistered_dialect

    def register_all_frontends(self) -> None:
        for ext in FRONTENDS:
            self.available_frontends[ext.lstrip(".")] = self._parse_stream

    def _parse_stream(
        self, stream: object
    ) -> ModuleOp:  # pragma: no cover - irkit reads files itself
        raise NotImplementedError

    def register_all_targets(self) -> None:
        super().register_all_targets()
        from irkit.cli.targets import IRKIT_TARGETS

        self.available_targets.update(IRKIT_TARGETS)  # irkit's llvm replaces xDSL's

    def register_all_passes(self) -> None:
        for name, factory in available_passes().items():
            self.register_pass(name, factory)

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(
            "-v", "--version", action=VersionAction, version_format=self.version_format
        )
        arg_parser.add_argument(
            "--dim",
            action="append",
            default=[],
            type=parse_dim,
            metavar="NAME=VALUE",
            help="override a named dim of a .graph model (repeatable)",
        )
        dtype_option(
            arg_parser, "before the pipeline (with no pipeline, the converted model is written)"
        )
        arg_parser.add_argument(
            "--list-passes", action="store_true", help="list passes and named pipelines, then exit"
        )
        add_plugin_option(arg_parser)
        arg_parser.add_argument(
            "--no-verify-each",
            action="store_true",
            help="verify only the pipeline's result (faster); a failure is replayed with "
            "verification after each pass, so it still names the pass",
        )
        arg_parser.add_argument(
            "--reproducer-dir",
            default=None,
            help="where a failing pass leaves its reproducer (default: the system temp dir)",
        )

    # --- the run -----------------------------------------------------------------------------

    def run(self) -> None:
        from irkit.plugins import load_plugins

        load_plugins(self.args.plugin)
        if self.args.list_passes:
            self._list_passes()
            return
        if self.args.output_file is not None:  # before any work, not after it
            inputs = [self.args.input_file] if self.args.input_file not in (None, "-") else []
            check_output(self.args.output_file, inputs)
        passes = parse_passes(self.args.passes) if self.args.passes else []
        path = self.args.input_file
        if path and Path(path).suffix.lower() == ".onnx":  # binary: the ONNX frontend reads it
            module = load(path, dict(self.args.dim), self.args.dtype)
            self._apply(module, passes)
            self._write(self.output_resulting_program(module))
            return
        text, filename, kind = self._read_input()
        chunks = _split(text) if self.args.split_input_file else [text]
        outputs = []
        for chunk in chunks:
            try:
                module = parse_source(chunk, filename, kind, dict(self.args.dim))
                if self.args.dtype:
                    verify(convert_floats(module, self.args.dtype))
                self._apply(module, passes)
                outputs.append(self.output_resulting_program(module))
            except IrkitError as e:
                if not self.args.verify_diagnostics:
                    raise
                outputs.append(f"{e}\n")  # the diagnostic is the output; go on to the next chunk
        self._write("// -----\n".join(outputs))

    def _read_input(self) -> tuple[str, str, str]:
        path = self.args.input_file
        if path is None or path == "-":
            if sys.stdin is None or sys.stdin.isatty():  # mlir-opt would wait for a ^D
                raise IrkitError(
                    "no input file, and standard input is a terminal: give a model file or pipe MLIR in"
                )
            return sys.stdin.read(), "<stdin>", "." + (self.args.frontend or "mlir")
        text = read_text(path)  # first: a missing file or a directory is said as such
        kind = "." + self.args.frontend if self.args.frontend else Path(path).suffix.lower()
        if kind not in FRONTENDS:
            raise IrkitError(
                f"unknown model format {kind or '(no extension)'!r}; irkit-opt reads {', '.join(FRONTENDS)} (or use -f)",
                path,
            )
        return text, path, kind

    def _after_pass(self, p: ModulePass, module: ModuleOp, seconds: float) -> None:
        if self.args.time_passes:
            print(f"// pass {p.name}: {seconds * 1e3:.2f} ms", file=sys.stderr)
        if self.args.print_between_passes or debug_level() >= 2:
            print(f"// -----// IR after {p.pipeline_pass_spec()} //----- //", file=sys.stderr)
            Printer(stream=sys.stderr).print_op(module)
            print(file=sys.stderr)

    def _apply(self, module, passes) -> None:
        """The pipeline on `module` in place, verified as the flags ask, IR dumps and
        reproducers as they ask."""
        apply_passes(module, passes, self.ctx, self._after_pass, self.args.reproducer_dir,
                     verify_each=not self.args.no_verify_each)  # fmt: skip

    def _write(self, text: str) -> None:
        out = self.args.output_file
        if out is None:
            sys.stdout.write(text)
            return
        write_output(
            out, text, [self.args.input_file] if self.args.input_file not in (None, "-") else []
        )

    def _list_passes(self) -> None:
        for name, pipe in sorted(PIPELINES.items()):
            print(f"pipeline {name}: {pipe.spec}  ({pipe.description})")
        for name in sorted(available_passes()):
            print(f"pass {name}")


def _split(text: str) -> list[str]:
    """Split on `// -----`, padding each chunk with newlines so line numbers stay true."""
    chunks, offset = [], 0
    for chunk in text.split("// -----"):
        chunks.append("\n" * offset + chunk)
        offset += chunk.count("\n")
    return chunks


def main(argv: Sequence[str] | None = None) -> int:
    def body() -> None:
        IrkitOptMain(argv).run()

    return run_main("irkit-opt", body)


if __name__ == "__main__":
    sys.exit(main())
