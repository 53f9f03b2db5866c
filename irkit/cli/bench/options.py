"""What several irkit-bench commands share: their measuring flags, the progress bar, where
a JSON record is written, and the model `attribute` measures by default."""

from __future__ import annotations

import argparse

from irkit.cli.common import dtype_option, fraction, parse_dim, positive_float, seed, write_output

BACKEND_HELP = (
    "cpu, cuda, cuda-sim (GPU-mapped IR run by the lockstep interpreter), cuda-host (the "
    "printed CUDA C compiled and run on the host), or auto (default)"
)
DEFAULT_MODEL = "transformer_block.graph"


def default_model():
    """The example model `attribute` measures when given no file (shipped with irkit)."""
    from pathlib import Path

    return Path(__file__).resolve().parents[2] / "examples" / DEFAULT_MODEL


def executor_options(p) -> None:
    p.add_argument(
        "--executor",
        default="local",
        choices=("local", "ray", "slurm"),
        help="where jobs run: here (default), Ray tasks (pip install -e '.[ray]'), "
        "or Slurm jobs through submitit ('.[slurm]'); one timing job per node "
        "at a time",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="a running Ray cluster (default: start one on this machine)",
    )
    p.add_argument("--slurm-partition", default=None, metavar="NAME")
    p.add_argument(
        "--slurm-cluster",
        default=None,
        choices=("local",),
        help="local: submitit's local executor instead of Slurm (testing)",
    )


def measure_options(p, budget: float, several: bool = False, dtype: bool = False) -> None:
    p.add_argument(
        "-p",
        "--passes",
        default=None,
        metavar="PIPELINE",
        help="pass pipeline or named pipeline (default: the backend's own)",
    )
    across = (
        (
            "; two or more, comma-separated (cpu,cuda-host), attribute one pipeline on each "
            "and compare the passes' effects (default pipeline: the passes their own "
            "pipelines share)"
        )
        if several
        else ""
    )
    p.add_argument("--backend", default="auto", help=BACKEND_HELP + across)
    p.add_argument("--dim", action="append", default=[], type=parse_dim, metavar="NAME=VALUE")
    if dtype:
        dtype_option(p)
    p.add_argument("--seed", type=seed, default=0, help="seed of the random inputs")
    precision = (
        "stop sampling when every pass's verdict is known: its 99.9%% CI excludes 0 "
        "or is narrower than this fraction of the full program (or of the programs it is "
        "measured between, if slower) either side; the rounds go on with the programs of "
        "the passes still open, a slow pair every few cycles (by need and cost)"
        if several
        else "stop sampling when every median's 95%% CI half-width is under this fraction"
    )
    p.add_argument("--precision", type=fraction, default=0.01, help=precision)
    p.add_argument(
        "--budget",
        type=positive_float,
        default=budget,
        help=f"seconds of sampling at most (default {budget:g})",
    )


def progress():
    """A transient progress bar on stderr, and the callback that drives it."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    tasks: dict[str, int] = {}
    labels = {
        "passes": "running passes (steps, shared by the variants)",
        "compile": "compiling variants' distinct programs",
        "measure": "timing variants (rounds, at most)",
        "kernels": "timing kernels alone (rounds, at most)",
    }

    def tick(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = bar.add_task(labels.get(phase, phase), total=total)
        bar.update(tasks[phase], completed=done, total=total)

    return bar, tick


def json_path(path: str, passed: bool) -> str:
    """Where a run's record goes: `path`, except that a failing run never replaces an
    existing record (a good run's, most likely); it goes beside it as NAME.wrong.json."""
    from pathlib import Path

    p = Path(path)
    if passed or not p.exists():
        return path
    return str(p.with_name(f"{p.stem}.wrong{p.suffix or '.json'}"))


def write_json(path: str, record: dict, model: str) -> None:
    import json

    write_output(path, json.dumps(record, indent=2) + "\n", [model], "--json", "json")


def cpu_list(text: str) -> set[int]:
    """`--pin`'s CPUs: comma-separated numbers, each one this process may run on."""
    import os

    try:
        cpus = {int(c) for c in text.split(",") if c.strip()}
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected CPU numbers like 0 or 0,1, got {text!r}"
        ) from None
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    if not cpus or not cpus <= allowed:
        raise argparse.ArgumentTypeError(
            f"CPUs {text!r}: this process may run on {','.join(map(str, sorted(allowed)))}"
        )
    return cpus
