"""Loading user code by dotted path (`pkg.mod:Name` or `pkg.mod.Name`) or entry-point name.

Workflows, environments, reward functions and engines all plug in this way, so a user package
can ship them without touching rftbus.
"""

from __future__ import annotations

import importlib
import traceback
from importlib.metadata import entry_points
from typing import Any

from rftbus.ground.errors import RftbusError


class PluginError(RftbusError):
    """A dotted path or entry point that does not resolve to an object."""


def load_object(spec: str, group: str, what: str) -> Any:
    """Resolve `spec`: an entry point in `group`, else a dotted path."""
    for ep in entry_points(group=group):
        if ep.name == spec:
            return ep.load()
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
    elif "." in spec:
        module_name, _, attr = spec.rpartition(".")
    else:
        raise PluginError(f"{what} {spec!r} is neither a built-in, an entry point in {group!r}, nor a dotted path")
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as e:  # the user's file, its line and what is wrong there: one line, not a traceback
        raise PluginError(f"{what} {spec!r}: {e.filename}:{e.lineno}: SyntaxError: {e.msg}") from None
    except ImportError as e:
        raise PluginError(f"{what} {spec!r}: cannot import {module_name!r} ({e})") from None
    except Exception as e:  # noqa: BLE001 - a user's module may raise anything at import: named, with its line
        raise PluginError(f"{what} {spec!r}: importing {module_name!r} failed at {raised_at(e)}: "
                          f"{type(e).__name__}: {first_line(e)}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"{what} {spec!r}: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def raised_at(e: BaseException) -> str:
    """`file:line` of the innermost frame of `e` outside the import machinery (where the user's code raised)."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "importlib" not in f.filename
              and not f.filename.startswith("<frozen")]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else ""
