"""The bad-input corpus: every case is a command line (or a Python API call) over files made
for it, and what irkit must say: the exit code, one line on stderr naming the place (file,
line and column; the flag; the pass and option; the ONNX node) and what was wrong. Nothing
the user gave may change. Cases are grouped by the class of fault they stand for; a new
fault found outside the project belongs in its class here.

A file's content is text, bytes, or a function of the case directory that makes it (a FIFO,
a link, an ONNX model)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

Content = str | bytes | Callable[[Path], None]


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]
    files: dict[str, Content] = field(default_factory=dict)
    code: int = 1
    where: str | None = None
    """Text the error line must name: `m.graph:2:17`, `--seed`, `-p`..."""
    says: str = ""
    """Text the error line must contain."""
    env: dict[str, str] = field(default_factory=dict)


G = "model m\ninput x : f32[4, 4]\noutput y = relu(x)\n"
"""A good model, for command-line and option cases."""

MM = "model m\ninput a : f32[8, 16]\ninput b : f32[16, 32]\noutput c = matmul(a, b)\n"


def graph(body: str, header: str = "model m\ninput x : f32[4, 4]\n") -> dict[str, Content]:
    return {"m.graph": header + body}


def opt(*args: str) -> list[str]:
    return ["irkit-opt", *args]


def bench(*args: str) -> list[str]:
    return ["irkit-bench", *args]


# --- ONNX files --------------------------------------------------------------------------------


def _onnx(
    nodes, inputs, outputs, inits=(), opset: int = 17, domain: str = ""
) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
        model = helper.make_model(g, opset_imports=[helper.make_opsetid(domain, opset)])
        model.ir_version = 8
        onnx.save(model, path)

    return make


def _vi(name: str, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


RELU = [helper.make_node("Relu", ["x"], ["y"], name="act")]


def _truncated(path: Path) -> None:
    _onnx(RELU, [_vi("x", [4])], [_vi("y", [4])])(path)
    path.write_bytes(path.read_bytes()[:-7])


def _external(path: Path) -> None:
    w = numpy_helper.from_array(np.ones((4,), np.float32), "w")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    entry = w.external_data.add()
    entry.key, entry.value = "location", "weights.bin"
    nodes = [helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [_vi("x", [4])], [_vi("y", [4])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path.write_bytes(m.SerializeToString())


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _link_to(target: str, hard: bool) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        (os.link if hard else os.symlink)(path.parent / target, path)

    return make


def _dir(path: Path) -> None:
    path.mkdir()


def _repo(*commits: dict[str, str], then: dict[str, str] | None = None) -> Callable[[Path], None]:
    """A git repository of these commits (each: file -> text), `then` written after the last
    commit (a dirty work tree)."""

    def make(path: Path) -> None:
        import subprocess

        def git(*args: str) -> None:
            subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True)

        path.mkdir()
        git("init", "-q")
        git("config", "user.email", "case@irkit.invalid")
        git("config", "user.name", "case")
        for n, files in enumerate(commits):
            for name, text in files.items():
                (path / name).write_text(text)
            git("add", *files)
            git("commit", "-q", "-m", f"commit {n}")
        for name, text in (then or {}).items():
            (path / name).write_text(text)

    return make


def _newer_history(path: Path) -> None:
    import sqlite3

    db = sqlite3.connect(path)
    db.execute("CREATE TABLE irkit_schema (version INTEGER NOT NULL)")
    db.execute("INSERT INTO irkit_schema VALUES (99)")
    db.commit()
    db.close()


NIGHTLY = 'db = "h.db"\nplugins = ["r/p.py"]\n[[workloads]]\nmodel = "m.graph"\n'


def record(**total) -> str:
    """An attribution record with every field compare and report read; `total` overrides
    the full pipeline's time."""
    import json

    t = {"median": 1e-3, "ci_low": 0.9e-3, "ci_high": 1.1e-3}
    ci = {"value": 1.0, "ci_low": 0.9, "ci_high": 1.1}
    kernel = {"name": "k0", "seconds": 1e-3, "flops": 1.0, "min_bytes": 4.0}
    rec = {
        "kind": "irkit.attribution", "workload": "w", "model": "m.graph", "backend": "cpu",
        "pipeline": "p", "strategy": "shapley", "dims": {},
        "total": {"baseline_s": t, "full_s": {**t, **total}, "speedup": ci},
        "noise_floor": {"floor": 0.01},
        "protocol": {"selection": "cpu", "variants": 1, "programs_measured": 1, "rounds": 3,
                     "stop_reason": "budget"},
        "passes": [], "kernels": {"baseline": [kernel], "full": [kernel]},
    }  # fmt: skip
    return json.dumps(rec) + "\n"


MLIR_I16 = """func.func @f(%a: tensor<4xi16>) -> tensor<4xi16> {
  func.return %a : tensor<4xi16>
}
"""
MLIR_DYN = """func.func @f(%a: tensor<?xf32>) -> tensor<?xf32> {
  func.return %a : tensor<?xf32>
}
"""
MLIR_UNRANKED = """func.func @f(%a: tensor<*xf32>) -> tensor<*xf32> {
  func.return %a : tensor<*xf32>
}
"""
MLIR_TWO = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  func.return %a : tensor<4xf32>
}
func.func @g(%a: tensor<4xf32>) -> tensor<4xf32> {
  func.return %a : tensor<4xf32>
}
"""
MLIR_BAD_RESULT = """func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x2xf32>) -> tensor<4x3xf32> {
  %c = graph.matmul %a, %b : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x3xf32>
  func.return %c : tensor<4x3xf32>
}
"""
MLIR_FUNCTIONAL_RELU = """func.func @f(%a: tensor<f32>) -> tensor<f32> {
  %b = graph.relu %a : (tensor<f32>) -> tensor<f32>
  func.return %b : tensor<f32>
}
"""
MLIR_GOOD = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %b = graph.relu %a : (tensor<4xf32>) -> tensor<4xf32>
  func.return %b : tensor<4xf32>
}
"""


CASES: list[Case] = [
    # --- .graph: syntax -------------------------------------------------------------------------
    Case("syntax-char", opt("m.graph"), graph("output y = relu(x) @ x\n"), where="m.graph:3:20", says="unexpected character '@'"),
    Case("syntax-eof", opt("m.graph"), graph("output y = relu(\n"), where="m.graph:3", says="unexpected end of file"),
    Case("syntax-string", opt("m.graph"), graph('output y = softmax(x, axis="1)\n'), where="m.graph:3", says="unexpected"),
    Case("syntax-keyword-value", opt("m.graph"), graph("output y = softmax(x, axis=)\n"), where="m.graph:3", says="unexpected"),
    Case("not-utf8", opt("m.graph"), {"m.graph": b"model m\ninput x : f32[4]\n\xff\xfe\n"}, where="m.graph:3:1", says="not a text file"),
    Case("nul-bytes", opt("m.graph"), {"m.graph": "model m\x00\n"}, where="m.graph:1", says="NUL"),
    Case("empty-file", opt("m.graph"), {"m.graph": "  \n"}, where="m.graph", says="file is empty"),
    Case("only-comments", opt("m.graph"), {"m.graph": "# nothing\n// here\n"}, where="m.graph:1:1", says="declares no output"),
    # --- .graph: names and declarations -----------------------------------------------------------
    Case("unknown-op", opt("m.graph"), graph("output y = rleu(x)\n"), where="m.graph:3:12", says="did you mean 'relu'"),
    Case("unknown-name", opt("m.graph"), graph("output y = relu(z)\n"), where="m.graph:3:17", says="unknown name 'z'"),
    Case("dim-as-tensor", opt("m.graph"), {"m.graph": "dim B = 4\ninput x : f32[B]\noutput y = x + B\n"}, where="m.graph:3:16", says="B is a dim, not a tensor"),
    Case("redefined-input", opt("m.graph"), graph("input x : f32[4]\noutput y = relu(x)\n"), where="m.graph:3:1", says="x is already defined"),
    Case("output-twice", opt("m.graph"), graph("output y = relu(x)\noutput y = relu(x)\n"), where="m.graph:4:1", says="output y is declared twice"),
    Case("output-unbound", opt("m.graph"), graph("output q\n"), where="m.graph:3:1", says="output q names no value"),
    Case("output-scalar", opt("m.graph"), graph("s = 2 * 3\noutput s\n"), where="m.graph:4:1", says="scalar literal"),
    Case("model-late", opt("m.graph"), graph("model again\noutput y = relu(x)\n"), where="m.graph:3:1", says="`model` must come first"),
    Case("dim-twice", opt("m.graph"), {"m.graph": "dim B = 2\ndim B = 3\ninput x : f32[B]\noutput y = relu(x)\n"}, where="m.graph:2:1", says="declared twice"),
    Case("unknown-dtype", opt("m.graph"), {"m.graph": "input x : f8[4]\noutput y = relu(x)\n"}, where="m.graph:1:11", says="unknown element type 'f8'"),
    Case("scalars-only-op", opt("m.graph"), graph("output y = relu(1.0)\n"), where="m.graph:3:12", says="needs at least one tensor operand"),
    Case("dim-override-unknown", opt("m.graph", "--dim", "Q=4"), {"m.graph": G}, where="m.graph", says="--dim Q: the model declares no such dim"),
    # --- .graph: static arithmetic and ranges -----------------------------------------------------
    Case("dim-div-zero", opt("m.graph"), {"m.graph": "dim B = 4 / 0\ninput x : f32[B]\noutput y = relu(x)\n"}, where="m.graph:1:9", says="division by zero"),
    Case("dim-not-integer", opt("m.graph"), {"m.graph": "dim B = 5 / 2\ninput x : f32[B]\noutput y = relu(x)\n"}, where="m.graph:1:9", says="a dim must be an integer"),
    Case("dim-zero", opt("m.graph"), {"m.graph": "dim B = 3 - 3\ninput x : f32[B]\noutput y = relu(x)\n"}, where="m.graph:1:1", says="must be positive"),
    Case("power-tower", opt("m.graph"), {"m.graph": "dim B = 2 ** 2 ** 2 ** 2 ** 2 ** 2\ninput x : f32[B]\noutput y = relu(x)\n"}, where="m.graph:1", says="out of the int64 range"),
    Case("power-int64", opt("m.graph"), {"m.graph": "dim B = 2 ** 63\ninput x : f32[B]\noutput y = relu(x)\n"}, where="m.graph:1:9", says="out of the int64 range"),
    Case("power-zero-negative", opt("m.graph"), graph("output y = x * 0 ** -1\n"), where="m.graph:3:16", says="zero raised to a negative power"),
    Case("power-complex", opt("m.graph"), graph("output y = x * (0 - 8) ** 0.5\n"), where="m.graph:3:16", says="not a real number"),
    Case("power-float-overflow", opt("m.graph"), graph("output y = x * 10.0 ** 400\n"), where="m.graph:3:16", says="out of the float64 range"),
    Case("product-overflow", opt("m.graph"), {"m.graph": "dim B = 4294967296 * 4294967296\ninput x : f32[B]\noutput y = relu(x)\n"}, where="m.graph:1:9", says="out of the int64 range"),
    Case("int-literal-huge", opt("m.graph"), graph("output y = x * 99999999999999999999999999\n"), where="m.graph:3:16", says="out of the int64 range"),
    Case("float-literal-inf", opt("m.graph"), graph("output y = x * 1e400\n"), where="m.graph:3:16", says="out of the float64 range"),
    Case("scalar-div-zero", opt("m.graph"), graph("output y = x * (1 / 0)\n"), where="m.graph:3:17", says="division by zero"),
    Case("float-div-zero", opt("m.graph"), graph("output y = x * (1.0 / 0.0)\n"), where="m.graph:3:17", says="division by zero"),
    Case("literal-over-f16", opt("m.graph"), graph("output y = x * 70000\n", "model m\ninput x : f16[4]\n"), where="m.graph:3:12", says="does not fit in f16"),
    Case("literal-over-f32", opt("m.graph"), graph("output y = x + 1e39\n"), where="m.graph:3:12", says="does not fit in f32"),
    Case("extent-2-63", opt("m.graph"), {"m.graph": "input x : f32[9223372036854775808]\noutput y = relu(x)\n"}, where="m.graph:1:15", says="out of the int64 range"),
    Case("extent-zero", opt("m.graph"), {"m.graph": "input x : f32[0, 4]\noutput y = relu(x)\n"}, where="m.graph:1:11", says="must be positive"),
    Case("extent-negative", opt("m.graph"), {"m.graph": "input x : f32[-4]\noutput y = relu(x)\n"}, where="m.graph:1:11", says="must be positive"),
    Case("extent-float", opt("m.graph"), {"m.graph": "input x : f32[2.5]\noutput y = relu(x)\n"}, where="m.graph:1:15", says="a tensor extent must be an integer"),
    Case("element-count-overflow", opt("m.graph"), {"m.graph": "input x : f32[4294967296, 4294967296]\noutput y = relu(x)\n"}, where="m.graph:1:11", says="more than int64 indexing holds"),
    Case("nesting-neg", opt("m.graph"), graph("output y = " + "-" * 5000 + "x\n"), where="m.graph:3", says="nested more than 200 levels"),
    Case("nesting-calls", opt("m.graph"), graph("output y = " + "relu(" * 3000 + "x" + ")" * 3000 + "\n"), where="m.graph:3", says="nested more than 200 levels"),
    Case("nesting-static", opt("m.graph"), {"m.graph": "dim B = " + "-" * 3000 + "4\ninput x : f32[4]\noutput y = relu(x)\n"}, where="m.graph:1", says="nested more than 200 levels"),
    # --- .graph: ops, attributes, shapes ----------------------------------------------------------
    Case("keyword-twice", opt("m.graph"), graph("output y = softmax(x, axis=0, axis=1)\n"), where="m.graph:3:31", says="keyword argument 'axis' is given twice"),
    Case("unknown-attribute", opt("m.graph"), graph("output y = softmax(x, dim=0)\n"), where="m.graph:3:23", says="softmax has no attribute 'dim'"),
    Case("attribute-kind", opt("m.graph"), graph('output y = softmax(x, axis="last")\n'), where="m.graph:3:23", says="wrong kind of value"),
    Case("attribute-name", opt("m.graph"), graph("output y = softmax(x, axis=Q)\n"), where="m.graph:3:28", says="'Q' is not a dim"),
    Case("axis-out-of-range", opt("m.graph"), graph("output y = softmax(x, axis=5)\n"), where="m.graph:3:12", says="axis"),
    Case("arity", opt("m.graph"), graph("output y = matmul(x)\n"), where="m.graph:3:12", says="matmul takes 2 tensor operand(s)"),
    Case("matmul-shapes", opt("m.graph"), graph("output y = matmul(x, b)\n", "model m\ninput x : f32[4, 3]\ninput b : f32[4, 3]\n"), where="m.graph:4:12", says="graph.matmul"),
    Case("broadcast", opt("m.graph"), graph("output y = x + b\n", "model m\ninput x : f32[4]\ninput b : f32[3]\n"), where="m.graph:4:12", says="graph.add"),
    Case("reshape-count", opt("m.graph"), graph("output y = reshape(x, shape=[3, 5])\n"), where="m.graph:3", says="reshape"),
    Case("reshape-no-shape", opt("m.graph"), graph("output y = reshape(x)\n"), where="m.graph:3:12", says="exactly one keyword argument, `shape=`"),
    Case("reshape-two-inferred", opt("m.graph"), graph("output y = reshape(x, shape=[-1, -1])\n"), where="m.graph:3", says="-1"),
    Case("cast-dtype", opt("m.graph"), graph("output y = cast(x, dtype=f8)\n"), where="m.graph:3", says="not a dim, dtype"),
    Case("transpose-perm", opt("m.graph"), graph("output y = transpose(x, perm=[0, 0])\n"), where="m.graph:3:12", says="perm"),
    Case("empty-slice", opt("m.graph"), graph("output y = slice(x, starts=[2, 0], limits=[2, 4], strides=[1, 1])\n"), where="m.graph:3:12", says="the result would be empty"),
    Case("empty-slice-run", bench("reference", "m.graph"), graph("output y = slice(x, starts=[2, 0], limits=[2, 4], strides=[1, 1])\n"), where="m.graph:3:12", says="the result would be empty"),
    Case("reduce-axes", opt("m.graph"), graph("output y = reduce_sum(x, axes=[7])\n"), where="m.graph:3:12", says="axes"),
    # --- files that are not model files -----------------------------------------------------------
    Case("missing-file", opt("nope.graph"), where="nope.graph", says="no such file"),
    Case("directory", opt("d.graph"), {"d.graph": _dir}, where="d.graph", says="is a directory"),
    Case("fifo-opt", opt("p.graph"), {"p.graph": _fifo}, where="p.graph", says="not a regular file"),
    Case("fifo-bench", bench("run", "p.graph"), {"p.graph": _fifo}, where="p.graph", says="not a regular file"),
    Case("fifo-onnx", bench("reference", "p.onnx"), {"p.onnx": _fifo}, where="p.onnx", says="not a regular file"),
    Case("unknown-extension", opt("m.txt"), {"m.txt": G}, where="m.txt", says="unknown model format '.txt'"),
    Case("model-is-results", bench("run", "r.jsonl"), {"r.jsonl": record()}, where="r.jsonl", says="unknown model format"),
    # --- resource limits: a size check before any allocation --------------------------------------
    Case("huge-dim-run", bench("run", "m.graph", "--budget", "0.1"), {"m.graph": "dim B = 1000000000\ninput x : f32[B, 512]\noutput y = relu(x)\n"}, where="m.graph", says="over the limit of"),
    Case("huge-dim-reference", bench("reference", "m.graph"), {"m.graph": "dim B = 1000000000\ninput x : f32[B, 512]\noutput y = relu(x)\n"}, where="m.graph", says="TiB"),
    Case("huge-dim-override", bench("reference", "m.graph", "--dim", "B=1000000000000"), {"m.graph": "dim B = 4\ninput x : f32[B, 512]\noutput y = relu(x)\n"}, where="m.graph", says="over the limit of"),
    Case("limit-env", bench("reference", "m.graph"), {"m.graph": "input x : f32[1024, 1024]\noutput y = relu(x)\n"}, env={"IRKIT_MAX_MEMORY": "1M"}, where="m.graph", says="(IRKIT_MAX_MEMORY)"),
    Case("limit-env-intermediate", bench("run", "m.graph", "--backend", "cpu"), {"m.graph": "input x : f32[64, 1]\ninput w : f32[1, 4096]\noutput y = reduce_sum(matmul(x, w), axes=[1])\n"}, env={"IRKIT_MAX_MEMORY": "1M"}, where="m.graph", says="largest tensor"),
    Case("limit-env-bad", bench("reference", "m.graph"), {"m.graph": G}, env={"IRKIT_MAX_MEMORY": "lots"}, says="IRKIT_MAX_MEMORY='lots'"),
    # --- MLIR --------------------------------------------------------------------------------------
    Case("mlir-syntax", opt("m.mlir"), {"m.mlir": "func.func @f( {\n"}, where="m.mlir:1", says="error"),
    Case("mlir-unknown-op", opt("m.mlir"), {"m.mlir": '"graph.nope"() : () -> ()\n'}, where="m.mlir:1", says="graph.nope"),
    Case("mlir-unregistered-dialect", opt("m.mlir"), {"m.mlir": '"zz.op"() : () -> ()\n'}, where="m.mlir:1", says="zz.op"),
    Case("mlir-result-type", opt("m.mlir"), {"m.mlir": MLIR_BAD_RESULT}, where="m.mlir:2", says="does not match the inferred type"),
    Case("mlir-i16-run", bench("run", "m.mlir"), {"m.mlir": MLIR_I16}, where="m.mlir:1:1", says="irkit runs f16, bf16, f32, f64, i64, i32 and i1 tensors"),
    Case("mlir-i16-reference", bench("reference", "m.mlir"), {"m.mlir": MLIR_I16}, where="m.mlir:1:1", says="@f: argument a has type tensor<4xi16>"),
    Case("mlir-dynamic-run", bench("run", "m.mlir"), {"m.mlir": MLIR_DYN}, where="m.mlir:1:1", says="dynamic extents"),
    Case("mlir-dynamic-reference", bench("reference", "m.mlir"), {"m.mlir": MLIR_DYN}, where="m.mlir:1:1", says="dynamic extents"),
    Case("mlir-dynamic-attribute", bench("attribute", "m.mlir", "--budget", "0.1"), {"m.mlir": MLIR_DYN}, where="m.mlir:1:1", says="dynamic extents"),
    Case("mlir-unranked", bench("reference", "m.mlir"), {"m.mlir": MLIR_UNRANKED}, where="m.mlir:1:1", says="ranked tensors only"),
    Case("mlir-two-functions", bench("reference", "m.mlir"), {"m.mlir": MLIR_TWO}, says="expected exactly one public func.func"),
    Case("mlir-no-function", bench("reference", "m.mlir"), {"m.mlir": "builtin.module {\n}\n"}, says="found none"),
    Case("mlir-deep-regions", opt("m.mlir"), {"m.mlir": "builtin.module {\n" * 3000 + "}\n" * 3000}, where="m.mlir:", says="nested too deeply"),
    Case("mlir-deep-types", opt("m.mlir"), {"m.mlir": "func.func @f(%a: " + "tuple<" * 3000 + "f32" + ">" * 3000 + ") {\n  func.return\n}\n"}, where="m.mlir:1:1", says="nested too deeply"),
    Case("mlir-op-syntax-types", bench("reference", "m.mlir"), {"m.mlir": MLIR_FUNCTIONAL_RELU}, where="m.mlir:2:3", says="invalid op"),
    Case("mlir-memref-reference", bench("run", "m.mlir"), {"m.mlir": "func.func @f(%a: memref<4xf32>) {\n  func.return\n}\n"}, where="m.mlir:1:1", says="the reference evaluates graph-level models"),
    Case("rank-over-limit", bench("run", "m.graph"), {"m.graph": "input x : f32[" + ", ".join(["1"] * 40) + "]\noutput y = relu(x)\n"}, where="m.graph:1:11", says="rank 40 is over irkit's limit of 32"),
    Case("mlir-with-dim", opt("m.mlir", "--dim", "B=2"), {"m.mlir": MLIR_GOOD}, where="m.mlir", says="--dim applies to .graph models"),
    # --- ONNX --------------------------------------------------------------------------------------
    Case("onnx-garbage", bench("reference", "m.onnx"), {"m.onnx": b"\x08\x07garbage\xff\xff\xff"}, where="m.onnx", says="not an ONNX model"),
    Case("onnx-truncated", bench("reference", "m.onnx"), {"m.onnx": _truncated}, where="m.onnx", says="not an ONNX model"),
    Case("onnx-empty", opt("m.onnx"), {"m.onnx": b""}, where="m.onnx", says="not an ONNX model"),
    Case("onnx-opset-new", bench("reference", "m.onnx"), {"m.onnx": _onnx(RELU, [_vi("x", [4])], [_vi("y", [4])], opset=999)}, where="m.onnx", says="opset 999, newer than onnx"),
    Case("onnx-unsupported-op", opt("m.onnx"), {"m.onnx": _onnx([helper.make_node("Hardmax", ["x"], ["y"], name="hm")], [_vi("x", [4, 4])], [_vi("y", [4, 4])])}, where="node 'hm'", says="Hardmax"),
    Case("onnx-undefined-input", opt("m.onnx"), {"m.onnx": _onnx([helper.make_node("Add", ["x", "ghost"], ["y"], name="add")], [_vi("x", [4])], [_vi("y", [4])])}, where="m.onnx", says="ghost"),
    Case("onnx-shape-mismatch", opt("m.onnx"), {"m.onnx": _onnx([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [_vi("x", [4, 3]), _vi("w", [4, 3])], [_vi("y", [4, 3])])}, where="m.onnx", says="shape inference failed"),
    Case("onnx-symbolic-dim", opt("m.onnx"), {"m.onnx": _onnx(RELU, [_vi("x", ["N", 4])], [_vi("y", ["N", 4])])}, where="m.onnx", says="give --dim N=SIZE"),
    Case("onnx-symbolic-unknown", opt("m.onnx", "--dim", "N=2", "--dim", "Q=2"), {"m.onnx": _onnx(RELU, [_vi("x", ["N", 4])], [_vi("y", ["N", 4])])}, where="m.onnx", says="Q"),
    Case("asm-of-gpu-ir", opt("m.graph", "-p", "default-cuda", "-t", "asm"), {"m.graph": MM}, where=None, says="the llvm and asm targets take CPU-level IR; @k0_matmul is mapped to the GPU"),
    Case("onnx-gather-bad-kind", opt("m.onnx"), {"m.onnx": _onnx([helper.make_node("Gather", ["x", "x"], ["y"], name="g")], [_vi("x", [4])], [_vi("y", [4])])}, where="m.onnx: node 'g' (Gather", says="operand #1 is f32 (float); graph.gather takes int values"),
    Case("onnx-uint64-overflow", opt("m.onnx"), {"m.onnx": _onnx([helper.make_node("Where", ["c", "big", "small"], ["y"], name="w")], [_vi("c", [2], TensorProto.BOOL)], [_vi("y", [2], TensorProto.UINT64)], [numpy_helper.from_array(np.array([1, 2**63], np.uint64), "big"), numpy_helper.from_array(np.array([0, 0], np.uint64), "small")])}, where="m.onnx: node 'w' (Where", says="'big' holds 9223372036854775808, beyond i64"),
    Case("graph-int-literal-overflow", opt("m.graph"), {"m.graph": "model m\ninput i : i32[4]\noutput y = i + 3000000000\n"}, where="m.graph:3:", says="does not fit in i32"),
    Case("graph-float-literal-for-int", opt("m.graph"), {"m.graph": "model m\ninput i : i64[4]\noutput y = i * 0.5\n"}, where="m.graph:3:", says="the literal 0.5 is not a value of i64"),
    Case("onnx-int-input", bench("reference", "m.onnx"), {"m.onnx": _onnx(RELU, [_vi("x", [4], TensorProto.UINT16)], [_vi("y", [4], TensorProto.UINT16)])}, where="m.onnx", says="element type UINT16"),
    Case("onnx-external-missing", opt("m.onnx"), {"m.onnx": _external}, where="m.onnx", says="weights.bin"),
    # --- command-line flags -------------------------------------------------------------------------
    Case("seed-negative", bench("reference", "m.graph", "--seed", "-1"), {"m.graph": G}, code=2, where="--seed", says="from 0 to 2^64-1"),
    Case("seed-text", bench("run", "m.graph", "--seed", "abc"), {"m.graph": G}, code=2, where="--seed", says="expected an integer"),
    Case("dtype-unknown-run", bench("run", "m.graph", "--dtype", "f8"), {"m.graph": G}, code=2, where="--dtype", says="invalid choice: 'f8'"),
    Case("dtype-unknown-opt", opt("m.graph", "--dtype", "fp16"), {"m.graph": G}, code=2, where="--dtype", says="invalid choice: 'fp16'"),
    Case("seed-huge", bench("reference", "m.graph", "--seed", str(2**70)), {"m.graph": G}, code=2, where="--seed", says="from 0 to 2^64-1"),
    Case("budget-nan", bench("run", "m.graph", "--budget", "nan"), {"m.graph": G}, code=2, where="--budget", says="finite"),
    Case("budget-negative", bench("run", "m.graph", "--budget", "-5"), {"m.graph": G}, code=2, where="--budget", says="must be positive"),
    Case("budget-inf", bench("attribute", "m.graph", "--budget", "inf"), {"m.graph": G}, code=2, where="--budget", says="finite"),
    Case("precision-negative", bench("run", "m.graph", "--precision", "-1"), {"m.graph": G}, code=2, where="--precision", says="between 0 and 1"),
    Case("precision-nan", bench("attribute", "m.graph", "--precision", "nan"), {"m.graph": G}, code=2, where="--precision", says="finite"),
    Case("precision-one", bench("run", "m.graph", "--precision", "1.5"), {"m.graph": G}, code=2, where="--precision", says="between 0 and 1"),
    Case("permutations-zero", bench("attribute", "m.graph", "--permutations", "0"), {"m.graph": G}, code=2, where="--permutations", says="from 1 to 100000"),
    Case("threshold-nan", bench("compare", "a.jsonl", "a.jsonl", "--threshold", "nan"), {"a.jsonl": record()}, code=2, where="--threshold", says="finite"),
    Case("suite-budget", bench("suite", "--quick", "--budget", "0"), code=2, where="--budget", says="must be positive"),
    Case("dim-flag-zero", bench("run", "m.graph", "--dim", "B=0"), {"m.graph": G}, code=2, where="--dim", says="must be positive"),
    Case("dim-flag-text", opt("m.graph", "--dim", "B=x"), {"m.graph": G}, code=2, where="--dim", says="integer"),
    Case("unknown-backend", bench("run", "m.graph", "--backend", "tpu"), {"m.graph": G}, says="unknown backend 'tpu'"),
    Case("unknown-target", opt("m.graph", "-t", "verilog"), {"m.graph": G}, code=2, where="-t/--target", says="unknown target 'verilog'"),
    Case("unknown-command", bench("frobnicate"), code=2, says="invalid choice"),
    Case("strategy", bench("attribute", "m.graph", "--strategy", "banzhaf"), {"m.graph": G}, code=2, where="--strategy", says="invalid choice"),
    Case("attribute-step-strategy", bench("attribute", "m.graph", "--backend", "cpu", "--step", "cpu-tile-matmul{mr=4}"), {"m.graph": G}, where="--step", says="--strategy prefix"),
    Case("attribute-step-no-pass", bench("attribute", "m.graph", "--backend", "cpu", "--strategy", "prefix", "--step", "gpu-tile-matmul{tma=true}"), {"m.graph": G}, says="no pass gpu-tile-matmul"),
    # --- outputs: never over an input ------------------------------------------------------------------
    Case("run-json-over-model", bench("run", "m.graph", "--json", "m.graph"), {"m.graph": G}, where="m.graph", says="--json names an input of this command"),
    Case("attribute-json-over-model", bench("attribute", "m.graph", "--json", "m.graph"), {"m.graph": G}, where="m.graph", says="--json names an input of this command"),
    Case("attribute-json-over-onnx", bench("attribute", "m.onnx", "--json", "./m.onnx"), {"m.onnx": _onnx(RELU, [_vi("x", [4])], [_vi("y", [4])])}, where="m.onnx", says="--json names an input"),
    Case("report-over-results", bench("report", "r.jsonl", "-o", "r.jsonl"), {"r.jsonl": record()}, where="r.jsonl", says="-o names an input of this command"),
    Case("opt-over-input", opt("m.graph", "-o", "m.graph"), {"m.graph": G}, where="m.graph", says="-o names an input"),
    Case("opt-over-hardlink", opt("m.graph", "-o", "h.graph"), {"m.graph": G, "h.graph": _link_to("m.graph", hard=True)}, where="h.graph", says="-o names an input"),
    Case("opt-over-symlink", opt("m.graph", "-o", "s.graph"), {"m.graph": G, "s.graph": _link_to("m.graph", hard=False)}, where="s.graph", says="-o names an input"),
    Case("json-over-symlinked-model", bench("run", "s.graph", "--json", "m.graph"), {"m.graph": G, "s.graph": _link_to("m.graph", hard=False)}, where="m.graph", says="--json names an input"),
    Case("json-over-another-model", bench("run", "m.graph", "--json", "other.graph"), {"m.graph": G, "other.graph": G}, where="other.graph", says="exists and is not a JSON record"),
    Case("json-over-onnx-model", bench("attribute", "m.graph", "--json", "w.onnx"), {"m.graph": G, "w.onnx": _onnx(RELU, [_vi("x", [4])], [_vi("y", [4])])}, where="w.onnx", says="not a JSON record"),
    Case("report-over-other-results", bench("report", "r.jsonl", "-o", "old.jsonl"), {"r.jsonl": record(), "old.jsonl": record()}, where="old.jsonl", says="exists and is not an HTML report"),
    # a model longer than the line limit is refused before parsing (a 50 MB file answers at once)
    Case("graph-too-many-lines", opt("m.graph"), {"m.graph": G + "z = relu(y)\n" * 4}, env={"IRKIT_MAX_MODEL_LINES": "3"}, where="m.graph:4:1", says="more than 3 lines"),
    Case("mlir-too-many-lines", opt("m.mlir"), {"m.mlir": "builtin.module {\n}\n" * 3}, env={"IRKIT_MAX_MODEL_LINES": "4"}, where="m.mlir:5:1", says="IRKIT_MAX_MODEL_LINES"),
    Case("model-lines-limit-bad", opt("m.graph"), {"m.graph": G}, env={"IRKIT_MAX_MODEL_LINES": "lots"}, says="IRKIT_MAX_MODEL_LINES='lots'"),
    # ... and so is one of few lines that spell out more operations than the limit (a 50 MB file of long sums)
    Case("graph-too-many-ops", opt("m.graph"), {"m.graph": "model m\ninput x : f32[4]\ny = x + x + x\noutput z = relu(y * y)\n"}, env={"IRKIT_MAX_MODEL_OPS": "3"}, where="m.graph:4:19", says="more than 3 operations"),
    Case("mlir-too-many-ops", opt("m.mlir"), {"m.mlir": "func.func @f(%a: f32) -> f32 {\n  %b = arith.addf %a, %a : f32\n  %c = arith.addf %b, %b : f32\n  func.return %c : f32\n}\n"}, env={"IRKIT_MAX_MODEL_OPS": "1"}, where="m.mlir:3:5", says="IRKIT_MAX_MODEL_OPS"),
    Case("model-ops-limit-bad", opt("m.graph"), {"m.graph": G}, env={"IRKIT_MAX_MODEL_OPS": "-1"}, says="IRKIT_MAX_MODEL_OPS='-1'"),
    # cuda-sim refuses a launch whose lockstep interpretation would not fit, before any input is made
    Case("cuda-sim-lockstep-too-big", bench("run", "m.graph", "--backend", "cuda-sim", "--dim", "R=4096", "--dim", "C=1024"), {"m.graph": "model s\ndim R = 4\ndim C = 8\ninput x : f32[R, C]\noutput y = softmax(x, axis=-1)\n"}, env={"IRKIT_MAX_MEMORY": "64M"}, says="cuda-sim: interpreting @k0_softmax in lockstep needs about"),
    # an MLIR model must have one public function: the file, and the second one's line
    Case("run-mlir-two-public", bench("run", "m.mlir"), {"m.mlir": "func.func @a(%x: memref<4xf32>) {\n  func.return\n}\nfunc.func @b(%x: memref<4xf32>) {\n  func.return\n}\n"}, where="m.mlir:4:1", says="found @a, @b"),
    Case("run-mlir-no-function", bench("run", "m.mlir"), {"m.mlir": "builtin.module {\n}\n"}, where="m.mlir", says="found none"),
    # a directory no one may write in (sysfs refuses new files even to root): said before any work
    Case("opt-output-unwritable-dir", opt("m.graph", "-o", "/sys/out.mlir"), {"m.graph": G}, where="/sys/out.mlir", says="-o: cannot write in /sys"),
    Case("run-json-unwritable-dir", bench("run", "m.graph", "--json", "/sys/run.json"), {"m.graph": G}, where="/sys/run.json", says="--json: cannot write in /sys"),
    Case("suite-out-unwritable-dir", bench("suite", "--quick", "--out", "/sys/r.jsonl"), where="/sys/r.jsonl", says="--out: cannot write in /sys"),
    Case("snapshot-unwritable-dir", bench("snapshot", "m.graph", "--kernel", "k0_relu", "-o", "/sys/k.snap"), {"m.graph": G}, where="/sys/k.snap", says="-o: cannot write in /sys"),
    Case("opt-output-over-binary", opt("m.graph", "-o", "w.onnx"), {"m.graph": G, "w.onnx": _onnx(RELU, [_vi("x", [4])], [_vi("y", [4])])}, where="w.onnx", says="exists and is not a text file"),
    Case("json-into-missing-dir", bench("run", "m.graph", "--json", "no/such/dir/r.json"), {"m.graph": G}, where="no/such/dir/r.json", says="does not exist"),
    Case("json-is-directory", bench("run", "m.graph", "--json", "out"), {"m.graph": G, "out": _dir}, where="out", says="is a directory"),
    Case("report-into-directory", bench("report", "r.jsonl", "-o", "out"), {"r.jsonl": record(), "out": _dir}, where="out", says="is a directory"),
    Case("opt-output-fifo", opt("m.graph", "-o", "p"), {"m.graph": G, "p": _fifo}, where="p", says="not a regular file"),
    Case("reproducer-dir-under-file", opt("m.graph", "-p", "lower-graph-to-loops", "--reproducer-dir", "f/sub"), {"m.graph": G, "f": "x"}, where="f/sub", says="--reproducer-dir"),
    Case("suite-out-is-model", bench("suite", "--quick", "--out", "m.graph"), {"m.graph": G}, where="m.graph:1", says="not a JSON Lines results file"),
    Case("suite-out-is-a-record", bench("suite", "--quick", "--out", "r.json"), {"r.json": '{\n  "kind": "irkit.attribution"\n}\n'}, where="r.json:1", says="refusing to append"),
    Case("suite-jobs-bad", bench("suite", "--jobs", "j.jsonl"), {"j.jsonl": '{"workload": "w"}\n'}, where="j.jsonl:1", says='a job needs "workload" and "model"'),
    Case("suite-jobs-dims", bench("suite", "--jobs", "j.jsonl"), {"j.jsonl": '{"workload": "w", "model": "m.graph", "dims": {"B": 0}}\n'}, where="j.jsonl:1", says="positive integers"),
    Case("suite-out-is-jobs", bench("suite", "--jobs", "j.jsonl", "--out", "j.jsonl"), {"j.jsonl": '{"workload": "w", "model": "m.graph"}\n', "m.graph": G}, where="j.jsonl", says="--out names the --jobs file"),
    Case("permutations-huge", bench("attribute", "m.graph", "--permutations", "1000000000"), {"m.graph": G}, code=2, where="--permutations", says="from 1 to 100000"),
    Case("num-threads-env", bench("run", "m.graph", "--backend", "cpu"), {"m.graph": G}, env={"IRKIT_NUM_THREADS": "100000"}, says="IRKIT_NUM_THREADS must be an integer from 1 to 1024"),
    Case("plugin-missing", opt("m.graph", "--plugin", "nope.py"), {"m.graph": G}, where="nope.py", says="--plugin: no such file"),
    Case("plugin-raises", bench("run", "m.graph", "--plugin", "bad.py"), {"m.graph": G, "bad.py": "raise RuntimeError('boom')\n"}, says="--plugin bad.py: cannot import it: RuntimeError: boom"),
    Case("bisect-results-alone", bench("bisect", "r.jsonl"), {"r.jsonl": record()}, where="r.jsonl", says="--slower-than BASE.jsonl"),
    Case("bisect-same-pipelines", bench("bisect", "m.graph", "--backend", "cpu", "-p", "cse,lower-graph-to-loops", "--slower-than", "cse,lower-graph-to-loops"), {"m.graph": G}, where="--slower-than", says="same passes"),
    Case("syntax-long-token", opt("m.graph"), graph("output y = relu(x) + " + "z" * 5000 + "(x\n"), where="m.graph:3:5023", says="unexpected end of file"),
    Case("syntax-long-token-2", opt("m.graph"), graph("output y = relu(x)\n" + "9" * 5000 + "\n"), where="m.graph:4:1", says="'" + "9" * 40 + "...'"),
    # --- result files: compare and report ----------------------------------------------------------------
    Case("history-add-bad-record", bench("history", "add", "a.jsonl", "--db", "h.db"), {"a.jsonl": '{"kind": "irkit.run", "graph": {"seconds": {}}}\n'}, where="a.jsonl:1", says="record without what irkit writes"),
    Case("history-db-is-a-folder", bench("history", "series", "--db", "d"), {"d": lambda p: p.mkdir()}, where="d", says="is not a file"),
    Case("history-db-newer-schema", bench("history", "series", "--db", "h.db"), {"h.db": _newer_history}, where="h.db", says="history schema 99 is newer than this irkit's"),
    Case("history-bisect-not-a-repository", bench("history", "bisect", "--repo", "d", "A", "B", "m.graph"), {"d": _dir, "m.graph": G}, where="d", says="not a git repository"),
    Case("history-bisect-unknown-commit", bench("history", "bisect", "--repo", "r", "deadbeef", "HEAD", "m.graph"), {"r": _repo({"m.graph": G}), "m.graph": G}, where="/r", says="unknown commit 'deadbeef'"),
    Case("history-bisect-good-after-bad", bench("history", "bisect", "--repo", "r", "HEAD", "HEAD~1", "r/m.graph"), {"r": _repo({"m.graph": G}, {"m.graph": G + "# 2\n"})}, where="/r", says="is not an ancestor of"),
    Case("history-bisect-old-commit-does-not-parse", bench("history", "bisect", "--repo", "r", "HEAD~1", "HEAD", "r/m.graph"), {"r": _repo({"m.graph": "model m\ninput x : f32[4, 4]\noutput y = relu(\n"}, {"m.graph": G})}, where="r/m.graph:3:16", says="m at r@"),
    Case("advise-unknown-rule", bench("advise", "m.graph", "--backend", "cpu", "--rules", "nope"), {"m.graph": G}, where="--rules", says="no rule named 'nope'"),
    Case("advise-negative-gain", bench("advise", "m.graph", "--min-gain", "-0.5"), {"m.graph": G}, code=2, where="--min-gain", says="between 0 and 1"),
    Case("advise-no-model", bench("advise"), {}, where="advise", says="a model file is needed"),
    Case("nightly-dirty-work-tree", bench("nightly", "n.toml"), {"r": _repo({"p.py": "X = 1\n"}, then={"p.py": "X = 2\n"}), "m.graph": G, "n.toml": NIGHTLY}, where="/r", says="has uncommitted changes"),
    Case("nightly-not-toml", bench("nightly", "n.toml"), {"n.toml": 'db = "h.db"\ncolour = = 2\n'}, where="n.toml:2:10", says="not TOML"),
    Case("nightly-unknown-key", bench("nightly", "n.toml"), {"n.toml": "colour = 1\n"}, where="n.toml", says="colour: unknown key"),
    Case("nightly-model-missing", bench("nightly", "n.toml"), {"n.toml": '[[workloads]]\nmodel = "nope.graph"\n'}, where="n.toml", says="workloads[1].model: no such file"),
    Case("history-db-not-a-database", bench("history", "series", "--db", "notes.txt"), {"notes.txt": "my notes\n" * 200}, where="notes.txt", says="not an irkit history database"),
    Case("compare-missing-field", bench("compare", "a.jsonl", "a.jsonl"), {"a.jsonl": '{"kind": "irkit.attribution", "workload": "w"}\n'}, where="a.jsonl:1", says="field model is missing"),
    Case("compare-zero-median", bench("compare", "a.jsonl", "b.jsonl"), {"a.jsonl": record(median=0.0), "b.jsonl": record()}, where="a.jsonl:1", says="total.full_s.median must be a positive number"),
    Case("compare-text-median", bench("compare", "a.jsonl", "b.jsonl"), {"a.jsonl": record(), "b.jsonl": record(median="fast")}, where="b.jsonl:1", says="total.full_s.median"),
    Case("compare-not-json", bench("compare", "a.jsonl", "b.jsonl"), {"a.jsonl": "{oops\n{}\n", "b.jsonl": record()}, where="a.jsonl:1", says="not a JSON record"),
    Case("compare-array", bench("compare", "a.jsonl", "b.jsonl"), {"a.jsonl": "[1, 2]\n", "b.jsonl": record()}, where="a.jsonl:1:1", says="must be a JSON object"),
    Case("compare-no-common", bench("compare", "a.jsonl", "b.jsonl"), {"a.jsonl": "", "b.jsonl": record()}, says="no workload appears in both"),
    Case("compare-binary", bench("compare", "a.jsonl", "b.jsonl"), {"a.jsonl": b"\xff\xfe\x00", "b.jsonl": record()}, where="a.jsonl", says="cannot read"),
    Case("compare-missing-file", bench("compare", "a.jsonl", "nope.jsonl"), {"a.jsonl": record()}, where="nope.jsonl", says="no such file"),
    Case("report-missing-kernels", bench("report", "r.jsonl", "-o", "r.html"), {"r.jsonl": record().replace('"kernels"', '"kernelz"')}, where="r.jsonl:1", says="field kernels is missing"),
    Case("report-nan-median", bench("report", "r.jsonl", "-o", "r.html"), {"r.jsonl": record(median=float("nan")).replace("NaN", "NaN")}, where="r.jsonl:1", says="positive number"),
    Case("report-no-records", bench("report", "r.jsonl", "-o", "r.html"), {"r.jsonl": '{"kind": "irkit.other"}\n'}, where="r.jsonl", says="no attribution, tuning or advice records"),
    Case("report-advise-missing-field", bench("report", "r.jsonl", "-o", "r.html"), {"r.jsonl": '{"kind": "irkit.advise", "schema": 1}\n'}, where="r.jsonl", says="advise record without evidence"),
    Case("report-directory-input", bench("report", "d", "-o", "r.html"), {"d": _dir}, where="d", says="not a regular file"),
    # --- pass pipelines and options: checked when parsed, naming pass and option ---------------------------
    Case("option-nr-lanes", opt("m.graph", "-p", "cpu-tile-matmul{nr=7}"), {"m.graph": G}, where="-p", says="pass 'cpu-tile-matmul': option nr=7: must be a positive multiple"),
    Case("option-min-panels", opt("m.graph", "-p", "cpu-tile-matmul{min-panels=-3}"), {"m.graph": G}, where="-p", says="option min-panels=-3: must be non-negative"),
    Case("option-mr", opt("m.graph", "-p", "lower-graph-to-loops,cpu-tile-matmul{mr=0}"), {"m.graph": MM}, where="-p", says="option mr=0"),
    Case("option-vector-bits", opt("m.graph", "-p", "cpu-tile-matmul{vector-bits=100}"), {"m.graph": G}, where="-p", says="option vector-bits=100"),
    Case("option-type", opt("m.graph", "-p", "cpu-tile-matmul{nr=abc}"), {"m.graph": G}, where="-p", says="option nr=abc: expected an integer"),
    Case("option-bool-type", opt("m.graph", "-p", "fuse-kernels{epilogues=3}"), {"m.graph": G}, where="-p", says="option epilogues=3: expected true or false"),
    Case("option-float-type", opt("m.graph", "-p", "pad-leading-dims{max-growth=lots}"), {"m.graph": G}, where="-p", says="option max-growth=lots: expected a number"),
    Case("option-unknown", opt("m.graph", "-p", "cpu-tile-matmul{zz=1}"), {"m.graph": G}, where="-p", says="unknown option 'zz' (options: kc, min-panels"),
    Case("option-none-taken", opt("m.graph", "-p", "canonicalize{bogus=1}"), {"m.graph": G}, where="-p", says="pass takes no options"),
    Case("option-block-size", opt("m.graph", "-p", "map-to-gpu{block-size=100}"), {"m.graph": G}, where="-p", says="option block-size=100: must be a power of two"),
    Case("option-gpu-tiles", opt("m.graph", "-p", "gpu-tile-matmul{block-m=30 thread-m=4}"), {"m.graph": G}, where="-p", says="option block-m=30"),
    Case("option-gpu-pad", opt("m.graph", "-p", "gpu-tile-matmul{pad=-1}"), {"m.graph": G}, where="-p", says="option pad=-1"),
    Case("option-gpu-tma-alone", opt("m.graph", "-p", "gpu-tile-matmul{tma=true}"), {"m.graph": G}, where="-p", says="option tma=true"),
    Case("option-gpu-persistent-alone", opt("m.graph", "-p", "gpu-tile-matmul{wgmma=true tma=true persistent=true}"), {"m.graph": G}, where="-p", says="option persistent=true"),
    Case("option-threads", bench("run", "m.graph", "-p", "cpu-parallelize{threads=-1}"), {"m.graph": G}, where="-p", says="option threads=-1"),
    Case("option-threads-huge", opt("m.graph", "-p", "cpu-parallelize{threads=100000}"), {"m.graph": G}, where="-p", says="option threads=100000"),
    Case("option-layout", opt("m.graph", "-p", "conv-layout{layout=chwn}"), {"m.graph": G}, where="-p", says="option layout=chwn: expected one of nchw, nhwc"),
    Case("option-max-group", opt("m.graph", "-p", "fuse-kernels{max-group-size=0}"), {"m.graph": G}, where="-p", says="option max-group-size=0"),
    Case("option-max-elements", opt("m.graph", "-p", "fold-constants{max-elements=0}"), {"m.graph": G}, where="-p", says="option max-elements=0"),
    Case("option-align", opt("m.graph", "-p", "pad-leading-dims{align-bytes=0}"), {"m.graph": G}, where="-p", says="option align-bytes=0"),
    Case("option-expansion", bench("attribute", "m.graph", "-p", "conv-to-matmul{max-expansion=0}"), {"m.graph": G}, where="-p", says="option max-expansion=0"),
    Case("option-in-attribute", bench("attribute", "m.graph", "-p", "cse,cpu-tile-matmul{nr=7},lower-graph-to-loops"), {"m.graph": G}, where="-p", says="option nr=7"),
    Case("pipeline-options", opt("m.graph", "-p", "default-cpu{x=1}"), {"m.graph": G}, where="-p", says="pipeline 'default-cpu' takes no options"),
    Case("pipeline-unknown-pass", opt("m.graph", "-p", "cse,fuse-kernel"), {"m.graph": G}, where="-p", says="did you mean 'fuse-kernels'"),
    Case("pipeline-malformed", opt("m.graph", "-p", "cse{"), {"m.graph": G}, where="-p", says="malformed pipeline"),
    Case("pipeline-level", opt("m.graph", "-p", "cpu-parallelize"), {"m.graph": G}, where="pass 'cpu-parallelize'", says="needs CPU loop-level IR"),
]  # fmt: skip


# --- the Python API: wrong argument kinds are irkit's errors, never TypeError/AttributeError --------


def _module():
    import irkit

    return irkit.load(Path(__file__).resolve().parents[2] / "examples" / "gemm.graph", {"M": 4, "N": 4, "K": 4})  # fmt: skip


def _api(name: str, call: Callable[[], object], says: str) -> tuple[str, Callable[[], object], str]:
    return name, call, says


def api_cases() -> list[tuple[str, Callable[[], object], str]]:
    import irkit
    from irkit.measure.attribution import attribute, compare_pipelines
    from irkit.measure.run import run_model
    from irkit.passes.cpu_tile_matmul import CpuTileMatmulPass
    from irkit.pipelines import apply_passes, parse_passes

    gemm = str(Path(__file__).resolve().parents[2] / "examples" / "gemm.graph")
    return [
        _api("load-int", lambda: irkit.load(123), "irkit.load: path must be a model file path"),  # type: ignore[arg-type]
        _api("load-none", lambda: irkit.load(None), "irkit.load: path must be"),  # type: ignore[arg-type]
        _api("load-dims-list", lambda: irkit.load(gemm, [1]), "dims must be a mapping"),  # type: ignore[arg-type]
        _api("load-dims-negative", lambda: irkit.load(gemm, {"M": -1}), "dims['M'] must be a positive integer"),
        _api("load-dims-float", lambda: irkit.load(gemm, {"M": 2.5}), "dims['M'] must be a positive integer"),  # type: ignore[dict-item]
        _api("load-dtype-unknown", lambda: irkit.load(gemm, dtype="f8"), "irkit.load: dtype must be one of f32, f16, bf16, got 'f8'"),
        _api("compile-int", lambda: irkit.compile(42), "irkit.compile: model must be a module or a model file path"),  # type: ignore[arg-type]
        _api("compile-pipeline-int", lambda: irkit.compile(_module(), pipeline=5), "irkit.compile: pipeline must be"),  # type: ignore[arg-type]
        _api("compile-backend-none", lambda: irkit.compile(_module(), backend=None), "irkit.compile: backend must be"),  # type: ignore[arg-type]
        _api("compile-backend-unknown", lambda: irkit.compile(_module(), backend="tpu"), "unknown backend 'tpu'"),
        _api("compile-bad-option", lambda: irkit.compile(_module(), pipeline="cpu-tile-matmul{nr=7}", backend="cpu"), "option nr=7"),
        _api("random-inputs-str", lambda: irkit.random_inputs("gemm.graph"), "irkit.random_inputs: module must be a module"),  # type: ignore[arg-type]
        _api("random-inputs-seed", lambda: irkit.random_inputs(_module(), seed=-1), "seed must be from 0 to 2^64-1"),
        _api("random-inputs-seed-float", lambda: irkit.random_inputs(_module(), seed=1.5), "seed must be an integer"),  # type: ignore[arg-type]
        _api("reference-str", lambda: irkit.reference("gemm.graph"), "irkit.reference: module must be a module"),  # type: ignore[arg-type]
        _api("reference-count", lambda: irkit.reference(_module(), np.zeros((4, 4))), "takes 2 input arrays"),
        _api("reference-shape", lambda: irkit.reference(_module(), np.zeros((4, 4)), np.zeros((3, 4))), "has shape [3, 4], expected [4, 4]"),
        _api("reference-text", lambda: irkit.reference(_module(), "abc", "def"), "must be a numeric array"),
        _api("reference-ragged", lambda: irkit.reference(_module(), [[1], [1, 2]], np.zeros((4, 4))), "is not an array"),
        _api("executable-shape", lambda: irkit.compile(_module(), backend="cpu")(np.zeros((4, 4), np.float32), np.zeros((2, 2), np.float32)), "expected [4, 4]"),
        _api("executable-out-int", lambda: irkit.compile(_module(), backend="cpu")(np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32), out=5), "out must be a list of 1 arrays"),  # type: ignore[arg-type]
        _api("executable-out-count", lambda: irkit.compile(_module(), backend="cuda-sim")(np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32), out=[]), "out must hold 1 arrays"),
        _api("executable-out-dtype", lambda: irkit.compile(_module(), backend="reference")(np.zeros((4, 4)), np.zeros((4, 4)), out=[np.zeros((4, 4), np.float32)]), "output buffer out0 must be a writable contiguous"),
        _api("parse-bad-option", lambda: parse_passes("cpu-tile-matmul{nr=7}"), "option nr=7"),
        _api("apply-bad-option", lambda: apply_passes(_module(), [CpuTileMatmulPass(nr=7)]), "option nr=7"),
        _api("attribute-permutations", lambda: attribute(gemm, "cse", "cpu", "shapley", {"M": 4, "N": 4, "K": 4}, precision=0.01, budget_s=0.1, permutations=0), "permutations must be a positive integer"),
        _api("attribute-model-int", lambda: attribute(123, "cse", "cpu"), "attribute: model must be a module or a model file path"),  # type: ignore[arg-type]
        _api("attribute-pipeline-int", lambda: attribute(_module(), 5, "cpu"), "attribute: pipeline must be a pipeline spec"),  # type: ignore[arg-type]
        _api("compare-pipelines-model", lambda: compare_pipelines(42, "cse", "cse"), "compare_pipelines: model must be"),  # type: ignore[arg-type]
        _api("compare-pipelines-budget", lambda: compare_pipelines(gemm, "cse", "cse", budget_s=-1.0), "compare_pipelines: budget must be a positive finite number"),
        _api("run-model-budget", lambda: run_model(gemm, None, "cpu", {"M": 4, "N": 4, "K": 4}, 0, 0.01, float("nan")), "run_model: budget must be a positive finite number"),
        _api("run-model-seed", lambda: run_model(gemm, None, "cpu", {"M": 4, "N": 4, "K": 4}, -3), "run_model: seed must be"),
        _api("parse-passes-int", lambda: parse_passes(5), "parse_passes: spec must be a pipeline spec"),  # type: ignore[arg-type]
        _api("apply-passes-module", lambda: apply_passes("x", []), "apply_passes: module must be a module"),  # type: ignore[arg-type]
        _api("apply-passes-strings", lambda: apply_passes(_module(), ["cse"]), "apply_passes: passes must be a list of pass instances"),  # type: ignore[list-item]
        _api("attribute-strategy", lambda: attribute(gemm, "cse", "cpu", "banzhaf", {"M": 4, "N": 4, "K": 4}, precision=0.01, budget_s=0.1), "strategy"),
        _api("attribute-budget", lambda: attribute(gemm, "cse", "cpu", "shapley", {"M": 4, "N": 4, "K": 4}, precision=0.01, budget_s=float("nan")), "budget"),
        _api("attribute-precision", lambda: attribute(gemm, "cse", "cpu", "shapley", {"M": 4, "N": 4, "K": 4}, precision=-1.0, budget_s=1.0), "precision"),
    ]  # fmt: skip
