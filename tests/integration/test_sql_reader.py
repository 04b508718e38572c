"""The read path through the real parts (issue #42): the studio's `POST api/sql` with a read token, in front of the
sandboxed reader (bubblewrap + chDB), on a chDB folder that the sink's writer holds and keeps inserting into.

A read token must reach nothing but the analytics tables: no file content, no secret, no outbound connection,
whatever the statement; a query that would run forever, or a result too big, ends at its limit; a 1 MB query is
refused at once. Below the grammar, the reader itself is asked directly for what the grammar refuses, to show the
sandbox holds on its own.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

import psutil
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from rftbus.ground.config import load_config
from rftbus.consumers.analytics.backends import open_backend
from rftbus.consumers.analytics.jail import JailError, JailedChdb, TooManyReaders
from rftbus.consumers.analytics.query import run_query
from rftbus.consumers.studio.app import create_studio

from hostile_sql import hostile
from probe_server import probe_server

READER = "reader-token-1"
SECRET = "feedback-token-" + uuid.uuid4().hex


@pytest.fixture
def live_sink(tmp_path):
    """A chDB folder held by the sink's writer (in this process, as `rftbus analytics sink` holds it), a thread
    inserting a task row every 50 ms, and a secret in the state folder (as `rftbus run` writes its config)."""
    state = tmp_path / "state"
    cfg = load_config(overrides={"state_dir": str(state), "serve": {"read_tokens": [READER]},
                                 "analytics": {"query_timeout_s": 2, "query_max_rows": 1000}}, environ={})
    (state / "run").mkdir(parents=True)
    (state / "run" / "config.yaml").write_text(f"serve:\n  feedback_tokens: [{SECRET}]\n")
    os.chmod(state / "run" / "config.yaml", 0o600)
    writer = open_backend(cfg, writable=True)
    stop, inserted = threading.Event(), [0]

    def insert() -> None:
        while not stop.is_set():
            writer.insert("tasks", [{"topic": "tasks", "kafka_topic": "t", "partition": 0, "offset": inserted[0],
                                     "kafka_ts": 1_700_000_000_000, "task_id": uuid.uuid4().hex, "taskset": "x",
                                     "split": "train", "prompt": "p", "answer": "a", "workflow": "single_turn",
                                     "n_samples": 1, "priority": 0, "created_at": 1_700_000_000_000}])
            inserted[0] += 1
            time.sleep(0.05)

    t = threading.Thread(target=insert, daemon=True)
    t.start()
    try:
        yield cfg, inserted
    finally:
        stop.set()
        t.join(10)
        writer.close()


def _studio(cfg) -> TestClient:
    app = FastAPI()
    app.mount("/studio", create_studio(cfg, publisher=object()))  # type: ignore[arg-type]  # reads only
    return TestClient(app, base_url="http://testserver/studio/")


def _no_secret(text: str) -> None:
    for leak in (SECRET, "root:x:0:0", "feedback_tokens"):
        assert leak not in text, text[:500]


def test_a_read_token_reaches_nothing_but_the_tables(live_sink, tmp_path):
    cfg, inserted = live_sink
    c, auth = _studio(cfg), {"Authorization": f"Bearer {READER}"}
    target = tmp_path / "pwned"
    secret_path = str(cfg.state_dir / "run" / "config.yaml")
    forms = hostile(str(target)) + [(s.replace("/etc/passwd", secret_path), w) for s, w in hostile(str(target))
                                    if "/etc/passwd" in s]
    for sql, words in forms:
        r = c.post("api/sql", headers=auth, json={"sql": sql})
        assert r.status_code == 400 and words in r.json()["error"]["message"], (sql, r.text[:300])
        _no_secret(r.text)
    assert not target.exists()
    # Schema questions have their own answer, from the table definitions.
    r = c.get("api/schema", headers=auth)
    assert r.status_code == 200 and any(t["table"] == "rftbus.experiences" for t in r.json()["tables"])
    assert "file" not in r.json()["functions"] and "count" in r.json()["functions"]
    assert c.get("api/schema").status_code == 401
    # A query that would run forever ends within max_execution_time, while the sink keeps inserting.
    before, t0 = inserted[0], time.monotonic()
    r = c.post("api/sql", headers=auth, json={"sql": "SELECT count() FROM tasks AS a, tasks AS b, tasks AS c, "
                                                     "tasks AS d, tasks AS e WHERE sleepEachRow(1) = 0"})
    assert r.status_code == 400 and "sleepEachRow" in r.text  # not a function that computes
    r = c.post("api/sql", headers=auth, json={"sql": "SELECT count() FROM (SELECT arrayJoin(range(100000)) AS a) AS x, "
                                                     "(SELECT arrayJoin(range(100000)) AS b) AS y "
                                                     "WHERE cityHash64(a, b) = 7"})
    took = time.monotonic() - t0
    assert r.status_code == 400 and "timeout" in r.json()["error"]["message"], r.text[:300]
    assert took < 2 + 10, took
    assert inserted[0] - before >= 5, "the sink's inserts stopped while the long query ran"
    # A result over max_result_rows is refused, not streamed.
    r = c.post("api/sql", headers=auth, json={"sql": "SELECT arrayJoin(range(5000)) AS n"})
    assert r.status_code == 400 and "result_too_large" in r.json()["error"]["message"], r.text[:300]
    # A 1 MB query: 4xx at once, and serve's memory does not grow with it.
    me = psutil.Process()
    rss0, t0 = me.memory_info().rss, time.monotonic()
    for _ in range(4):
        r = c.post("api/sql", headers=auth, json={"sql": "SELECT " + " + ".join(["1"] * 250_000)})
        assert r.status_code in (400, 413), r.text[:300]
    assert time.monotonic() - t0 < 3 * 4
    assert me.memory_info().rss - rss0 < 200 * 2**20
    # And a real read still answers, counting the rows the sink wrote meanwhile.
    r = c.post("api/sql", headers=auth, json={"sql": "SELECT count() AS n FROM rftbus.tasks"})
    assert r.status_code == 200 and r.json()["rows"][0][0] >= before, r.text[:300]
    assert run_query(cfg, "SELECT count() AS n FROM tasks").scalar() >= before


def test_the_reader_itself_reaches_no_file_secret_or_network(live_sink):
    """What the grammar refuses, asked of the sandboxed reader directly: the engine in the sandbox cannot do it."""
    cfg, _ = live_sink
    secret = str(cfg.state_dir / "run" / "config.yaml")
    with probe_server() as (port, hits):
        with JailedChdb(cfg.state_dir / "analytics" / "chdb", "rftbus", cfg.analytics) as r:
            for sql in (f"SELECT file('{secret}')", "SELECT file('/etc/passwd')", "SELECT file('/proc/1/environ')",
                        f"DESCRIBE file('{secret}', 'TSVWithNames')", f"SELECT * FROM file('{secret}', 'LineAsString')",
                        f"DESCRIBE url('http://127.0.0.1:{port}/x', 'CSVWithNames')",
                        f"SELECT * FROM url('http://127.0.0.1:{port}/x', 'CSV', 'a String')",
                        "SELECT * FROM remote('127.0.0.1:9000', system.one)"):
                with pytest.raises(JailError) as e:
                    r.query(sql)
                _no_secret(str(e.value))
                assert "'…'" in str(e.value) or e.value.category in ("refused", "engine", "unknown_name", "timeout"), str(e.value)
            # The reader's own process sees no environment and no other process.
            assert r.query("SELECT count() AS n FROM tasks").scalar() > 0
    assert hits == [], "the sandboxed reader made a request"


def test_sandboxed_readers_are_bounded_and_a_query_past_them_is_a_429(live_sink):
    """#63: each sandboxed reader is a process of about 250 MB, and nothing bounded how many ran at once. Past
    analytics.max_readers a read is refused at once (the studio's SQL answers 429), and a slot frees on close."""
    cfg, _ = live_sink
    cfg = cfg.model_copy(update={"analytics": cfg.analytics.model_copy(update={"max_readers": 2})})
    c, auth = _studio(cfg), {"Authorization": f"Bearer {READER}"}
    held = [JailedChdb(cfg.state_dir / "analytics" / "chdb", "rftbus", cfg.analytics) for _ in range(2)]
    try:
        for r in held:
            assert r.query("SELECT 1 AS one").scalar() == 1  # each started its process
        third = JailedChdb(cfg.state_dir / "analytics" / "chdb", "rftbus", cfg.analytics)
        with pytest.raises(TooManyReaders, match="analytics.max_readers 2"):
            third.query("SELECT 1")
        r = c.post("api/sql", headers=auth, json={"sql": "SELECT count() AS n FROM tasks"})
        assert r.status_code == 429 and r.json()["error"]["code"] == "too_many_queries", r.text[:300]
    finally:
        for r in held:
            r.close()
    r = c.post("api/sql", headers=auth, json={"sql": "SELECT count() AS n FROM tasks"})
    assert r.status_code == 200, r.text[:300]
