"""The layering holds: every import in irkit (deferred ones inside functions included) points
down the stack or stays in its own package, siblings (passes and codegen) never import each
other, and no chain of imports comes back to where it started.

    errors < limits, dtypes, plugins, version < dialects < ir < loops (the loop-IR contract)
    < frontend < passes | codegen < pipelines < shared_runs < runtime < measure < irkit (the API
    facade)
    < cli, fuzz, universe

Imports under `if TYPE_CHECKING:` are for type checkers only and do not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent / "irkit"

LAYERS: list[set[str]] = [
    {"irkit.errors"},
    {"irkit.limits", "irkit.dtypes", "irkit.plugins", "irkit.version", "irkit.host", "irkit.files"},
    {"irkit.dialects"},
    {"irkit.ir"},
    {"irkit.loops"},
    {"irkit.frontend"},
    {"irkit.passes", "irkit.codegen"},
    {"irkit.pipelines", "irkit.tuning"},
    {"irkit.shared_runs"},  # many pipelines at once, on the pass runner
    {"irkit.runtime"},
    {"irkit.measure"},
    {"irkit"},  # the package's API facade (irkit.load, irkit.compile, ...)
    {"irkit.cli", "irkit.fuzz", "irkit.universe"},
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def group(module: str) -> str:
    """The layer group a module belongs to: the longest listed prefix."""
    names = [g for layer in LAYERS for g in layer if module == g or module.startswith(g + ".")]
    assert names, f"{module} is in no layer: add it to LAYERS"
    return max(names, key=len)


def rank(g: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if g in layer)


def _is_module(name: str) -> bool:
    path = ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _type_checking_only(tree: ast.AST) -> set[ast.AST]:
    """The import nodes inside `if TYPE_CHECKING:` blocks."""
    out: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            out.update(n for stmt in node.body for n in ast.walk(stmt))
    return out


def imports() -> list[tuple[str, str, str]]:
    """(importer, imported, where) for every `import irkit...`/`from irkit... import` at
    any depth (a function's deferred import too); `from pkg import submodule` counts as an
    import of the submodule."""
    edges = []
    for path in sorted(ROOT.rglob("*.py")):
        source = module_name(path)
        tree = ast.parse(path.read_text(), str(path))
        typing_only = _type_checking_only(tree)
        for node in ast.walk(tree):
            if node in typing_only:
                continue
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                targets = [s for s in subs if _is_module(s)] or [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                if t == "irkit" or t.startswith("irkit."):
                    edges.append((source, t, f"{path.relative_to(ROOT.parent)}:{node.lineno}"))
    return edges


def test_every_import_points_down_or_stays_in_its_package() -> None:
    upward = []
    for source, target, where in imports():
        a, b = group(source), group(target)
        if a != b and rank(b) >= rank(a):
            upward.append(f"{where}: {source} -> {target} ({a} may not import {b})")
    assert not upward, "\n".join(upward)


def test_no_import_cycle() -> None:
    graph = nx.DiGraph()
    for source, target, _ in imports():
        if source != target:
            graph.add_edge(source, target)
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, cycles[:5]


def test_the_check_sees_deferred_imports_and_upward_arrows() -> None:
    # the walk finds an import inside a function body, and rank() orders the layers
    edges = {(s, t) for s, t, _ in imports()}
    assert ("irkit.runtime", "irkit.runtime.cpu") in edges  # deferred, in a factory
    assert rank(group("irkit.runtime.cpu")) > rank(group("irkit.codegen.llvm"))
    assert rank(group("irkit.passes.map_to_gpu")) == rank(group("irkit.codegen.cuda"))


def test_the_code_stays_in_readable_pieces() -> None:
    """Issue 63's bounds on irkit's shape: at most 4 functions over 80 lines and none over
    150, at most 4 files over 600 lines, at most 30 `type: ignore` and 100 `fmt: skip`."""
    long_functions, long_files, ignores, skips = [], [], 0, 0
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text()
        lines = text.count("\n")
        if lines > 600:
            long_files.append(f"{path.name} ({lines})")
        ignores += text.count("type: ignore")
        skips += text.count("fmt: skip")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 80:
                    long_functions.append((length, f"{path.name}:{node.name}"))
    assert len(long_functions) <= 4 and max(n for n, _ in long_functions) <= 150, long_functions
    assert len(long_files) <= 4, long_files
    assert ignores <= 30 and skips <= 100, (ignores, skips)
