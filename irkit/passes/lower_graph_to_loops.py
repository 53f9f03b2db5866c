"""lower-graph-to-loops: graph functions become kernel functions over buffers, and a driver.

Each kernel (a `graph.kernel` region, or any graph op outside one) becomes a private
`func.func` over memrefs: its inputs, then its outputs, then the scratch buffers it needs
(see `kernel_emitter` for what is computed inline and what is stored). Its body is
`scf.parallel` nests over `memref.load`/`memref.store` with arith and math scalars.

The graph function becomes the driver, a public `func.func` of the same name over memrefs:
the model's inputs, then one buffer per output (destination-passing; each output argument
carries `irkit.output = "<name>"`). It allocates intermediates with `memref.alloc`, calls
the kernels in order, frees each buffer after its last use, and copies outputs that no
kernel writes directly (an input or a constant returned as is).

Composite ops are decomposed inside their kernel first (`decompose-composites`), so softmax
or layer_norm stays one kernel. Constants are copied into the kernels that read them: splats
become scalar constants, other values `memref.global`s.

Preconditions: static shapes (the graph dialect guarantees them). A required lowering, not
an optimization.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriteWalker
from xdsl.rewriter import Rewriter

from irkit.dialects import graph as g
from irkit.dtypes import dense_array, dense_attr
from irkit.errors import IrkitError
from irkit.ir import location_of, ssa_name
from irkit.loops import (
    INDEX_EXTENT_ATTR,
    KERNEL_ATTR,
    LAUNCH_ATTR,
    ONCE_ATTR,
    OUTPUT_ATTR,
    PARAM_ATTR,
    RESHAPE_ATTR,
    SCRATCH_ATTR,
)
from irkit.passes.decompose_composites import DecomposeAttentionPattern, decompose
from irkit.passes.emit_attention import FUSED_ATTR
from irkit.passes.kernel_emitter import KernelEmitter
from irkit.passes.loop_builder import LoopBuilder, compute_type, free_after_last_use
from irkit.passes.map_to_gpu import launch_attr
from irkit.passes.materialize import materialized_values


def memref_of(value: SSAValue, element_type: Attribute | None = None) -> MemRefType:
    t = value.type
    assert isinstance(t, TensorType)
    return MemRefType(element_type or t.element_type, t.get_shape())


@dataclass
class Kernel:
    """One kernel being lowered: its (cloned, decomposed) ops and its interface."""

    name: str
    region: g.KernelOp  # detached; holds the cloned ops
    inputs: list[SSAValue] = field(default_factory=list)  # values of the graph function
    outputs: list[SSAValue] = field(default_factory=list)  # values of the graph function

    @property
    def ops(self) -> list[Operation]:
        return [op for op in self.region.body.block.ops if not isinstance(op, g.YieldOp)]

    @property
    def inner_outputs(self) -> list[SSAValue]:
        last = self.region.body.block.last_op
        assert isinstance(last, g.YieldOp)
        return list(last.values)


def _kernel_groups(fn: func.FuncOp) -> list[tuple[list[Operation], list[SSAValue], list[SSAValue]]]:
    """(ops, values yielded inside, results outside) per kernel of `fn`, in program order."""
    groups: list[tuple[list[Operation], list[SSAValue], list[SSAValue]]] = []
    for op in fn.body.block.ops:
        if isinstance(op, g.ConstantOp | func.ReturnOp):
            continue
        if isinstance(op, g.KernelOp):
            block = op.body.block
            ops = [o for o in block.ops if not isinstance(o, g.YieldOp)]
            assert isinstance(block.last_op, g.YieldOp)
            groups.append((ops, list(block.last_op.values), list(op.results)))
        elif isinstance(op, g.GraphOp):
            groups.append(([op], list(op.results), list(op.results)))
        else:
            where = location_of(op)
            raise IrkitError(f"lower-graph-to-loops cannot lower {op.name}", where)
    return groups


def _clone_kernel(
    index: int, ops: Sequence[Operation], yielded: Sequence[SSAValue], results: Sequence[SSAValue]
) -> Kernel:
    """A group's ops in a detached graph.kernel, with copies of the splat constants it reads.
    Other constants are inputs: the driver passes their globals in, so that a kernel is
    self-contained on every backend (a GPU kernel cannot name a host global).

    The ops of a fused group (inside a graph.kernel, whose results are what the rest of the
    function reads) are moved, not cloned: the graph function is replaced after lowering,
    and cloning them was a third of this pass on a 2000-op chain. An op standing alone is
    cloned, since decomposing it in place would rewire its users outside the group."""
    block = Block()
    mapping: dict[SSAValue, SSAValue] = {}
    inside = {op for op in ops if not _is_global(op)}
    move = any(isinstance(op.parent_op(), g.KernelOp) for op in ops)
    kernel = Kernel(
        _kernel_name(index, ops),
        g.KernelOp(result_types=[[r.type for r in results]], regions=[Region(block)]),
    )
    for op in ops:
        if op not in inside:
            continue
        for operand in op.operands:
            owner = operand.owner
            if operand in mapping or (isinstance(owner, Operation) and owner in inside):
                continue
            if isinstance(owner, g.ConstantOp) and not _is_global(owner):
                copy = owner.clone()
                block.add_op(copy)
                mapping[operand] = copy.results[0]
            elif operand not in kernel.inputs:
                kernel.inputs.append(operand)
        if move:
            for i, operand in enumerate(op.operands):
                if operand in mapping:
                    op.operands[i] = mapping[operand]
            op.detach()
            block.add_op(op)
        else:
            block.add_op(op.clone(value_mapper=mapping))
    block.add_op(g.YieldOp.create(operands=[mapping.get(v, v) for v in yielded]))
    kernel.outputs = list(results)
    decompose(kernel.region)
    return kernel


def _kernel_name(index: int, ops: Sequence[Operation]) -> str:
    names = [op.name.removeprefix("graph.") for op in ops if not isinstance(op, g.ConstantOp)]
    shown = names[:3] + (["etc"] if len(names) > 3 else [])
    return f"k{index}_" + "_".join(shown)


def _arg_name(value: SSAValue, fallback: str) -> str:
    hint = value.name_hint or fallback
    return re.sub(r"\W", "_", hint)


def _build_kernel_function(
    kernel: Kernel, module: ModuleOp, keep_transcendentals: bool = False
) -> func.FuncOp:
    ops, outs = kernel.ops, kernel.inner_outputs
    if any(o.owner not in set(ops) for o in outs):
        raise IrkitError(f"kernel {kernel.name} returns a value it does not compute")
    stored = materialized_values(ops, outs, keep_transcendentals)
    scratch = [v for v in stored if v not in outs]
    arg_types = (
        [memref_of(v) for v in kernel.inputs]
        + [memref_of(v) for v in outs]
        + [memref_of(v, compute_type(memref_of(v).element_type)) for v in scratch]
    )
    block = Block(arg_types=arg_types)
    values = [*kernel.inputs, *outs, *scratch]
    names = (
        [_arg_name(v, f"in{i}") for i, v in enumerate(kernel.inputs)]
        + [_arg_name(r, f"out{i}") for i, r in enumerate(kernel.outputs)]
        + [f"tmp{i}" for i in range(len(scratch))]
    )
    for arg, name in zip(block.args, names, strict=True):
        arg.name_hint = name
    buffers: dict[SSAValue, SSAValue] = dict(zip(values, block.args, strict=True))
    emitter = KernelEmitter(LoopBuilder(block), buffers, module, kernel.name)
    emitter.emit(stored)
    block.add_op(func.ReturnOp())
    roles = (
        [DictionaryAttr({})] * len(kernel.inputs)
        + [
            DictionaryAttr({OUTPUT_ATTR: StringAttr(n)})
            for n in names[len(kernel.inputs) : len(kernel.inputs) + len(outs)]
        ]
        + [DictionaryAttr({SCRATCH_ATTR: UnitAttr()})] * len(scratch)
    )
    fn = func.FuncOp(
        kernel.name,
        (arg_types, []),
        Region(block),
        visibility="private",
        arg_attrs=ArrayAttr(roles),
    )
    fn.attributes[KERNEL_ATTR] = UnitAttr()
    if emitter.launch is not None:  # GPU-mapped as emitted (a GPU-fused attention)
        grid, threads, flops = emitter.launch
        fn.attributes[LAUNCH_ATTR] = launch_attr(grid, threads, "attention", flops)
    if len(kernel.inputs) == len(outs) == 1 and all(isinstance(o, g.ReshapeOp) for o in ops):
        fn.attributes[RESHAPE_ATTR] = UnitAttr()  # a copy `reshape-views` may make a view
    return fn


def _is_global(op: Operation) -> bool:
    """Whether `op` is a constant kept in a `memref.global` (any with two distinct values)."""
    if not isinstance(op, g.ConstantOp):
        return False
    values = dense_array(op.value)
    return values.size > 1 and not bool(np.all(values == values[0]))


def _global_for(op: g.ConstantOp, module: ModuleOp) -> memref.GetGlobalOp:
    """A module-level `memref.global` holding the constant; returns the op reading it."""
    value = op.value
    assert isinstance(value, DenseIntOrFPElementsAttr)
    mtype = memref_of(op.results[0])
    name = f"cst{sum(isinstance(o, memref.GlobalOp) for o in module.ops)}"
    init = dense_attr(TensorType(mtype.element_type, mtype.get_shape()), dense_array(value))
    glob = memref.GlobalOp.get(StringAttr(name), mtype, init, constant=UnitAttr())
    first = module.body.block.first_op
    assert first is not None, "a module that has a constant has a function"
    module.body.block.insert_op_before(glob, first)
    return memref.GetGlobalOp(SymbolRefAttr(name), mtype)


# --- the driver ----------------------------------------------------------------------------


def _output_names(fn: func.FuncOp) -> list[str]:
    """Each output's name: its `irkit.name`, else the returned value's SSA name, else outN."""
    ret = fn.body.block.last_op
    assert isinstance(ret, func.ReturnOp)
    n = len(ret.operands)
    attrs = fn.res_attrs.data if fn.res_attrs else [DictionaryAttr({})] * n
    names = []
    for i, (d, v) in enumerate(zip(attrs, ret.operands, strict=True)):
        name = d.data.get("irkit.name")
        names.append(name.data if isinstance(name, StringAttr) else v.name_hint or f"out{i}")
    return names


def _build_driver(fn: func.FuncOp, kernels: list[tuple[Kernel, func.FuncOp]], module: ModuleOp):
    ret = fn.body.block.last_op
    assert isinstance(ret, func.ReturnOp)
    graph_args = list(fn.body.block.args)
    outputs = list(ret.operands)
    block = Block(arg_types=[memref_of(a) for a in graph_args] + [memref_of(v) for v in outputs])
    env: dict[SSAValue, SSAValue] = dict(zip(graph_args, block.args, strict=False))
    out_args = block.args[len(graph_args) :]
    hints: list[str | None] = [a.name_hint for a in graph_args]
    hints.extend(_output_names(fn))
    for arg, name in zip(block.args, hints, strict=True):
        arg.name_hint = ssa_name(name) if name else None  # an output named by its ONNX name
    for v, arg in zip(outputs, out_args, strict=True):
        if (
            v not in env
            and isinstance(v.owner, Operation)
            and not isinstance(v.owner, g.ConstantOp)
        ):
            env[v] = arg  # the kernel writes the output buffer directly
    allocated = []
    # weight-only values: params, constants, and what kernels compute from those alone
    weights: set[SSAValue] = {
        a for a, d in zip(graph_args, _arg_attrs(fn), strict=True) if PARAM_ATTR in d.data
    }
    for kernel, kfn in kernels:
        if all(v in weights or isinstance(v.owner, g.ConstantOp) for v in kernel.inputs) and all(
            env.get(v) not in out_args for v in kernel.outputs
        ):  # a weight's layout (conv_block's transposed filter): once per bind, not per call
            kfn.attributes[ONCE_ATTR] = UnitAttr()
            weights.update(kernel.outputs)
        for v in kernel.outputs:
            if v not in env:
                env[v] = _append(block, _alloc(memref_of(v)))
                env[v].name_hint = v.name_hint
                allocated.append(v)
        for v in kernel.inputs:
            if v not in env:  # a constant: its global, read once for every kernel using it
                env[v] = _append(block, _global_for(v.owner, module))  # type: ignore[arg-type]
        scratch = kfn.function_type.inputs.data[len(kernel.inputs) + len(kernel.outputs) :]
        temps = [_append(block, _alloc(t)) for t in scratch]
        args = [env[v] for v in kernel.inputs] + [env[v] for v in kernel.outputs] + temps
        block.add_op(func.CallOp(kfn.sym_name.data, args, []))
        for t in temps:
            block.add_op(memref.DeallocOp.get(t))
    for v, arg in zip(outputs, out_args, strict=True):
        if env.get(v) is not arg:
            source = env.get(v) or _append(block, _global_for(v.owner, module))  # type: ignore[arg-type]
            block.add_op(memref.CopyOp(source, arg))
    for v in allocated:
        block.add_op(memref.DeallocOp.get(env[v]))
    block.add_op(func.ReturnOp())
    for v in allocated:
        free_after_last_use(block, env[v])
    return _driver_function(fn, block, _index_attrs(fn))


def _arg_attrs(fn: func.FuncOp) -> list[DictionaryAttr]:
    n = len(fn.body.block.args)
    return list(fn.arg_attrs.data) if fn.arg_attrs else [DictionaryAttr({})] * n


def _alloc(t: Attribute) -> memref.AllocOp:
    assert isinstance(t, MemRefType), t
    return memref.AllocOp.get(t.element_type, alignment=64, shape=t.get_shape())


def _append(block: Block, op: Operation) -> SSAValue:
    block.add_op(op)
    return op.results[0]


def _index_attrs(fn: func.FuncOp) -> list[DictionaryAttr]:
    """The graph function's argument attributes, with the least gather extent of each
    argument that is (or becomes) gather indices."""
    out = []
    for arg, d in zip(fn.body.block.args, _arg_attrs(fn), strict=True):
        extents = g.index_extents(arg)
        if extents:
            d = DictionaryAttr({**d.data, INDEX_EXTENT_ATTR: IntegerAttr(min(extents), i64)})
        out.append(d)
    return out


def _driver_function(fn: func.FuncOp, block: Block, in_attrs: list[DictionaryAttr]) -> func.FuncOp:
    out_attrs = [DictionaryAttr({OUTPUT_ATTR: StringAttr(n)}) for n in _output_names(fn)]
    types = [a.type for a in block.args]
    driver = func.FuncOp(
        fn.sym_name.data, (types, []), Region(block), arg_attrs=ArrayAttr(in_attrs + out_attrs)
    )
    for key, value in fn.attributes.items():
        if key not in ("sym_name", "function_type", "arg_attrs", "res_attrs", "sym_visibility"):
            driver.attributes[key] = value
    return driver


def _decompose_attention(fn: func.FuncOp) -> None:
    """Attention left for the lowering (not marked by `cpu-fuse-attention`) becomes its
    primitives in the graph function, before kernels form: its causal mask is a constant
    the driver passes in, which a kernel cannot make for itself. Constants a decomposition
    leaves inside a fused kernel's region move out in front of it."""
    if not any(
        isinstance(op, g.AttentionOp) and FUSED_ATTR not in op.attributes for op in fn.walk()
    ):
        return
    PatternRewriteWalker(DecomposeAttentionPattern(), apply_recursively=False).rewrite_region(
        fn.body
    )
    block = fn.body.block
    for kernel in [op for op in block.ops if isinstance(op, g.KernelOp)]:
        for const in [o for o in kernel.body.block.ops if _is_global(o)]:
            const.detach()
            block.insert_op_before(const, kernel)


def lower_function(fn: func.FuncOp, module: ModuleOp, keep_transcendentals: bool = False) -> None:
    """Replace graph function `fn` in `module` by its kernel functions and its driver."""
    _decompose_attention(fn)
    kernels = []
    for i, (ops, yielded, results) in enumerate(_kernel_groups(fn)):
        kernel = _clone_kernel(i, ops, yielded, results)
        kernels.append((kernel, _build_kernel_function(kernel, module, keep_transcendentals)))
    driver = _build_driver(fn, kernels, module)
    for kernel, kfn in kernels:
        module.body.block.insert_op_before(kfn, fn)
        kernel.region.erase(safe_erase=False)  # its ops read the graph function's values
    Rewriter.replace_op(fn, driver)


def is_graph_function(op: Operation) -> bool:
    """A func.func over tensors, or one holding graph ops: what this pass lowers."""
    if not isinstance(op, func.FuncOp):
        return False
    types = [*op.function_type.inputs.data, *op.function_type.outputs.data]
    return any(isinstance(t, TensorType) for t in types) or any(
        isinstance(o, g.GraphOp) for o in op.walk()
    )


@dataclass(frozen=True)
class LowerGraphToLoopsPass(ModulePass):
    """Lower every graph function to kernel functions over memrefs plus a driver (see the
    module docstring). Required on every backend path; not an optimization."""

    name = "lower-graph-to-loops"

    keep_transcendentals: bool = False
    """Store a transcendental value (exp, tanh, erf, log, sigmoid, gelu) that two or more ops
    of its kernel read, instead of computing it again for each: softmax's exponentials, read
    by the row sum and by the output. A store and a load cost less than an `exp` on the CPU
    (`default-cpu` sets it); the GPU recomputes cheaply and keeps the default."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in [f for f in op.ops if is_graph_function(f)]:
            assert isinstance(fn, func.FuncOp)
            lower_function(fn, op, self.keep_transcendentals)
