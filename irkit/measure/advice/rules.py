"""Rules: evidence about a kernel -> concrete pipeline edits worth measuring.

A rule is a small object with a docstring that states its reasoning and a `propose(kernel,
context)` that returns edits (`edits.Edit`): passes to add or remove, options to set. A
rule proposes; it never decides. Every edit is compiled, checked against the reference and
timed paired against the current pipeline (`advise`), and only a measured gain is advice.
So a rule may be generous where its evidence is suggestive, and must be silent where its
evidence rules the edit out: a rule that fires on every kernel costs budget, one that
never fires costs recall (`benchmarks/advise_eval.py` measures both).

Rules are data, in a registry, extensible from a plugin like passes:

    from irkit.measure.advice import Edit, Rule, register_rule

    @register_rule
    class MyTiles(Rule):
        \"\"\"Why this edit should help a kernel with this evidence.\"\"\"
        name = "my-tiles"
        families = frozenset({"cpu"})

        def propose(self, kernel, ctx):
            if kernel.kind == "contraction" and kernel.below_roof(50):
                return [Edit.set("my-tile-pass", "tile", 64)]
            return []
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from irkit.errors import IrkitError
from irkit.measure.advice.edits import Edit, spec_items
from irkit.measure.advice.evidence import KernelEvidence


@dataclass
class Context:
    """What a rule may read beyond its kernel: the pipeline advised and the backend's
    reference (default) pipeline, every kernel of the program, the machine, and the tuning
    database's entry for this workload where it has one."""

    backend: str
    family: str
    """"cpu" or "gpu" (cuda, cuda-host and cuda-sim run one code generator)."""
    pipeline: str
    reference: tuple[str, ...]
    optional: frozenset[str]
    program: list[KernelEvidence]
    vector_bits: int = 0
    cores: int = 1
    tuned: dict[str, Any] | None = None
    _items: list[tuple[str, dict[str, str]]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self._items = spec_items(self.pipeline)

    def has(self, pass_name: str) -> bool:
        return any(name == pass_name for name, _ in self._items)

    def option(self, pass_name: str, option: str) -> str | None:
        """The value the pipeline gives `option` of `pass_name` (None: the pass's default,
        or the pass absent)."""
        for name, params in self._items:
            if name == pass_name:
                return params.get(option)
        return None

    def options(self, pass_name: str) -> dict[str, str]:
        return next((dict(p) for name, p in self._items if name == pass_name), {})

    def missing(self, pass_name: str) -> list[Edit]:
        """[add `pass_name`] where the reference pipeline runs it and this one does not."""
        names = {spec_items(r)[0][0] for r in self.reference}
        if pass_name in names and not self.has(pass_name):
            return [Edit.add(pass_name)]
        return []

    def reference_options(self, pass_name: str) -> dict[str, str]:
        """The options the reference pipeline gives `pass_name` (none where it lacks it)."""
        for r in self.reference:
            name, params = spec_items(r)[0]
            if name == pass_name:
                return dict(params)
        return {}

    def kinds(self) -> set[str]:
        return {k.kind for k in self.program}


class Rule:
    """A rule (see the module doc): its docstring is its reasoning, shown by `advise`."""

    name: ClassVar[str] = ""
    families: ClassVar[frozenset[str]] = frozenset({"cpu", "gpu"})

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        raise NotImplementedError

    @classmethod
    def reasoning(cls) -> str:
        return " ".join((cls.__doc__ or "").split())


RULES: dict[str, type[Rule]] = {}


def register_rule(cls: type[Rule]) -> type[Rule]:
    """Make a rule part of `advise` (usable as a class decorator; from a plugin too)."""
    if not cls.name:
        raise IrkitError(f"rule {cls.__qualname__} has no name")
    RULES[cls.name] = cls
    return cls


def rules_for(family: str, names: Sequence[str] | None = None) -> list[Rule]:
    """The registered rules for a backend family (`names`: only those, in that order;
    one-line error naming one that is not registered)."""
    if names is not None:
        unknown = [n for n in names if n not in RULES]
        if unknown:
            known = ", ".join(sorted(RULES))
            raise IrkitError(f"--rules: no rule named '{unknown[0]}' (there are: {known})")
        chosen = [RULES[n] for n in names]
    else:
        chosen = list(RULES.values())
    return [cls() for cls in chosen if family in cls.families]


_LIGHT = ("elementwise", "movement", "reduction", "transpose")
"""Kinds of kernel whose time is mostly moving their operands."""


def _on(value: str | None) -> bool:
    return value is None or value.lower() not in ("false", "0")


# --- the rules of both code generators ------------------------------------------------------


@register_rule
class KernelFusion(Rule):
    """Memory-bound kernels that hand their results to one another through memory pay for
    that traffic twice (a store, then a load in the next kernel); fused into one kernel
    (or into a matmul's epilogue), the intermediate stays in registers or cache. Proposed
    where the program has several kernels, some of them memory-bound or elementwise:
    fuse-kernels added, or its elementwise, reduction and epilogue fusion turned back on."""

    name = "kernel-fusion"

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        light = [k for k in ctx.program if k.bound == "memory" or k.kind in _LIGHT]
        if len(ctx.program) < 2 or not light:
            return []
        edits = ctx.missing("fuse-kernels")
        for option in ("elementwise", "reductions", "epilogues"):
            if not _on(ctx.option("fuse-kernels", option)):
                edits.append(Edit.set("fuse-kernels", option, None))
        return edits


@register_rule
class PaddedRows(Rule):
    """Rows whose byte stride is a multiple of 4 KiB map to the same cache sets and alias
    each other's stores (4K aliasing); padding an intermediate's rows by a cache line
    spreads them. Proposed for a kernel whose buffers have such rows: pad-leading-dims."""

    name = "padded-rows"

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        if "rows-4k-strided" in kernel.features or kernel.kind in ("contraction", "transpose"):
            return ctx.missing("pad-leading-dims")
        return []


@register_rule
class ViewsNotCopies(Rule):
    """A kernel that only moves data (a reshape, a concatenation, a slice) costs a full read
    and write of its tensor for no arithmetic; a reshape of contiguous data is a view, and a
    concatenation can be written in place by its producers. Proposed for movement kernels:
    reshape-views, split-concat, and the graph's transpose and constant folding."""

    name = "views-not-copies"

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        if kernel.kind not in ("movement", "transpose"):
            return []
        edits = [*ctx.missing("reshape-views"), *ctx.missing("fold-transposes")]
        if "concat" in kernel.name:
            edits += ctx.missing("split-concat")
        return edits + ctx.missing("fold-constants")


@register_rule
class GraphCleanup(Rule):
    """Work the graph computes twice (a common subexpression), or that a canonical form
    removes (an identity reshape, a transpose of a transpose), reaches the kernels as time.
    Proposed once the program has several kernels: canonicalize, cse, fold-constants."""

    name = "graph-cleanup"

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        if len(ctx.program) < 2 or kernel is not ctx.program[0]:
            return []  # a property of the graph: proposed once, from its slowest kernel
        return [*ctx.missing("canonicalize"), *ctx.missing("cse"), *ctx.missing("fold-constants")]


@register_rule
class ConvolutionAsGemm(Rule):
    """A direct convolution's loops reuse little of what they load; as a matmul over its
    patches (im2col, or implicit GEMM reading the patches in place) it gets the matmul's
    register tiles, and in channels-last layout its channels are contiguous. Proposed for a
    convolution kernel: conv-to-matmul and conv-layout as the reference pipeline runs them."""

    name = "convolution-as-gemm"

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        if "conv" not in kernel.name and "im2col" not in kernel.name:
            return []
        return [*ctx.missing("conv-to-matmul"), *ctx.missing("conv-layout")]


@register_rule
class ReferencePasses(Rule):
    """The backend's default pipeline runs an optional pass that this pipeline does not:
    a pass the default keeps has earned its place on the models irkit is measured on
    (`attribute` prices each), and where it changes this program's code it may help here
    too. Proposed once, from the slowest kernel, for every such pass (the ones that compile
    to the same code are dropped before timing): the rule of last resort, for evidence the
    other rules do not read."""

    name = "reference-passes"

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        if kernel is not ctx.program[0]:
            return []
        names = [spec_items(r)[0][0] for r in ctx.reference]
        return [e for n in names if n in ctx.optional for e in ctx.missing(n)]


@register_rule
class TunedOptions(Rule):
    """The tuning database holds a winner for this workload, pipeline and machine (found by
    `irkit-bench tune` with a CI over the default): its option values are proposed for the
    kernels they shape."""

    name = "tuned-options"

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        entry = ctx.tuned
        if not entry or not entry.get("declared") or kernel is not ctx.program[0]:
            return []
        edits = []
        for label, value in (entry.get("choice") or {}).items():
            pass_name, _, option = label.partition(".")
            if option and ctx.has(pass_name):
                edits.append(Edit.set(pass_name, option, value))
        return edits


def _search_space(pass_name: str) -> dict[str, tuple[Any, ...]]:
    from irkit.passes import available_passes

    factory = available_passes().get(pass_name)
    return dict(getattr(factory(), "SEARCH_SPACE", {}) or {}) if factory else {}


def option_edits(
    ctx: Context, pass_name: str, explore: bool, only: Sequence[str] | None = None
) -> list[Edit]:
    """For a pass the pipeline runs: every option whose value differs from the reference
    pipeline's, back to it; with `explore`, every other value of the pass's declared search
    space (`SEARCH_SPACE`, shared with `tune`; `only`: of these options), one at a time."""
    if not ctx.has(pass_name):
        return []
    given, ref = ctx.options(pass_name), ctx.reference_options(pass_name)
    space = _search_space(pass_name)
    edits = [
        Edit.set(pass_name, option, ref.get(option))
        for option in sorted({*given, *ref})
        if given.get(option) != ref.get(option)
    ]
    if explore:
        for option, values in space.items():
            if only is not None and option not in only:
                continue
            for v in values:
                if str(v) != given.get(option):
                    edits.append(Edit.set(pass_name, option, v))
    return edits


# --- the CPU's -------------------------------------------------------------------------------


@register_rule
class MatmulRegisterTiles(Rule):
    """A matmul (or a convolution as one) whose loops load an operand for every multiply-add
    is bound by loads, not FMAs; register blocks (mr rows x nr vector columns of C held in
    registers) reuse each load mr or nr times, and packing streams the panels. Proposed for a
    contraction kernel: cpu-tile-matmul added; where it runs with options set, each back to
    the pass's default; and where the kernel is far under its roof, the pass's search space
    (`SEARCH_SPACE`) one option at a time."""

    name = "matmul-register-tiles"
    families = frozenset({"cpu"})

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        if kernel.kind not in ("contraction", "attention"):
            return []
        if not ctx.has("cpu-tile-matmul"):
            return ctx.missing("cpu-tile-matmul")
        return option_edits(ctx, "cpu-tile-matmul", kernel.below_roof(25), only=("mr", "nr"))


@register_rule
class VectorWidth(Rule):
    """A kernel whose widest vector is narrower than the machine's does fewer lanes of work
    per instruction than the machine can; a pass told a narrower width than the host's
    (`vector-bits`) is the usual cause. Proposed where the kernel's vectors are narrower
    than the host's: every pass with such a `vector-bits` back to its default (the host's)."""

    name = "vector-width"
    families = frozenset({"cpu"})

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        if not ctx.vector_bits or kernel.vector_bits >= ctx.vector_bits:
            return []
        edits = []
        for pass_name, params in spec_items(ctx.pipeline):
            value = params.get("vector-bits")
            if value and value.isdigit() and 0 < int(value) < ctx.vector_bits:
                edits.append(Edit.set(pass_name, "vector-bits", None))
        return edits


@register_rule
class VectorMath(Rule):
    """A transcendental (exp, tanh, erf) left to libm is a scalar call per element, which
    also keeps its loop from vectorizing; expanded into polynomial arithmetic it vectorizes
    with the rest. Proposed for a kernel whose IR still calls them: expand-math."""

    name = "vector-math"
    families = frozenset({"cpu"})

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        return ctx.missing("expand-math") if "scalar-math" in kernel.features else []


@register_rule
class RowPhases(Rule):
    """Softmax and normalisations read each row several times (a max, a sum, a scale); run
    row by row, every phase after the first reads the row from L1 instead of memory.
    Proposed for a reduction kernel: cpu-fuse-rows, and its reductions vectorized
    (reassociate-reductions) and column sums turned into row updates (interchange-reductions)."""

    name = "row-phases"
    families = frozenset({"cpu"})

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        if kernel.kind not in ("reduction", "attention"):
            return []
        return [
            *ctx.missing("cpu-fuse-rows"),
            *ctx.missing("reassociate-reductions"),
            *ctx.missing("interchange-reductions"),
        ]


@register_rule
class AllCores(Rule):
    """A kernel that runs on one core where the machine has several leaves their FMA units
    and bandwidth idle; its outer loop split across threads divides its time, once its work
    pays for the threads' start (a few microseconds on irkit's pool). Proposed for a
    single-threaded kernel of at least 20 us (50 us missed resnet's at small sizes):
    cpu-parallelize, or its thread count back to the default (all cores)."""

    name = "all-cores"
    families = frozenset({"cpu"})

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        if ctx.cores < 2 or kernel.threads > 1 or kernel.seconds < 20e-6:
            return []
        if not ctx.has("cpu-parallelize"):
            return ctx.missing("cpu-parallelize")
        if ctx.option("cpu-parallelize", "threads") not in (None, "0"):
            return [Edit.set("cpu-parallelize", "threads", None)]
        if ctx.option("cpu-parallelize", "min-work") is not None:
            return [Edit.set("cpu-parallelize", "min-work", None)]
        return []


@register_rule
class TransposeTiles(Rule):
    """A transpose reads along rows and writes along columns: one of the two strides a
    cache line per element. Transposed in register blocks (vectors shuffled in registers)
    both sides move whole lines. Proposed for a transpose kernel: cpu-tile-transpose, and its
    search space where the kernel is far under its roof."""

    name = "transpose-tiles"
    families = frozenset({"cpu"})

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        if kernel.kind not in ("transpose", "movement") and "transpose" not in kernel.name:
            return []
        if not ctx.has("cpu-tile-transpose"):
            return ctx.missing("cpu-tile-transpose")
        return option_edits(ctx, "cpu-tile-transpose", False)


@register_rule
class AttentionFusion(Rule):
    """Attention written as a batched matmul, a softmax and a batched matmul writes its S x S
    scores to memory and reads them back twice; fused with an online softmax the scores
    live in register tiles. Proposed where the program has a softmax (or its max and exp
    kernels) beside matmul kernels: the backend's attention pass."""

    name = "attention-fusion"

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        names = [k.name for k in ctx.program]
        softmax = any(w in n for n in names for w in ("softmax", "reduce_max", "_exp"))
        if not softmax or sum("matmul" in n for n in names) < 2:
            return []
        if kernel.kind not in ("reduction", "contraction"):
            return []
        pass_name = "cpu-fuse-attention" if ctx.family == "cpu" else "gpu-fuse-attention"
        return ctx.missing(pass_name)


@register_rule
class LoopIndexing(Rule):
    """A flattened index taken apart with division and remainder in the innermost loop costs
    a division per element and hides the access pattern from LLVM's vectorizer; loops
    delinearized over the tensor's dimensions, and indices simplified, give it unit strides.
    Proposed for a kernel whose IR divides indices: delinearize-loops, simplify-indices."""

    name = "loop-indexing"
    families = frozenset({"cpu"})

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        if "index-division" not in kernel.features and kernel.kind != "movement":
            return []
        return [*ctx.missing("delinearize-loops"), *ctx.missing("simplify-indices")]


@register_rule
class WindowUnroll(Rule):
    """A convolution or pooling window of a few taps, as a loop, pays loop overhead and
    keeps its taps out of one vector expression; unrolled over channels-last data, each tap
    is a vector op. Proposed for window kernels (pooling, convolution): unroll-windows."""

    name = "window-unroll"
    families = frozenset({"cpu"})

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        if not any(w in kernel.name for w in ("pool", "conv", "im2col")):
            return []
        return ctx.missing("unroll-windows")


@register_rule
class SharedArena(Rule):
    """Intermediates each in their own allocation spread the program's working set over more
    memory than it needs at once; laid out in one arena, buffers whose lives do not overlap
    share bytes that are still in cache. Proposed once for a program of several kernels:
    share-buffers."""

    name = "shared-arena"
    families = frozenset({"cpu"})

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        if len(ctx.program) < 3 or kernel is not ctx.program[0]:
            return []
        return ctx.missing("share-buffers")


# --- the GPU's -------------------------------------------------------------------------------


@register_rule
class GpuMatmulTiles(Rule):
    """A matmul mapped one thread per output reads each operand from global memory for
    every multiply-add; block tiles staged through shared memory, each thread computing a
    register tile, reuse every load many times. Proposed for a contraction kernel:
    gpu-tile-matmul; where it runs with options set, each back to the default; with spills
    or under a quarter of the SM's warps resident (registers or shared memory exhausted),
    smaller thread tiles; with under one wave of blocks, split-K."""

    name = "gpu-matmul-tiles"
    families = frozenset({"gpu"})

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        if kernel.kind not in ("contraction", "attention"):
            return []
        if not ctx.has("gpu-tile-matmul"):
            return ctx.missing("gpu-tile-matmul")
        edits = option_edits(ctx, "gpu-tile-matmul", False)
        gpu = kernel.gpu or {}
        if gpu.get("spills", 0) > 0 or gpu.get("occupancy_pct", 100) < 25:
            edits += [
                Edit.set("gpu-tile-matmul", "thread-m", 4),
                Edit.set("gpu-tile-matmul", "thread-n", 4),
            ]
        if gpu.get("waves", 1) < 1:
            edits.append(Edit.set("gpu-tile-matmul", "split-k", 1))
        return edits


@register_rule
class HopperMatmul(Rule):
    """f16 and bf16 matmuls on mma.sync top out near two thirds of a Hopper's tensor-core
    peak; the published steps past that point each took a share of the rest: wgmma reading
    both operands from shared memory through descriptors, its tiles filled by TMA on
    mbarriers (one thread issues a stage), a producer warpgroup handing stages to consumers
    by mbarriers with setmaxnreg, a persistent grid, and a grouped tile order for L2 reuse;
    then, where C has at least two 256-wide tile columns, 128 x 256 tiles (on an H200,
    2026-11-29: 4096^3 f16 from 0.747x to 0.843x cuBLAS, docs/results.md).
    Proposed for an f16/bf16 contraction kernel under gpu-tile-matmul: the first of those
    steps its pipeline has not taken, one at a time, so each is timed against the one
    before (sm_90a only: a device without it refuses the edit when compiling it)."""

    name = "hopper-matmul"
    families = frozenset({"gpu"})
    LADDER: ClassVar[tuple[tuple[str, Any, tuple[str, ...]], ...]] = (
        ("wgmma", True, ("true",)),
        ("tma", True, ("true",)),
        ("warp-specialize", True, ("true",)),
        ("persistent", True, ("true",)),
        ("group-m", 8, tuple(str(g) for g in range(2, 65))),
    )
    """Each step: the option, the value proposed, and the values that mean it is taken."""
    WIDE_N: ClassVar[int] = 256
    """The tile width proposed last (wgmma n256: 128 accumulators a consumer thread)."""

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        if kernel.kind != "contraction" or not ctx.has("gpu-tile-matmul"):
            return []
        if not re.search(r"x(b?f16)>", kernel.ir):  # a half-precision operand
            return []
        for option, value, taken in self.LADDER:
            if ctx.option("gpu-tile-matmul", option) not in taken:
                return [Edit.set("gpu-tile-matmul", option, value)]
        output = re.search(r"memref<(?:\d+x)*(\d+)xb?f16> \{irkit\.output", kernel.ir)
        wide = output is not None and int(output.group(1)) >= 2 * self.WIDE_N
        if wide and ctx.option("gpu-tile-matmul", "block-n") != str(self.WIDE_N):
            return [Edit.set("gpu-tile-matmul", "block-n", self.WIDE_N)]
        return []


@register_rule
class GpuCoarsening(Rule):
    """An elementwise kernel of one point per thread spends its threads' lives on index
    arithmetic and launch; several points per thread, in wide loads, amortize both.
    Proposed for large elementwise kernels: gpu-coarsen, or its factor back to the default."""

    name = "gpu-coarsening"
    families = frozenset({"gpu"})

    def propose(self, kernel: KernelEvidence, ctx: Context) -> list[Edit]:
        if kernel.kind not in ("elementwise", "movement"):
            return []
        if not ctx.has("gpu-coarsen"):
            return ctx.missing("gpu-coarsen")
        return option_edits(ctx, "gpu-coarsen", False)
