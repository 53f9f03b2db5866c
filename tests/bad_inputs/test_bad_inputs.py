"""The README's error promise, case by case (tests/bad_inputs/cases.py): every bad input is
one line on stderr, naming where, with exit code 1 (or 2 for a malformed command line), no
traceback, and no file the user gave changed, moved or added to."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

import pytest

from irkit.cli.bench import main as bench_main
from irkit.cli.opt import main as opt_main
from irkit.errors import IrkitError
from tests.bad_inputs.cases import CASES, Case, api_cases

MAINS = {"irkit-opt": opt_main, "irkit-bench": bench_main}


def _make(case: Case, where: Path) -> None:
    for name, content in case.files.items():
        path = where / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if callable(content):
            content(path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def snapshot(where: Path) -> dict[str, str]:
    """Every entry under `where`: a regular file by its content's hash, anything else
    (a FIFO, a link, a directory) by its kind and target."""
    out = {}
    for root, dirs, files in os.walk(where):
        for name in dirs + files:
            path = Path(root) / name
            mode = path.lstat().st_mode
            rel = str(path.relative_to(where))
            if stat.S_ISLNK(mode):
                out[rel] = f"link -> {os.readlink(path)}"
            elif stat.S_ISREG(mode):
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[rel] = f"mode {stat.S_IFMT(mode):o}"
    return out


def check_error_line(case: Case, code: int | None, err: str) -> str:
    prog = case.argv[0]
    line = err.strip()
    assert code == case.code, (code, err)
    assert "Traceback" not in err and "internal error" not in err, err
    assert line and "\n" not in line, f"not one line: {err!r}"
    assert line.startswith(f"{prog}"), line
    if case.where is not None:
        assert case.where in line, (case.where, line)
    assert case.says in line, (case.says, line)
    return line


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_and_changes_nothing(
    case: Case, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    for key, value in case.env.items():
        monkeypatch.setenv(key, value)
    _make(case, tmp_path)
    before = snapshot(tmp_path)
    try:
        code = MAINS[case.argv[0]](case.argv[1:])
    except SystemExit as e:  # argparse's usage errors
        code = e.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    check_error_line(case, code, err)
    assert snapshot(tmp_path) == before  # nothing changed, nothing left behind


def test_the_corpus_is_large_and_its_ids_unique() -> None:
    ids = [c.id for c in CASES] + [name for name, _, _ in api_cases()]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 100


@pytest.mark.parametrize("name,call,says", api_cases(), ids=[n for n, _, _ in api_cases()])
def test_python_api_raises_irkit_errors(name, call, says) -> None:
    with pytest.raises(IrkitError) as e:
        call()
    assert says in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


CONSOLE = ["fifo-opt", "power-tower", "nesting-neg", "run-json-over-model", "seed-negative",
           "option-nr-lanes", "mlir-dynamic-run", "onnx-opset-new"]  # fmt: skip


@pytest.mark.parametrize("case", [c for c in CASES if c.id in CONSOLE], ids=lambda c: c.id)
def test_console_scripts_keep_the_promise(case: Case, tmp_path) -> None:
    """The installed entry points, in a fresh process with a deadline: the same one line,
    and no hang (a FIFO is refused before it is opened)."""
    _make(case, tmp_path)
    before = snapshot(tmp_path)
    r = subprocess.run(case.argv, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env={**os.environ, **case.env}, check=False)  # fmt: skip
    check_error_line(case, r.returncode, r.stderr)
    assert snapshot(tmp_path) == before
