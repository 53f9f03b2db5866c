"""The results database (`irkit.measure.history`, `irkit-bench history`): records kept over
commits as series of points, each with its CI and its record's A/A floor."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from irkit.errors import IrkitError
from irkit.measure.attribution import attribute
from irkit.measure.history import SCHEMA, History, machine_key
from irkit.measure.records import read_records
from irkit.measure.run import run_model
from tests.conftest import ROOT

CHAIN = "examples/elementwise_chain.graph"
SPEC = "fuse-kernels,lower-graph-to-loops,expand-math"
DIMS = {"N": 8, "D": 16}


@pytest.fixture(scope="module")
def records() -> list[dict]:
    """An attribution, a run and a peers benchmark record, as irkit writes them."""
    attributed = attribute(CHAIN, SPEC, "cpu", "shapley", DIMS, budget_s=0.3).to_json()
    ran = run_model(CHAIN, SPEC, "cpu", DIMS, budget_s=0.2).to_json()
    peers = next(read_records(ROOT / "benchmarks/results/cpu_peers.jsonl"))
    return [attributed, ran, peers]


def test_records_become_series_of_points_once(tmp_path: Path, records: list[dict]) -> None:
    with History.open(tmp_path / "h.db") as h:
        added = h.add_all((r, "test") for r in records)
        assert added.records == 3 and added.skipped == 0 and added.points > 5
        again = h.add_all((r, "test") for r in records)  # the same content: kept once
        assert (again.records, again.points, again.skipped) == (0, 0, 3)
        assert h.add({"kind": "irkit.attribution.failed"}).skipped == 1  # no measurements
        labels = {s.label: s for s in h.series()}
        whole = labels["elementwise_chain[D=16,N=8] " + SPEC + " on cpu: seconds (attribution)"]
        assert "elementwise_chain[D=16,N=8] " + SPEC + " on cpu: seconds" in labels  # the run's
        (point,) = h.points(whole.id)
        full = records[0]["total"]["full_s"]
        assert point.value == full["median"] and point.n == full["n"]
        assert point.ci_low <= point.value <= point.ci_high
        assert point.floor == records[0]["noise_floor"]["floor"]  # the A/A floor kept
        assert point.commit == records[0]["fingerprint"]["git_sha"]
        assert any(s.metric == "saved by fuse-kernels" for s in labels.values())
        assert any(s.kernel for s in labels.values())  # the full program's kernels too
        assert any(s.metric.startswith("speedup vs ") for s in labels.values())
        assert h.record(point.commit[:8])[0]["kind"] in {"irkit.attribution", "irkit.run"}


def test_sqlite_and_postgresql_give_the_same_answers(
    tmp_path: Path, records: list[dict], postgres_url: str
) -> None:
    """One schema, the same statements: the same series and points either way, a record
    kept once, the schema migrated once."""
    answers = []
    for url in (str(tmp_path / "h.db"), postgres_url):
        with History.open(url) as h:
            assert h.version == len(SCHEMA)
            added = h.add_all((r, "test") for r in records)
            again = h.add_all((r, "test") for r in records)
            assert again.records == 0
            answers.append((added, {s.label: h.points(s.id) for s in h.series()}))
        with History.open(url) as h:  # opened again: already at its version
            assert h.version == len(SCHEMA)
    assert answers[0] == answers[1]
    closed = postgres_url.rsplit(":", 1)[0] + ":1/postgres"
    with pytest.raises(IrkitError, match="cannot connect"):
        History.open(closed)


def test_the_machine_is_the_fingerprint_without_what_changes_between_runs() -> None:
    a = {"cpu": "znver5", "cpu_count": 2, "time": "t1", "git_sha": "a", "platform": "Linux-1"}
    b = {**a, "time": "t2", "git_sha": "b", "platform": "Linux-2"}
    assert machine_key(a) == machine_key(b)
    assert machine_key(a) != machine_key({**a, "cpu_count": 16})


def test_the_schema_is_migrated_once_and_a_newer_one_refused(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    with History.open(path) as h:
        assert h.version == len(SCHEMA)
    with History.open(path) as h:  # opened again: nothing to apply
        assert h.version == len(SCHEMA)
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE irkit_schema SET version = ?", (len(SCHEMA) + 1,))
    db.close()
    with pytest.raises(IrkitError, match="is newer than this irkit's"):
        History.open(path)
    notes = tmp_path / "notes.db"
    notes.write_text("not a database\n" * 100)
    with pytest.raises(IrkitError, match="not an irkit history database"):
        History.open(notes)
    assert notes.read_text() == "not a database\n" * 100  # nothing the user gave is lost


def test_history_cli_adds_lists_and_shows(tmp_path: Path, records: list[dict]) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    db = str(tmp_path / "h.db")

    def history(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "irkit.cli.bench", "history", *args, "--db", db],
                              capture_output=True, text=True, cwd=ROOT)  # fmt: skip

    added = history("add", str(results))
    assert added.returncode == 0, added.stderr
    assert "3 record(s) kept" in added.stdout
    listed = history("series", "--workload", "elementwise_chain")
    assert listed.returncode == 0 and "saved by expand-math" in listed.stdout
    shown = history("show", "1")
    assert shown.returncode == 0 and records[0]["fingerprint"]["git_sha"][:10] in shown.stdout
    missing = history("show", "999")
    assert missing.returncode == 1 and "no series 999" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_run_and_attribute_keep_their_records_with_db(tmp_path: Path) -> None:
    """`--db` on run and attribute: the record is kept as it is written; a bad --db stops
    the command before any work, in one line."""
    db = str(tmp_path / "h.db")
    common = [CHAIN, "-p", SPEC, "--backend", "cpu", "--dim", "N=8", "--dim", "D=16", "--db", db]
    for command in (["run", *common, "--budget", "0.2"],
                    ["attribute", *common, "--budget", "0.3", "--no-kernel-times"]):  # fmt: skip
        r = subprocess.run([sys.executable, "-m", "irkit.cli.bench", *command],
                           capture_output=True, text=True, cwd=ROOT)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "record(s)" in r.stdout and "kept in" in r.stdout
    with History.open(db) as h:
        assert {r["kind"] for r in h.record("")} == {"irkit.run", "irkit.attribution"}
    (tmp_path / "dir.db").mkdir()
    bad = subprocess.run([sys.executable, "-m", "irkit.cli.bench", "run", *common[:-1],
                          str(tmp_path / "dir.db")], capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert bad.returncode != 0 and "is not a file" in bad.stderr and "Traceback" not in bad.stderr


def _history_of(
    steps: dict[int, float], n: int = 20, noise: float = 0.01, seed: int = 0, floor: float = 0.02
) -> list[dict]:
    """Run records of one workload over `n` commits, a time of 1 ms times each step from its
    commit on (`steps`: commit index -> factor), every point's own noise `noise` (its CI)
    and the run-to-run scatter too."""
    import numpy as np

    rng = np.random.default_rng(seed)
    level, out = 1e-3, []
    for i in range(n):
        level *= steps.get(i, 1.0)
        value = level * (1 + noise * rng.standard_normal())
        out.append(
            {
                "kind": "irkit.run",
                "model": "planted.graph",
                "pipeline": "p",
                "backend": "cpu",
                "graph": {
                    "seconds": {
                        "median": value,
                        "ci_low": value * (1 - 1.96 * noise / 4),
                        "ci_high": value * (1 + 1.96 * noise / 4),
                        "n": 30,
                    }
                },
                "kernels": [],
                "noise_floor": {"floor": floor},
                "fingerprint": {
                    "git_sha": f"{i:040x}",
                    "cpu": "test",
                    "time": f"2026-11-{1 + i:02d}T00:00:00+0000",
                },
            }
        )
    return out


def test_detect_finds_planted_steps_with_their_sign_and_commit(tmp_path: Path) -> None:
    """A 6% slowdown at commit 8 and a 5% speedup at commit 15 over 20 commits with 0.5%
    noise from run to run: both found, at their commits, with the right sign (at 1%, one
    history in five put the speedup a commit late: reruns are what pin a commit); an A/A
    history (no step, 1% noise) and a step under the A/A floor give none."""
    from irkit.measure.changepoints import detect

    def changes(records: list[dict]) -> list:
        values = [r["graph"]["seconds"]["median"] for r in records]
        lows = [r["graph"]["seconds"]["ci_low"] for r in records]
        highs = [r["graph"]["seconds"]["ci_high"] for r in records]
        return detect(
            values, lows, highs, [r["fingerprint"]["git_sha"] for r in records], floor=0.02
        )

    for seed in range(5):
        found = changes(_history_of({8: 1.06, 15: 1 / 1.05}, noise=0.005, seed=seed))
        assert [(c.at, c.slower) for c in found] == [(8, True), (15, False)], (seed, found)
        assert found[0].ci_low <= 1.06 <= found[0].ci_high or abs(found[0].ratio - 1.06) < 0.02
        assert found[0].before == f"{7:040x}" and found[0].after == f"{8:040x}"
        assert changes(_history_of({}, seed=seed)) == []  # A/A: nothing
        assert changes(_history_of({8: 1.015}, noise=0.002, seed=seed)) == []  # under the floor


def test_a_lone_outlier_beside_a_step_does_not_hide_it() -> None:
    """Measured in a loaded full run (test_nightly): one night 30% slow two nights before a
    2.8x step. PELT cut the outlier off as a segment of its own, leaving the step two points
    on its left, too few for the t-test; a cut that fails is now tested again between the
    nearest cuts that passed (the strongest first), and the step is found."""
    from irkit.measure.changepoints import detect

    values = [87.4, 88.5, 87.9, 86.8, 113.2, 87.1, 244.0, 243.5, 244.9, 253.7, 251.7, 253.3]
    values += [63.7, 59.4, 62.1, 59.6, 62.1, 59.7]
    lows, highs = [v * 0.99 for v in values], [v * 1.01 for v in values]
    commits = [f"{i:040x}" for i in range(len(values))]
    found = detect(values, lows, highs, commits, floor=0.02)
    assert [(c.at, c.slower) for c in found] == [(6, True), (12, False)], found


def test_history_detect_prints_the_triage_list(tmp_path: Path) -> None:
    records = tmp_path / "runs.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in _history_of({10: 1.08})))
    db = str(tmp_path / "h.db")
    run = [sys.executable, "-m", "irkit.cli.bench", "history"]
    assert subprocess.run([*run, "add", str(records), "--db", db], cwd=ROOT).returncode == 0
    r = subprocess.run([*run, "detect", "--db", db], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "slower at irkit 0000000000..0000000000 (detected 1.0" in r.stdout
    assert ": suspected" in r.stdout  # not rerun: no --rerun
    assert "1 change point(s): 0 confirmed" in r.stdout and "0 open regression(s)" in r.stdout


def test_a_database_of_an_older_schema_is_migrated_and_keeps_its_points(
    tmp_path: Path, records: list[dict], monkeypatch
) -> None:
    """A database made at schema 1 (before the points' log moments) opens at the current
    schema with every point it had; new records' points carry their log moments (the
    attribution's whole program, a run's graph), what a test between runs needs."""
    import irkit.measure.history as history

    path = tmp_path / "h.db"
    monkeypatch.setattr(history, "SCHEMA", SCHEMA[:1])
    with History.open(path) as old:
        assert old.version == 1
    db = sqlite3.connect(path)  # a point as schema 1's irkit wrote it
    with db:
        db.execute(
            "INSERT INTO records (digest, kind, repos, machine, fingerprint, added_at, "
            "body) VALUES ('d', 'irkit.run', '{}', 'm', '{}', 'now', '{}')"
        )
        db.execute(
            "INSERT INTO series (key, workload, dims, pipeline, backend, kernel, metric, "
            "machine) VALUES ('k', 'w', '{}', 'p', 'cpu', '', 'seconds', 'm')"
        )
        db.execute(
            "INSERT INTO points (series_id, record_id, commit_sha, value, ci_low, "
            "ci_high, n, floor) VALUES (1, 1, 'abc', 0.5, 0.4, 0.6, 9, 0.01)"
        )
    db.close()
    monkeypatch.setattr(history, "SCHEMA", SCHEMA)
    kept = history.Point("abc", None, 0.5, 0.4, 0.6, 9, 0.01, None, None, {}, 1)
    before = {"w p on cpu: seconds": [kept]}
    with History.open(path) as new:
        assert new.version == len(SCHEMA) >= 2
        assert {s.label: new.points(s.id) for s in new.series()} == before
        assert all(p.log_mean is None for points in before.values() for p in points)
        new.add(records[1])
        ran = [s for s in new.series() if s.metric == "seconds" and not s.kernel]
        points = [p for s in ran for p in new.points(s.id) if p.log_sd is not None]
        assert points and all(p.log_sd > 0 for p in points)
    full = records[0]["total"]["full_log"]
    assert full["n"] == records[0]["total"]["full_s"]["n"] and full["sd"] > 0


PLUGIN = """from dataclasses import dataclass

from xdsl.passes import ModulePass

from irkit.passes import register_pass


@register_pass
@dataclass(frozen=True)
class NothingPass(ModulePass):
    name = "test-history-nothing"
    is_optimization = True

    def apply(self, ctx, op):
        pass
"""


def test_a_record_names_each_plugin_repository_commit_and_history_keeps_it(
    tmp_path: Path,
) -> None:
    """A plugin loaded from a git repository (-L) is in the record's fingerprint with that
    repository's commit ("-dirty" once its tracked files change), and the history keeps it
    beside irkit's: a regression may come from a plugin repository's commit."""
    repo = tmp_path / "passes"
    repo.mkdir()
    (repo / "mine.py").write_text(PLUGIN)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    for step in (["init", "-q"], ["add", "mine.py"], ["commit", "-qm", "a pass"]):
        subprocess.run([*git, *step], check=True, capture_output=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    out, db = tmp_path / "run.json", str(tmp_path / "h.db")
    plugin = str(repo / "mine.py")
    r = subprocess.run([sys.executable, "-m", "irkit.cli.bench", "run", CHAIN, "-L", plugin,
                        "-p", f"test-history-nothing,{SPEC}", "--backend", "cpu", "--dim", "N=8",
                        "--dim", "D=16", "--budget", "0.2", "--json", str(out), "--db", db],
                       capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert r.returncode == 0, r.stderr
    record = json.loads(out.read_text())
    assert record["fingerprint"]["plugins"] == {plugin: sha}
    with History.open(db) as h:
        (repos,) = h.repos("")
    assert repos == {"irkit": record["fingerprint"]["git_sha"], plugin: sha}
    (repo / "mine.py").write_text(PLUGIN + "# changed\n")
    from irkit.measure.fingerprint import repo_commit

    assert repo_commit(repo / "mine.py") == sha + "-dirty"
    assert repo_commit(tmp_path) is None  # not in a repository


WRITER = """
import json, sys
from irkit.measure.history import History
with History.open(sys.argv[1]) as h:
    for line in open(sys.argv[2]):
        h.add(json.loads(line), "writer")
        print("kept", flush=True)
"""


def _consistent(url: str, expected: int | None = None) -> int:
    """Every record kept once, with exactly its points; the number of records."""
    from irkit.measure.history import points_of

    with History.open(url) as h:
        rows = h._run("SELECT id, digest, body FROM records").fetchall()
        digests = [r[1] for r in rows]
        assert len(digests) == len(set(digests))  # none twice
        for record_id, _, body in rows:
            count = h._run("SELECT COUNT(*) FROM points WHERE record_id = ?", (record_id,))
            assert count.fetchone()[0] == len(list(points_of(json.loads(body))))
        labels = [s.label for s in h.series()]
        assert len(labels) == len(set(labels))  # one series, not one per writer
    if expected is not None:
        assert len(rows) == expected
    return len(rows)


@pytest.mark.parametrize("server", ["sqlite", "postgresql"])
def test_two_writers_at_once_and_a_writer_killed_leave_the_database_consistent(
    tmp_path: Path, server: str, request: pytest.FixtureRequest
) -> None:
    """Two processes add overlapping records to one database at once (from a fresh file:
    both create the schema): each record is kept once, with all its points. A third is
    killed while adding: what it kept is whole, and adding everything again completes it."""
    import signal

    url = str(tmp_path / "h.db") if server == "sqlite" else request.getfixturevalue("postgres_url")
    records = _history_of({}, n=120, seed=3)
    for name, part in (("a", records[:80]), ("b", records[40:])):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, url, str(tmp_path / f"{n}.jsonl")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        for n in ("a", "b")
    ]  # fmt: skip
    for w in writers:
        _, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
    _consistent(url, expected=120)
    more = _history_of({}, n=400, seed=4)
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in more))
    killed = subprocess.Popen(
        [sys.executable, "-c", WRITER, url, str(tmp_path / "c.jsonl")],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert killed.stdout is not None
    for _ in range(25):  # some kept, then killed in the middle of the rest
        assert killed.stdout.readline() == "kept\n"
    killed.send_signal(signal.SIGKILL)
    killed.communicate(timeout=60)
    partial = _consistent(url)
    assert 120 + 25 <= partial < 520
    with History.open(url) as h:
        h.add_all((r, "again") for r in more)
    _consistent(url, expected=520)
