"""The results database: every record irkit writes, kept over commits as series of points.

    with History.open("irkit-history.db") as h:        # SQLite: a file, no set-up
        h.add(record, source="results.jsonl")          # -> Added (records, points, skipped)
        for s in h.series(): print(s.label, h.points(s.id))

A record is stored whole, keyed by its content (adding it again adds nothing), with the
repositories it was built from (irkit's commit, and each plugin's: `plugin_repos`), the machine it ran on (`machine_key`: the
host fingerprint without what changes between runs of one machine: the time, versions, the
kernel's build string) and when it was recorded. Its measurements become points of series:
one series for each workload (model and dims), pipeline, backend, kernel (or the whole
program) and metric on one machine, each point a median with its CI and sample count, and
the record's A/A floor where it has one (a later test's unit of "no change").

One schema for every database, portable SQL; `SCHEMA` lists the migrations, each applied
once in order and counted in `irkit_schema`; a database newer than this irkit is refused.
SQLite comes with Python (a path); a `postgresql://` URL is a team's server, through
psycopg (`pip install psycopg`), with the same statements.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from irkit.errors import IrkitError

SCHEMA: list[list[str]] = [
    [  # 1: records, series and their points
        "CREATE TABLE records (id {id}, digest TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, "
        "commit_sha TEXT, repos TEXT NOT NULL, machine TEXT NOT NULL, fingerprint TEXT NOT NULL, "
        "recorded_at TEXT, added_at TEXT NOT NULL, source TEXT, body TEXT NOT NULL)",
        "CREATE TABLE series (id {id}, key TEXT NOT NULL UNIQUE, workload TEXT NOT NULL, "
        "dims TEXT NOT NULL, pipeline TEXT NOT NULL, backend TEXT NOT NULL, "
        "kernel TEXT NOT NULL, metric TEXT NOT NULL, machine TEXT NOT NULL)",
        "CREATE TABLE points (id {id}, series_id BIGINT NOT NULL REFERENCES series(id), "
        "record_id BIGINT NOT NULL REFERENCES records(id), commit_sha TEXT, recorded_at TEXT, "
        "value DOUBLE PRECISION NOT NULL, ci_low DOUBLE PRECISION, ci_high DOUBLE PRECISION, "
        "n BIGINT, floor DOUBLE PRECISION)",
        "CREATE INDEX points_by_series ON points (series_id)",
    ],
    [  # 2: each point's log moments, what a test between runs needs (Welch's on the logs)
        "ALTER TABLE points ADD COLUMN log_mean DOUBLE PRECISION",
        "ALTER TABLE points ADD COLUMN log_sd DOUBLE PRECISION",
    ],
    [  # 3: the reruns' verdicts on suspected changes, one per series and pair of revisions
        "CREATE TABLE verdicts (id {id}, series_id BIGINT NOT NULL REFERENCES series(id), "
        "before_rev TEXT NOT NULL, after_rev TEXT NOT NULL, verdict TEXT NOT NULL, "
        "ratio DOUBLE PRECISION, ci_low DOUBLE PRECISION, ci_high DOUBLE PRECISION, "
        "rounds BIGINT, protocol TEXT NOT NULL, decided_at TEXT NOT NULL, "
        "UNIQUE (series_id, before_rev, after_rev))",
    ],
    [  # 4: the kind of record a series is measured by (a run's and an attribution's differ)
        "ALTER TABLE series ADD COLUMN kind TEXT",
    ],
]
"""The migrations, in order: migration i (from 1) takes a database at version i - 1 to i.
`{id}` is the dialect's auto-numbered primary key."""

WRITE_LOCK = 0x69726B6974
"""PostgreSQL's advisory lock key that irkit's writers take ("irkit")."""

KEPT = ("irkit.run", "irkit.attribution", "irkit.benchmark", "irkit.tune")
"""The record kinds whose measurements become points; others (a failed job's record, a
cross-backend summary of records kept on their own) are counted as skipped."""

VOLATILE = {
    "plugins",
    "time",
    "git_sha",
    "irkit_version",
    "python",
    "numpy",
    "llvmlite",
    "llvm",
    "platform",
    "torch",
    "cuda_python",
    # what irkit read of the machine (the CPU's features are `cpu_features_sha`): fields
    # added over time, so a record without one would otherwise start a series of its own
    "isa",
    "vector_bits",
    "vector_bits_pref",
    "vector_registers",
    # how irkit ran on it, and a GPU's software and its state at the start
    "thread_pool",
    "gomp_spincount",
    "driver",
    "nvrtc",
    "cuda_driver_api",
    "l2_flush_bytes",
    "clocks_start",
}
"""Fingerprint fields that are not the machine: when, what was built or loaded, what irkit
derived from the machine, and a device's state at the start."""


@dataclass(frozen=True)
class Series:
    id: int
    workload: str
    dims: dict
    pipeline: str
    backend: str
    kernel: str
    metric: str
    machine: str
    kind: str | None = None
    """The kind of the records measuring it: a run's time and an attribution's are taken by
    different protocols, so they are different series."""

    @property
    def label(self) -> str:
        dims = ",".join(f"{k}={v}" for k, v in sorted(self.dims.items()))
        where = f"{self.workload}{f'[{dims}]' if dims else ''} {self.pipeline} on {self.backend}"
        by = (
            f" ({self.kind.removeprefix('irkit.')})" if self.kind not in (None, "irkit.run") else ""
        )
        return f"{where}: {self.metric}{f' {self.kernel}' if self.kernel else ''}{by}"


@dataclass(frozen=True)
class Point:
    commit: str | None
    recorded_at: str | None
    value: float
    ci_low: float | None
    ci_high: float | None
    n: int | None
    floor: float | None
    log_mean: float | None = None
    """The mean and standard deviation of the log times, where the record has them."""
    log_sd: float | None = None
    repos: dict | None = None
    """The repositories (name -> commit) its record was built from."""
    record_id: int | None = None


@dataclass(frozen=True)
class Verdict:
    """A rerun's verdict on a suspected change: "confirmed", "refuted" or "undecided", with
    the paired ratio (after / before) and the protocol it was reached by."""

    verdict: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    rounds: int | None
    protocol: dict
    decided_at: str


def _verdict(row: Any) -> Verdict:
    """A Verdict from a row of (verdict, ratio, ci_low, ci_high, rounds, protocol, decided_at)."""
    return Verdict(row[0], row[1], row[2], row[3], row[4], json.loads(row[5]), row[6])


def revision_key(repos: dict) -> str:
    """A revision (repository name -> commit) as one comparable string."""
    return json.dumps(repos, sort_keys=True)


@dataclass(frozen=True)
class Added:
    records: int
    points: int
    skipped: int


def machine_key(fingerprint: dict) -> str:
    """A short hash of the fingerprint's fields that describe the machine (not `VOLATILE`)."""
    kept = {k: v for k, v in fingerprint.items() if k not in VOLATILE}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def points_of(record: dict) -> Iterator[tuple[dict, dict]]:
    """(series fields, point fields) for each measurement of a record of a `KEPT` kind."""
    kind = record.get("kind")
    base = {
        "workload": str(record.get("workload") or Path(str(record.get("model", "?"))).stem),
        "dims": dict(record.get("dims") or {}),
        "pipeline": str(record.get("pipeline") or ""),
        "backend": str(record.get("backend") or "cpu"),
    }
    if kind == "irkit.attribution":
        total, floor = record["total"], (record.get("noise_floor") or {}).get("floor")
        full = _estimate(total["full_s"], floor, total.get("full_log"))
        yield base | {"kernel": "", "metric": "seconds"}, full
        baseline = _estimate(total["baseline_s"], None, total.get("baseline_log"))
        yield base | {"kernel": "", "metric": "baseline seconds"}, baseline
        for p in record["passes"]:
            yield base | {"kernel": "", "metric": f"saved by {p['pass']}"}, _estimate(p["saved_s"])
        for k in (record.get("kernels") or {}).get("full", []):
            if k.get("seconds") is not None:
                yield base | {"kernel": k["name"], "metric": "seconds"}, _estimate(k)
    elif kind == "irkit.run":
        if graph := record.get("graph"):
            moments = (
                {"mean": graph["log_mean"], "sd": graph["log_sd"]} if "log_sd" in graph else None
            )
            yield (
                base | {"kernel": "", "metric": "seconds"},
                _estimate(graph["seconds"], None, moments),
            )
        for k in record.get("kernels") or []:
            if k.get("seconds"):
                yield base | {"kernel": k["name"], "metric": "seconds"}, _estimate(k["seconds"])
        if isinstance(record.get("compile_seconds"), int | float):  # one sample: no CI
            yield (
                base | {"kernel": "", "metric": "compile seconds"},
                _estimate({"value": record["compile_seconds"]}),
            )
    elif kind == "irkit.tune":
        yield from _tune_points(record, base)
    elif kind == "irkit.benchmark" and record.get("benchmark") == "compile_speed":
        yield from _compile_speed_points(record)
    elif kind == "irkit.benchmark":
        bench = {**base, "pipeline": str(record.get("pipeline") or record.get("benchmark", ""))}
        for key, value in record.items():
            if key.startswith("speedup_vs_") and isinstance(value, dict):
                yield bench | {"kernel": "", "metric": key.replace("_", " ")}, _estimate(value)
        if isinstance(record.get("irkit"), dict) and "seconds" in record["irkit"]:
            yield bench | {"kernel": "", "metric": "seconds"}, _estimate(record["irkit"]["seconds"])


def _tune_points(record: dict, base: dict) -> Iterator[tuple[dict, dict]]:
    """A tuning run: its default program's time and its winner's, under the base pipeline."""
    tuned = {**base, "pipeline": str(record["base_pipeline"]), "kernel": ""}
    for program in record["programs"]:
        if program.get("is_default") and program.get("seconds"):
            yield tuned | {"metric": "seconds"}, _estimate(program["seconds"])
    winner = [
        p for p in record["programs"] if p["spec"] == record.get("pipeline") and p.get("seconds")
    ]
    if winner:
        yield tuned | {"metric": "tuned seconds"}, _estimate(winner[0]["seconds"])


def _compile_speed_points(record: dict) -> Iterator[tuple[dict, dict]]:
    """benchmarks/compile_speed.py: the main job's time and each example's compile time,
    cold and warm (irkit's own speed, kept over its commits)."""
    series = {"dims": {}, "pipeline": "compile_speed", "backend": "cpu", "kernel": ""}
    timings = {"main job": record.get("main_job") or {}, **(record.get("examples") or {})}
    for workload, t in timings.items():
        for key, metric in (("cold_s", "compile seconds"), ("warm_s", "warm compile seconds")):
            if isinstance(t.get(key), int | float):
                yield (
                    series | {"workload": workload, "metric": metric},
                    _estimate({"value": t[key]}),
                )


def _estimate(e: dict, floor: float | None = None, moments: dict | None = None) -> dict:
    """A point from any of irkit's estimates: {median|value|seconds, ci_low, ci_high, n},
    with the log moments where the record has them."""
    value = next((e[k] for k in ("median", "value", "seconds") if e.get(k) is not None), None)
    if value is None:
        raise ValueError(f"an estimate without a median: {sorted(e)}")
    moments = moments or {}
    return {
        "value": float(value),
        "ci_low": e.get("ci_low"),
        "ci_high": e.get("ci_high"),
        "n": e.get("n"),
        "floor": floor,
        "log_mean": moments.get("mean"),
        "log_sd": moments.get("sd"),
    }


class History:
    """A results database (`History.open`); a context manager that closes it."""

    def __init__(self, connection: Any, where: str, postgres: bool = False):
        self.db, self.where, self.postgres = connection, where, postgres
        self._migrate()

    @staticmethod
    def open(url: str | Path) -> History:
        """SQLite at a path (or `sqlite:///path`), PostgreSQL at a `postgresql://` URL."""
        text = str(url)
        if text.startswith(("postgresql://", "postgres://")):
            return History._postgres(text)
        path = Path(text.removeprefix("sqlite:///"))
        if path.exists() and not path.is_file():
            raise IrkitError("is not a file: a history database is one SQLite file", str(path))
        try:
            # autocommit: `_transaction` begins each one itself, IMMEDIATE (a writer waits
            # for another's commit, up to the timeout, instead of failing mid-way)
            connection = sqlite3.connect(path, timeout=120, isolation_level=None)
            connection.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as e:
            raise IrkitError(f"cannot open the history database: {e}", str(path)) from None
        return History(connection, str(path))

    @staticmethod
    def _postgres(url: str) -> History:
        try:
            import psycopg
        except ImportError:
            raise IrkitError(
                "a PostgreSQL history needs psycopg: pip install psycopg", "--db"
            ) from None
        shown = url.split("@")[-1]  # the host and database, not the password
        try:
            connection = psycopg.connect(url, autocommit=True)
        except psycopg.Error as e:
            raise IrkitError(f"cannot connect: {str(e).strip().splitlines()[0]}", shown) from None
        return History(connection, shown, postgres=True)

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.db.close()

    def _run(self, sql: str, params: tuple = ()) -> Any:
        """Execute one statement (written with `?` placeholders) on either database."""
        return self.db.execute(sql.replace("?", "%s") if self.postgres else sql, params)

    def _insert(self, sql: str, params: tuple) -> int:
        """An INSERT's new row id."""
        if self.postgres:
            return int(self._run(sql + " RETURNING id", params).fetchone()[0])
        return int(self._run(sql, params).lastrowid or 0)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One transaction, writers one at a time: SQLite's BEGIN IMMEDIATE takes the write
        lock at the start; PostgreSQL's transaction takes an advisory lock. So two writers
        at once never both find a record (or series, or verdict) missing and both add it,
        and a writer killed mid-way leaves every record whole or absent."""
        if self.postgres:
            with self.db.transaction():
                self._run("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK,))
                yield
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    @property
    def version(self) -> int:
        catalog = (
            "SELECT 1 FROM information_schema.tables WHERE table_name = 'irkit_schema'"
            if self.postgres
            else "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'irkit_schema'"
        )
        try:
            if self._run(catalog).fetchone() is None:
                return 0
            row = self._run("SELECT version FROM irkit_schema").fetchone()
        except sqlite3.DatabaseError as e:
            raise IrkitError(f"not an irkit history database ({e})", self.where) from None
        return int(row[0]) if row else 0

    def _migrate(self) -> None:
        """Apply the migrations this database lacks, each in one transaction."""
        have = self.version
        if have > len(SCHEMA):
            raise IrkitError(
                f"history schema {have} is newer than this irkit's ({len(SCHEMA)}): "
                "upgrade irkit to use it",
                self.where,
            )
        key = (
            "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"
            if self.postgres
            else ("INTEGER PRIMARY KEY")
        )
        for version in range(have + 1, len(SCHEMA) + 1):
            with self._transaction():
                if self.version >= version:  # another process migrated it meanwhile
                    continue
                if version == 1:
                    self._run("CREATE TABLE irkit_schema (version INTEGER NOT NULL)")
                    self._run("INSERT INTO irkit_schema VALUES (0)")
                for statement in SCHEMA[version - 1]:
                    self._run(statement.format(id=key))
                self._run("UPDATE irkit_schema SET version = ?", (version,))

    @staticmethod
    def check(record: dict, source: str | None = None) -> None:
        """Raise `add`'s error for a record it would refuse, without a database."""
        try:
            list(points_of(record))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            what = f"missing {e}" if isinstance(e, KeyError) else str(e)
            raise IrkitError(
                f"a {record.get('kind')} record without what irkit writes in one ({what}); "
                "nothing of it kept",
                source,
            ) from None

    def add(self, record: dict, source: str | None = None) -> Added:
        """Keep one record and its points; nothing for one kept before (by its content) or
        of a kind that has none (`KEPT`). A record of a kept kind without what that kind
        holds is an IrkitError naming `source`, and nothing of it is kept."""
        History.check(record, source)
        return self._add(record, source)

    def _add(self, record: dict, source: str | None) -> Added:
        if record.get("kind") not in KEPT:
            return Added(0, 0, 1)
        body = json.dumps(record, sort_keys=True, default=str)
        digest = hashlib.sha256(body.encode()).hexdigest()
        fingerprint = record.get("fingerprint") or {}
        commit = fingerprint.get("git_sha")
        machine = machine_key(fingerprint)
        recorded = fingerprint.get("time")
        with self._transaction():
            if self._run("SELECT 1 FROM records WHERE digest = ?", (digest,)).fetchone():
                return Added(0, 0, 1)
            record_id = self._insert(
                "INSERT INTO records (digest, kind, commit_sha, repos, machine, fingerprint, "
                "recorded_at, added_at, source, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    digest,
                    record["kind"],
                    commit,
                    json.dumps({"irkit": commit, **(fingerprint.get("plugins") or {})}),
                    machine,
                    json.dumps(fingerprint, sort_keys=True, default=str),
                    recorded,
                    time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    source,
                    body,
                ),
            )
            count = 0
            for fields, point in points_of(record):
                series_id = self._series_id({**fields, "machine": machine}, record["kind"])
                self._run(
                    "INSERT INTO points (series_id, record_id, commit_sha, recorded_at, value, "
                    "ci_low, ci_high, n, floor, log_mean, log_sd) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        series_id,
                        record_id,
                        commit,
                        recorded,
                        point["value"],
                        point["ci_low"],
                        point["ci_high"],
                        point["n"],
                        point["floor"],
                        point["log_mean"],
                        point["log_sd"],
                    ),
                )
                count += 1
        return Added(1, count, 0)

    def add_all(self, records: Iterable[tuple[dict, str]]) -> Added:
        """`add` for each (record, source); the totals."""
        totals = [0, 0, 0]
        for record, source in records:
            added = self.add(record, source)
            totals = [
                totals[0] + added.records,
                totals[1] + added.points,
                totals[2] + added.skipped,
            ]
        return Added(*totals)

    def _series_id(self, fields: dict, kind: str) -> int:
        """The series of these fields measured by records of `kind` (a run's time and an
        attribution's are taken by different protocols: not one series)."""
        dims = json.dumps(fields["dims"], sort_keys=True)
        parts = [
            fields[k] for k in ("workload", "pipeline", "backend", "kernel", "metric", "machine")
        ]
        key = hashlib.sha256(json.dumps([dims, *parts, kind]).encode()).hexdigest()[:24]
        row = self._run("SELECT id FROM series WHERE key = ?", (key,)).fetchone()
        if row:
            return int(row[0])
        return self._insert(
            "INSERT INTO series (key, workload, dims, pipeline, backend, kernel, metric, machine, "
            "kind) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (key, fields["workload"], dims, *parts[1:], kind),
        )

    def series(self) -> list[Series]:
        rows = self._run(
            "SELECT id, workload, dims, pipeline, backend, kernel, metric, machine, kind FROM series "
            "ORDER BY workload, pipeline, backend, kernel, metric"
        ).fetchall()
        return [Series(r[0], r[1], json.loads(r[2]), *r[3:]) for r in rows]

    def points(self, series_id: int) -> list[Point]:
        """A series' points in the order they were recorded."""
        rows = self._run(
            "SELECT p.commit_sha, p.recorded_at, p.value, p.ci_low, p.ci_high, p.n, p.floor, "
            "p.log_mean, p.log_sd, r.repos, p.record_id FROM points p "
            "JOIN records r ON r.id = p.record_id "
            "WHERE p.series_id = ? ORDER BY p.recorded_at, p.id",
            (series_id,),
        ).fetchall()
        return [
            Point(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], json.loads(r[9]), r[10])
            for r in rows
        ]

    def body(self, record_id: int) -> dict:
        """One record, whole."""
        row = self._run("SELECT body FROM records WHERE id = ?", (record_id,)).fetchone()
        return json.loads(row[0])

    def verdict(self, series_id: int, before: dict, after: dict) -> Verdict | None:
        """The rerun's verdict on a change in a series between two revisions, if one ran."""
        row = self._run(
            "SELECT verdict, ratio, ci_low, ci_high, rounds, protocol, decided_at FROM verdicts "
            "WHERE series_id = ? AND before_rev = ? AND after_rev = ?",
            (series_id, revision_key(before), revision_key(after)),
        ).fetchone()
        return _verdict(row) if row else None

    def verdicts(self, series_id: int) -> list[tuple[dict, dict, Verdict]]:
        """Every rerun's verdict on a series: (before, after, verdict)."""
        rows = self._run(
            "SELECT before_rev, after_rev, verdict, ratio, ci_low, ci_high, rounds, protocol, "
            "decided_at FROM verdicts WHERE series_id = ? ORDER BY id",
            (series_id,),
        ).fetchall()
        return [(json.loads(r[0]), json.loads(r[1]), _verdict(r[2:])) for r in rows]

    def decide(self, series_id: int, before: dict, after: dict, verdict: Verdict) -> Verdict:
        """Keep a rerun's verdict; where another writer kept one first, that one stands."""
        with self._transaction():
            existing = self.verdict(series_id, before, after)
            if existing is not None:
                return existing
            self._run(
                "INSERT INTO verdicts (series_id, before_rev, after_rev, verdict, ratio, ci_low, "
                "ci_high, rounds, protocol, decided_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    series_id,
                    revision_key(before),
                    revision_key(after),
                    verdict.verdict,
                    verdict.ratio,
                    verdict.ci_low,
                    verdict.ci_high,
                    verdict.rounds,
                    json.dumps(verdict.protocol, sort_keys=True, default=str),
                    verdict.decided_at,
                ),
            )
        return verdict

    def repos(self, commit: str) -> list[dict[str, str | None]]:
        """The repositories (name -> commit) of the records kept for irkit's `commit`."""
        rows = self._run(
            "SELECT repos FROM records WHERE commit_sha LIKE ? ORDER BY recorded_at, id",
            (commit + "%",),
        ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def record(self, commit: str) -> list[dict[str, Any]]:
        """The records kept for a commit (a prefix of its hash), whole."""
        rows = self._run(
            "SELECT body FROM records WHERE commit_sha LIKE ? ORDER BY recorded_at, id",
            (commit + "%",),
        ).fetchall()
        return [json.loads(r[0]) for r in rows]
