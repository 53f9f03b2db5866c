"""Pass pipelines: parsing `-p` specs, named pipelines, and running passes with verification.

A spec is xDSL's pipeline syntax (`canonicalize,cse,some-pass{opt=1}`); a name from
`PIPELINES` expands to its passes. Every pass is followed by verification; a pass that
raises or leaves invalid IR becomes a `PassFailure` naming the pass, with the IR it was
given and the pipeline written to a reproducer file.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import os
import re
import tempfile
import time
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import ArgSpec, _convert_arg_to_type, parse_pipeline
from xdsl.utils.exceptions import ArgSpecParseError

from irkit.errors import IrkitError, OptionError, PassFailure, expect, one_line
from irkit.ir import content_hash, make_context, to_text, verify
from irkit.loops import is_gpu_mapped, is_loop_level
from irkit.passes import available_passes


@dataclass(frozen=True)
class Pipeline:
    """A named pipeline: its passes in order, and which of them are optional optimizations
    (removable without changing what the module computes)."""

    name: str
    passes: tuple[str, ...]
    optional: frozenset[str] = frozenset()
    description: str = ""

    @property
    def spec(self) -> str:
        return ",".join(self.passes)


GRAPH_OPTIMIZATIONS = (
    "canonicalize", "cse", "conv-layout", "fold-transposes", "conv-to-matmul", "fold-constants",
    "fuse-kernels",
)  # fmt: skip
"""The optional graph-level passes both default pipelines start with, in order."""

CPU_ATTENTION, GPU_ATTENTION = ("cpu-fuse-attention",), ("gpu-fuse-attention",)
"""Each default pipeline's attention pass (it recognizes the chains too), after the cleanup,
before transposes fold into the matmuls it matches."""

CUDA_GRAPH = ("recognize-scaled-matmul",)
"""`default-cuda`'s graph passes the CPU's lacks: dequantized 8-bit matmuls onto the 8-bit
tensor cores (before fold-constants, which would fold an 8-bit weight's dequantization)."""

CUDA_LOOP_PASSES = (
    "lower-graph-to-loops", "reshape-views", "pad-leading-dims", "gpu-tile-matmul", "gpu-coarsen",
    "map-to-gpu",
)  # fmt: skip
"""`default-cuda`'s passes after the graph's: the first and last required, the rest optional."""

CPU_GRAPH_OPTIONS = {
    "conv-to-matmul": "conv-to-matmul{implicit=true}",
    "fuse-kernels": "fuse-kernels{concat-transposes=false}",
}
"""How `default-cpu` runs some of them: convolutions as implicit GEMMs (no im2col matrix),
and their padded input copied apart from the layout transpose before it, which
`cpu-tile-transpose` then tiles."""

PIPELINES: dict[str, Pipeline] = {
    "graph-cleanup": Pipeline(
        "graph-cleanup",
        ("canonicalize", "cse"),
        frozenset({"canonicalize", "cse"}),
        "xDSL's canonicalization and common-subexpression elimination on graph IR",
    ),
    "default-cpu": Pipeline(
        "default-cpu",
        (
            *(CPU_GRAPH_OPTIONS.get(p, p) for p in (*GRAPH_OPTIMIZATIONS[:2], *CPU_ATTENTION)),
            *(CPU_GRAPH_OPTIONS.get(p, p) for p in GRAPH_OPTIMIZATIONS[2:]),
            "lower-graph-to-loops{keep-transcendentals=true}",
            "reshape-views",
            "pad-leading-dims",
            "cpu-tile-matmul",
            "cpu-tile-transpose",
            "expand-math",
            "cpu-fuse-rows",
            "interchange-matmul",
            "interchange-reductions",
            "unroll-windows",
            "delinearize-loops",
            "block-reductions",
            "reassociate-reductions",
            "split-concat",
            "simplify-indices",
            "cpu-parallelize",
            "share-buffers",
        ),
        frozenset(
            {
                *GRAPH_OPTIMIZATIONS,
                *CPU_ATTENTION,
                "reshape-views",
                "pad-leading-dims",
                "cpu-tile-matmul",
                "cpu-tile-transpose",
                "expand-math",
                "cpu-fuse-rows",
                "unroll-windows",
                "delinearize-loops",
                "simplify-indices",
                "reassociate-reductions",
                "interchange-reductions",
                "split-concat",
                "cpu-parallelize",
                "share-buffers",
            }
        ),
        "the optimized CPU pipeline: graph cleanup, attention recognized and fused (online softmax in register tiles), NHWC convolutions as implicit-GEMM "
        "matmuls (the patches read in place from the padded input), "
        "transpose and constant folding, fusion into kernel regions, loops, reshapes as views, padded row "
        "strides of intermediates, register-blocked vector matmuls, transposes in register "
        "blocks, vectorizable exp, "
        "softmax/layer_norm phases run row by row, convolution windows unrolled over channels-last data, f32 sums in blocks added in f64, vectorized reductions, column sums as row updates, concatenations split at their inputs, large loops on all CPUs (IRKIT_NUM_THREADS=1 for one thread), intermediates sharing one arena where their lives do not overlap",
    ),
    "default-cuda": Pipeline(
        "default-cuda",
        (
            *GRAPH_OPTIMIZATIONS[:2],
            *CUDA_GRAPH,
            *GPU_ATTENTION,
            *GRAPH_OPTIMIZATIONS[2:],
            *CUDA_LOOP_PASSES,
        ),
        frozenset((*GRAPH_OPTIMIZATIONS, *CUDA_GRAPH, *GPU_ATTENTION, *CUDA_LOOP_PASSES[1:-1])),
        "the optimized CUDA pipeline: graph cleanup, dequantized 8-bit matmuls as scaled_matmul, attention recognized and fused (a block per query tile, K and V through shared memory, the online softmax in registers), NHWC convolutions as im2col matmuls, "
        "transpose and constant folding, fusion, loops, reshapes as views, padded row strides of "
        "intermediates, warp-tiled shared-memory matmuls, large elementwise kernels several "
        "points per thread, mapping onto the GPU",
    ),
    "baseline-cuda": Pipeline(
        "baseline-cuda",
        ("lower-graph-to-loops", "map-to-gpu"),
        frozenset(),
        "no optimization: one kernel per graph op, mapped one thread per output (or one "
        "block per row for reductions)",
    ),
    "baseline-cpu": Pipeline(
        "baseline-cpu",
        ("lower-graph-to-loops", "interchange-matmul", "block-reductions"),
        frozenset(),
        "no optimization: one kernel per graph op, plain loop nests (a matmul's as row "
        "updates, the inner loop contiguous), f32 sums in blocks added in f64 (the CPU "
        "baseline)",
    ),
}


XDSL_OPTIMIZATIONS = frozenset({"canonicalize", "cse", "dce", "licm"})
"""xDSL passes irkit treats as optional optimizations when they appear in a spec."""


@dataclass(frozen=True)
class Step:
    """One pass of a pipeline, as attribution sees it."""

    label: str
    """The pass's name, with `#2`, `#3`... when the same pass appears again."""
    spec: str
    """The pass with its options, in `-p` syntax."""
    optional: bool
    refines: int | None = None
    """An option step (`irkit.measure.attribution.plan.option_chain`): the index of the
    step whose pass this one runs with more options set, in its place."""


def pipeline_steps(spec: str) -> list[Step]:
    """The passes of a `-p` spec (named pipelines expanded) in order, each marked optional
    (an optimization attribution may remove) or required. A pass is optional when its
    named pipeline lists it so, when its class sets `is_optimization = True`, or when it
    is one of `XDSL_OPTIMIZATIONS`."""
    steps: list[Step] = []
    seen: dict[str, int] = {}
    for item, named_optional in _items(spec):
        p = _expand(item)[0]
        optional = (
            named_optional
            if named_optional is not None
            else bool(getattr(p, "is_optimization", False)) or item.name in XDSL_OPTIMIZATIONS
        )
        seen[item.name] = seen.get(item.name, 0) + 1
        label = item.name + (f"#{seen[item.name]}" if seen[item.name] > 1 else "")
        steps.append(Step(label, str(p.pipeline_pass_spec()), optional))
    return steps


def _items(spec: str) -> list[tuple[ArgSpec, bool | None]]:
    try:
        items = list(parse_pipeline(spec))
    except ArgSpecParseError as e:
        raise IrkitError(_one_line_spec_error(str(e)), "-p") from None
    out: list[tuple[ArgSpec, bool | None]] = []
    for item in items:
        if item.name in PIPELINES and item.name not in available_passes():
            named = PIPELINES[item.name]
            out.extend((i, i.name in named.optional) for i, _ in _items(named.spec))
        else:
            out.append((item, None))
    return out


def lower_to_loops(module: ModuleOp) -> ModuleOp:
    """`lower-graph-to-loops` where the pipeline left the module at the graph level."""
    if not is_loop_level(module):
        module = apply_passes(module, parse_passes("lower-graph-to-loops"))
    return module


def lower_for_cpu(module: ModuleOp) -> ModuleOp:
    """What the CPU backends require: loops, untiled matmuls as row updates
    (interchange-matmul) and f32 sums in blocks (block-reductions; each changes nothing
    run twice); one run of the passes, verified once. A module that needs none is returned
    as it is, neither copied nor verified again."""
    from irkit.passes.interchange_matmul import needs_interchange
    from irkit.passes.reductions import needs_blocking

    if not is_loop_level(module):
        spec = "lower-graph-to-loops,interchange-matmul,block-reductions"
        return apply_passes(module, parse_passes(spec))
    steps = [
        name
        for name, needed in (
            ("interchange-matmul", needs_interchange),
            ("block-reductions", needs_blocking),
        )
        if needed(module)
    ]
    if not steps:
        return module
    return apply_passes(module, parse_passes(",".join(steps)))


def lower_for_gpu(module: ModuleOp) -> ModuleOp:
    """What the GPU backends require: loops mapped onto the GPU (map-to-gpu with its
    defaults, where the pipeline did not map them). Every kernel: a pass that maps some
    (gpu-tile-matmul maps its matmuls) and one after it that adds a loop-level kernel (a
    researcher's, or fidelity.py's plants) left that kernel unmapped and the program
    refused ("CUDA C needs GPU-mapped IR"); map-to-gpu leaves mapped kernels as they are."""
    from irkit.passes.map_to_gpu import unmapped_kernels

    module = lower_to_loops(module)
    if not is_gpu_mapped(module) or unmapped_kernels(module):
        module = apply_passes(module, parse_passes("map-to-gpu"))
    return module


def parse_passes(spec: str) -> list[ModulePass]:
    """Parse a `-p` spec into pass instances. Raises IrkitError naming the pass or option."""
    expect("parse_passes", "spec", spec, str, "a pipeline spec such as 'cse,fuse-kernels'")
    try:
        items = list(parse_pipeline(spec))
    except ArgSpecParseError as e:
        raise IrkitError(_one_line_spec_error(str(e)), "-p") from None
    passes: list[ModulePass] = []
    for item in items:
        passes.extend(_expand(item))
    return passes


def _expand(item: ArgSpec) -> list[ModulePass]:
    if item.name in PIPELINES and item.name not in available_passes():
        if item.parameters:
            raise IrkitError(f"pipeline '{item.name}' takes no options", "-p")
        return parse_passes(PIPELINES[item.name].spec)
    factory = available_passes().get(item.name)
    if factory is None:
        import difflib

        close = difflib.get_close_matches(item.name, [*available_passes(), *PIPELINES], n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise IrkitError(f"unknown pass '{item.name}'{hint}", "-p")
    cls = factory()
    try:
        p = cls.from_pass_spec(item)
    except (ValueError, TypeError) as e:
        raise IrkitError(f"pass '{item.name}': {_option_problem(cls, item, e)}", "-p") from None
    check_options(p, "-p")
    return [p]


def check_options(p: ModulePass, where: str | None = None) -> None:
    """Run the pass's `check_options()` (if it has one): an option out of its domain is an
    IrkitError naming the pass and the option, raised before any pass runs."""
    check = getattr(p, "check_options", None)
    if check is None:
        return
    try:
        check()
    except (OptionError, ValueError, TypeError) as e:
        raise IrkitError(f"pass '{p.name}': {one_line(e)}", where) from None


def _option_problem(cls: type[ModulePass], item: ArgSpec, error: Exception) -> str:
    """Which option of `item` xDSL's `from_spec` refused, and why, in the user's words."""
    fields = {f.name for f in dataclasses.fields(cls) if f.init and f.name != "name"}
    hints = typing.get_type_hints(cls)
    for key, value in item.normalize_parameter_names().parameters.items():
        option = key.replace("_", "-")
        if key not in fields:
            known = ", ".join(sorted(f.replace("_", "-") for f in fields))
            takes = f"(options: {known})" if known else "(the pass takes no options)"
            return f"unknown option '{option}' {takes}"
        try:
            _convert_arg_to_type(value, hints[key])
        except (ValueError, TypeError):
            shown = ",".join(str(v) for v in value) if isinstance(value, list | tuple) else value
            expected = getattr(hints[key], "__name__", str(hints[key]))
            return f"option {option}={shown}: expected {_KINDS.get(expected, expected)}"
    return one_line(error)


_KINDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


def _one_line_spec_error(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    col = next((m.group(1) for ln in lines if (m := re.match(r".*:1:(\d+)$", ln))), "?")
    return f"malformed pipeline at column {col}: {lines[-1].strip()}"


PassCallback = Callable[[ModulePass, ModuleOp, float], None]
"""Called after each pass with the pass, the (verified) module and the pass's seconds."""


VERIFY_EACH_ENV = "IRKIT_VERIFY_EACH"
"""Set to 1 to verify after every pass by default (as `irkit-opt` does)."""


def verify_each_default() -> bool:
    return os.environ.get(VERIFY_EACH_ENV, "") not in ("", "0")


P = typing.ParamSpec("P")
R = typing.TypeVar("R")


def without_cyclic_gc(fn: Callable[P, R]) -> Callable[P, R]:
    """Run `fn` with Python's cyclic garbage collector paused (restored after, as it was).
    Passes build and drop tens of thousands of IR objects, each op a reference cycle with
    its block; every collection walked all of them, so a pipeline's time grew faster than
    its IR: default-cpu on a 2000-op chain took 3.03 s with it and 2.25 s without
    (fuse-kernels 0.40 -> 0.18 s, the growth the compile-speed benchmark saw as n^1.2).
    What a pipeline leaves is collected as usual afterwards."""

    @functools.wraps(fn)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was:
                gc.enable()

    return paused


@without_cyclic_gc
def apply_passes(
    module: ModuleOp,
    passes: Sequence[ModulePass],
    ctx: Context | None = None,
    after_pass: PassCallback | None = None,
    reproducer_dir: str | Path | None = None,
    verify_each: bool | None = None,
) -> ModuleOp:
    """Run `passes` over `module` in place.

    Verification follows mlir-opt's, made cheap: the result is always verified; with
    `verify_each` (default: `$IRKIT_VERIFY_EACH`, and on in `irkit-opt`) also after every
    pass. Without it, a failure still names its pass: a pass that raises, or a result that
    does not verify, replays the pipeline from a copy of the input with verification after
    each pass, which finds the pass and writes its reproducer (the IR that pass was given).
    Copying and verifying around each pass were about 0.78 s of the 0.9 s that default-cpu
    took on transformer_block on the 2-core development machine (the passes 0.11-0.18 s)."""
    expect("apply_passes", "module", module, ModuleOp, "a module")
    for p in passes:
        expect(
            "apply_passes",
            "passes",
            p,
            ModulePass,
            "a list of pass instances (parse_passes' result)",
        )
    ctx = ctx or make_context()
    for p in passes:  # every option is checked before any pass runs
        check_options(p)
    if reproducer_dir is not None:
        _check_reproducer_dir(reproducer_dir)
    if verify_each if verify_each is not None else verify_each_default():
        return apply_verifying_each(module, passes, ctx, after_pass, reproducer_dir)
    original = module.clone()
    failed: ModulePass | None = None
    for p in passes:
        start = time.perf_counter()
        try:
            p.apply(ctx, module)
        except Exception:  # noqa: BLE001 - replayed below, where it is reported by name
            failed = p
            break
        if after_pass is not None:
            after_pass(p, module, time.perf_counter() - start)
    else:
        try:
            verify(module)
            return module
        except Exception:  # noqa: BLE001 - replayed below to name the pass
            pass
    apply_verifying_each(original, passes, ctx, None, reproducer_dir)
    if failed is not None:
        raise PassFailure(
            failed.name,
            "it raised, and not when the pipeline was replayed: it is not deterministic",
        )
    raise IrkitError(
        "the pipeline's result did not verify, and did when it was replayed with "
        "verification after each pass: a pass is not deterministic"
    )


def apply_verifying_each(
    module: ModuleOp,
    passes: Sequence[ModulePass],
    ctx: Context,
    after_pass: PassCallback | None,
    reproducer_dir: str | Path | None,
) -> ModuleOp:
    """Run `passes`, copying the IR before and verifying it after each: a failure names the
    pass and writes the IR it was given as a reproducer."""
    verified: set[tuple] = set()  # functions a pass left as they were are not verified again
    for p in passes:
        before = module.clone()
        start = time.perf_counter()
        try:
            p.apply(ctx, module)
            seconds = time.perf_counter() - start
            verify(module, verified)
        except Exception as e:  # any failure inside a pass is the pass's failure
            if isinstance(e, IrkitError):
                cause = f"{e.location}: {e.message}" if e.location else e.message
            else:
                cause = one_line(e, type(e).__name__)
            raise PassFailure(
                p.name, cause, _write_reproducer(before, p, cause, reproducer_dir)
            ) from e
        if after_pass is not None:
            after_pass(p, module, seconds)
    return module


def _check_reproducer_dir(directory: str | Path) -> None:
    """Refuse, before any pass runs, a reproducer directory that cannot be written to."""
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise IrkitError(f"--reproducer-dir: cannot create it: {e.strerror}", str(d)) from None
    if not d.is_dir():
        raise IrkitError("--reproducer-dir: not a directory", str(d))
    if not os.access(d, os.W_OK | os.X_OK):
        raise IrkitError("--reproducer-dir: not writable", str(d))


def _write_reproducer(
    module: ModuleOp, p: ModulePass, cause: str, directory: str | Path | None
) -> str | None:
    """Write the IR the pass was given, with a RUN line; None if it cannot be written (the
    pass's failure is then reported without a reproducer rather than hidden by this one)."""
    directory = Path(directory or tempfile.gettempdir())
    path = directory / f"irkit-reproducer-{p.name}-{content_hash(module)}.mlir"
    header = (
        f"// irkit reproducer: pass '{p.name}' failed: {cause}\n"
        f"// RUN: irkit-opt %s -p '{p.pipeline_pass_spec()}'\n"
    )
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path.write_text(header + to_text(module))
    except OSError:
        return None
    return str(path)
