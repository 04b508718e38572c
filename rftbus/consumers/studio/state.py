"""What the studio's routes share (`request.app.state.studio`): config, tokens, where grades go, the
dashboard's cache, and the scope check every route makes before it reads or writes anything."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from fastapi import Depends, Request
from fastapi.templating import Jinja2Templates
from prometheus_client import Counter

from rftbus.ground.config import Config
from rftbus.ground.status import run_started
from rftbus.ground.web.auth import Scope, TokenAuth
from rftbus.ground.web.errors import BadRequest

from . import access, dashboard, data
from .grading import KafkaPublisher, Publisher

HERE = Path(__file__).parent


class Studio:
    """What the routes share: config, tokens, where grades go, the dashboard's cache."""

    def __init__(self, cfg: Config, publisher: Publisher | None = None):
        self.cfg = cfg
        self.auth = TokenAuth.from_config(cfg.serve)
        self.publisher = publisher or KafkaPublisher(cfg)
        self.cache = data.Cache(cfg.studio.cache_s)
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self._kafka_quiet_until = 0.0
        self.grades: Counter | None = None  # grades published, by kind (when studio.metrics is on)

    def lags(self) -> list[dict] | None:
        from rftbus.ground.kafka import inspect
        from rftbus.ground.kafka.clients import make_admin
        from rftbus.ground.kafka.committed import CommittedOffsets

        try:
            with CommittedOffsets(self.cfg) as committed:
                c = self.cfg
                stages = {c.explorer.group_id, c.streams.app_id, c.trainer.group_id, c.analytics.group_id}
                names = {t.name for t in c.topics.all().values()}
                return inspect.as_dicts(inspect.groups_info(make_admin(c), committed, timeout=c.studio.lag_timeout_s,
                                                            only=stages, topics=names))
        except Exception:  # noqa: BLE001 - Kafka away or slow: the panel says lags are unknown, the rest still draws
            return None

    def since_ms(self, window: str) -> int:
        """`run`: from the start of the last `rftbus run` on this state folder (all if none); `all`: 0."""
        if window not in ("run", "all"):
            raise BadRequest("window is run or all", param="window")
        started = run_started(self.cfg.state_dir) if window == "run" else None
        return int(started * 1000) if started else 0

    def dashboard(self, window: str) -> dashboard.Dashboard:
        since = self.since_ms(window)

        def make() -> dashboard.Dashboard:
            # Kafka's lags beside the analytics queries, waited for at most studio.lag_timeout_s in all: a
            # broker that is down (the run has ended) must not hold the page.
            # Kafka that did not answer lately (the run has ended) is asked again but not waited for.
            t0 = time.monotonic()
            box: list[list[dict] | None] = []
            asking = threading.Thread(target=lambda: box.append(self.lags()), name="studio-lags", daemon=True)
            asking.start()
            with data.reading(self.cfg) as r:
                d = dashboard.build(self.cfg, r, None, since)
            wait = 0.0 if time.monotonic() < self._kafka_quiet_until else self.cfg.studio.lag_timeout_s
            asking.join(max(0.0, wait - (time.monotonic() - t0)))
            lags = box[0] if box else None
            if lags is None:
                self._kafka_quiet_until = time.monotonic() + 15.0
            d.panels[-1] = dashboard.lag_panel(lags, self.cfg.studio.lag_timeout_s)
            return d
        return self.cache.get(f"dashboard:{since}", make)


def studio_of(request: Request) -> Studio:
    return request.app.state.studio


def requires(scope: Scope):
    """A route dependency: the caller's token (header or the login cookie) must hold `scope`; checked
    before the route reads a parameter or the body."""
    def check(request: Request) -> None:
        access.check(studio_of(request).auth, request, scope)
    return check


def requires_any(*wanted: Scope):
    """A route dependency: the caller's token must hold one of `wanted` (a prompt's picture: graders see it in the
    queue, readers on the experience page)."""
    def check(request: Request) -> None:
        auth = studio_of(request).auth
        if not access.scopes(auth, request) & set(wanted):
            access.check(auth, request, wanted[0])  # (raises, naming the scope)
    return check


GRADER, READER = Depends(requires(Scope.feedback)), Depends(requires(Scope.read))  # route dependencies
GRADER_OR_READER = Depends(requires_any(Scope.feedback, Scope.read))
