"""The one follower of the metrics topic that feeds the trackers: decode, map to points, fan out.

Its own consumer group commits after each batch is written, so a restarted follower goes on where it was. A
tracker that fails to start is reported and left out; one that fails on a point is reported (once per kind of
error) and keeps getting the next points: a tracker never stops the loop or the other trackers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rftbus.ground.config import Config
from rftbus.ground.config.redact import redact
from rftbus.consumers.trackers.base import KINDS, Point, Tracker, flatten
from rftbus.ground.kafka.clients import make_consumer
from rftbus.ground.kafka.read import consume_ready
from rftbus.ground.schemas import DecodeError, TrainerMetric, make_codec


def mlflow_default_uri(cfg: Config) -> str:
    """A SQLite store in the state folder: MLflow 3 refuses new runs in its file store (maintenance mode)."""
    return f"sqlite:///{(cfg.state_dir / 'mlflow.db').absolute()}"


def make_trackers(cfg: Config) -> list[Tracker]:
    """The trackers `run.report_to` names, each configured from `run.tracking`."""
    t = cfg.run.tracking
    out: list[Tracker] = []
    for name in cfg.run.report_to:
        if name == "tensorboard":
            from rftbus.consumers.trackers.tensorboard import TensorBoardTracker

            out.append(TensorBoardTracker(cfg.state_dir / "tensorboard" / "loop"))
        elif name == "wandb":
            from rftbus.consumers.trackers.wandb import WandbTracker

            out.append(WandbTracker(cfg.state_dir, t.project, t.wandb_mode))
        elif name == "mlflow":
            from rftbus.consumers.trackers.mlflow import MlflowTracker

            out.append(MlflowTracker(t.mlflow_uri or mlflow_default_uri(cfg), t.project))
    return out


def point_of(rec: TrainerMetric, newest_step: int) -> Point | None:
    prefix = KINDS.get(rec.kind)
    if prefix is None:
        return None
    step = rec.step if rec.kind == "metric" else max(rec.step, newest_step)
    return Point(prefix, step, rec.version, dict(rec.values), rec.created_at / 1000.0)


class MetricsFollower:
    def __init__(self, cfg: Config, trackers: list[Tracker], report: Callable[[str], None]):
        self.cfg, self.report = cfg, report
        self.trackers = list(trackers)
        self.run_name = cfg.run.tracking.run_name or cfg.state_dir.absolute().name
        self.params = flatten(redact(cfg.model_dump(mode="json")))  # no secret reaches a tracker
        self.decode = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer(TrainerMetric)
        self.logged = 0
        self.newest_step = 0
        self._errors: set[tuple[str, str]] = set()

    def _start_trackers(self) -> None:
        for t in list(self.trackers):
            try:
                t.start(self.run_name, self.params)
            except Exception as e:  # noqa: BLE001 - a tracker's library and its setup are not ours: say, go on
                self.report(f"tracker {t.name}: not started: {type(e).__name__}: {str(e)[:300]}")
                self.trackers.remove(t)

    def _log(self, point: Point) -> None:
        for t in self.trackers:
            try:
                t.log(point)
            except Exception as e:  # noqa: BLE001 - one tracker failing must not lose the others' points
                key = (t.name, type(e).__name__)
                if key not in self._errors:
                    self._errors.add(key)
                    self.report(f"tracker {t.name}: a point failed ({type(e).__name__}: {str(e)[:300]}); "
                                "later points are still sent")

    def handle(self, value: bytes | None) -> None:
        try:
            rec = self.decode(value, None)
        except DecodeError:
            return  # not a TrainerMetric this follower can read: the sink and the rejected topic deal with it
        if rec is None or rec.model != self.cfg.model.name:
            return
        point = point_of(rec, self.newest_step)
        if point is None:
            return
        if rec.kind == "metric":
            self.newest_step = max(self.newest_step, rec.step)
        self._log(point)
        self.logged += 1

    def run(self, stop: threading.Event, drain_s: float = 2.0) -> None:
        """Until `stop`; then what is already on the topic (up to `drain_s` of quiet), so the last eval point
        is written before the trackers close."""
        if not self.trackers:
            return
        self._start_trackers()
        consumer = make_consumer(self.cfg, f"{self.cfg.streams.app_id}-trackers", **{
            "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.subscribe([self.cfg.topics.metrics.name])
        try:
            quiet_since: float | None = None
            while True:
                msgs = consume_ready(consumer, 500, 0.5)
                for m in msgs:
                    if m.error() is None:
                        self.handle(m.value())
                if msgs:
                    consumer.commit(asynchronous=True)
                if stop.is_set():
                    now = time.monotonic()
                    quiet_since = quiet_since if quiet_since is not None and not msgs else now
                    if now - quiet_since >= drain_s:
                        break
        finally:
            for t in self.trackers:
                try:
                    t.close()
                except Exception as e:  # noqa: BLE001 - closing one must not skip closing the others
                    self.report(f"tracker {t.name}: close failed: {type(e).__name__}: {e}")
            consumer.close()
