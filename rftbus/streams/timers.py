"""The streams worker's timers: the library loggers pinned to the worker's level, ticks on the joined and join
topics (a partition with no traffic still moves its clocks), the checkpoint's redelivery check, and the status
file and metrics records."""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from rftbus.ground.config import Config
from rftbus.ground.schemas import topic_context
from rftbus.streams.join import ScanClock
from rftbus.streams.outputs import H_KIND
from rftbus.streams.telemetry import flat_counts, metric

if TYPE_CHECKING:
    from rftbus.streams.app import StreamsApp


def add_timers(sa: StreamsApp, cfg: Config, wid: str) -> None:
    app, sc, topo, side, codec = sa.app, cfg.streams, sa.topo, sa.side_producer, sa.codec
    checkpoint, counters, live, join, follower = sa.checkpoint, sa.counters, sa.live, sa.join, sa.follower
    pass_rates, status, n = sa.pass_rates, sa.status, topo.raw_partitions

    @app.task
    async def quiet_libraries() -> None:
        # The worker's logging setup leaves aiokafka/faust loggers at DEBUG-enabled levels; every produced
        # record then formats a debug line (measured: ~6% of the worker's CPU). Pin them to the configured level.
        level = logging.getLevelName(sc.log_level.upper())
        for name in ("aiokafka", "faust", "mode", "rftbus.streams"):
            logging.getLogger(name).setLevel(level)

    @app.timer(sc.tick_interval_s, name="ticks")
    async def ticks() -> None:
        for topic in (topo.joined, topo.join):
            for p in range(n):
                side.produce(topic, value=b"", partition=p, headers=[(H_KIND, b"tick")])
        side.poll(0)

    @app.timer(2.0, name="redelivery")
    async def redelivery_check() -> None:
        await checkpoint.check()

    started = time.time()
    last_metrics = [0.0]
    sizes, size_scans = {"held": 0, "pending": 0, "unmatched": 0}, ScanClock(sc)  # a full scan, not every second
    last_seen: list[Any] = [None]

    @app.timer(sc.status_interval_s, name="status")
    async def write_status() -> None:
        recovery = getattr(app.tables, "recovery", None)  # (Faust's TableManager has it; its interface does not say)
        seen = (recovery is not None and recovery.completed.is_set(), frozenset(app.consumer.assignment()))
        if seen != last_seen[0]:  # a rebalance or a finished recovery: the sizes are counted again now
            last_seen[0] = seen
            size_scans.last.clear()
        if size_scans.due():
            pending, unmatched = join.pending()
            held, early = live.waiting()  # (a grade whose group has not come is unmatched feedback too)
            sizes.update(held=held, pending=pending, unmatched=unmatched + early)
        snap = counters.snapshot(sizes["held"], sizes["pending"], sizes["unmatched"])
        assigned = sorted(f"{tp.topic}/{tp.partition}" for tp in app.consumer.assignment()
                          if tp.topic in (topo.raw, topo.feedback))
        status.write({"role": "streams", "id": wid, "pid": os.getpid(), "state": "running", "app_id": sc.app_id,
                      "processing_guarantee": sc.processing_guarantee, "latest_version": follower.version,
                      "started_at": started, "updated_at": time.time(), "cpu_s": round(time.process_time(), 3),
                      "assigned": assigned,
                      "untranslated_kafka_settings": sa.untranslated,
                      "redelivery": checkpoint.stats(), **snap})
        if time.time() - last_metrics[0] >= sc.metrics_interval_s:
            last_metrics[0] = time.time()
            metrics_topic = cfg.topics.metrics.name
            m = metric(cfg, "streams", follower.version, flat_counts(snap))
            side.produce(metrics_topic, key=m.model.encode(), value=codec.encode(m, topic_context(metrics_topic)))
            rates = pass_rates.take_changed()
            if rates:
                m = metric(cfg, "task_pass_rate", follower.version, rates)
                side.produce(metrics_topic, key=m.model.encode(), value=codec.encode(m, topic_context(metrics_topic)))
            side.poll(0)
