"""irkit-bench replay: run, check and time a snapshot's kernel alone."""

from __future__ import annotations

import argparse

from irkit.cli.common import (
    check_output,
    fraction,
    positive_float,
    write_output,
)
from irkit.cli.views import fmt_time


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("replay", help="run, check and time a snapshot's kernel alone")
    p.add_argument("snapshot", help="a .snap file from `irkit-bench snapshot`")
    p.add_argument("--backend", default=None, help="where to run it (default: the snapshot's)")
    p.add_argument(
        "--against-current",
        action="store_true",
        help="also rebuild the kernel from the model at this commit and time both",
    )
    p.add_argument("--precision", type=fraction, default=0.01)
    p.add_argument("--budget", type=positive_float, default=2.0)
    p.add_argument("--json", default=None, metavar="OUT", help="write the result as JSON")
    return p


def run(args) -> int:
    import json

    from irkit.measure.snapshot import Snapshot, replay

    if args.json:
        check_output(args.json, [args.snapshot], "--json", "json")
    snap = Snapshot.load(args.snapshot)
    result = replay(snap, args.backend, args.precision, args.budget, args.against_current)
    held = "bit-identical to" if result.exact else "within tolerance of"
    verdict = (
        f"{held} the recorded outputs"
        if result.identical
        else f"not {held} the recorded outputs: {', '.join(result.mismatches)}"
    )
    code = "the recorded code" if result.same_code else "code other than the recorded"
    print(f"{result.kernel} on {result.backend} ({code}): {verdict}")
    s = result.seconds
    print(f"  alone: {fmt_time(s.median)} [{fmt_time(s.low)}, {fmt_time(s.high)}] (median, 95% CI)")
    if result.compare is not None:
        c = result.compare
        x = c["speedup"]
        same = "the same code" if c["same_code"] else "different code"
        print(
            f"  current commit's {result.kernel} ({same}, "
            f"{'bit-identical' if c['current_bit_identical'] else 'DIFFERENT outputs'}): "
            f"{fmt_time(c['current_s']['median'])}; recorded / current = {x['median']:.3f}x "
            f"[{x['ci_low']:.3f}, {x['ci_high']:.3f}]"
        )
    for note in result.notes:
        print(f"  note: {note}")
    if args.json:
        write_output(
            args.json,
            json.dumps(result.to_json(), indent=2) + "\n",
            [args.snapshot],
            "--json",
            "json",
        )
    return 0 if result.identical else 1
