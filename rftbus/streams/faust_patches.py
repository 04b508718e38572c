"""Every change rftbus makes to faust-streaming and aiokafka, listed in one place; the ones no subclass can reach are
applied here, once.

`PATCHES` names each change, what it replaces, how (`subclass`: an override in the worker's own transport,
rftbus/streams/transport.py, which Faust builds from its class attributes and which touches no Faust class; `patch`: an
attribute of an aiokafka or Faust class replaced at run time, here), why, the upstream issue (or that none is filed),
and the test that fails without it; the docs and `rftbus streams --patches` print it. Both rest on the internals of
exactly faust-streaming 0.15.3 and aiokafka 0.14.0 (pyproject.toml pins both): the worker refuses any other release,
so an upgrade is a decision, not a surprise. `install` is idempotent; `uninstall` restores every original (tests use
`installed()`, so no test leaves aiokafka patched).

The patches left are aiokafka's network client (its clients are built inside aiokafka's producer and consumer, where
no setting or subclass reaches: three methods, wrapped around the originals, and the client module's `random`) and
Faust's Cython stream iterator's sleep (a module function). None copies an upstream body.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass
from typing import Any, Iterator

import aiokafka.client as aiokafka_client
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import AIOKafkaConnection
from aiokafka.errors import RequestTimedOutError

from rftbus.ground.errors import RftbusError
from rftbus.streams.eager import YieldEvery

__all__ = ["PATCHES", "YieldEvery", "install", "installed", "uninstall"]

FAUST_VERSION = "0.15.3"
AIOKAFKA_VERSION = "0.14.0"
STREAM_YIELD_EVERY = 32  # the Cython stream iterator's zero sleeps: one real yield in this many
JOIN_GROUP_LAPSE_S = 5.0  # Kafka's Java client: JoinGroup waits rebalance timeout + 5 s (KAFKA-5570)


@dataclass(frozen=True)
class Patch:
    name: str
    replaces: str
    how: str  # subclass (rftbus/streams/transport.py) | patch (here)
    why: str
    upstream: str
    test: str


PATCHES = (
    Patch("commit_rule", "faust Consumer._new_offset (transport.Consumer)",
          "subclass",
          "Faust commits past a record that was never acked when the records after it were (a loss on restart); "
          "for the ingest topics the streams checkpoint decides what may be committed",
          "faust-streaming/faust#606 (fix proposed in #707, unreleased)",
          "tests/integration/test_offsets.py::test_faust_commits_past_an_unacked_record_and_the_rule_does_not"),
    Patch("read_offsets", "faust Consumer._read_offset (transport.Consumer.__init__)",
          "subclass",
          "records re-read after a rebalance fall below Faust's read mark and are dropped; for the ingest topics "
          "nothing is dropped that way (a replay is skipped downstream)",
          "none filed (the drop paths are in faust-streaming/faust#606's discussion)",
          "tests/integration/test_offsets.py::test_a_record_faust_skipped_is_fetched_again_and_curated"),
    Patch("idempotent_producer", "faust aiokafka Producer._settings_extra (transport.Producer)",
          "subclass",
          "Faust enables aiokafka's idempotence only under exactly_once; at_least_once appends a retried batch twice "
          "when a broker is killed -9",
          "none filed (nearest: faust-streaming/faust#177)",
          "tests/unit/test_faust_patches.py::test_the_streams_producer_is_idempotent_only_with_the_patch"),
    Patch("join_group_timeout", "aiokafka AIOKafkaConnection.send",
          "patch",
          "aiokafka waits for every answer for request_timeout_ms, JoinGroup too, which the coordinator may hold "
          "for the whole rebalance timeout; with request timeouts that follow kafka.request_timeout_s a join would "
          "time out and start again. JoinGroup waits max(request timeout, rebalance timeout + 5 s), as Kafka's "
          "Java client does",
          "none filed for aiokafka; the Java client's fix: KAFKA-5570, apache/kafka#8702",
          "tests/unit/test_faust_patches.py::test_join_group_waits_for_the_rebalance_timeout"),
    Patch("timeout_refreshes_metadata", "aiokafka AIOKafkaClient.send",
          "patch",
          "a request that timed out (a frozen leader keeps its connections open) closes the connection but leaves the "
          "metadata as it was, so the retried batch goes to the frozen node again (measured: a 30 s freeze of a "
          "leader stalled the worker's writes 36 s); the timeout now asks for fresh metadata, as Kafka's Java client "
          "does when it drops a timed-out connection",
          "none filed for aiokafka; Java: NetworkClient.handleTimedOutRequests requests a metadata update",
          "tests/unit/test_faust_patches.py::test_a_timed_out_request_asks_for_fresh_metadata"),
    Patch("silent_nodes_last", "aiokafka AIOKafkaClient._get_conn, aiokafka.client's `random` (a SilentLast: its "
          "choice and shuffle put silent nodes last), and AIOKafkaConnection.send (with join_group_timeout)",
          "patch",
          "aiokafka picks the node for a metadata request or a coordinator lookup at random, the frozen one included: "
          "after a request to a frozen node timed out, the metadata refresh and the lookup that follow went to it "
          "again one time in three, another request timeout each (measured: the worker reached the new group "
          "coordinator 30 s after the freeze, its session had expired, and it rejoined and rescanned). A node whose "
          "request or connection timed out is asked last for the next 3 request timeouts, as Kafka's Java client "
          "asks its least-loaded node and backs off from one that failed",
          "none filed for aiokafka; Java: NetworkClient.leastLoadedNode and reconnect backoff",
          "tests/unit/test_faust_patches.py::test_a_node_that_timed_out_is_asked_last"),
    Patch("client_timeout", "faust aiokafka Producer._new_producer, AIOKafkaConsumerThread._create_worker_consumer (transport.Producer, transport.ConsumerThread)",
          "subclass",
          "Faust gives aiokafka one request timeout per client, and aiokafka uses it for more than a wait for an "
          "answer: the producer's is also how long a batch may wait for a leader (Faust: 1,200 s; 10 s expired a "
          "batch while a single broker restarted) and Faust refuses a consumer session longer than it. So a produce "
          "request sent to a frozen leader waited for the whole freeze. The clients' network wait (every connection's "
          "timeout) is now kafka.request_timeout_s; the batch lifetime and Faust's session check keep their settings",
          "none filed (aiokafka has no delivery timeout apart from request_timeout_ms; Java split them in KIP-91)",
          "tests/unit/test_faust_patches.py::test_the_workers_clients_wait_as_long_as_kafka_request_timeout_s"),
    Patch("fetch_settings", "faust AIOKafkaConsumerThread._create_worker_consumer (transport.ConsumerThread)",
          "subclass",
          "Faust passes fetch_max_wait_ms=1500 and leaves fetch_min_bytes at 1 (not settable): streams.fetch_min_bytes "
          "and fetch_max_wait_ms reach aiokafka",
          "none filed (a performance setting)",
          "tests/unit/test_faust_patches.py::test_fetch_settings_reach_the_consumer"),
    Patch("inline_delivery", "faust Consumer.wait_first, as the fetch loop calls it per record (transport.Consumer)",
          "subclass",
          "four tasks and three cancellations per record: a record is delivered inline when that cannot block",
          "none filed (a performance change)",
          "tests/unit/test_faust_patches.py::test_a_record_that_cannot_block_is_delivered_without_a_task"),
    Patch("stream_yield", "faust._cython.streams.sleep",
          "patch",
          "an event-loop turn per event in Faust's Cython stream iterator (an epoll call and its handles, ~0.03 ms of "
          "the worker's CPU per experience): a zero sleep yields once in STREAM_YIELD_EVERY",
          "none filed (a performance change)",
          "tests/unit/test_faust_patches.py::test_install_patches_and_uninstall_restores"),
)

_ORIGINAL: dict[str, Any] = {}
_state: dict[str, Any] = {"join_timeout_s": None}


def require_versions(faust_version: str | None = None, aiokafka_version: str | None = None) -> None:
    """One-line refusal to run on a faust-streaming or aiokafka other than the ones these patches copy."""
    import aiokafka
    from faust import __version__

    found = {"faust-streaming": (faust_version or __version__, FAUST_VERSION),
             "aiokafka": (aiokafka_version or aiokafka.__version__, AIOKAFKA_VERSION)}
    for name, (have, want) in found.items():
        if have != want:
            raise RftbusError(f"the streams worker patches {name} {want} internals (rftbus/streams/faust_patches.py) but "
                              f"{have} is installed: pip install {name}=={want}")


# -- join_group_timeout (and silent_nodes_last: a connection's request that timed out) -------------------------------
def _send(self: AIOKafkaConnection, request: Any, expect_response: bool = True) -> Any:
    join = _state["join_timeout_s"]
    if join is None or not type(request).__name__.startswith("JoinGroupRequest") or join <= self._request_timeout:
        sent = _ORIGINAL["send"](self, request, expect_response)
    else:  # aiokafka binds the timeout when send() builds its wait_for(): lend the longer one for this call only
        saved, self._request_timeout = self._request_timeout, join
        try:
            sent = _ORIGINAL["send"](self, request, expect_response)
        finally:
            self._request_timeout = saved
    # A metadata request is the one the client sends on the connection itself (`_metadata_update`), past `_client_send`
    # that marks the others: only it is watched here, so produce and fetch requests go as aiokafka sends them.
    node = getattr(self, "_rftbus_node", None)  # (set by _get_conn: a connection does not know its node)
    if node is None or not type(request).__name__.startswith("MetadataRequest"):
        return sent
    return _watched(sent, node, self._request_timeout)


async def _watched(sent: Any, node: Any, timeout_s: float) -> Any:
    """aiokafka's awaitable (a coroutine already); a node whose answer timed out becomes silent. This is how the
    metadata update's own requests (sent on the connection, not through the client's `send`) mark one."""
    try:
        return await sent
    except asyncio.TimeoutError:
        _mark_silent(node, timeout_s)
        raise


# -- timeout_refreshes_metadata, silent_nodes_last ----------------------------------------------------------------
SILENT_FOR = 3  # request timeouts a node that did not answer is asked last for
_SILENT: dict[Any, float] = {}  # node id -> until when it is asked last (the worker talks to one cluster)


def _mark_silent(node_id: Any, timeout_s: float) -> None:
    _SILENT[node_id] = time.monotonic() + SILENT_FOR * timeout_s


def _is_silent(node_id: Any) -> bool:
    until = _SILENT.get(node_id)
    return until is not None and time.monotonic() < until


async def _client_send(self: AIOKafkaClient, node_id: Any, request: Any, **kw: Any) -> Any:
    try:
        answer = await _ORIGINAL["client_send"](self, node_id, request, **kw)
    except RequestTimedOutError:  # (raised by send itself on its own timeout; a broker's error code is a response)
        _mark_silent(node_id, self._request_timeout_ms / 1000)
        self.force_metadata_update()  # the leaders may have moved away from the node that did not answer
        raise
    _SILENT.pop(node_id, None)
    return answer


async def _get_conn(self: AIOKafkaClient, node_id: Any, **kw: Any) -> Any:
    t0 = time.monotonic()
    conn = await _ORIGINAL["_get_conn"](self, node_id, **kw)
    if conn is None:
        if time.monotonic() - t0 >= self._request_timeout_ms / 2000:  # a connect that hung
            _mark_silent(node_id, self._request_timeout_ms / 1000)
    else:
        conn._rftbus_node = node_id
    return conn


class SilentLast:
    """What aiokafka's client module calls `random`: its two uses pick the node for a metadata request, a coordinator
    lookup or a bootstrap (`get_random_node`: `choice`; `_metadata_update`: `shuffle`, then the nodes in turn). The
    same random picks, silent nodes last (none of aiokafka's code is copied)."""

    def choice(self, nodeids: Any) -> Any:
        answering = [n for n in nodeids if not _is_silent(n)]
        return random.choice(answering or nodeids)

    def shuffle(self, nodeids: list) -> None:
        random.shuffle(nodeids)
        nodeids.sort(key=_is_silent)  # (stable: the shuffle stays within each half)

    def __getattr__(self, name: str) -> Any:  # anything else aiokafka might ask of the module
        return getattr(random, name)


def _cython_streams() -> Any:
    try:
        from faust._cython import streams as cstreams
    except ImportError:  # pure-Python Faust: its own iterator, left as it is
        return None
    return cstreams


# -- install / uninstall ----------------------------------------------------------------------------------------
_TARGETS: dict[str, tuple[Any, str, Any]] = {  # key -> (owner, attribute, replacement)
    "send": (AIOKafkaConnection, "send", _send),
    "client_send": (AIOKafkaClient, "send", _client_send),
    "_get_conn": (AIOKafkaClient, "_get_conn", _get_conn),
    "client_random": (aiokafka_client, "random", SilentLast()),
}


def install(*, join_timeout_s: float | None = None) -> None:
    """Apply every patch (once; a second call only updates the setting). `join_timeout_s`: how long a JoinGroup
    may wait (None: aiokafka's request timeout)."""
    require_versions()
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
    _state.update(join_timeout_s=None)
    _SILENT.clear()


def is_installed() -> bool:
    return "send" in _ORIGINAL


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
