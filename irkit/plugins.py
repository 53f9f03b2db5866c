"""Plugins: a researcher's own passes (and dialects, backends) loaded into irkit's commands.

A plugin is a Python module that registers what it brings when imported (a pass class under
`@irkit.passes.register_pass`, for one). The commands load:

- every `--plugin MODULE_OR_FILE` given (a dotted module name, or a path to a .py file);
- every name in `IRKIT_PLUGINS` (separated by the OS path separator, `:` on POSIX), which
  is also how worker processes (the suite's isolated jobs) load what their parent loaded;
- every entry point in the `irkit.plugins` group of installed packages.

`load_plugins` records what it loaded in `IRKIT_PLUGINS`, so a subprocess sees the same
passes as its parent.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable
from importlib.metadata import entry_points
from pathlib import Path

from irkit.errors import IrkitError, one_line

ENV = "IRKIT_PLUGINS"
GROUP = "irkit.plugins"


def load_plugins(names: Iterable[str] = ()) -> list[str]:
    """Import the plugins `names`, those in IRKIT_PLUGINS and the installed entry points;
    returns the names loaded (from the arguments and the environment). Raises IrkitError
    naming a plugin that cannot be imported."""
    listed = [n for n in os.environ.get(ENV, "").split(os.pathsep) if n]
    wanted = list(dict.fromkeys([*listed, *names]))
    for name in wanted:
        _import(name)
    for ep in entry_points(group=GROUP):
        try:
            ep.load()
        except Exception as e:  # a broken installed plugin is the user's to see, in one line
            raise IrkitError(
                f"plugin entry point '{ep.name}' ({ep.value}): cannot load: {type(e).__name__}: {one_line(e)}"
            ) from None
    if wanted:
        os.environ[ENV] = os.pathsep.join(wanted)
    return wanted


def _import(name: str) -> None:
    path = Path(name)
    try:
        if name.endswith(".py") or path.is_file():
            if not path.is_file():
                raise IrkitError("--plugin: no such file", name)
            module_name = (
                "irkit_plugin_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
            )
            if module_name in sys.modules:
                return
            spec = importlib.util.spec_from_file_location(module_name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
        else:
            importlib.import_module(name)
    except IrkitError:
        raise
    except Exception as e:  # ImportError, or anything the module raised while importing
        raise IrkitError(
            f"--plugin {name}: cannot import it: {type(e).__name__}: {one_line(e)}"
        ) from None
