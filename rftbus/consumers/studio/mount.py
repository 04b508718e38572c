"""The studio as a mount of `rftbus serve` (entry point `rftbus.serve.mounts`, rftbus/producers/serve/mounts.py):
grades then go through serve's own feedback path."""

from __future__ import annotations

from typing import Any

from rftbus.ground.config import Config
from rftbus.ground.web.auth import Scope


class StudioMount:
    path = "/studio"

    def scopes(self, cfg: Config) -> set[Scope]:
        return {Scope.read} if cfg.studio.mount_in_serve else set()

    def app(self, cfg: Config, service: Any) -> Any:
        from rftbus.consumers.studio.app import create_studio
        from rftbus.consumers.studio.grading import ServePublisher

        return create_studio(cfg, ServePublisher(service))


studio = StudioMount()
