from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# cpu-parallelize{threads=0} resolves to IRKIT_NUM_THREADS: one thread for the tests, so that
# what they compile and time does not depend on the CI machine's core count. Tests of
# threading ask for their thread counts explicitly.
os.environ["IRKIT_NUM_THREADS"] = "1"
# Every pass's word that it changed nothing (`irkit.ir.unchanged`) is checked against the IR
# wherever the tests share pipelines' work (`apply_pipelines`): a wrong word is an error.
os.environ["IRKIT_CHECK_UNCHANGED"] = "1"
# The tests' subprocesses (irkit-opt, irkit-bench, lit and filecheck) run the console scripts
# installed beside this Python, not a version manager's shims of them: pyenv's put a bash
# script and `pyenv exec` before each, and lit alone starts about 400 of them.
_SCRIPTS = Path(sys.executable).parent
if (_SCRIPTS / "irkit-opt").exists():
    os.environ["PATH"] = f"{_SCRIPTS}{os.pathsep}{os.environ.get('PATH', '')}"

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.graph"))

SMALL = {
    "conv_block": {"N": 1, "H": 12},
    "elementwise_chain": {"N": 64, "D": 96},
    "gemm": {"M": 64, "N": 48, "K": 80},
    "layernorm": {"T": 16, "H": 96},
    "llama_block": {"S": 12, "D": 64, "H": 4, "HK": 2, "HD": 16, "F": 96},
    "llama_decode": {"L": 20, "D": 64, "H": 4, "HK": 2, "HD": 16, "F": 96},
    "mlp": {"B": 4, "D": 64, "F": 256},
    "softmax": {"R": 32, "C": 100},
    "transformer_block": {"B": 1, "S": 16, "D": 32, "F": 64},
}
"""Dims at which every example runs in milliseconds (tests use these)."""


@pytest.fixture(params=EXAMPLES, ids=lambda p: p.stem)
def example(request: pytest.FixtureRequest) -> Path:
    return request.param


SUBSET_EXAMPLES = [p for p in EXAMPLES if not p.stem.startswith("llama_")]
"""The examples every subset of a default pipeline is checked on: the Llama blocks run the
transformer block's passes on more kernels (3 minutes more on the 2-core CI machine), and
are checked under the default pipelines on every backend instead."""


@pytest.fixture(params=SUBSET_EXAMPLES, ids=lambda p: p.stem)
def subset_example(request: pytest.FixtureRequest) -> Path:
    return request.param


def check_every_subset(pipeline_name: str, module, backend: str, seed: int) -> int:
    """The attribution invariant: every subset of `pipeline_name`'s optional passes compiles
    for `backend` and matches the reference. Returns the number of distinct programs checked.

    The subsets are walked pass by pass as a frontier of distinct modules: after each
    optional pass, every module so far either runs it or not, and modules with the same text
    are one (all subsets that reach it continue the same way). The final frontier holds the
    program of every one of the 2^k subsets, each compiled and checked once, as attribution
    measures them; a pass that changes nothing on an example costs nothing. Once the
    frontier holds 8 modules, each goes on in one of two processes (forked: the machine's
    two cores, each taking the next module as it finishes one; copying and printing modules
    is most of the time). Programs reached from two of them are checked twice."""
    from irkit.pipelines import PIPELINES, parse_passes

    pipeline = PIPELINES[pipeline_name]
    passes = [(name, parse_passes(name)[0], name in pipeline.optional) for name in pipeline.passes]
    frontier = [(str(module), module.clone(), "")]
    done = 0
    while done < len(passes) and len(frontier) < 8:
        frontier = _advance(frontier, passes[done : done + 1])
        done += 1
    if done == len(passes) or (os.cpu_count() or 1) < 2:
        results = [_finish(frontier, passes[done:], module, backend, seed)]
    else:
        import multiprocessing

        parts = [frontier[i :: len(frontier)] for i in range(len(frontier))]  # one a module
        _FORKED.update(halves=parts, rest=passes[done:], args=(module, backend, seed))
        with multiprocessing.get_context("fork").Pool(2) as pool:
            results = pool.map(_finish_half, range(len(parts)), chunksize=1)
        _FORKED.clear()
    for _, failure in results:
        assert failure is None, failure
    return sum(count for count, _ in results)


_FORKED: dict = {}
"""What the forked halves of `check_every_subset` read (modules cannot be pickled)."""


def _finish_half(index: int) -> tuple[int, str | None]:
    # a worker may run on any CPU, whatever an earlier test left the parent pinned to (in
    # the full suite the walk took twice its time alone: both workers on one CPU)
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
    module, backend, seed = _FORKED["args"]
    return _finish(_FORKED["halves"][index], _FORKED["rest"], module, backend, seed)


def _advance(frontier: list, passes: list) -> list:
    """The frontier after `passes` (name, pass, optional): each module with and, where the
    pass is optional, without it; modules of the same text once."""
    from irkit.ir import make_context

    ctx = make_context()
    for name, p, optional in passes:
        reached: dict[str, tuple] = {}
        for text, m, spec in frontier:
            if optional:
                reached.setdefault(text, (text, m, spec))
            after = m.clone()
            p.apply(ctx, after)  # verified once, at the end (apply_passes would copy it)
            after_text = str(after)
            reached.setdefault(after_text, (after_text, after, f"{spec},{name}".lstrip(",")))
        frontier = list(reached.values())
    return frontier


def _finish(
    frontier: list, passes: list, module, backend: str, seed: int
) -> tuple[int, str | None]:
    """The rest of the walk, then every distinct program compiled and checked: how many,
    and the first failure's description (None: every one matched)."""
    from irkit.ir import verify
    from irkit.runtime import BACKENDS, lower_for
    from irkit.runtime.check import check

    programs: set[str] = set()
    for _, m, spec in _advance(frontier, passes):
        try:
            verify(m)
            lowered = lower_for(m, backend)
            text = str(lowered)
            if text in programs:
                continue
            programs.add(text)
            checks, _ = check(BACKENDS[backend]().compile(lowered), module, seed)
        except Exception as e:  # noqa: BLE001 - reported with the subset that raised it
            return len(programs), f"{spec}: {type(e).__name__}: {e}"
        if not (checks and all(c.passed for c in checks)):
            return len(programs), f"{spec}: {[c.describe() for c in checks]}"
    return len(programs), None


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A real PostgreSQL server of its own (Debian's postgresql, which .ci/run installs),
    started for these tests on a free port and stopped after; a skip saying why where none
    can start. As root, the server runs as the postgres user (it refuses root). Tests take
    a database of their own from it (`postgres_url`)."""
    import glob
    import os
    import shutil
    import socket
    import tempfile

    pytest.importorskip("psycopg", reason="psycopg is not installed (the test extra has it)")
    found = shutil.which("initdb") or next(
        iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))[::-1]), None
    )
    if found is None:
        pytest.skip("no PostgreSQL server here (Debian's postgresql: .ci/run installs it)")
    bindir = Path(found).parent
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="irkit-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: the server cannot start as root")
        shutil.chown(root, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = root / "data"
    init = subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust",
                           "-U", "postgres"], capture_output=True, text=True)  # fmt: skip
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"initdb failed: {init.stderr.strip().splitlines()[-1:]}")
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1"
    start = subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-o", options,
                            "-l", str(root / "log"), "-w", "start"], capture_output=True, text=True)  # fmt: skip
    if start.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"the PostgreSQL server did not start: {start.stderr.strip()[-300:]}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                        "stop"], capture_output=True)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database on the test server, dropped after the test."""
    import uuid

    import psycopg

    name = f"irkit_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield postgres_server.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(autouse=True)
def _plugins_stay_with_their_test() -> Iterator[None]:
    """`load_plugins` records what it loaded in IRKIT_PLUGINS, for the subprocesses of the
    command that loaded them; a command run in-process by a test (the bad-input corpus's
    `-L` cases) would leave it to the next test of the worker, whose subprocesses then load
    a plugin file of another test's (a history record named one)."""
    before = os.environ.get("IRKIT_PLUGINS")
    yield
    if before is None:
        os.environ.pop("IRKIT_PLUGINS", None)
    else:
        os.environ["IRKIT_PLUGINS"] = before
