"""irkit-bench dashboard: the history as a static site (or served).

irkit-bench dashboard [--db URL] [-o DIR] [--serve PORT]
"""

from __future__ import annotations

import argparse
import os

from irkit.cli.bench.history import DEFAULT_DB
from irkit.cli.common import bounded_int

MARK = ".irkit-dashboard"
"""The file that marks a folder as a dashboard irkit wrote (and may write again)."""


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "dashboard",
        help="the history as a site: each series with its change points, the triage "
        "list, and each change's verdict, IR diff, kernels and records",
    )
    p.add_argument(
        "--db",
        default=os.environ.get("IRKIT_HISTORY", DEFAULT_DB),
        help="the history database (a SQLite file or postgresql://...)",
    )
    p.add_argument(
        "-o",
        "--out",
        default="irkit-dashboard",
        metavar="DIR",
        help="the folder to write (default irkit-dashboard; a folder irkit did "
        "not write is refused)",
    )
    p.add_argument(
        "--serve",
        type=bounded_int(1, 65535),
        default=None,
        metavar="PORT",
        help="then serve it on localhost:PORT until interrupted",
    )
    return p


def run(args) -> int:
    from pathlib import Path

    from irkit.errors import IrkitError
    from irkit.measure.dashboard import write_site
    from irkit.measure.history import History

    out = Path(args.out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARK).exists())):
        raise IrkitError("is not a dashboard irkit wrote: give -o a new or empty folder", str(out))
    if not Path(args.db).exists() and "://" not in args.db:
        raise IrkitError("no such history database (irkit-bench history add)", args.db)
    with History.open(args.db) as history:
        pages = write_site(history, out)
    (out / MARK).write_text("written by irkit-bench dashboard; it may write here again\n")
    print(f"dashboard: {len(pages)} page(s) in {out}/ (open {out / 'index.html'})")
    if args.serve is not None:
        _serve(out, args.serve)
    return 0


def _serve(folder, port: int) -> None:
    import functools
    import http.server

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        print(f"serving http://127.0.0.1:{port}/ (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
