"""Compile speed (issue 25): how fast irkit turns models into running code, recorded per commit.

    python benchmarks/compile_speed.py [--quick] [--main-job] [--out benchmarks/results/compile_speed.jsonl]

Measured, each in a fresh process so that nothing is warm by accident:
- the default-cpu pass pipeline on generated elementwise chains of 250, 500, 1000 and 2000
  ops: seconds and input ops per second (the acceptance asks >= 5,000 ops/s at 2000, and no
  pass growing faster than n log n: the per-pass times are recorded for that);
- `irkit.compile` of every example under default-cpu, with an empty machine-code cache
  (cold) and again with the cache it left (warm);
- with `--main-job`: the README's main command, `irkit-bench attribute`, cold and warm.
Printed last: a table; `--out` appends one record with the host fingerprint.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHAIN = """
import json, sys, time
from irkit.frontend import parse_source
from irkit.pipelines import apply_passes, parse_passes
n = int(sys.argv[1])
ops = ["relu", "sigmoid", "tanh", "exp"]
lines = ["model chain", "input x : f32[64, 64]", "v0 = x"]
lines += [f"v{i + 1} = {ops[i % 4]}(v{i}) + v{i}" for i in range(n // 2)]
lines.append(f"output y = v{n // 2}")
module = parse_source("\\n".join(lines) + "\\n", "chain.graph", ".graph")
count = sum(1 for _ in module.walk()) - 2
passes, times = parse_passes("default-cpu"), {}
start = time.perf_counter()
apply_passes(module, passes, after_pass=lambda p, m, s: times.__setitem__(p.name, s))
print(json.dumps({"ops": count, "seconds": time.perf_counter() - start, "passes": times}))
"""

COMPILE = """
import json, sys, time
import irkit
start = time.perf_counter()
irkit.compile(sys.argv[1], "default-cpu", backend="cpu")
print(json.dumps({"seconds": time.perf_counter() - start}))
"""


def child(code: str, *args: str, cache: str) -> dict:
    env = {**os.environ, "IRKIT_CACHE": cache}
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                         text=True, check=True, cwd=ROOT).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def timed(command: list[str], cache: str) -> float:
    env = {**os.environ, "IRKIT_CACHE": cache}
    start = time.perf_counter()
    subprocess.run(command, env=env, capture_output=True, check=True, cwd=ROOT)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="chains up to 500 ops")
    parser.add_argument("--main-job", action="store_true", help="also time irkit-bench attribute")
    parser.add_argument("--out", default=None, help="append the record to this JSON Lines file")
    args = parser.parse_args()
    from irkit.measure.fingerprint import host_fingerprint

    record: dict = {"kind": "irkit.benchmark", "benchmark": "compile_speed", "chains": [],
                    "examples": {}, "fingerprint": host_fingerprint()}  # fmt: skip
    with tempfile.TemporaryDirectory() as cold_dir:
        for n in (250, 500) if args.quick else (250, 500, 1000, 2000):
            r = child(CHAIN, str(n), cache=cold_dir)
            r["ops_per_s"] = r["ops"] / r["seconds"]
            record["chains"].append(r)
        for path in sorted((ROOT / "examples").glob("*.graph")):
            with tempfile.TemporaryDirectory() as cache:
                cold = child(COMPILE, str(path), cache=cache)["seconds"]
                warm = child(COMPILE, str(path), cache=cache)["seconds"]
            record["examples"][path.stem] = {"cold_s": cold, "warm_s": warm}
        if args.main_job:
            with tempfile.TemporaryDirectory() as cache:
                bench = [sys.executable, "-m", "irkit.cli.bench", "attribute"]
                record["main_job"] = {"cold_s": timed(bench, cache), "warm_s": timed(bench, cache)}
    print(f"{'chain ops':>10} {'seconds':>8} {'ops/s':>8}  slowest passes")
    for r in record["chains"]:
        slow = sorted(r["passes"].items(), key=lambda kv: -kv[1])[:3]
        print(f"{r['ops']:>10} {r['seconds']:>8.2f} {r['ops_per_s']:>8.0f}  "
              + ", ".join(f"{k} {v:.2f}s" for k, v in slow))  # fmt: skip
    print(f"{'example':>18} {'cold s':>7} {'warm s':>7}")
    for name, r in record["examples"].items():
        print(f"{name:>18} {r['cold_s']:>7.2f} {r['warm_s']:>7.2f}")
    if "main_job" in record:
        m = record["main_job"]
        print(
            f"main job (irkit-bench attribute): cold {m['cold_s']:.0f} s, warm {m['warm_s']:.0f} s"
        )
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
