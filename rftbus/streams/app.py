"""The Faust app: the stages, their agents (ingest, feedback fan-out, join) and the revoke signal; the timers
(ticks, redelivery check, status, metrics) are added by timers.py.

The stage logic lives in ingest.py / live.py / join.py / curate.py; this module only wires it to Faust.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from confluent_kafka import Producer

from rftbus.ground.config import Config
from rftbus.ground.kafka.clients import make_admin, make_producer
from rftbus.ground.kafka.topics import max_message_bytes
from rftbus.ground.schemas import make_codec
from rftbus.streams import faust_patches
from rftbus.streams.agents import reporting_agent
from rftbus.streams.checkpoint import Checkpoint, Deliveries
from rftbus.streams.faust_conf import faust_settings, join_timeout_s
from rftbus.streams.ingest import Ingest, output_partitions
from rftbus.streams.join import FeedbackFanout, Join
from rftbus.streams.live import LiveGroups, published
from rftbus.streams.outputs import Emitter, value_limits
from rftbus.streams.priority import PassRates
from rftbus.streams.state import CheckpointedTable, CommitTables, ReadAgain, ReadFromCache
from rftbus.streams.telemetry import Counters, StatusFile
from rftbus.streams.timers import add_timers
from rftbus.streams.topology import Topology
from rftbus.streams.transport import Adaptation, WorkerApp
from rftbus.ground.weights.follower import WeightFollower

log = logging.getLogger("rftbus.streams")


@dataclass
class StreamsApp:
    app: WorkerApp
    ingest: Ingest
    join: Join
    follower: WeightFollower
    counters: Counters
    side_producer: Producer
    status: StatusFile
    untranslated: list[str]
    checkpoint: Checkpoint
    live: LiveGroups
    pass_rates: PassRates
    codec: Any
    topo: Topology


def local_state_dir(cfg: Config, wid: str) -> Path:
    return Path(cfg.state_dir) / "streams" / wid


def build(cfg: Config, topo: Topology, wid: str) -> StreamsApp:
    sc = cfg.streams
    datadir = local_state_dir(cfg, wid)
    datadir.mkdir(parents=True, exist_ok=True)
    settings = faust_settings(cfg, str(datadir))
    # On the worker's transport (transport.py). app.Table makes CheckpointedTables (faust's `Table` setting), recovered
    # only up to the committed inputs, whose rocksdb holds only committed changes, written at each commit (store.py)
    app = WorkerApp(sc.app_id, Table=CheckpointedTable, TableManager=CommitTables, **settings.kwargs)
    codec = make_codec(cfg.schema_registry.url, cfg.schema_registry.client)
    counters = Counters()
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
    rates = app.Table("rates", partitions=n, key_type=bytes, value_type=bytes,
                      changelog_topic=app.topic(topo.rates_changelog, partitions=n, compacting=True))
    pass_rates = PassRates(sc.pass_rate_alpha, store=rates)  # per raw partition, recovered with its inputs
    read_from = ReadFromCache(ReadAgain(cfg, sc.app_id))
    traces_table = None
    if topo.spans:  # (otel.enabled) trace id -> its calls waiting for a grade, and its grade (rftbus/streams/traces/)
        traces_table = app.Table("traces", partitions=n, key_type=bytes, value_type=bytes, changelog_topic=app.topic(
            topo.traces_changelog, partitions=n, compacting=True))
    for table in (pending, held, rates, traces_table):
        if table is not None:
            cast(CheckpointedTable, table).read_from = read_from
    live = LiveGroups(cfg, held, emit, codec, counters)
    cast(CheckpointedTable, held).publish = published  # which groups are held, for the run's books
    ingest = Ingest(cfg, emit, codec, follower, pass_rates, counters, topo.raw, live, n)
    # Every topic the worker reads commits by the checkpoint's rule, and every fetched offset must reach its agent;
    # under exactly_once transaction markers are real gaps in the internal topics.
    inputs = {topo.raw, topo.joined, topo.join, topo.feedback} | ({topo.spans} if topo.spans else set())
    watched = inputs if sc.processing_guarantee == "at_least_once" else inputs - {topo.joined, topo.join}
    checkpoint = Checkpoint(cfg, inputs, watched, output_partitions(emit, topo.join, topo.spans),
                            Deliveries(emit.write, cfg.state_dir, counters, sc.write_retries, sc.write_retry_backoff_s),
                            counters, scopes={topo.raw: "ingest", topo.joined: "ingest"},
                            redo_topics=frozenset({topo.raw} | ({topo.spans} if topo.spans else set())))  # (their tables)
    join = Join(cfg, pending, emit, counters, topo.partitions["joined"])
    fanout = FeedbackFanout(cfg, emit, codec, counters)
    emit.checkpoint = ingest.checkpoint = join.checkpoint = fanout.checkpoint = checkpoint
    traces = None
    if topo.spans:  # (otel.enabled; opentelemetry-proto and the tokenizer only then)
        from rftbus.streams.traces.stage import Traces, episodes_for

        traces = Traces(cfg, emit, counters, episodes_for(cfg), traces_table)
        traces.checkpoint = checkpoint
    # Ticks, status and metrics go through a plain confluent producer: they are not part of any input
    # record's processing (and so not of any transaction).
    side = make_producer(cfg)
    status = StatusFile(cfg, wid)

    # before the consumer and producer are made (the commit rule, the fetch settings, the clients' network wait)
    app.adaptation = Adaptation(commit_rules=checkpoint.commit_rules(), fetch_min_bytes=sc.fetch_min_bytes,
                                fetch_max_wait_ms=sc.fetch_max_wait_ms, client_timeout_s=cfg.request_timeout_s)
    faust_patches.install(join_timeout_s=join_timeout_s(settings.kwargs))  # aiokafka's network client

    def ingest_stream(stream: Any) -> Any:
        ingest.stream = stream = stream.noack()  # acknowledged by hand, once an input's outcome is out
        return watched_stream(stream)

    def watched_stream(stream: Any) -> Any:  # (whichever agent starts first: the guard sees every fetched record)
        checkpoint.attach(app.consumer)
        return stream

    ingest_agent = reporting_agent("ingest", ingest.handle, ingest.on_error, counters, prepare=ingest_stream)
    join_agent = reporting_agent("join", join.handle, join.on_error, counters, prepare=watched_stream)
    feedback_agent = reporting_agent("feedback", fanout.handle, fanout.on_error, counters, prepare=watched_stream)

    app.agent(app.topic(topo.raw, topo.joined), name="ingest")(ingest_agent)
    app.agent(app.topic(topo.join), name="join")(join_agent)
    app.agent(app.topic(topo.feedback), name="feedback")(feedback_agent)
    if traces is not None and topo.spans:  # (otel.enabled: agents' GenAI spans become groups, rftbus/streams/traces/)
        traces_agent = reporting_agent("traces", traces.handle, traces.on_error, counters, prepare=watched_stream)
        app.agent(app.topic(topo.spans), name="traces")(traces_agent)

    async def on_revoked(sender: Any, revoked: Any, **kw: Any) -> None:
        checkpoint.revoke(set(revoked))
        for tp in revoked:
            if tp.topic == topo.raw:
                pass_rates.forget(tp.partition)
        read_from.clear()  # the next recovery asks the broker again: the group has committed since

    app.on_partitions_revoked.connect(on_revoked)  # type: ignore[arg-type]  # faust's signal typing

    sa = StreamsApp(app, ingest, join, follower, counters, side, status, settings.untranslated,
                    checkpoint=checkpoint, live=live, pass_rates=pass_rates, codec=codec, topo=topo)
    add_timers(sa, cfg, wid)
    return sa
