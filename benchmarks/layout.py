"""What the layout passes are worth on the graphs exporters write.

    python benchmarks/layout.py [--backend cpu] [--budget 20] [--out FILE] [--quick] [--only NAME...]
        [--strategy shapley|ablation|prefix]

Two ONNX models are built with onnx.helper (into a temporary directory, never committed):

- `linear_mlp`: two `torch.nn.Linear` layers as PyTorch exports them, `Gemm(transB=1)` with
  the weights as initializers and a ReLU between. Unfolded, each weight is re-transposed
  by a kernel on every call; fold-constants stores it pre-transposed.
- `nhwc_block`: a TensorFlow-style block, channels-last tensors transposed to channels-first
  around an elementwise residual block (scale, ReLU, add) and back. fold-transposes sinks
  the transposes through the block, where they cancel.
- `conv_block`: a PyTorch-exported ResNet stage (Conv 3x3 + bias, BatchNormalization, Relu,
  MaxPool; NCHW, 2 x 32 x 56 x 56 -> 64 channels). conv-layout makes it channels-last and
  conv-to-matmul an im2col matmul that the matmul tiling pass takes.
- `column_sums`: a MatMul whose [2048, 2048] result is summed over its rows (ReduceSum over
  axis 0: per-feature statistics, a bias gradient). The reduction walks columns of an
  intermediate with 8 KiB rows, which all map to the same cache sets; pad-leading-dims
  skews the rows by a cache line.

Each is attributed (`irkit-bench attribute`, Shapley over the optional passes of the
backend's default pipeline: every distinct program checked against the float64 reference,
then timed in interleaved rounds) and the records are appended to the output file.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from irkit.cli.bench import main as bench

RESULTS = Path(__file__).resolve().parent / "results"


def linear_mlp(batch: int, width: int, hidden: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    scale = 1 / np.sqrt(width)
    inits = [
        numpy_helper.from_array(rng.uniform(-scale, scale, shape).astype(np.float32), name)
        for name, shape in (("w1", (hidden, width)), ("b1", (hidden,)),
                            ("w2", (width, hidden)), ("b2", (width,)))
    ]  # fmt: skip
    n = helper.make_node
    nodes = [
        n("Gemm", ["x", "w1", "b1"], ["h0"], transB=1),
        n("Relu", ["h0"], ["h"]),
        n("Gemm", ["h", "w2", "b2"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "linear_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, width])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def nhwc_block(n: int, hw: int, c: int) -> onnx.ModelProto:
    to_nchw, to_nhwc = [0, 3, 1, 2], [0, 2, 3, 1]
    node = helper.make_node
    nodes = [
        node("Transpose", ["x"], ["xc"], perm=to_nchw),
        node("Transpose", ["r"], ["rc"], perm=to_nchw),
        node("Mul", ["xc", "s"], ["a"]),
        node("Relu", ["a"], ["b"]),
        node("Add", ["b", "rc"], ["yc"]),
        node("Transpose", ["yc"], ["y"], perm=to_nhwc),
    ]
    shape = [n, hw, hw, c]
    graph = helper.make_graph(
        nodes, "nhwc_block",
        [helper.make_tensor_value_info(v, TensorProto.FLOAT, shape) for v in ("x", "r")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(np.array(0.5, dtype=np.float32), "s")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def conv_block(n: int, c: int, k: int, hw: int) -> onnx.ModelProto:
    """A ResNet stage as PyTorch exports it (NCHW): Conv 3x3 with bias, BatchNormalization,
    Relu, MaxPool 2x2. conv-layout and conv-to-matmul make it one im2col and one tiled
    matmul with the bias, batch norm and relu as its epilogue."""
    rng = np.random.default_rng(1)
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w", "bias"], ["c"], pads=[1, 1, 1, 1]),
        node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["b"]),
        node("Relu", ["b"], ["r"]),
        node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
    ]
    inits = [
        numpy_helper.from_array(rng.uniform(-0.1, 0.1, (k, c, 3, 3)).astype(np.float32), "w"),
        *[numpy_helper.from_array(rng.uniform(lo, hi, (k,)).astype(np.float32), name)
          for name, lo, hi in (("bias", -0.1, 0.1), ("scale", 0.5, 1.5), ("shift", -0.1, 0.1),
                               ("mean", -0.1, 0.1), ("var", 0.5, 1.5))],
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "conv_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, k, hw // 2, hw // 2])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def column_sums(rows: int, k: int, cols: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.uniform(-0.1, 0.1, (k, cols)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("ReduceSum", ["h", "axes"], ["s"], keepdims=0),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([0]), "axes")]
    graph = helper.make_graph(
        nodes, "column_sums", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [cols])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--budget", default="20")
    parser.add_argument("--out", default=None, help="JSON Lines file the records are appended to")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--only", nargs="*", help="these models only (default: all)")
    parser.add_argument("--strategy", default="shapley", choices=["prefix", "ablation", "shapley"])
    args = parser.parse_args()
    out = Path(args.out or RESULTS / f"layout_{args.backend}.jsonl")
    models = {
        "linear_mlp": linear_mlp(16, 64, 128) if args.quick else linear_mlp(128, 512, 2048),
        "nhwc_block": nhwc_block(1, 8, 16) if args.quick else nhwc_block(8, 64, 64),
        "conv_block": conv_block(1, 4, 8, 8) if args.quick else conv_block(2, 32, 64, 56),
        "column_sums": column_sums(64, 32, 1024) if args.quick else column_sums(2048, 256, 2048),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in models.items():
            if args.only and name not in args.only:
                continue
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(model, path)
            record = Path(tmp) / f"{name}.json"
            code = bench(["attribute", str(path), "--backend", args.backend, "--budget",
                          args.budget, "--strategy", args.strategy, "--json", str(record)])  # fmt: skip
            if code:
                return code
            with out.open("a") as f:
                f.write(json.dumps(json.loads(record.read_text())) + "\n")
    print(f"records appended to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
