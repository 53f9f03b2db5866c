"""A nightly run: a coverage set measured at the current commit, kept, triaged.

A configuration file (TOML) names the coverage set and where results go:

    db = "irkit-history.db"            # or postgresql://user@host/db
    results = "nightly"                # a folder: one JSON Lines file per commit, the triage
    budget = 1.0                       # seconds of timing per workload (run's --budget)
    rerun_budget = 30.0                # seconds per rerun of a suspected change
    plugins = ["passes/mine.py"]       # loaded for every workload
    [repos]                            # where reruns build a repository (default: its own path)
    irkit = "../irkit"
    [[workloads]]
    model = "models/mlp.graph"         # paths are taken from the configuration's folder
    dims = { B = 8 }
    pipelines = ["default", "fuse-kernels,lower-graph-to-loops"]
    backends = ["cpu"]

`nightly` runs every workload x pipeline x backend (`irkit.measure.run.run_model`: checked,
then timed) on an executor (here, Ray, Slurm), appends the records to `results/<commit>.jsonl` (a job already
recorded there is not run again: a nightly interrupted resumes), keeps them in the
database, then detects change points and applies the rerun rules (`irkit.measure.triage`),
and writes the triage list to `results/triage-<commit>.txt`.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from irkit.errors import IrkitError

KEYS = {
    "db",
    "results",
    "precision",
    "budget",
    "rerun_budget",
    "min_change",
    "plugins",
    "repos",
    "workloads",
    "seed",
}
DEFAULTS = {"precision": 0.01, "budget": 1.0, "rerun_budget": 30.0, "min_change": 0.02}
WORKLOAD_KEYS = {"name", "model", "dims", "pipelines", "backends"}


@dataclass(frozen=True)
class NightlyJob:
    """One workload x pipeline x backend of the coverage set (picklable: it may run
    elsewhere)."""

    workload: str
    model: str
    dims: dict[str, int]
    pipeline: str | None
    backend: str
    precision: float
    budget: float
    seed: int
    plugins: tuple[str, ...]

    def key(self) -> str:
        dims = ",".join(f"{k}={v}" for k, v in sorted(self.dims.items()))
        return f"{self.workload}|{dims}|{self.pipeline or 'default'}|{self.backend}"


@dataclass(frozen=True)
class Config:
    path: Path
    db: str
    results: Path
    precision: float = 0.01
    budget: float = 1.0
    rerun_budget: float = 30.0
    min_change: float = 0.02
    seed: int = 0
    plugins: tuple[str, ...] = ()
    repos: dict[str, str] = field(default_factory=dict)
    jobs: tuple[NightlyJob, ...] = ()


def read_config(path: str | Path, db: str | None = None) -> Config:
    """The configuration at `path`; an IrkitError naming the file (and line, column, or
    key) for anything it cannot use."""
    path = Path(path)
    data = _parse(path)
    base = path.resolve().parent

    def bad(key: str, what: str) -> IrkitError:
        return IrkitError(f"{key}: {what}", str(path))

    unknown = sorted(set(data) - KEYS)
    if unknown:
        raise bad(unknown[0], f"unknown key (known: {', '.join(sorted(KEYS))})")
    numbers = {}
    for key, default in DEFAULTS.items():
        value = data.get(key, default)
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
            raise bad(key, f"a positive number, not {value!r}")
        numbers[key] = float(value)
    seed = data.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise bad("seed", f"an integer >= 0, not {seed!r}")
    plugins = data.get("plugins", [])
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        raise bad("plugins", "a list of paths (or module names)")
    plugins = [str(base / p) if p.endswith(".py") else p for p in plugins]
    repos = data.get("repos", {})
    if not isinstance(repos, dict) or not all(isinstance(v, str) for v in repos.values()):
        raise bad("repos", "a table of name = path")
    workloads = data.get("workloads")
    if not isinstance(workloads, list) or not workloads:
        raise bad("workloads", "at least one [[workloads]] table, each with a model")
    shared = {
        "precision": numbers["precision"],
        "budget": numbers["budget"],
        "seed": seed,
        "plugins": tuple(plugins),
    }
    jobs = [job for n, w in enumerate(workloads, 1) for job in _jobs(w, n, base, shared, bad)]
    db_url = db or str(data.get("db", "irkit-history.db"))
    if "://" not in db_url and not Path(db_url).is_absolute():
        db_url = str(base / db_url)
    return Config(
        path,
        db_url,
        base / str(data.get("results", "nightly")),
        numbers["precision"],
        numbers["budget"],
        numbers["rerun_budget"],
        numbers["min_change"],
        seed,
        tuple(plugins),
        dict(repos),
        tuple(jobs),
    )


def _parse(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except OSError as e:
        raise IrkitError(
            f"cannot read the nightly configuration: {e.strerror}", str(path)
        ) from None
    except UnicodeDecodeError:
        raise IrkitError("not TOML: not UTF-8 text", str(path)) from None
    except tomllib.TOMLDecodeError as e:
        where = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        text = re.sub(r"\s*\(at line.*\)", "", str(e))
        spot = f"{path}:{where[1]}:{where[2]}" if where else str(path)
        raise IrkitError(f"not TOML: {text}", spot) from None


def _jobs(w: object, n: int, base: Path, shared: dict, bad) -> list[NightlyJob]:
    """The jobs of the configuration's `n`-th [[workloads]] table."""
    where = f"workloads[{n}]"
    if not isinstance(w, dict) or not isinstance(w.get("model"), str):
        raise bad(where, 'needs model = "path"')
    extra = sorted(set(w) - WORKLOAD_KEYS)
    if extra:
        raise bad(f"{where}.{extra[0]}", f"unknown key (known: {', '.join(sorted(WORKLOAD_KEYS))})")
    dims = w.get("dims", {})
    if not isinstance(dims, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in dims.values()
    ):
        raise bad(f"{where}.dims", "a table of name = positive integer")
    model = w["model"] if Path(w["model"]).is_absolute() else str(base / w["model"])
    if not Path(model).is_file():
        raise bad(f"{where}.model", f"no such file: {model}")
    pipelines, backends = w.get("pipelines", ["default"]), w.get("backends", ["cpu"])
    for key, value in (("pipelines", pipelines), ("backends", backends)):
        if not isinstance(value, list) or not value or not all(isinstance(x, str) for x in value):
            raise bad(f"{where}.{key}", "a non-empty list of strings")
    name = str(w.get("name") or Path(model).stem)
    return [
        NightlyJob(
            name,
            model,
            dict(dims),
            None if pipeline == "default" else pipeline,
            backend,
            shared["precision"],
            shared["budget"],
            shared["seed"],
            shared["plugins"],
        )
        for pipeline in pipelines
        for backend in backends
    ]


def run_job(job: NightlyJob) -> dict:
    """One job, in this process: its run record, with the workload's name and sizes."""
    from irkit.measure.run import run_model
    from irkit.plugins import load_plugins

    load_plugins(job.plugins)
    record = run_model(
        job.model, job.pipeline, job.backend, job.dims, job.seed, job.precision, job.budget
    ).to_json()
    record["workload"] = job.workload
    record["nightly_key"] = job.key()
    return record
