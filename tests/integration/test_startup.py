"""Start-up (#19: start learning at once): a command started beside the broker waits for it (kafka.wait_s)
instead of failing, an address where nothing listens answers at once, and `rftbus run` starts its children
before the broker answers. Through real processes and the session's real broker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rftbus.ground.kafka.clients import BrokerUnreachable, check_reachable
from tests.conftest import make_config


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_nothing_listening_answers_at_once_and_wait_s_keeps_asking(tmp_path):
    cfg = make_config(tmp_path, _closed_port())
    t = time.monotonic()
    with pytest.raises(BrokerUnreachable, match="nothing accepts connections"):
        check_reachable(cfg, timeout=5.0)
    assert time.monotonic() - t < 1.0  # librdkafka alone waits out its whole 5 s metadata timeout
    waiting = cfg.model_copy(update={"kafka": cfg.kafka.model_copy(update={"wait_s": 2.0})})
    t = time.monotonic()
    with pytest.raises(BrokerUnreachable):
        check_reachable(waiting, timeout=5.0)
    assert 2.0 <= time.monotonic() - t < 5.0
    t = time.monotonic()
    with pytest.raises(BrokerUnreachable):
        check_reachable(waiting, timeout=5.0, wait=False)  # the caller's own probe: no waiting
    assert time.monotonic() - t < 1.0


def test_a_command_started_before_the_broker_waits_for_it(broker, tmp_path):
    """`rftbus topics create` with kafka.wait_s, pointed at a port where the broker appears 3 s later (a
    forwarder to the session's broker stands in for it starting): it waits, then does its work."""
    port = _closed_port()
    target = ("127.0.0.1", broker.broker.port)
    stop = threading.Event()

    def forward() -> None:
        time.sleep(3.0)
        srv = socket.create_server(("127.0.0.1", port))
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                a, _ = srv.accept()
            except OSError:
                continue
            b = socket.create_connection(target)
            for x, y in ((a, b), (b, a)):
                threading.Thread(target=_pipe, args=(x, y), daemon=True).start()
        srv.close()

    threading.Thread(target=forward, daemon=True).start()
    cmd = [str(Path(sys.executable).parent / "rftbus"), "--state-dir", str(tmp_path), "-b", f"127.0.0.1:{port}",
           "topics", "create"]
    t = time.monotonic()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "RFTBUS_KAFKA__WAIT_S": "30"})
    finally:
        stop.set()
    assert out.returncode == 0, out.stdout + out.stderr
    assert time.monotonic() - t >= 3.0


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def test_creators_racing_on_fresh_topics_all_succeed(broker, tmp_path):
    """`rftbus run` and its children create the declared topics at once; one that sees a topic another just made
    must wait until it is visible, not fail on UNKNOWN_TOPIC_OR_PART (found by a reverse benchmark run)."""
    import uuid
    from concurrent.futures import ThreadPoolExecutor

    from rftbus.ground.kafka.clients import make_admin
    from rftbus.ground.kafka.topics import create_topics
    from tests.explorer_kafka import KEYS

    for _ in range(3):
        u = uuid.uuid4().hex[:8]
        cfg = make_config(tmp_path, broker.broker.port, **{f"topics.{k}.name": f"race-{k}-{u}" for k in KEYS})
        with ThreadPoolExecutor(6) as pool:
            results = list(pool.map(lambda c: create_topics(c, make_admin(c)), [cfg] * 6))
        for res in results:
            assert all(r.status in ("created", "exists") for r in res), [(r.name, r.status, r.error) for r in res]
        assert sum(r.status == "created" for res in results for r in res) == len(KEYS)
