"""Comparisons across commits: one workload built from two revisions and timed interleaved.

    with Checkouts() as trees:
        base = Side.start(trees, {irkit_repo: "abc123"}, workload)     # a worker process
        new = Side.start(trees, {irkit_repo: "def456"}, workload)
        change = paired_change(base, new, threshold=0.02)           # confirmed | refuted | undecided

A *revision* names a commit for each repository a result was built from: irkit's own, and
each plugin repository's. Each commit that is not the checkout's own clean HEAD is checked
out once into a git worktree (`Checkouts`, removed on exit). A *side* is a worker process
(`revision_worker.py`) that imports that revision's irkit and plugins, compiles and checks
the workload, and then times one round of the whole graph (or one kernel) when asked. The
two sides of a comparison are asked in turn, in alternating order, so that both see the
same machine, and `irkit.measure.bisect.sequential_slower` decides from the paired ratios
(with its error control over repeated looks), or answers "undecided" at its budget.

`irkit.measure.culprits` searches a repository's commits with that test (commit -> pass
-> kernel); `irkit.measure.triage` decides suspected changes with it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from irkit.errors import IrkitError
from irkit.measure.bisect import Decision, sequential_slower
from irkit.measure.stats import Estimate

IRKIT = "irkit"
"""The name irkit's own repository has in a revision (plugins go by their path)."""


def git(repo: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(
        ["git", "--no-optional-locks", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check and done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise IrkitError(f"git {args[0]}: {lines[0] if lines else 'failed'}", str(repo))
    return done.stdout.strip()


@dataclass(frozen=True)
class Repo:
    """A git repository whose commits are built: irkit's own, or a repository of plugins."""

    path: Path

    @staticmethod
    def at(path: str | Path) -> Repo:
        folder = Path(path).resolve()
        if not folder.exists():
            raise IrkitError("no such repository", str(path))
        top = subprocess.run(
            [
                "git",
                "-C",
                str(folder if folder.is_dir() else folder.parent),
                "rev-parse",
                "--show-toplevel",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if top.returncode != 0:
            raise IrkitError("not a git repository", str(path))
        return Repo(Path(top.stdout.strip()))

    @property
    def is_irkit(self) -> bool:
        return (self.path / "irkit" / "__init__.py").is_file()

    def commit(self, rev: str) -> str:
        """The full hash of `rev`; an IrkitError naming it where the repository has none."""
        sha = git(self.path, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
        if not sha:
            raise IrkitError(f"unknown commit {rev!r}", str(self.path))
        return sha

    @property
    def head(self) -> str:
        return self.commit("HEAD")

    @property
    def dirty(self) -> bool:
        return bool(git(self.path, "status", "--porcelain", "--untracked-files=no"))

    def commits(self, good: str, bad: str) -> list[str]:
        """The commits after `good` up to `bad` (oldest first, following first parents);
        an IrkitError where `good` is not an ancestor of `bad`."""
        good, bad = self.commit(good), self.commit(bad)
        ancestor = subprocess.run(
            ["git", "-C", str(self.path), "merge-base", "--is-ancestor", good, bad],
            capture_output=True,
            timeout=30,
        )
        if ancestor.returncode != 0 or good == bad:
            raise IrkitError(
                f"{good[:10]} is not an ancestor of {bad[:10]}: GOOD must come before BAD",
                str(self.path),
            )
        return git(self.path, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}").split()

    def subject(self, sha: str) -> str:
        return git(self.path, "log", "-1", "--format=%s", sha)


class Checkouts:
    """Worktrees of the commits a comparison builds, each made once; all removed on exit.
    A repository's own clean HEAD is used where it is, not checked out again."""

    def __init__(self) -> None:
        self._made: dict[tuple[Path, str], Path] = {}
        self._root: Path | None = None

    def __enter__(self) -> Checkouts:
        return self

    def __exit__(self, *exc: object) -> None:
        for (repo, _), tree in self._made.items():
            git(repo, "worktree", "remove", "--force", str(tree), check=False)
        for repo in {repo for repo, _ in self._made}:
            git(repo, "worktree", "prune", check=False)
        if self._root is not None:
            import shutil

            shutil.rmtree(self._root, ignore_errors=True)

    def tree(self, repo: Repo, sha: str) -> Path:
        if sha == repo.head and not repo.dirty:
            return repo.path
        if (repo.path, sha) not in self._made:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="irkit-revisions-"))
            where = self._root / f"{repo.path.name}-{sha[:12]}-{len(self._made)}"
            git(repo.path, "worktree", "add", "--detach", "--quiet", str(where), sha)
            self._made[(repo.path, sha)] = where
        return self._made[(repo.path, sha)]


@dataclass(frozen=True)
class Workload:
    """What a side compiles and times: a model file, its dims, pipeline and backend, and
    the plugins loaded (paths; those inside a repository of the revision are taken from
    that revision's checkout)."""

    model: str
    dims: Mapping[str, int] = field(default_factory=dict)
    pipeline: str | None = None
    backend: str = "cpu"
    seed: int = 0
    plugins: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        dims = ",".join(f"{k}={v}" for k, v in sorted(self.dims.items()))
        return Path(self.model).stem + (f"[{dims}]" if dims else "")

    @staticmethod
    def of_record(record: dict) -> Workload:
        """The workload a run or attribution record measured."""
        plugins = tuple((record.get("fingerprint") or {}).get("plugins") or {})
        return Workload(
            str(record["model"]),
            dict(record.get("dims") or {}),
            record.get("pipeline") or None,
            str(record.get("backend") or "cpu"),
            int((record.get("protocol") or {}).get("seed", record.get("seed", 0)) or 0),
            plugins,
        )


Revision = Mapping[Repo, str]
"""A commit for each repository that differs from what is installed here."""


def describe(revision: Revision) -> str:
    return " ".join(
        f"{IRKIT if repo.is_irkit else repo.path.name}@{sha[:10]}" for repo, sha in revision.items()
    )


class Side:
    """A worker process holding one revision's compiled workload (see the module docstring)."""

    def __init__(self, proc: subprocess.Popen, label: str, ready: dict, log: Any = None):
        self.proc, self.label, self.ready, self.log = proc, label, ready, log
        self._where: dict[str, str] = {}
        self._workload = ""

    @staticmethod
    def start(trees: Checkouts, revision: Revision, workload: Workload) -> Side:
        """Build `revision` (worktrees) and start its worker; an IrkitError naming the
        revision where the workload does not load, compile or check there."""
        side = Side.launch(trees, revision, workload)
        side.wait_ready()
        return side

    @staticmethod
    def launch(trees: Checkouts, revision: Revision, workload: Workload) -> Side:
        """`start` without waiting for the worker to be ready (`wait_ready`), so that
        several compile at once."""
        env = dict(os.environ)
        path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        plugins = list(workload.plugins)
        model = workload.model
        irkit_root = None
        where: dict[str, str] = {}  # a checkout's path -> its repository's, for messages
        for repo, sha in revision.items():
            tree = trees.tree(repo, sha)
            where[str(tree)] = str(repo.path)
            path.insert(0, str(tree))  # irkit's own, or a plugin imported by module name
            if repo.is_irkit:
                irkit_root = str(tree)
            plugins = [_moved(p, repo.path, tree) for p in plugins]
            model = _moved(model, repo.path, tree)
        env["PYTHONPATH"] = os.pathsep.join(path)
        env.pop("IRKIT_PLUGINS", None)
        source = (Path(__file__).with_name("revision_worker.py")).read_text()
        log = tempfile.TemporaryFile("w+")
        proc = subprocess.Popen(
            [sys.executable, "-c", source],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            cwd=tempfile.gettempdir(),
        )
        job = {
            "model": model,
            "dims": dict(workload.dims),
            "pipeline": workload.pipeline,
            "backend": workload.backend,
            "seed": workload.seed,
            "plugins": plugins,
            "irkit_root": irkit_root,
        }
        side = Side(proc, describe(revision), {}, log)
        side._where, side._workload = where, workload.label
        side._send(json.dumps(job))
        return side

    def wait_ready(self) -> None:
        ready = self._receive()
        if "error" in ready:
            self.close()
            message = ready["error"]
            for tree, repo in self._where.items():
                message = message.replace(tree, repo)
            raise IrkitError(f"{self._workload} at {self.label}: {message}")
        self.ready = ready

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):  # a dead worker: _receive says
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()

    def _receive(self) -> dict:
        assert self.proc.stdout is not None
        try:
            reply = self.proc.stdout.readline()
        except OSError:
            reply = ""
        if not reply:
            code = self.proc.wait(timeout=30)
            said = ""
            if self.log is not None:
                self.log.seek(0)
                lines = [line for line in self.log.read().splitlines() if line.strip()]
                said = f": {lines[-1].strip()}" if lines else ""
            return {"error": f"the worker exited ({code}) without a reply{said}"}
        return json.loads(reply)

    def _ask(self, line: str) -> dict:
        self._send(line)
        return self._receive()

    def sample(self) -> float:
        reply = self._ask("t")
        if "s" not in reply:
            raise IrkitError(f"at {self.label}: {reply.get('error')}")
        return float(reply["s"])

    def kernel_sample(self, name: str) -> float:
        reply = self._ask(f"k {name}")
        if "s" not in reply:
            raise IrkitError(f"kernel {name} at {self.label}: {reply.get('error')}")
        return float(reply["s"])

    def ir(self, prefix: int) -> str:
        return str(self._ask(f"ir {prefix}").get("ir", ""))

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                assert self.proc.stdin is not None
                self.proc.stdin.write("q\n")
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.log):
            if stream is not None:
                with contextlib.suppress(OSError, ValueError):  # a dead worker's broken pipe
                    stream.close()

    def __enter__(self) -> Side:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _moved(path: str, repo: Path, tree: Path) -> str:
    """`path`, if inside `repo`, as the same file in `tree` (that commit's checkout)."""
    try:
        return str(tree / Path(path).resolve().relative_to(repo))
    except ValueError:
        return path


# --- the paired test -------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """NEW against BASE, decided by a paired sequential test: `verdict` is "slower",
    "faster", "no change" (within the threshold in the direction asked) or "undecided";
    `ratio` is new / base with its CI."""

    verdict: str
    ratio: Estimate
    rounds: int
    looks: int
    threshold: float
    direction: str
    copies: int = 1
    """Worker processes a side was timed as (placement slots)."""

    def to_json(self) -> dict:
        return {
            "verdict": self.verdict,
            "ratio": self.ratio.median,
            "ci_low": self.ratio.low,
            "ci_high": self.ratio.high,
            "confidence": self.ratio.confidence,
            "rounds": self.rounds,
            "looks": self.looks,
            "threshold": self.threshold,
            "direction": self.direction,
            "copies": self.copies,
            "test": "paired sequential over worker copies as placement slots, rounds "
            "alternating order (irkit.measure.bisect)",
        }

    def describe(self) -> str:
        r = self.ratio
        return f"{r.median:.3f}x [{r.low:.3f}, {r.high:.3f}] over {self.rounds} rounds"


COPIES = 3
"""Worker processes a side is timed as: where a process's code and buffers landed moves its
time by a few percent (an A/A pair of processes can differ by 3%, seen here under load), so
each side is several processes, the rounds rotating through the pairs, and the paired test's
CI holds their spread (`sequential_slower`'s slots)."""

Sampler = Side | Callable[[], float]


def paired_change(
    base: Sampler | Sequence[Sampler],
    new: Sampler | Sequence[Sampler],
    threshold: float,
    slower: bool = True,
    budget_s: float = 30.0,
    alpha: float = 0.05,
) -> Comparison:
    """Is `new` slower than `base` by more than `threshold` (`slower`), or faster by more
    than that (not `slower`)? Each side is one sampler or several copies (paired in order:
    placement slots); round i asks slot i mod copies, the two sides in an order that
    alternates from one cycle of the slots to the next."""
    a = [x.sample if isinstance(x, Side) else x for x in _listed(base)]
    b = [x.sample if isinstance(x, Side) else x for x in _listed(new)]
    if len(a) != len(b):
        raise ValueError(f"{len(a)} copies of the base against {len(b)} of the new side")
    rounds = itertools.count()

    def sample() -> tuple[float, float]:
        i = next(rounds)
        k = i % len(a)
        if (i // len(a)) % 2 == 0:
            x = a[k]()
            y = b[k]()
        else:
            y = b[k]()
            x = a[k]()
        return (x, y) if slower else (y, x)

    d: Decision = sequential_slower(sample, threshold, alpha, budget_s=budget_s, slots=len(a))
    ratio = d.ratio if slower else _inverse(d.ratio)
    verdict = {"slower": "slower" if slower else "faster", "not slower": "no change"}.get(
        d.verdict, d.verdict
    )
    return Comparison(
        verdict, ratio, d.rounds, d.looks, threshold, "slower" if slower else "faster", len(a)
    )


def _listed(x: Sampler | Sequence[Sampler]) -> list[Sampler]:
    return list(x) if isinstance(x, Sequence) else [x]


def start_copies(
    trees: Checkouts, revisions: Sequence[Revision], workload: Workload, copies: int = COPIES
) -> list[list[Side]]:
    """`copies` workers for each revision, all compiling at once; all closed on an error."""
    launched: list[list[Side]] = []
    try:
        for revision in revisions:
            launched.append([Side.launch(trees, revision, workload) for _ in range(copies)])
        for group in launched:
            for side in group:
                side.wait_ready()
    except BaseException:
        close_all(launched)
        raise
    return launched


def close_all(groups: Sequence[Sequence[Side]]) -> None:
    for group in groups:
        for side in group:
            side.close()


def _inverse(e: Estimate) -> Estimate:
    return Estimate(1 / e.median, 1 / e.high, 1 / e.low, e.confidence, e.n)
