"""`rftbus run`'s Prometheus endpoint (run.metrics_port): the loop's health for an operator's monitoring.

Each child already publishes its state in its status file (rftbus/ground/status.py); this collector turns those files,
the consumer lags the run reads every 2 s and the supervisor's restart counts into metric families at scrape
time (the textfile-collector pattern of Prometheus' node exporter), so a trainer, streams worker or explorer
needs no HTTP server of its own; serve and the studio serve their own /metrics. Counters are the children's own
running totals (they restart from the checkpointed or committed state after a crash, so a rate() sees a reset).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rftbus.ground.status import read_statuses

log = logging.getLogger("rftbus.apps.run")


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class StatusCollector(Collector):
    """`role` / `ident`: only the status files of that role (and id) in the state folder, for a stage started on
    its own (`rftbus train --metrics-port`); None: every process (`rftbus run`). `last_eval`: the run's newest
    held-out eval point."""

    def __init__(self, state_dir: Path, lags: Callable[[], dict[str, int]] = lambda: {},
                 restarts: Callable[[], dict[str, int]] = lambda: {},
                 last_eval: Callable[[], dict | None] = lambda: None, role: str | None = None,
                 ident: str | None = None):
        self.state_dir, self.lags, self.restarts, self.last_eval = state_dir, lags, restarts, last_eval
        self.role, self.ident = role, ident

    def collect(self) -> Iterator[Metric]:
        statuses = read_statuses(self.state_dir)
        if self.role is not None:
            statuses = [s for s in statuses if s.get("role") == self.role
                        and (self.ident is None or str(s.get("id")) == self.ident)]
        steps = CounterMetricFamily("rftbus_trainer_steps", "optimizer steps taken (rate(): the step rate)", labels=["id"])
        stale = GaugeMetricFamily("rftbus_trainer_staleness", "mean versions behind of what the last step trained",
                                  labels=["id"])
        tps = GaugeMetricFamily("rftbus_trainer_tokens_per_second", "the trainer's token throughput", labels=["id"])
        loss = GaugeMetricFamily("rftbus_trainer_loss", "the last step's loss", labels=["id"])
        version = GaugeMetricFamily("rftbus_weight_version", "the weight version each process holds (trainer: "
                                    "published; explorer, serve: generating with; streams: newest seen)",
                                    labels=["role", "id"])
        produced = CounterMetricFamily("rftbus_explorer_experiences", "experiences an explorer produced",
                                       labels=["id"])
        rejected = CounterMetricFamily("rftbus_streams_rejected", "experiences the streams rejected, by reason",
                                       labels=["reason"])
        curated = CounterMetricFamily("rftbus_streams_curated", "experiences the streams passed to the trainer")
        by_reason: dict[str, float] = {}
        n_curated = 0.0
        for s in statuses:
            role, ident = str(s.get("role")), str(s.get("id"))
            v = _num(s.get("latest_version") if role == "streams" else s.get("version"))
            if v is not None:
                version.add_metric([role, ident], v)
            if role == "trainer":
                for fam, key in ((steps, "step"), (stale, "staleness"), (tps, "throughput_tokens_s"), (loss, "last_loss")):
                    x = _num(s.get(key))
                    if x is not None:
                        fam.add_metric([ident], x)
            elif role == "explorer" and _num(s.get("experiences_produced")) is not None:
                produced.add_metric([ident], float(s["experiences_produced"]))
            elif role == "streams":
                for reason, n in (s.get("rejected_by_reason") or {}).items():
                    by_reason[reason] = by_reason.get(reason, 0.0) + float(n)
                n_curated += float(_num(s.get("curated")) or 0.0)
        for reason, n in sorted(by_reason.items()):
            rejected.add_metric([reason], n)
        curated.add_metric([], n_curated)
        lag = GaugeMetricFamily("rftbus_consumer_lag", "records not yet consumed, per consumer group", labels=["group"])
        for group, n in self.lags().items():
            lag.add_metric([group], float(n))
        restarts = CounterMetricFamily("rftbus_child_restarts", "restarts of each supervised child", labels=["child"])
        for child, n in self.restarts().items():
            restarts.add_metric([child], float(n))
        yield from (steps, stale, tps, loss, version, produced, rejected, curated, lag, restarts)
        point = self.last_eval()
        if point is not None:
            reward = GaugeMetricFamily("rftbus_eval_reward", "the newest held-out eval point's mean reward")
            reward.add_metric([], float(point["reward"]))
            ev = GaugeMetricFamily("rftbus_eval_version", "the weight version the newest eval point scored")
            ev.add_metric([], float(point["version"]))
            yield from (reward, ev)


def serve_metrics(host: str, port: int, collector: StatusCollector) -> tuple[Callable[[], None], int] | None:
    """Start the endpoint; a port already taken is reported and the run goes on without it. (its stop, its port)"""
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        log.warning("run metrics: cannot listen on %s:%s (%s); no /metrics for this run", host, port, e)
        return None

    def stop() -> None:
        server.shutdown()
        thread.join(5)
    return stop, server.server_port
