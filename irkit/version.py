"""irkit's version, from the installed package's metadata (a bare source tree says so)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("irkit")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"
