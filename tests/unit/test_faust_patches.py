"""rftbus/streams/faust_patches.py and rftbus/streams/transport.py: each change does what it says on faust-streaming 0.15.3 /
aiokafka 0.14.0 (and the check fails without it: a plain Faust app, or aiokafka unpatched), install is applied once,
uninstall restores every original, and the worker's aiokafka clients wait as long as `kafka.request_timeout_s`. The
commit rule's own test is tests/integration/test_offsets.py."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from pathlib import Path

import faust
import pytest
from aiokafka.conn import AIOKafkaConnection
from aiokafka.protocol.group import HeartbeatRequest, JoinGroupRequest

from rftbus.ground.config import load_config
from rftbus.ground.errors import RftbusError
from rftbus.streams import faust_patches as fp
from rftbus.streams.faust_conf import faust_settings, join_timeout_s
from rftbus.streams.transport import Adaptation, WorkerApp

REPO = Path(__file__).resolve().parents[2]


def _app(tmp_path, adaptation: Adaptation | None = None, **sections):
    """A plain Faust app on the worker's settings, or (`adaptation` given) the worker's own app and transport."""
    cfg = load_config(overrides={"state_dir": str(tmp_path), **sections}, environ={})
    kwargs = dict(faust_settings(cfg, str(tmp_path / "faust")).kwargs)
    if adaptation is None:
        return faust.App("rftbus-test", **kwargs), kwargs
    app = WorkerApp("rftbus-test", **kwargs)
    app.adaptation = adaptation
    return app, kwargs


def _clients(tmp_path, adaptation: Adaptation | None = None, **sections):
    """The aiokafka producer and worker consumer the worker's own Faust settings build (not started)."""
    app, _ = _app(tmp_path, adaptation, **sections)

    async def build():  # aiokafka builds its clients inside a running loop
        return app.producer._new_producer(), app.consumer._thread._create_worker_consumer(app.transport)

    return asyncio.run(build())


@pytest.fixture
def unpatched():
    was = fp.is_installed()
    fp.uninstall()
    yield
    if was:
        fp.install()


def test_every_patch_names_its_upstream_issue_and_its_test():
    for patch in fp.PATCHES:
        assert patch.upstream and patch.why
        path, _, name = patch.test.partition("::")
        assert f"def {name}(" in (REPO / path).read_text(), f"{patch.name}: {patch.test} does not exist"


def test_the_worker_refuses_another_release():
    fp.require_versions(fp.FAUST_VERSION, fp.AIOKAFKA_VERSION)
    with pytest.raises(RftbusError, match=r"patches faust-streaming 0\.15\.3 internals .* but 0\.15\.4 is installed"):
        fp.require_versions("0.15.4", fp.AIOKAFKA_VERSION)
    with pytest.raises(RftbusError, match=r"patches aiokafka 0\.14\.0 internals .* but 0\.13\.0 is installed"):
        fp.require_versions(fp.FAUST_VERSION, "0.13.0")


def test_install_patches_and_uninstall_restores(unpatched):
    originals = {key: getattr(owner, attr) for key, (owner, attr, _) in fp._TARGETS.items()}
    with fp.installed():
        for key, (owner, attr, new) in fp._TARGETS.items():
            assert getattr(owner, attr) is new, key
        fp.install()  # once: a second call changes nothing but the settings
        assert fp.original("send") is originals["send"]
        try:
            from faust._cython import streams as cstreams
        except ImportError:
            cstreams = None
        if cstreams is not None:
            assert isinstance(cstreams.sleep, fp.YieldEvery)
    for key, (owner, attr, _) in fp._TARGETS.items():
        assert getattr(owner, attr) is originals[key], key
    if cstreams is not None:
        assert cstreams.sleep is asyncio.sleep


def test_the_streams_producer_is_idempotent_only_with_the_patch(tmp_path, unpatched):
    plain, _ = _clients(tmp_path / "a")
    assert plain._txn_manager is None, "faust-streaming now enables idempotence itself: drop the patch"
    patched, _ = _clients(tmp_path / "b", Adaptation())
    assert patched._txn_manager is not None  # aiokafka's idempotence: producer id + sequence numbers


def test_the_workers_clients_wait_as_long_as_kafka_request_timeout_s(tmp_path, unpatched):
    """Faust's own defaults are 90 s (consumer) and 1,200 s (producer; also how long a batch may wait for a
    leader): a frozen node stalled the worker for the whole freeze. With `client_timeout` every connection waits
    kafka.request_timeout_s, the producer's batches keep Faust's lifetime, and a session longer than the request
    timeout passes Faust's check without lengthening the consumer's waits."""
    producer, consumer = _clients(tmp_path / "a", kafka={"request_timeout_s": 7}, streams={"session_timeout_s": 12})
    assert producer.client._request_timeout_ms >= 600_000  # Faust's, without the patch: the whole freeze
    assert consumer._client._request_timeout_ms == 12_000  # Faust's check lifts it to the session
    producer, consumer = _clients(tmp_path / "b", Adaptation(client_timeout_s=7), kafka={"request_timeout_s": 7},
                                  streams={"session_timeout_s": 12})
    assert producer.client._request_timeout_ms == 7000 and consumer._client._request_timeout_ms == 7000
    assert producer._message_accumulator._batch_ttl >= 600  # a batch still waits out a broker restart
    assert consumer._session_timeout_ms == 12_000
    # aiokafka must still give every connection the client's timeout when it opens one
    from aiokafka.client import AIOKafkaClient

    assert "request_timeout_ms=self._request_timeout_ms" in inspect.getsource(AIOKafkaClient._get_conn)


def _join_timeout(conn: AIOKafkaConnection, request) -> float:
    """The timeout aiokafka bound for this request's answer (the wait_for coroutine's argument)."""
    coro = conn.send(request)
    try:
        return coro.cr_frame.f_locals["timeout"]
    finally:
        coro.close()


def test_join_group_waits_for_the_rebalance_timeout(tmp_path, unpatched):
    _, kwargs = _app(tmp_path, kafka={"request_timeout_s": 10}, streams={"session_timeout_s": 10})
    want = join_timeout_s(kwargs)
    assert want == kwargs["broker_rebalance_timeout"] + 5 == 25

    class Writer:
        def write(self, data: bytes) -> None:
            pass

    async def timeouts() -> tuple[float, float]:
        conn = AIOKafkaConnection("localhost", 9, request_timeout_ms=10_000)
        conn._writer = Writer()
        conn._versions = {JoinGroupRequest.API_KEY: (0, 5), HeartbeatRequest.API_KEY: (0, 3)}
        join = JoinGroupRequest("g", 10_000, 20_000, "", None, "consumer", [("roundrobin", b"")])
        return _join_timeout(conn, join), _join_timeout(conn, HeartbeatRequest("g", 1, "m"))

    assert asyncio.run(timeouts()) == (10.0, 10.0)  # aiokafka alone: the join times out mid-rebalance
    with fp.installed(join_timeout_s=want):
        assert asyncio.run(timeouts()) == (25.0, 10.0)  # the join only; its connection keeps 10 s after it


def test_fetch_settings_reach_the_consumer(tmp_path, unpatched):
    _, plain = _clients(tmp_path / "a")
    assert (plain._fetch_min_bytes, plain._fetch_max_wait_ms) == (1, 1500)  # Faust's, not settable
    _, tuned = _clients(tmp_path / "b", Adaptation(fetch_min_bytes=4096, fetch_max_wait_ms=50))
    assert (tuned._fetch_min_bytes, tuned._fetch_max_wait_ms) == (4096, 50)
    # aiokafka must still read the private attributes when it starts its fetcher
    from aiokafka.consumer.consumer import AIOKafkaConsumer

    src = inspect.getsource(AIOKafkaConsumer.start)
    assert "fetch_min_bytes=self._fetch_min_bytes" in src and "fetch_max_wait_ms=self._fetch_max_wait_ms" in src


def test_a_timed_out_request_asks_for_fresh_metadata(unpatched):
    """A frozen leader never answers: aiokafka closes the connection on the timeout but keeps the leaders it knew,
    so the retry went to the frozen node again. With the patch the timeout forces a metadata update."""
    from aiokafka.client import AIOKafkaClient
    from aiokafka.errors import RequestTimedOutError

    async def attempt() -> int:
        client = AIOKafkaClient(bootstrap_servers="localhost:9", request_timeout_ms=50)
        forced = []

        class Frozen:
            def send(self, request, expect_response=True):
                async def never():
                    raise asyncio.TimeoutError
                return never()

            def close(self, reason=None, exc=None):
                pass

        async def ready(node_id, *, group=None):
            return True

        client._conns[(1, 0)] = Frozen()
        client.ready = ready
        client.force_metadata_update = lambda: forced.append(1)
        with pytest.raises(RequestTimedOutError):
            await client.send(1, HeartbeatRequest("g", 1, "m"), group=0)
        return len(forced)

    assert asyncio.run(attempt()) == 0  # aiokafka alone: the metadata stays as it was
    with fp.installed():
        assert asyncio.run(attempt()) == 1


def test_a_node_that_timed_out_is_asked_last(unpatched):
    """aiokafka picks a random node for metadata and coordinator lookups, a frozen one included (another request
    timeout each time it does). With the patch a node whose request timed out is asked last for a while."""
    from aiokafka.client import AIOKafkaClient
    from aiokafka.cluster import ClusterMetadata
    from aiokafka.errors import RequestTimedOutError
    from aiokafka.protocol.metadata import MetadataResponse_v0

    answer = MetadataResponse_v0([(n, "localhost", 9090 + n) for n in (1, 2, 3)], [])

    class Conn:
        def __init__(self, node, asked):
            self.node, self.asked = node, asked

        def send(self, request, expect_response=True):
            async def reply():
                self.asked.append(self.node)
                if self.node == 1:
                    raise asyncio.TimeoutError  # (the frozen node: connected, never answers)
                return answer
            return reply()

        def connected(self):
            return True

        def close(self, reason=None, exc=None):
            pass

    async def attempt() -> tuple[set, list[int]]:
        client = AIOKafkaClient(bootstrap_servers="localhost:9", request_timeout_ms=10_000)
        client.cluster.update_metadata(answer)
        asked: list[int] = []
        for n in (1, 2, 3):
            client._conns[(n, 0)] = Conn(n, asked)
        with contextlib.suppress(RequestTimedOutError, asyncio.TimeoutError):
            await client.send(1, HeartbeatRequest("g", 1, "m"), group=0)  # node 1 times out
        client.force_metadata_update = lambda: None
        picks = {client.get_random_node() for _ in range(60)}
        firsts = []
        for _ in range(60):  # a random first node: 12 tries missed node 1 with p = (2/3)^12, 0.8 % (it did once)
            asked.clear()
            await client._metadata_update(ClusterMetadata(), [])
            firsts.append(asked[0])
        return picks, firsts

    picks, firsts = asyncio.run(attempt())
    assert 1 in picks and 1 in firsts  # aiokafka alone: the silent node is picked like any other
    with fp.installed():
        picks, firsts = asyncio.run(attempt())
    assert picks == {2, 3} and 1 not in firsts


def test_a_record_that_cannot_block_is_delivered_without_a_task(tmp_path):
    """Faust's fetch loop awaits ``wait_first(callback(message), suspend_flow.wait())`` per record: the callback in
    a task of its own (and the suspension's wait in another). The worker's consumer runs a callback that cannot
    block inline, in the fetch loop's own task, and one that blocks still completes under Faust's wait."""
    async def deliver(app) -> tuple[bool, bool]:
        consumer = app.consumer
        ran_in: list = []

        async def callback() -> None:
            ran_in.append(asyncio.current_task())

        async def blocking() -> None:
            await asyncio.sleep(0.01)
            ran_in.append("blocked, then done")

        await consumer.wait_first(callback(), consumer.suspend_flow.wait())
        await consumer.wait_first(blocking(), consumer.suspend_flow.wait())
        return ran_in[0] is asyncio.current_task(), ran_in[1] == "blocked, then done"

    plain, _ = _app(tmp_path / "a")
    assert asyncio.run(deliver(plain)) == (False, True)  # Faust: a task per record
    worker, _ = _app(tmp_path / "b", Adaptation())
    assert asyncio.run(deliver(worker)) == (True, True)


def test_a_connection_whose_answer_timed_out_marks_its_node_silent(unpatched):
    """The metadata update sends on the connection itself, not through the client's `send`: the connection's own
    wait (tagged with its node by `_get_conn`) marks the node, so the next update asks it last."""
    async def never():
        raise asyncio.TimeoutError

    async def answers():
        return "ok"

    with fp.installed():
        assert asyncio.run(fp._watched(answers(), 7, 1.0)) == "ok" and not fp._is_silent(7)
        with pytest.raises(asyncio.TimeoutError):
            asyncio.run(fp._watched(never(), 7, 1.0))
        assert fp._is_silent(7)
        nodes = [7, 8, 9]
        fp.SilentLast().shuffle(nodes)
        assert nodes[-1] == 7 and {fp.SilentLast().choice([7, 8]) for _ in range(20)} == {8}
    assert not fp._is_silent(7)  # uninstall forgets


def test_rftbus_streams_patches_lists_every_change(tmp_path):
    from typer.testing import CliRunner

    from rftbus.apps.cli.main import app

    out = CliRunner().invoke(app, ["--state-dir", str(tmp_path), "streams", "--patches"], terminal_width=250,
                             env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert all(p.name in out.output and p.test in out.output for p in fp.PATCHES)
    assert f"{len(fp.PATCHES)} changes" in out.output
