"""The graph dialect: tensor-level model operations on builtin tensor types.

Every op has tensor operands and exactly one tensor result, value semantics, and no side
effects. The result type is a function of the operand types and the properties: one
classmethod, `infer`, computes it; the builder (`create_inferred`) uses it to build and the
verifier uses it to check. Floating-point element types only (f16, bf16, f32, f64); all
operands of an op share one element type (except `graph.cast`).

Axes may be written negative (counted from the end, as in numpy); helper accessors return
them normalized.
"""

from __future__ import annotations

from xdsl.ir import Dialect

from irkit.dialects.graph.base import (
    FLOAT_TYPES,
    GraphOp,
    Props,
    bool_of,
    element_type_of,
    float_of,
    int_array,
    int_of,
    ints,
    tensor,
)
from irkit.dialects.graph.contractions import (
    IMPLICIT_ATTR,
    AvgPool2dOp,
    BatchMatmulOp,
    Conv2dOp,
    GlobalAvgPoolOp,
    Im2colOp,
    MatmulOp,
    MaxPool2dOp,
    Pool2dOp,
    conv_layout,
    layout_of,
    pool_layout,
    window_output,
)
from irkit.dialects.graph.elementwise import (
    AbsOp,
    AddOp,
    BinaryOp,
    CastOp,
    DivOp,
    ErfOp,
    ExpOp,
    GeluOp,
    LeakyReluOp,
    LogOp,
    MaxOp,
    MinOp,
    MulOp,
    NegOp,
    PowOp,
    ReluOp,
    RsqrtOp,
    SigmoidOp,
    SqrtOp,
    SubOp,
    TanhOp,
    UnaryOp,
)
from irkit.dialects.graph.layout import (
    ConcatOp,
    ConstantOp,
    ReshapeOp,
    SliceOp,
    TransposeOp,
)
from irkit.dialects.graph.reductions import (
    BatchNormOp,
    LayerNormOp,
    ReduceMaxOp,
    ReduceMeanOp,
    ReduceOp,
    ReduceSumOp,
    SoftmaxOp,
)
from irkit.dialects.graph.regions import (
    KernelOp,
    YieldOp,
)

Graph = Dialect(
    "graph",
    [
        MatmulOp, BatchMatmulOp, Conv2dOp, Im2colOp,
        AddOp, SubOp, MulOp, DivOp, MaxOp, MinOp, PowOp,
        NegOp, AbsOp, ReluOp, LeakyReluOp, GeluOp, SigmoidOp, TanhOp, ExpOp, LogOp, SqrtOp,
        RsqrtOp, ErfOp, CastOp,
        ReduceSumOp, ReduceMaxOp, ReduceMeanOp, SoftmaxOp, LayerNormOp, BatchNormOp,
        MaxPool2dOp, AvgPool2dOp, GlobalAvgPoolOp,
        TransposeOp, ReshapeOp, ConcatOp, SliceOp, ConstantOp,
        KernelOp, YieldOp,
    ],
    [],
)  # fmt: skip

__all__ = [
    "AbsOp",
    "AddOp",
    "AvgPool2dOp",
    "BatchMatmulOp",
    "BatchNormOp",
    "BinaryOp",
    "CastOp",
    "ConcatOp",
    "ConstantOp",
    "Conv2dOp",
    "DivOp",
    "ErfOp",
    "ExpOp",
    "FLOAT_TYPES",
    "GeluOp",
    "GlobalAvgPoolOp",
    "Graph",
    "GraphOp",
    "IMPLICIT_ATTR",
    "Im2colOp",
    "KernelOp",
    "LayerNormOp",
    "LeakyReluOp",
    "LogOp",
    "MatmulOp",
    "MaxOp",
    "MaxPool2dOp",
    "MinOp",
    "MulOp",
    "NegOp",
    "Pool2dOp",
    "PowOp",
    "Props",
    "ReduceMaxOp",
    "ReduceMeanOp",
    "ReduceOp",
    "ReduceSumOp",
    "ReluOp",
    "ReshapeOp",
    "RsqrtOp",
    "SigmoidOp",
    "SliceOp",
    "SoftmaxOp",
    "SqrtOp",
    "SubOp",
    "TanhOp",
    "TransposeOp",
    "UnaryOp",
    "YieldOp",
    "bool_of",
    "conv_layout",
    "element_type_of",
    "float_of",
    "int_array",
    "int_of",
    "ints",
    "layout_of",
    "pool_layout",
    "tensor",
    "window_output",
]
