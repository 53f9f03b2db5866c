"""Registries: pass names match classes; xDSL's own tools see irkit through the universe."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from xdsl.universe import Universe

from irkit.passes import IRKIT_PASSES
from irkit.pipelines import PIPELINES, available_passes, parse_passes
from irkit.universe import IRKIT_DIALECTS


def test_pass_registry_keys_equal_class_names() -> None:
    for key, factory in IRKIT_PASSES.items():
        assert factory().name == key


def test_named_pipelines_parse_and_optional_passes_are_members() -> None:
    for name, pipe in PIPELINES.items():
        assert pipe.optional <= {p.split("{")[0] for p in pipe.passes}, name
        assert [p.name for p in parse_passes(name)] == [p.split("{")[0] for p in pipe.passes]
        assert name not in available_passes(), f"pipeline {name} shadows a pass"


def test_universe_entry_point_is_installed() -> None:
    multiverse = Universe.get_multiverse()
    assert "graph" in multiverse.all_dialects
    assert multiverse.all_dialects["graph"]().name == "graph"
    assert set(IRKIT_PASSES) <= set(multiverse.all_passes)
    assert set(IRKIT_DIALECTS) <= set(multiverse.all_dialects)


@pytest.mark.skipif(shutil.which("xdsl-opt") is None, reason="xdsl-opt is not on PATH")
def test_plain_xdsl_opt_parses_graph_ir() -> None:
    text = subprocess.run(
        ["irkit-opt", "examples/mlp.graph"], capture_output=True, text=True, check=True
    ).stdout
    r = subprocess.run(["xdsl-opt", "-p", "cse"], input=text, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "graph.gelu" in r.stdout
