"""Attention as one graph op: what `recognize-attention` makes of the matmul, scale, mask,
softmax, matmul that exporters write, and what a fused attention pass lowers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    BoolAttr,
    Float64Type,
    FloatAttr,
    TensorType,
)
from xdsl.ir import Attribute
from xdsl.irdl import irdl_op_definition, prop_def, result_def, var_operand_def
from xdsl.utils.exceptions import VerifyException

from irkit.dialects import shapes
from irkit.dialects.graph.base import BOOL, FLOAT, GraphOp, Props, kind_of, require_kind, tensor
from irkit.dialects.shapes import ShapeError


@irdl_op_definition
class AttentionOp(GraphOp):
    """Scaled dot-product attention over heads, grouped-query attention included:

        s[b, h, i, j] = scale * sum_d q[b, h, i, d] * k[b, h // g, j, d]  (+ mask[b, h, i, j])
        p[b, h, i, :] = softmax_j(s[b, h, i, :])
        out[b, h, i, e] = sum_j p[b, h, i, j] * v[b, h // g, j, e]

    q is [B, H, Sq, D], k [B, Hk, Sk, D], v [B, Hk, Sk, Dv]; H a multiple of Hk, and
    g = H / Hk query heads share each key/value head (1: multi-head attention; H: multi-query).
    A fourth operand, `mask`, broadcasts to [B, H, Sq, Sk]: float (the queries' type) is
    added to the scores; boolean (i1) keeps a score where true and masks it (-inf) where
    false. `causal` masks key j for query i where j > i + Sk - Sq: the queries are the last
    Sq positions of the Sk keys (FlashAttention's bottom-right alignment; PyTorch's
    `is_causal` where Sq = Sk, and a decode step's one query sees every key). A query whose
    every score is masked has no softmax: its row is NaN, as softmax over -inf is.
    `scale` defaults to 1 / sqrt(D)."""

    name = "graph.attention"
    KINDS: ClassVar[frozenset[str]] = frozenset({FLOAT, BOOL})
    inputs = var_operand_def(TensorType)
    scale = prop_def(FloatAttr[Float64Type])
    causal = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    result = result_def(TensorType)
    assembly_format = (
        "$inputs `scale` `=` $scale (`causal` `=` $causal^)? attr-dict "
        "`:` functional-type(operands, results)"
    )

    @classmethod
    def check_kinds(cls, types: Sequence[TensorType]) -> None:
        for i, t in enumerate(types[:3]):
            require_kind(cls.name, i, t, frozenset({FLOAT}))
        if len(types) == 4:
            require_kind(cls.name, 3, types[3], frozenset({FLOAT, BOOL}))

    @classmethod
    def complete_properties(cls, types: Sequence[TensorType], props: Props) -> dict[str, Attribute]:
        full = dict(props)
        if "scale" not in full and types and types[0].get_shape():
            full["scale"] = FloatAttr(1.0 / math.sqrt(types[0].get_shape()[-1]), Float64Type())
        return full

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        if len(types) not in (3, 4):
            raise ShapeError(
                f"attention takes q, k, v and an optional mask, got {len(types)} operands"
            )
        q, k, v = (t.get_shape() for t in types[:3])
        if not len(q) == len(k) == len(v) == 4:
            raise ShapeError(
                f"attention takes [batch, heads, sequence, head dim] operands, got {list(q)}, "
                f"{list(k)} and {list(v)}"
            )
        if q[0] != k[0] or k[0] != v[0]:
            raise ShapeError(f"attention batches differ: q {list(q)}, k {list(k)}, v {list(v)}")
        if k[1] != v[1] or q[1] % k[1]:
            raise ShapeError(
                f"attention heads: q's {q[1]} must be a multiple of k's and v's ({k[1]}, {v[1]})"
            )
        if q[3] != k[3]:
            raise ShapeError(f"attention head dims differ: q {list(q)}, k {list(k)}")
        if k[2] != v[2]:
            raise ShapeError(f"attention key and value lengths differ: k {list(k)}, v {list(v)}")
        dtypes = {t.element_type for t in types[:3]}
        if len(dtypes) > 1:
            raise VerifyException("attention's q, k and v must share one element type")
        if len(types) == 4:
            mask = types[3]
            scores = (q[0], q[1], q[2], k[2])
            if shapes.broadcast_shapes(mask.get_shape(), scores) != scores:
                raise ShapeError(
                    f"attention mask {list(mask.get_shape())} does not broadcast to the "
                    f"scores {list(scores)}"
                )
            if kind_of(mask.element_type) == FLOAT and mask.element_type != types[0].element_type:
                raise VerifyException("an additive attention mask has the queries' element type")
        return tensor(types[0].element_type, (q[0], q[1], q[2], v[3]))
