"""mypy over irkit/ is clean (the configuration is pyproject.toml's [tool.mypy]); CI runs it
through this test. Unused `# type: ignore` comments are errors too, so none outlives its need."""

from __future__ import annotations

from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parent.parent


def test_irkit_type_checks_clean(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    out, err, status = api.run(["--cache-dir", str(tmp_path / "mypy-cache")])
    assert status == 0, out + err
    assert "Success: no issues found" in out
