"""Apps that mount into `rftbus serve` under a path (the studio at /studio), found through the Python entry
point group `rftbus.serve.mounts` rather than imported: serve knows this interface, not the apps, so a
component that mounts here imports serve and serve never imports it back (no cycle, #35), and a serve-only
install runs without them.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, Protocol

from rftbus.ground.config import Config
from rftbus.ground.web.auth import Scope

GROUP = "rftbus.serve.mounts"


class MountPlugin(Protocol):
    path: str  # e.g. "/studio"

    def scopes(self, cfg: Config) -> set[Scope]:
        """The token scopes its routes answer under this config; empty: not mounted."""
        ...

    def app(self, cfg: Config, service: Any) -> Any:
        """The ASGI app, given serve's LiveService."""
        ...


def plugins() -> list[MountPlugin]:
    """The installed mounts; one whose component is not installed (its extra left out) is skipped."""
    found = []
    for ep in entry_points(group=GROUP):
        try:
            found.append(ep.load())
        except ModuleNotFoundError:
            continue
    return found


def mounted(cfg: Config) -> list[MountPlugin]:
    return [p for p in plugins() if p.scopes(cfg)]


def mounted_scopes(cfg: Config) -> set[Scope]:
    return {s for p in mounted(cfg) for s in p.scopes(cfg)}
