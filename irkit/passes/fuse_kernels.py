"""fuse-kernels: partition a graph function's ops into `graph.kernel` regions.

Without fusion every graph op is a kernel of its own and every intermediate tensor makes
a round trip through memory. This pass groups ops so that the lowering computes each
group in one kernel, keeping intermediates in registers (or small scratch buffers):

- **elementwise** chains, broadcast operands and data movement (transpose, reshape, slice,
  concat) included: `sigmoid(x * w + b)` becomes one loop nest;
- **reductions** with their elementwise producers and consumers: softmax, layer_norm,
  and mean/variance written out of primitives each become one kernel;
- **epilogues** into a contraction (matmul, batch_matmul, conv2d): bias, activation,
  residual add and scaling are applied to the contraction's result before it is stored;
- **implicit im2col into its matmul**: an im2col marked `irkit.implicit`
  (`conv-to-matmul{implicit=true}`) joins the matmul reading it, which the lowering then
  reads in place from the convolution's input (no im2col matrix);
- **a cache concat into its attention**: keys or values concatenated along the positions
  (a decode step's cache and its new position) that only a fused attention reads join
  its kernel alone, which reads the parts in place (`emit_decode`) instead of a copy;
- **views into a pool**: the reshape, transpose or slice feeding a pooling op, which then
  reads its input through the view (conv_block: the matmul's [pixels, channels] result
  pooled as NHWC with no reshaped copy). Not what follows a pool: computed in the order
  of a transposed result, a pool's window reads stride across channels (conv_block's
  pool fused with the transpose back to NCHW took 62 us, against 5 + 9 us apart).

Grouping is greedy over the dataflow graph (a networkx DiGraph of groups), visiting ops
in program order and merging each op with the groups of its producers when the pair is
allowed by the options above. A merge is refused when it would create a cycle between
groups (some path leaves the pair and comes back: the merged group would not be convex),
when some dataflow edge between the two groups is not an allowed one (so a contraction
never takes an elementwise producer in through another edge), when a group would hold two contractions, or a contraction and a reduction, or exceed
`max-group-size` ops. Ops are then reordered by a topological sort of the group graph
(stable with respect to the original order) and each group of two or more ops becomes a
`graph.kernel` yielding the values used outside it. Producers used both inside and
outside a group are not recomputed: their value becomes one more output of the kernel.

Optional and semantics-preserving: the lowering computes the same values with or without
it (tested on every example against the reference). Options:

    elementwise=true     fuse elementwise and data-movement ops with each other
    reductions=true      fuse reductions with elementwise producers and consumers
    epilogues=true       fuse elementwise consumers into matmul/conv2d
    movement-epilogues=false
                         let a contraction's kernel hold reshape/transpose/slice ops
                         applied to its result (those preparing an epilogue operand, such
                         as a reshaped bias, are always allowed), and any kernel a reshape
                         of its result (off: a reshape joins only the kernel reading it;
                         one more output of its producer's kernel, it was a copy of the
                         same bytes, where alone it is a view).
                         Off by default: it buys no memory traffic (the contraction still
                         writes each element once) and changes the contraction's loop nest
                         to the moved tensor's domain, which the tiling passes
                         (cpu-tile-matmul, gpu-tile-matmul) do not match; measured on
                         transformer_block, such fusion cost 5.4 ms of 33 ms on the CPU.
    implicit-im2col=true put an implicit im2col in its matmul's kernel (off: the im2col
                         matrix is written by a kernel of its own)
    concat-transposes=true
                         fuse a transpose that moves the innermost axis into a concat
                         reading it. `default-cpu` turns it off: `cpu-tile-transpose` runs
                         such a transpose alone in register blocks, and the concat then
                         copies contiguous rows (conv_block's padded NHWC input, the
                         implicit GEMM's: 30 us fused, one strided load per element,
                         against 5 + 3 us apart on one znver4 core)
    max-group-size=64    the most graph ops one kernel may hold
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

import networkx as nx
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.traits import IsTerminator

from irkit.dialects import graph as g
from irkit.errors import require
from irkit.ir import shape_of
from irkit.passes.emit_attention import FUSED_ATTR


class Kind(Enum):
    ELEMENTWISE = "elementwise"
    MOVEMENT = "movement"
    REDUCTION = "reduction"
    CONTRACTION = "contraction"
    POOL = "pool"
    GATHER = "gather"  # an implicit im2col: its matmul reads it in place
    ATTENTION = "attention"  # fused (cpu-fuse-attention): reads a K/V concat in place
    OPAQUE = "opaque"  # existing kernels, constants, anything unknown: never fused


_KINDS: tuple[tuple[type[Operation] | tuple[type[Operation], ...], Kind], ...] = (
    ((g.BinaryOp, g.UnaryOp, g.CastOp, g.BatchNormOp), Kind.ELEMENTWISE),
    ((g.TransposeOp, g.ReshapeOp, g.SliceOp, g.ConcatOp), Kind.MOVEMENT),
    ((g.ReduceOp, g.SoftmaxOp, g.LayerNormOp, g.GlobalAvgPoolOp), Kind.REDUCTION),
    ((g.MatmulOp, g.BatchMatmulOp, g.ScaledMatmulOp, g.Conv2dOp), Kind.CONTRACTION),
    ((g.Pool2dOp,), Kind.POOL),
)


def kind_of(op: Operation) -> Kind:
    """How fusion treats an op (by its class: `_KIND_OF` remembers each; an im2col by its
    `irkit.implicit` mark too, an attention by its fused mark)."""
    if isinstance(op, g.Im2colOp) and g.IMPLICIT_ATTR in op.attributes:
        return Kind.GATHER
    if isinstance(op, g.AttentionOp):
        return Kind.ATTENTION if FUSED_ATTR in op.attributes else Kind.OPAQUE
    kind = _KIND_OF.get(type(op))
    if kind is None:
        kind = next((k for classes, k in _KINDS if isinstance(op, classes)), Kind.OPAQUE)
        _KIND_OF[type(op)] = kind
    return kind


_KIND_OF: dict[type[Operation], Kind] = {}


@dataclass(frozen=True)
class FuseKernelsPass(ModulePass):
    """Group graph ops into graph.kernel regions (see the module docstring)."""

    name = "fuse-kernels"
    is_optimization = True

    elementwise: bool = True
    reductions: bool = True
    epilogues: bool = True
    movement_epilogues: bool = False
    implicit_im2col: bool = True
    concat_transposes: bool = True
    max_group_size: int = 64

    def check_options(self) -> None:
        require(
            self.max_group_size >= 1, "max-group-size", self.max_group_size, "must be at least 1"
        )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in op.ops:
            if isinstance(fn, func.FuncOp) and not fn.is_declaration:
                _Fuser(self).run(fn.body.block)

    def allows(self, producer: Kind, consumer: Kind) -> bool:
        """Whether an edge producer -> consumer may lie inside one kernel."""
        simple = {Kind.ELEMENTWISE, Kind.MOVEMENT}
        if producer in simple and consumer in simple:
            return self.elementwise
        if producer is Kind.REDUCTION and consumer in simple | {Kind.REDUCTION}:
            return self.reductions
        if producer in simple and consumer is Kind.REDUCTION:
            return self.reductions
        if producer is Kind.CONTRACTION and consumer is Kind.ELEMENTWISE:
            return self.epilogues
        if producer is Kind.CONTRACTION and consumer is Kind.MOVEMENT:
            return self.epilogues and self.movement_epilogues
        if producer is Kind.MOVEMENT and consumer is Kind.POOL:
            return self.elementwise
        if producer is Kind.GATHER and consumer is Kind.CONTRACTION:
            return self.implicit_im2col
        if producer is Kind.MOVEMENT and consumer is Kind.ATTENTION:
            return self.elementwise  # `_edge_allowed`: a concat of keys or values only
        return False


def _moves_a_result(ops: list[Operation]) -> bool:
    """Whether a reshape/transpose/slice in `ops` consumes, directly or through other ops of
    `ops`, the result of the contraction among them (a movement op preparing an epilogue
    operand, such as a bias reshape, does not)."""
    group = set(ops)
    stack = [o for o in ops if kind_of(o) is Kind.CONTRACTION]
    seen: set[Operation] = set()
    while stack:
        for result in stack.pop().results:
            for use in result.uses:
                user = use.operation
                if user in group and user not in seen:
                    if kind_of(user) is Kind.MOVEMENT:
                        return True
                    seen.add(user)
                    stack.append(user)
    return False


class _Fuser:
    """The grouping of one block: a DiGraph whose nodes are groups (frozen op lists)."""

    def __init__(self, options: FuseKernelsPass):
        self.options = options
        self.group_of: dict[Operation, int] = {}
        self.members: dict[int, list[Operation]] = {}
        self.dag = nx.DiGraph()

    def run(self, block: Block) -> None:
        ops = [o for o in block.ops if not o.has_trait(IsTerminator)]
        self.position = position = {o: i for i, o in enumerate(ops)}
        # nothing moves until the groups are placed: each op's producers found once
        self.producers = {o: _producers(o, position) for o in ops}
        self.consumers: dict[Operation, list[Operation]] = {o: [] for o in ops}
        for o in ops:
            for p in self.producers[o]:
                self.consumers[p].append(o)
        self.kinds = {i: Counter([kind_of(o)]) for i, o in enumerate(ops)}  # per group
        for i, o in enumerate(ops):
            self.group_of[o] = i
            self.members[i] = [o]
            self.dag.add_node(i)
            for producer in self.producers[o]:
                self.dag.add_edge(self.group_of[producer], i)
        for o in ops:
            # a reshape joins the kernel of what reads it (read through it, no copy), not
            # that of what it reads (unless movement-epilogues): there it would be one more
            # output, the same bytes copied into a buffer of another shape, where standing
            # alone it is a view (reshape-views)
            if kind_of(o) is Kind.OPAQUE or (
                isinstance(o, g.ReshapeOp) and not self.options.movement_epilogues
            ):
                continue
            # a concat of keys or values that only attention reads joins the attention's
            # kernel alone (read in place from its parts: a decode step's cache and new
            # position), not its producers' (there the cache would be copied each step)
            if _cache_concat(o) and all(kind_of(c) is Kind.ATTENTION for c in self.consumers[o]):
                continue
            # producers in program order, not operand order: mul(silu(gate), up) and
            # mul(up, silu(gate)) fuse alike (each matmul could take the product)
            for producer in sorted(self.producers[o], key=position.__getitem__):
                if kind_of(producer) is not Kind.OPAQUE and self._edge_allowed(producer, o):
                    self._try_merge(self.group_of[producer], self.group_of[o])
        order = nx.lexicographical_topological_sort(
            self.dag, key=lambda n: position[self.members[n][0]]
        )
        terminator = block.last_op
        for node in order:
            group = sorted(self.members[node], key=position.__getitem__)
            for o in group:
                o.detach()
            placed = group[0] if len(group) == 1 else _make_kernel(group)
            if terminator is None:
                block.add_op(placed)
            else:
                block.insert_op_before(placed, terminator)

    def _try_merge(self, a: int, b: int) -> None:
        if a == b:
            return
        if len(self.members[a]) + len(self.members[b]) > self.options.max_group_size:
            return
        kinds = self.kinds[a] + self.kinds[b]
        contractions = kinds[Kind.CONTRACTION]
        if contractions > 1 or (contractions and kinds[Kind.REDUCTION]):
            return
        if kinds[Kind.ATTENTION] and set(kinds) - {Kind.ATTENTION, Kind.MOVEMENT}:
            return
        ops = self.members[a] + self.members[b]
        if contractions and not self.options.movement_epilogues and _moves_a_result(ops):
            return
        if not (self._edges_allowed(a, b) and self._edges_allowed(b, a)):
            return
        # a path a -> x -> b would become a cycle through the merged group; the other way,
        # b -> x -> a, is impossible while a -> b is an edge (the DAG has no cycle)
        if self._creates_cycle(a, b) or (not self.dag.has_edge(a, b) and self._creates_cycle(b, a)):
            return
        self.dag = nx.contracted_nodes(self.dag, a, b, self_loops=False, copy=False)
        for o in self.members.pop(b):
            self.group_of[o] = a
        self.members[a] = ops
        self.kinds[a] = kinds
        del self.kinds[b]

    def _edges_allowed(self, a: int, b: int) -> bool:
        """Whether every dataflow edge from group a into group b may lie inside a kernel
        (so a matmul never takes an elementwise producer in through a side door). The edges
        are found from the smaller group's side: a chain adds one op at a time to a group
        of up to 64."""
        group = self.group_of
        if len(self.members[a]) < len(self.members[b]):
            edges = ((p, o) for p in self.members[a] for o in self.consumers[p] if group[o] == b)
        else:
            edges = ((p, o) for o in self.members[b] for p in self.producers[o] if group[p] == a)
        return all(self._edge_allowed(p, o) for p, o in edges)

    def _edge_allowed(self, producer: Operation, consumer: Operation) -> bool:
        """Whether the dataflow edge producer -> consumer may lie inside a kernel."""
        if not self.options.allows(kind_of(producer), kind_of(consumer)):
            return False
        if kind_of(consumer) is Kind.ATTENTION:
            return _cache_concat(producer)
        return self.options.concat_transposes or not (
            isinstance(consumer, g.ConcatOp) and _moves_innermost(producer)
        )

    def _creates_cycle(self, a: int, b: int) -> bool:
        """Whether a path a -> x -> ... -> b exists through some other group x."""
        return any(s != b and nx.has_path(self.dag, s, b) for s in self.dag.successors(a))


def _cache_concat(op: Operation) -> bool:
    """Whether `op` concatenates rank-4 keys or values along their positions (axis 2):
    attention's cache and the new positions."""
    if not isinstance(op, g.ConcatOp) or len(shape_of(op.results[0])) != 4:
        return False
    return g.int_of(op.properties, "axis") % 4 == 2 and all(
        isinstance(use.operation, g.AttentionOp) and use.index in (1, 2)
        for use in op.results[0].uses
    )


def _moves_innermost(op: Operation) -> bool:
    """Whether `op` is a transpose whose result's innermost axis is not its input's."""
    if not isinstance(op, g.TransposeOp):
        return False
    perm = g.ints(op.properties, "perm")
    return perm[-1] != len(perm) - 1


def _producers(op: Operation, position: dict[Operation, int]) -> Iterable[Operation]:
    """The ops of the same block whose results `op` (or an op nested in it) reads."""
    seen: list[Operation] = []
    for nested in op.walk():
        for operand in nested.operands:
            owner = operand.owner
            if isinstance(owner, Operation) and owner in position and owner not in seen:
                if owner is not op:
                    seen.append(owner)
    return seen


def _make_kernel(group: list[Operation]) -> g.KernelOp:
    """Move `group` (detached, in dataflow order) into a graph.kernel; rewire outside uses."""
    inside = set(group)
    escaping: list[SSAValue] = [
        r for o in group for r in o.results if any(u.operation not in inside for u in r.uses)
    ]
    block = Block()
    for o in group:
        block.add_op(o)
    terminator = g.YieldOp.create(operands=escaping)
    block.add_op(terminator)
    kernel = g.KernelOp(result_types=[[v.type for v in escaping]], regions=[Region(block)])
    for value, result in zip(escaping, kernel.results, strict=True):
        for use in list(value.uses):
            if use.operation not in inside and use.operation is not terminator:
                use.operation.operands[use.index] = result
    return kernel
