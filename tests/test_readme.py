"""The README's pass table is the registry: every irkit pass appears once, with its real
optionality and its options' real defaults, and nothing else does."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from irkit.passes import IRKIT_PASSES

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_pass_table() -> dict[str, tuple[str, str]]:
    """pass -> (optional, options) from the table under `### Passes`."""
    text = README.read_text()
    section = text.split("### Passes", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `([a-z0-9-]+)` \| [^|]+ \| (yes|no) \| (.+) \|$", line)
        if m:
            assert m.group(1) not in rows, f"{m.group(1)} appears twice"
            rows[m.group(1)] = (m.group(2), m.group(3).strip("` "))
    return rows


def registered_options(cls) -> str:
    opts = []
    for f in dataclasses.fields(cls):
        if f.name == "name" or not f.init:
            continue
        value = str(f.default).lower() if isinstance(f.default, bool) else f.default
        opts.append(f"{f.name.replace('_', '-')}={value}")
    return " ".join(opts) or "none"


def builtin_passes() -> dict:
    """irkit's own passes: not the plugins tests load into the same registry (tests' own,
    and `irkit.measure.plants`, which irkit never registers by itself)."""
    return {
        n: f()
        for n, f in IRKIT_PASSES.items()
        if f().__module__.startswith("irkit.") and f().__module__ != "irkit.measure.plants"
    }


def test_the_readme_pass_table_matches_the_registry() -> None:
    rows, passes = readme_pass_table(), builtin_passes()
    assert set(rows) == set(passes), set(rows) ^ set(passes)
    for name, cls in passes.items():
        optional, options = rows[name]
        assert optional == ("yes" if getattr(cls, "is_optimization", False) else "no"), name
        documented = re.fullmatch(r"(\d+) options, each with its default: \[docs/passes\.md\]\(docs/passes\.md#([a-z-]+)\)", options)  # fmt: skip
        if documented is None:
            assert options == registered_options(cls), (name, options)
            continue
        # a pass of many options points at its section of docs/passes.md (a README cell stays
        # short), whose options block names each one with its default
        expected = registered_options(cls).split()
        assert int(documented.group(1)) == len(expected), (name, options)
        block = _docs_section(documented.group(2))
        listed = r"^\s+(?:[a-z0-9-]+=\S+ )*"  # an option line may name several, `a=1 b=2`
        missing = [o for o in expected if not re.search(rf"{listed}{re.escape(o)}(?:\s|$)", block, re.M)]  # fmt: skip
        assert not missing, (name, missing)


def _docs_section(anchor: str) -> str:
    """The section of docs/passes.md whose heading makes `anchor` (GitHub's slug)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "passes.md").read_text()
    headings = list(re.finditer(r"^(#+) (.+)$", text, re.M))
    for n, h in enumerate(headings):
        if re.sub(r"[^a-z0-9 -]", "", h.group(2).lower()).replace(" ", "-") == anchor:
            end = headings[n + 1].start() if n + 1 < len(headings) else len(text)
            return text[h.end() : end]
    raise AssertionError(f"docs/passes.md has no section #{anchor}")
