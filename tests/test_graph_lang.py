"""The .graph model language: structure, precedence, scalars, dims, and located errors."""

from __future__ import annotations

import pytest
from xdsl.dialects import func

from irkit.dialects import graph as g
from irkit.errors import IrkitError
from irkit.frontend import load
from irkit.frontend.graph_lang import PARAM_ATTR, parse_graph
from irkit.ir import entry_function


def ops(source: str, dims=None) -> list:
    fn = entry_function(parse_graph(source, "t.graph", dims))
    return [op for op in fn.body.block.ops if not isinstance(op, func.ReturnOp)]


def test_mlp_example_structure() -> None:
    fn = entry_function(load("examples/mlp.graph"))
    assert fn.sym_name.data == "mlp"
    assert [a.name_hint for a in fn.body.block.args] == ["x", "w1", "b1", "w2"]
    params = [PARAM_ATTR in d.data for d in fn.arg_attrs]
    assert params == [False, True, True, True]
    kinds = [type(op) for op in fn.body.block.ops]
    assert kinds == [g.MatmulOp, g.AddOp, g.GeluOp, g.MatmulOp, func.ReturnOp]


def test_dim_override_changes_shapes() -> None:
    fn = entry_function(load("examples/mlp.graph", {"B": 4096}))
    assert fn.body.block.args[0].type.get_shape() == (4096, 1024)
    assert fn.attributes["irkit.dims"].data["B"].value.data == 4096


def test_precedence_and_unary_minus() -> None:
    src = "model m\ninput x : f32[4]\ninput y : f32[4]\noutput z = -x + y * x ** y\n"
    kinds = [type(op) for op in ops(src)]
    assert kinds == [g.NegOp, g.PowOp, g.MulOp, g.AddOp]


def test_scalars_become_rank0_constants_of_the_tensor_dtype() -> None:
    src = "model m\ninput x : bf16[4]\noutput z = x * (0.5 + 0.25) - 1\n"
    consts = [op for op in ops(src) if isinstance(op, g.ConstantOp)]
    assert [c.value.get_values()[0] for c in consts] == [0.75, 1.0]  # 0.5 + 0.25 folded
    assert all(str(c.result.type) == "tensor<bf16>" for c in consts)


def test_dim_arithmetic_in_types_and_attributes() -> None:
    src = "model m\ndim B = 2\ndim S = 3\ninput x : f32[B * S, 4]\noutput y = reshape(x, shape=[B, S, -1])\n"
    (r,) = ops(src)
    assert r.result.type.get_shape() == (2, 3, 4)


def test_keyword_attributes_map_to_properties() -> None:
    src = "model m\ninput x : f32[2, 3, 8, 8]\noutput y = avg_pool2d(x, kernel=[2, 2], strides=[2, 2], count_include_pad=true)\n"
    (p,) = ops(src)
    assert g.ints(p.properties, "kernel") == (2, 2)
    assert g.bool_of(p.properties, "count_include_pad") is True


def test_int_written_for_a_float_attribute() -> None:
    src = "model m\ninput x : f32[4, 8]\ninput a : f32[8]\noutput y = layer_norm(x, a, a, eps=1)\n"
    (ln,) = ops(src)
    assert g.float_of(ln.properties, "eps") == 1.0


def test_output_of_existing_name_and_comments() -> None:
    src = "// c-style comment\nmodel m  # trailing\ninput x : f32[4]\nh = relu(x)\noutput h\n"
    (r,) = ops(src)
    assert isinstance(r, g.ReluOp)


@pytest.mark.parametrize(
    "source, where, message",
    [
        ("model m\ninput x : f32[4]\noutput y = relu(x, x)\n", "3:12", "takes 1 tensor operand"),
        ("model m\ninput x : f32[4]\ninput x : f32[4]\noutput y = relu(x)\n", "3:1", "already defined"),
        ("model m\ndim B = 0\ninput x : f32[B]\noutput y = relu(x)\n", "2:1", "must be positive"),
        ("model m\ninput x : f32[4]\noutput y = 1.0 + 2.0\n", "3:1", "scalar literal"),
        ("model m\ninput x : f32[4]\noutput y = relu(x, alpha=0.1)\n", "3:20", "has no attribute 'alpha'"),
        ("model m\ninput x : f32[4]\noutput y = cast(x, dtype=i8)\n", "3:26", "is not a dim, dtype"),
        ("model m\ninput x : f32[4.5]\noutput y = relu(x)\n", "2:15", "must be an integer"),
        ("model m\ninput x : f32[4]\nmodel n\noutput y = relu(x)\n", "3:1", "must come first"),
        ("input x : f32[4]\noutput y = B\n", "2:12", "unknown name 'B'"),
        ("model m\ninput x : f32[4]\noutput y = x +* x\n", "3:15", "unexpected '*'"),
    ],
)  # fmt: skip
def test_errors_carry_file_line_col(source: str, where: str, message: str) -> None:
    with pytest.raises(IrkitError) as info:
        parse_graph(source, "t.graph")
    text = str(info.value)
    assert text.startswith(f"t.graph:{where}: error:"), text
    assert message in text
    assert "\n" not in text


def test_unknown_dim_override() -> None:
    with pytest.raises(IrkitError, match="--dim Q: the model declares no such dim"):
        load("examples/mlp.graph", {"Q": 3})
