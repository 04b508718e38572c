"""The Faust app: agents (ingest, feedback fan-out, join), timers (ticks, status, metrics) and signals.

The stage logic lives in ingest.py / live.py / join.py / curate.py; this module only wires it to Faust.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust
from confluent_kafka import Producer

from rftbus.config import Config
from rftbus.kafka.clients import make_admin, make_producer
from rftbus.kafka.topics import max_message_bytes
from rftbus.schemas import make_codec
from rftbus.streams import faust_patches
from rftbus.streams.agents import reporting_agent
from rftbus.streams.checkpoint import Checkpoint, Deliveries
from rftbus.streams.faust_conf import faust_settings, join_timeout_s
from rftbus.streams.ingest import Ingest, output_partitions
from rftbus.streams.join import FeedbackFanout, Join, ScanClock
from rftbus.streams.live import LiveGroups
from rftbus.streams.outputs import H_KIND, Emitter, value_limits
from rftbus.streams.priority import PassRates
from rftbus.streams.telemetry import Counters, StatusFile, flat_counts, metric
from rftbus.streams.topology import Topology
from rftbus.weights.follower import WeightFollower

log = logging.getLogger("rftbus.streams")


@dataclass
class StreamsApp:
    app: faust.App
    ingest: Ingest
    join: Join
    follower: WeightFollower
    counters: Counters
    side_producer: Producer
    status: StatusFile
    untranslated: list[str]


def build(cfg: Config, topo: Topology, wid: str) -> StreamsApp:
    sc = cfg.streams
    datadir = Path(cfg.state_dir) / "streams" / wid
    datadir.mkdir(parents=True, exist_ok=True)
    settings = faust_settings(cfg, str(datadir))
    app = faust.App(sc.app_id, **settings.kwargs)
    codec = make_codec(cfg.schema_registry.url, cfg.schema_registry.client)
    counters = Counters()
    pass_rates = PassRates(sc.pass_rate_alpha)
    follower = WeightFollower(cfg, prefetch=False)
    topic_limits = max_message_bytes(make_admin(cfg), list(topo.names.values()))
    emit = Emitter(app, codec.encode, topo.names, topo.partitions, sc.rejection_original_max_bytes,
                   value_limits(topic_limits, topo.names, settings.kwargs["producer_max_request_size"]))
    n = topo.raw_partitions
    # key/value type bytes: raw bytes in and out of the store (rocksdb encodes what it keeps, memory does not)
    pending = app.Table("pending", partitions=n, key_type=bytes, value_type=bytes,
                        changelog_topic=app.topic(topo.changelog, partitions=n, compacting=True))
    held = app.Table("live", partitions=n, key_type=bytes, value_type=bytes,
                     changelog_topic=app.topic(topo.live_changelog, partitions=n, compacting=True))
    live = LiveGroups(cfg, held, emit, codec, counters)
    ingest = Ingest(cfg, emit, codec, follower, pass_rates, counters, topo.raw, live, n)
    # Every fetched offset must reach the agent; under exactly_once transaction markers are real gaps in joined.
    watched = {topo.raw} | ({topo.joined} if sc.processing_guarantee == "at_least_once" else set())
    checkpoint = Checkpoint(cfg, {topo.raw, topo.joined}, watched, output_partitions(emit),
                            Deliveries(emit.write, cfg.state_dir, counters, sc.write_retries, sc.write_retry_backoff_s),
                            counters)
    emit.checkpoint = ingest.checkpoint = checkpoint
    join = Join(cfg, pending, emit, counters, topo.partitions["joined"])
    fanout = FeedbackFanout(cfg, emit, codec, counters)
    # Ticks, status and metrics go through a plain confluent producer: they are not part of any input
    # record's processing (and so not of any transaction).
    side = make_producer(cfg)
    status = StatusFile(cfg, wid)

    # before the consumer and producer start (the idempotent producer, the fetch settings, the join timeout, the
    # clients' network wait)
    faust_patches.install(commit_rules=checkpoint.commit_rules(), fetch_min_bytes=sc.fetch_min_bytes,
                          fetch_max_wait_ms=sc.fetch_max_wait_ms, join_timeout_s=join_timeout_s(settings.kwargs),
                          client_timeout_s=cfg.kafka.request_timeout_s)

    def ingest_stream(stream: Any) -> Any:
        ingest.stream = stream = stream.noack()  # acknowledged by hand, once an input's outcome is out
        checkpoint.attach(app.consumer)
        return stream

    ingest_agent = reporting_agent("ingest", ingest.handle, ingest.on_error, counters, prepare=ingest_stream)
    join_agent = reporting_agent("join", join.handle, join.on_error, counters)
    feedback_agent = reporting_agent("feedback", fanout.handle, fanout.on_error, counters)

    app.agent(app.topic(topo.raw, topo.joined), name="ingest")(ingest_agent)
    app.agent(app.topic(topo.join), name="join")(join_agent)
    app.agent(app.topic(topo.feedback), name="feedback")(feedback_agent)

    async def on_revoked(sender: Any, revoked: Any, **kw: Any) -> None:
        checkpoint.revoke(set(revoked))

    app.on_partitions_revoked.connect(on_revoked)  # type: ignore[arg-type]  # faust's signal typing

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
    sizes, size_scans = {"held": 0, "pending": 0}, ScanClock(sc)  # table sizes: a full scan, not every second

    @app.timer(sc.status_interval_s, name="status")
    async def write_status() -> None:
        if size_scans.due():
            sizes.update(held=live.waiting(), pending=join.pending())
        snap = counters.snapshot(sizes["held"], sizes["pending"])
        assigned = sorted(f"{tp.topic}/{tp.partition}" for tp in app.consumer.assignment()
                          if tp.topic in (topo.raw, topo.feedback))
        status.write({"role": "streams", "id": wid, "pid": __import__("os").getpid(), "app_id": sc.app_id,
                      "processing_guarantee": sc.processing_guarantee, "latest_version": follower.version,
                      "started_at": started, "updated_at": time.time(), "cpu_s": round(time.process_time(), 3),
                      "assigned": assigned,
                      "untranslated_kafka_settings": settings.untranslated,
                      "redelivery": checkpoint.stats(), **snap})
        if time.time() - last_metrics[0] >= sc.metrics_interval_s:
            last_metrics[0] = time.time()
            metrics_topic = cfg.topics.metrics.name
            m = metric(cfg, "streams", follower.version, flat_counts(snap))
            side.produce(metrics_topic, key=m.model.encode(), value=codec.encode(m))
            rates = pass_rates.take_changed()
            if rates:
                m = metric(cfg, "task_pass_rate", follower.version, rates)
                side.produce(metrics_topic, key=m.model.encode(), value=codec.encode(m))
            side.poll(0)

    return StreamsApp(app, ingest, join, follower, counters, side, status, settings.untranslated)
