"""ONNX conformance: onnx's own backend node test cases, through irkit's importer, the
reference and the CPU backend.

Every case whose node types irkit's importer handles is imported with its integer and
boolean inputs as run-time inputs; where the importer needs one at import (axes, shapes:
irkit compiles static shapes), again with the non-float inputs bound to their test values,
and then with every input but the first (a float scale). A case the
importer refuses with `Unsupported` (a documented limit, e.g. an unsupported attribute or
an integer data tensor) is counted, not failed; every case that imports must reproduce the
expected outputs on both backends. The per-op tally is printed.
"""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest
from onnx import numpy_helper

import irkit
from irkit.frontend.onnx import Unsupported, import_model
from irkit.frontend.onnx_ops import CONVERTERS


def _cases():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators divide by zero on purpose
        from onnx.backend.test.case.node import collect_testcases

        cases = collect_testcases(None)
    supported = set(CONVERTERS) | {"Constant"}
    return [c for c in cases if {n.op_type for n in c.model.graph.node} <= supported]


CASES = _cases()
FLOATS = ("float16", "float32", "float64", "bfloat16")


def _array(x) -> np.ndarray:
    return numpy_helper.to_array(x) if hasattr(x, "data_type") else np.asarray(x)


def run_case(case) -> str:
    """'unsupported', or 'ok' after both backends matched; raises on a mismatch."""
    inputs, expected = case.data_sets[0]
    names = [
        i.name
        for i in case.model.graph.input
        if i.name not in {t.name for t in case.model.graph.initializer}
    ]
    arrays = [_array(x) for x in inputs]
    non_float = {n: a for n, a in zip(names, arrays, strict=False) if str(a.dtype) not in FLOATS}
    all_but_data = dict(list(zip(names, arrays, strict=False))[1:])  # Resize's float scales
    for bind in ({}, non_float, all_but_data):
        try:
            module = import_model(case.model, case.name, bind=bind)
            break
        except Unsupported:
            continue
    else:
        return "unsupported"
    feed = [a for n, a in zip(names, arrays, strict=False) if n not in bind]
    for backend in ("reference", "cpu"):
        outputs = irkit.compile(module, backend=backend)(*feed)
        for got, want in zip(outputs, expected, strict=True):
            want = _array(want)
            assert got.shape == want.shape, f"{backend}: shape {got.shape} != {want.shape}"
            low = str(want.dtype) in ("float16", "bfloat16")  # irkit rounds f16 at kernel edges
            rtol = max(case.rtol, 1e-2) if low else case.rtol
            np.testing.assert_allclose(
                np.asarray(got, np.float64), want.astype(np.float64),
                rtol=rtol, atol=max(case.atol, 1e-6), equal_nan=True, err_msg=f"{backend}: {case.name}",
            )  # fmt: skip
    return "ok"


def test_conformance_over_onnx_node_tests(capsys) -> None:
    tally: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures = []
    for case in CASES:
        ops = (
            "+".join(sorted({n.op_type for n in case.model.graph.node} - {"Constant"}))
            or "Constant"
        )
        try:
            tally[ops][run_case(case)] += 1
        except Exception as e:  # noqa: BLE001 - every failure is collected and reported
            tally[ops]["FAILED"] += 1
            failures.append(f"{case.name}: {type(e).__name__}: {' '.join(str(e).split())[:300]}")
    with capsys.disabled():
        passed = sum(t["ok"] for t in tally.values())
        print(f"\nONNX node tests: {passed} passed, {sum(t['unsupported'] for t in tally.values())} "
              f"unsupported, {len(failures)} failed, of {len(CASES)} selected")  # fmt: skip
        for ops in sorted(tally):
            print(f"  {ops}: {dict(tally[ops])}")
    assert passed > 200
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("op", sorted(set(CONVERTERS) - {"Constant"}))
def test_every_converter_has_a_passing_node_test(op: str) -> None:
    """No converter is untested: each op appears in at least one case that imports and passes."""
    relevant = [c for c in CASES if op in {n.op_type for n in c.model.graph.node}]
    assert any(run_case(c) == "ok" for c in relevant), f"no passing conformance case for {op}"


def test_the_documented_op_table_is_the_importers() -> None:
    from pathlib import Path

    from irkit.frontend.onnx_ops import support_table

    doc = Path(__file__).resolve().parent.parent / "docs" / "onnx.md"
    assert doc.read_text() == support_table(), (
        "regenerate: python -m irkit.frontend.onnx_ops > docs/onnx.md"
    )
