"""Every change rftbus makes to faust-streaming and aiokafka at run time, in one place, applied once.

Each patch below names what it replaces, why, the upstream issue (or that none is filed), and the test that
fails without it; `PATCHES` lists them for the docs and `rftbus streams --patches`. They copy or bend the
internals of exactly faust-streaming 0.15.3 and aiokafka 0.14.0 (pyproject.toml pins both): `install`
refuses any other release, so an upgrade is a decision, not a surprise. `install` is idempotent;
`uninstall` restores every original (tests use `installed()`, so no test leaves Faust patched).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterator, cast

from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.cluster import ClusterMetadata
from aiokafka.conn import AIOKafkaConnection
from aiokafka.errors import KafkaError, RequestTimedOutError
from aiokafka.protocol.metadata import MetadataRequest
from faust.transport.consumer import CONSUMER_FETCHING, Consumer
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread, Producer
from mode import Service

from rftbus.errors import RftbusError
from rftbus.streams.eager import YieldEvery, run_eager

__all__ = ["PATCHES", "YieldEvery", "install", "installed", "uninstall"]

FAUST_VERSION = "0.15.3"
AIOKAFKA_VERSION = "0.14.0"
YIELD_EVERY = 10  # the fetch loop yields to the stream at least this often (Faust: 100, with a turn per record)
STREAM_YIELD_EVERY = 32  # the Cython stream iterator's zero sleeps: one real yield in this many
JOIN_GROUP_LAPSE_S = 5.0  # Kafka's Java client: JoinGroup waits rebalance timeout + 5 s (KAFKA-5570)


@dataclass(frozen=True)
class Patch:
    name: str
    replaces: str
    why: str
    upstream: str
    test: str


PATCHES = (
    Patch("commit_rule", "faust Consumer._new_offset",
          "Faust commits past a record that was never acked when the records after it were (a loss on restart); "
          "for the ingest topics the streams checkpoint decides what may be committed",
          "faust-streaming/faust#606 (fix proposed in #707, unreleased)",
          "tests/integration/test_offsets.py::test_faust_commits_past_an_unacked_record_and_the_rule_does_not"),
    Patch("read_offsets", "faust Consumer._read_offset (set in __init__)",
          "records re-read after a rebalance fall below Faust's read mark and are dropped; for the ingest topics "
          "nothing is dropped that way (a replay is skipped downstream)",
          "none filed (the drop paths are in faust-streaming/faust#606's discussion)",
          "tests/integration/test_offsets.py::test_a_record_faust_skipped_is_fetched_again_and_curated"),
    Patch("idempotent_producer", "faust aiokafka Producer._settings_extra",
          "Faust enables aiokafka's idempotence only under exactly_once; at_least_once appends a retried batch twice "
          "when a broker is killed -9",
          "none filed (nearest: faust-streaming/faust#177)",
          "tests/unit/test_faust_patches.py::test_the_streams_producer_is_idempotent_only_with_the_patch"),
    Patch("join_group_timeout", "aiokafka AIOKafkaConnection.send",
          "aiokafka waits for every answer for request_timeout_ms, JoinGroup too, which the coordinator may hold "
          "for the whole rebalance timeout; with request timeouts that follow kafka.request_timeout_s a join would "
          "time out and start again. JoinGroup waits max(request timeout, rebalance timeout + 5 s), as Kafka's "
          "Java client does",
          "none filed for aiokafka; the Java client's fix: KAFKA-5570, apache/kafka#8702",
          "tests/unit/test_faust_patches.py::test_join_group_waits_for_the_rebalance_timeout"),
    Patch("timeout_refreshes_metadata", "aiokafka AIOKafkaClient.send",
          "a request that timed out (a frozen leader keeps its connections open) closes the connection but leaves the "
          "metadata as it was, so the retried batch goes to the frozen node again (measured: a 30 s freeze of a "
          "leader stalled the worker's writes 36 s); the timeout now asks for fresh metadata, as Kafka's Java client "
          "does when it drops a timed-out connection",
          "none filed for aiokafka; Java: NetworkClient.handleTimedOutRequests requests a metadata update",
          "tests/unit/test_faust_patches.py::test_a_timed_out_request_asks_for_fresh_metadata"),
    Patch("silent_nodes_last", "aiokafka AIOKafkaClient._get_conn, get_random_node, _metadata_update",
          "aiokafka picks the node for a metadata request or a coordinator lookup at random, the frozen one included: "
          "after a request to a frozen node timed out, the metadata refresh and the lookup that follow went to it "
          "again one time in three, another request timeout each (measured: the worker reached the new group "
          "coordinator 30 s after the freeze, its session had expired, and it rejoined and rescanned). A node whose "
          "request or connection timed out is asked last for the next 3 request timeouts, as Kafka's Java client "
          "asks its least-loaded node and backs off from one that failed",
          "none filed for aiokafka; Java: NetworkClient.leastLoadedNode and reconnect backoff",
          "tests/unit/test_faust_patches.py::test_a_node_that_timed_out_is_asked_last"),
    Patch("client_timeout", "faust aiokafka Producer._new_producer; AIOKafkaConsumerThread._create_worker_consumer",
          "Faust gives aiokafka one request timeout per client, and aiokafka uses it for more than a wait for an "
          "answer: the producer's is also how long a batch may wait for a leader (Faust: 1,200 s; 10 s expired a "
          "batch while a single broker restarted) and Faust refuses a consumer session longer than it. So a produce "
          "request sent to a frozen leader waited for the whole freeze. The clients' network wait (every connection's "
          "timeout) is now kafka.request_timeout_s; the batch lifetime and Faust's session check keep their settings",
          "none filed (aiokafka has no delivery timeout apart from request_timeout_ms; Java split them in KIP-91)",
          "tests/unit/test_faust_patches.py::test_the_workers_clients_wait_as_long_as_kafka_request_timeout_s"),
    Patch("fetch_settings", "faust AIOKafkaConsumerThread._create_worker_consumer",
          "Faust passes fetch_max_wait_ms=1500 and leaves fetch_min_bytes at 1 (not settable): streams.fetch_min_bytes "
          "and fetch_max_wait_ms reach aiokafka",
          "none filed (a performance setting)",
          "tests/unit/test_faust_patches.py::test_fetch_settings_reach_the_consumer"),
    Patch("inline_delivery", "faust Consumer._drain_messages; faust._cython.streams.sleep",
          "four tasks and three cancellations per record, and an event-loop turn per event: a record is delivered "
          "inline when that cannot block (worker CPU per experience 0.26-0.35 -> 0.15-0.19 ms)",
          "none filed (a performance change)",
          "tests/unit/test_faust_patches.py::test_install_patches_and_uninstall_restores"),
)

_ORIGINAL: dict[str, Any] = {}
_state: dict[str, Any] = {"fetch": (1, 1500), "join_timeout_s": None, "rules": {}, "client_timeout_s": None}


def require_versions(faust_version: str | None = None, aiokafka_version: str | None = None) -> None:
    """One-line refusal to run on a faust-streaming or aiokafka other than the ones these patches copy."""
    import aiokafka
    from faust import __version__

    found = {"faust-streaming": (faust_version or __version__, FAUST_VERSION),
             "aiokafka": (aiokafka_version or aiokafka.__version__, AIOKAFKA_VERSION)}
    for name, (have, want) in found.items():
        if have != want:
            raise RftbusError(f"the streams worker patches {name} {want} internals (streams/faust_patches.py) but "
                              f"{have} is installed: pip install {name}=={want}")


# -- commit_rule and read_offsets -------------------------------------------------------------------------
CommitRule = Callable[[Any, Any], "int | None"]  # (Faust consumer, tp) -> offset to commit, or None


def _new_offset(self: Consumer, tp: Any) -> int | None:
    rule = _state["rules"].get(tp.topic)
    return _ORIGINAL["_new_offset"](self, tp) if rule is None else rule(self, tp)


class _ReadOffsets(defaultdict):
    """Faust drops a fetched record whose offset is below the last one it delivered (its read mark). After
    a rebalance a partition is re-read from the commit, but records still buffered from before the seek raise
    that mark first, and the re-read records are then dropped. For topics with a commit rule nothing is
    dropped this way: a record delivered twice is skipped downstream (the checkpoint's `Landed.done`).
    Measured without it: the two-worker kill test lost 84 of 2,000."""

    def __getitem__(self, tp: Any) -> Any:
        if tp.topic in _state["rules"]:
            return None
        return super().__getitem__(tp)


def _consumer_init(self: Consumer, *args: Any, **kwargs: Any) -> None:
    _ORIGINAL["Consumer.__init__"](self, *args, **kwargs)
    self._read_offset = _ReadOffsets(lambda: None, self._read_offset)


# -- idempotent_producer ------------------------------------------------------------------------------------
def _settings_extra(self: Producer) -> Any:
    return {**_ORIGINAL["_settings_extra"](self), "acks": "all", "enable_idempotence": True}


# -- join_group_timeout --------------------------------------------------------------------------------------
def _send(self: AIOKafkaConnection, request: Any, expect_response: bool = True) -> Any:
    join = _state["join_timeout_s"]
    if join is None or not type(request).__name__.startswith("JoinGroupRequest") or join <= self._request_timeout:
        return _ORIGINAL["send"](self, request, expect_response)
    # aiokafka binds the timeout when send() builds its wait_for(): lend the longer one for this call only
    saved, self._request_timeout = self._request_timeout, join
    try:
        return _ORIGINAL["send"](self, request, expect_response)
    finally:
        self._request_timeout = saved


# -- timeout_refreshes_metadata, silent_nodes_last ----------------------------------------------------------------
SILENT_FOR = 3  # request timeouts a node that did not answer is asked last for
_AIOKAFKA_LOG = logging.getLogger("aiokafka")  # (the copied `_metadata_update` logs where aiokafka's does)


def _silent(client: AIOKafkaClient) -> dict[Any, float]:
    """node id -> when a request to it, or a connection, last timed out (per client)."""
    if not hasattr(client, "_rftbus_silent"):
        client._rftbus_silent = {}
    return client._rftbus_silent


def _is_silent(client: AIOKafkaClient, node_id: Any) -> bool:
    since = _silent(client).get(node_id)
    return since is not None and time.monotonic() - since < SILENT_FOR * client._request_timeout_ms / 1000


async def _client_send(self: AIOKafkaClient, node_id: Any, request: Any, **kw: Any) -> Any:
    try:
        answer = await _ORIGINAL["client_send"](self, node_id, request, **kw)
    except RequestTimedOutError:  # (raised by send itself on its own timeout; a broker's error code is a response)
        _silent(self)[node_id] = time.monotonic()
        self.force_metadata_update()  # the leaders may have moved away from the node that did not answer
        raise
    _silent(self).pop(node_id, None)
    return answer


async def _get_conn(self: AIOKafkaClient, node_id: Any, **kw: Any) -> Any:
    t0 = time.monotonic()
    conn = await _ORIGINAL["_get_conn"](self, node_id, **kw)
    if conn is None and time.monotonic() - t0 >= self._request_timeout_ms / 2000:  # a connect that hung
        _silent(self)[node_id] = time.monotonic()
    return conn


def _get_random_node(self: AIOKafkaClient) -> Any:
    nodeids = [b.nodeId for b in self.cluster.brokers()]
    answering = [n for n in nodeids if not _is_silent(self, n)]
    return random.choice(answering or nodeids) if nodeids else None


async def _metadata_update(self: AIOKafkaClient, cluster_metadata: ClusterMetadata, topics: Any) -> bool:
    """aiokafka 0.14.0 AIOKafkaClient._metadata_update, its logging included; what differs: silent nodes are asked
    last, and a node that times out here becomes silent."""
    metadata_request = MetadataRequest(list(topics) if topics else None)
    nodeids: list[Any] = [b.nodeId for b in self.cluster.brokers()]
    bootstrap_id = ("bootstrap", ConnectionGroup.DEFAULT)
    if bootstrap_id in self._conns:
        nodeids.append("bootstrap")
    random.shuffle(nodeids)
    nodeids.sort(key=lambda n: _is_silent(self, n))  # (stable: the shuffle stays within each half)
    for node_id in nodeids:
        conn = await self._get_conn(node_id)
        if conn is None:
            continue
        try:
            metadata = await conn.send(metadata_request)
        except (KafkaError, asyncio.TimeoutError) as err:
            _AIOKAFKA_LOG.warning("Unable to request metadata from node with id %s: %r", node_id, err)
            if isinstance(err, (RequestTimedOutError, asyncio.TimeoutError)):
                _silent(self)[node_id] = time.monotonic()
            continue
        if not metadata.brokers:
            return False
        cluster_metadata.update_metadata(metadata)
        if bootstrap_id in self._conns and len(self.cluster.brokers()):
            self._conns.pop(bootstrap_id).close()
        break
    else:
        _AIOKAFKA_LOG.error("Unable to update metadata from %s", nodeids)
        cluster_metadata.failed_update(None)
        return False
    return True


# -- client_timeout ------------------------------------------------------------------------------------------
def _bound_network_wait(client: AIOKafkaClient) -> None:
    """Every connection the client opens takes its `_request_timeout_ms` (read in `_get_conn`, after start)."""
    if _state["client_timeout_s"] is not None:
        client._request_timeout_ms = int(_state["client_timeout_s"] * 1000)


def _new_producer(self: Producer, transactional_id: str | None = None) -> Any:
    producer = _ORIGINAL["_new_producer"](self, transactional_id)
    _bound_network_wait(producer.client)  # (the accumulator's batch lifetime keeps Faust's request timeout)
    return producer


# -- fetch_settings (and client_timeout) ------------------------------------------------------------------------
def _create_worker_consumer(self: Any, transport: Any) -> Any:
    consumer = _ORIGINAL["_create_worker_consumer"](self, transport)
    # read when the consumer starts its fetcher (tests/unit/test_faust_patches.py checks aiokafka still does)
    consumer._fetch_min_bytes, consumer._fetch_max_wait_ms = _state["fetch"]
    _bound_network_wait(consumer._client)
    return consumer


# -- inline_delivery ------------------------------------------------------------------------------------------
async def _drain_messages(self: Consumer, fetcher: Service) -> None:  # pragma: no cover (a worker's loop)
    """faust-streaming 0.15.3 Consumer._drain_messages; only the delivery line differs: the callback runs
    inline up to its first suspension (eager.run_eager), and only a callback that would block goes under
    Faust's own ``wait_first(..., suspend_flow.wait())``, so the rebalance escape and the error propagation
    are what they were; the loop yields every YIELD_EVERY records."""
    callback = self.callback
    getmany = self.getmany
    consumer_should_stop = cast(Service, self)._stopped.is_set
    fetcher_should_stop = cast(Service, fetcher)._stopped.is_set
    get_read_offset = self._read_offset.__getitem__
    set_read_offset = self._read_offset.__setitem__
    set_flag, unset_flag = self.diag.set_flag, self.diag.unset_flag
    commit_every = self._commit_every
    acks_enabled_for = self.app.topics.acks_enabled_for
    num_since_yield = 0
    try:
        while not (consumer_should_stop() or fetcher_should_stop()):
            set_flag(CONSUMER_FETCHING)
            ait = cast(AsyncIterator, getmany(timeout=1.0))
            await self.sleep(0)  # (Faust: getmany may be called in a loop never releasing the event loop)
            if not self.should_stop:
                async for tp, message in ait:
                    num_since_yield += 1
                    if num_since_yield > YIELD_EVERY:
                        await asyncio.sleep(0)
                        num_since_yield = 0
                    offset = message.offset
                    r_offset = get_read_offset(tp)
                    if r_offset is None or offset >= r_offset:
                        gap = offset - (r_offset or 0)
                        if gap > 1 and r_offset and acks_enabled_for(message.topic):
                            await self._add_gap(tp, r_offset + 1, offset)
                        if commit_every is not None and self._n_acked >= commit_every:
                            self._n_acked = 0
                            await self.commit()
                        rest = run_eager(callback(message))  # type: ignore[arg-type]  # (it is a coroutine)
                        if rest is not None:  # it would block: Faust's own escape on a flow suspension
                            await self.wait_first(rest, self.suspend_flow.wait())
                        set_read_offset(tp, offset)
                    else:
                        self.log.dev("DROPPED MESSAGE ROFF %r: k=%r v=%r", offset, message.key, message.value)
                unset_flag(CONSUMER_FETCHING)
    except self.consumer_stopped_errors:
        if self.transport.app.should_stop:
            self.log.info("Broker stopped consumer, shutting down...")
            return
        raise
    except asyncio.CancelledError:
        if self.transport.app.should_stop:
            self.log.info("Consumer shutting down for user cancel.")
            return
        raise
    except Exception as exc:
        self.log.exception("Drain messages raised: %r", exc)
        raise
    finally:
        unset_flag(CONSUMER_FETCHING)


def _cython_streams() -> Any:
    try:
        from faust._cython import streams as cstreams
    except ImportError:  # pure-Python Faust: its own iterator, left as it is
        return None
    return cstreams


# -- install / uninstall ----------------------------------------------------------------------------------------
_TARGETS: dict[str, tuple[Any, str, Any]] = {  # key -> (owner, attribute, replacement)
    "_new_offset": (Consumer, "_new_offset", _new_offset),
    "Consumer.__init__": (Consumer, "__init__", _consumer_init),
    "_settings_extra": (Producer, "_settings_extra", _settings_extra),
    "send": (AIOKafkaConnection, "send", _send),
    "client_send": (AIOKafkaClient, "send", _client_send),
    "_get_conn": (AIOKafkaClient, "_get_conn", _get_conn),
    "get_random_node": (AIOKafkaClient, "get_random_node", _get_random_node),
    "_metadata_update": (AIOKafkaClient, "_metadata_update", _metadata_update),
    "_new_producer": (Producer, "_new_producer", _new_producer),
    "_create_worker_consumer": (AIOKafkaConsumerThread, "_create_worker_consumer", _create_worker_consumer),
    "_drain_messages": (Consumer, "_drain_messages", _drain_messages),
}


def install(*, commit_rules: dict[str, CommitRule] | None = None, fetch_min_bytes: int = 1,
            fetch_max_wait_ms: int = 1500, join_timeout_s: float | None = None,
            client_timeout_s: float | None = None) -> None:
    """Apply every patch (once; a second call only updates the settings). `commit_rules`: topic -> the rule
    that decides its commits (the streams checkpoint's); `join_timeout_s`: how long a JoinGroup may wait;
    `client_timeout_s`: how long the worker's clients wait for any other answer (None: Faust's settings)."""
    require_versions()
    _state["client_timeout_s"] = client_timeout_s
    _state["rules"] = dict(commit_rules or {})
    _state["fetch"] = (fetch_min_bytes, fetch_max_wait_ms)
    _state["join_timeout_s"] = join_timeout_s
    for key, (owner, attr, new) in _TARGETS.items():
        if key not in _ORIGINAL:
            _ORIGINAL[key] = getattr(owner, attr)
            setattr(owner, attr, new)
    cstreams = _cython_streams()
    if cstreams is not None and not isinstance(cstreams.sleep, YieldEvery):
        _ORIGINAL.setdefault("cython_sleep", cstreams.sleep)
        cstreams.sleep = YieldEvery(STREAM_YIELD_EVERY)


def uninstall() -> None:
    for key, (owner, attr, _new) in _TARGETS.items():
        if key in _ORIGINAL:
            setattr(owner, attr, _ORIGINAL.pop(key))
    cstreams = _cython_streams()
    if cstreams is not None and "cython_sleep" in _ORIGINAL:
        cstreams.sleep = _ORIGINAL.pop("cython_sleep")
    _state.update(rules={}, fetch=(1, 1500), join_timeout_s=None, client_timeout_s=None)


def is_installed() -> bool:
    return "_new_offset" in _ORIGINAL


@contextlib.contextmanager
def installed(**kw: Any) -> Iterator[None]:
    """The patches for a block (tests), and the originals back after it, whatever was there before."""
    was = is_installed()
    install(**kw)
    try:
        yield
    finally:
        if not was:
            uninstall()


def original(key: str) -> Any:
    """The unpatched callable (tests compare against Faust's own rule)."""
    if key in _ORIGINAL:
        return _ORIGINAL[key]
    owner, attr, _ = _TARGETS[key]
    return getattr(owner, attr)
