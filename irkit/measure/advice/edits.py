"""Pipeline edits: what a piece of advice is (a pass added or removed, an option set).

An edit applies to a pipeline spec and gives another spec, every pass written out with the
options it was given (`-p` syntax, ready for `irkit-opt -p`):

    Edit.add("expand-math").apply("default-cpu", reference)   # where default-cpu has it
    Edit.set("cpu-tile-matmul", "mr", 6).apply(spec, reference)
    Edit.set("cpu-tile-matmul", "mr", None)                   # back to the pass's default

A pass is added where the reference pipeline (the backend's default) runs it: before the
first pass of the spec that the reference runs after it, with the options the reference
gives it. `apply` returns None where the edit changes nothing (the pass is there already,
absent, or the option already has that value).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any


@dataclass(frozen=True)
class Edit:
    action: str
    """"add", "remove" or "set"."""
    pass_name: str
    option: str | None = None
    """For "set": the option, hyphenated as in a spec (`vector-bits`)."""
    value: Any = None
    """For "set": the value; None: the option removed (the pass's own default)."""

    @staticmethod
    def add(pass_name: str) -> Edit:
        return Edit("add", pass_name)

    @staticmethod
    def remove(pass_name: str) -> Edit:
        return Edit("remove", pass_name)

    @staticmethod
    def set(pass_name: str, option: str, value: Any) -> Edit:
        return Edit("set", pass_name, option.replace("_", "-"), value)

    def describe(self) -> str:
        if self.action == "add":
            return f"add {self.pass_name}"
        if self.action == "remove":
            return f"remove {self.pass_name}"
        if self.value is None:
            return f"{self.pass_name}: {self.option} back to the pass's default"
        return f"{self.pass_name}{{{self.option}={_text(self.value)}}}"

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "pass": self.pass_name,
            "option": self.option,
            "value": self.value,
            "describe": self.describe(),
        }

    def apply(self, spec: str, reference: Sequence[str]) -> str | None:
        """`spec` with this edit, or None where it changes nothing. `reference`: the
        backend's default pipeline's passes (with their options), for where an added pass
        goes and what options it runs with."""
        items = spec_items(spec)
        names = [name for name, _ in items]
        if self.action == "add":
            if self.pass_name in names:
                return None
            ref_names = [spec_items(r)[0][0] for r in reference]
            given = next(
                (r for r, n in zip(reference, ref_names, strict=True) if n == self.pass_name), None
            )
            entry = spec_items(given)[0] if given else (self.pass_name, {})
            at = _insertion_point(names, ref_names, self.pass_name)
            items.insert(at, entry)
        elif self.action == "remove":
            if self.pass_name not in names:
                return None
            items = [it for it in items if it[0] != self.pass_name]
        else:
            if self.pass_name not in names:
                return None
            changed = False
            for name, params in items:
                if name != self.pass_name:
                    continue
                key = str(self.option)
                before = params.get(key)
                if self.value is None:
                    params.pop(key, None)
                else:
                    params[key] = _text(self.value)
                changed = changed or params.get(key) != before
            if not changed:
                return None
        return join_items(items)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _insertion_point(names: list[str], ref_names: list[str], name: str) -> int:
    """Before the first pass of `names` that the reference runs after `name`; at the end
    where none does (or the reference does not run `name`)."""
    if name not in ref_names:
        return len(names)
    rank = ref_names.index(name)
    for i, other in enumerate(names):
        if other in ref_names and ref_names.index(other) > rank:
            return i
    return len(names)


def spec_items(spec: str) -> list[tuple[str, dict[str, str]]]:
    """A pipeline spec (named pipelines expanded) as (pass, {option: value text}), the
    options as given (a pass's defaults left out), hyphenated. A fresh list each call."""
    return [(name, dict(params)) for name, params in _parsed(spec)]


@cache
def _parsed(spec: str) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    from irkit.pipelines import parse_passes

    out = []
    for p in parse_passes(spec):
        arg = p.pipeline_pass_spec(include_default=False)
        params = tuple(
            (k.replace("_", "-"), ",".join(_text(v) for v in vs))
            for k, vs in arg.parameters.items()
        )
        out.append((arg.name, params))
    return tuple(out)


def join_items(items: Sequence[tuple[str, dict[str, str]]]) -> str:
    """The spec of (pass, options) items: `a,b{x=1 y=2}`."""
    return ",".join(
        name + ("{" + " ".join(f"{k}={v}" for k, v in params.items()) + "}" if params else "")
        for name, params in items
    )


def pass_options(spec: str, pass_name: str) -> dict[str, str] | None:
    """The options `spec` gives `pass_name` (its first instance), None where it is absent."""
    return next((params for name, params in spec_items(spec) if name == pass_name), None)
