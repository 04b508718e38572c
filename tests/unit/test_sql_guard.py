"""The read-only query path (issue #36): a `read` token must never write a file, reach outside the database,
kill a query or hang the sink. Unit tests of the statement check, then the real thing: a chDB folder held by
the sink's own writer and query server (in this process, as `rftbus analytics sink` runs them), asked through
the studio's `POST /api/sql` with a read token while rows keep going in.
"""

from __future__ import annotations

import threading
import time
import uuid

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from rftbus.config import load_config
from rftbus.consumers.analytics.backends import QueryError, open_backend, where
from rftbus.consumers.analytics.backends.base import read_limits
from rftbus.consumers.analytics.query import run_query
from rftbus.consumers.analytics.server import QueryServer
from rftbus.consumers.analytics.statement import RefusedStatement, check
from rftbus.consumers.studio.app import create_studio
from rftbus.status import StatusFile, read_statuses

READER = "reader-token-1"


def hostile(target: str) -> list[tuple[str, str]]:
    """Every write, file, URL, process and kill form we could think of, with the words its refusal names."""
    return [
        (f"SELECT 1 INTO OUTFILE '{target}' TRUNCATE FORMAT RawBLOB", "INTO is refused"),
        (f"SELECT 'x' INTO OUTFILE '{target}' APPEND FORMAT RawBLOB", "INTO is refused"),
        (f"SELECT * FROM (SELECT 1 AS a) INTO OUTFILE '{target}'", "INTO is refused"),
        (f"SELECT * FROM rftbus.tasks INTO OUTFILE '{target}' FORMAT CSV", "INTO is refused"),
        (f"with a AS (SELECT 1) select * from a into outfile '{target}'", "INTO is refused"),
        (f"SHOW TABLES INTO OUTFILE '{target}'", "INTO is refused"),
        (f"DESCRIBE TABLE rftbus.tasks INTO OUTFILE '{target}'", "INTO is refused"),
        (f"INSERT INTO FUNCTION file('{target}', 'RawBLOB') SELECT 'x'", "INSERT statements are refused"),
        (f"SELECT * FROM file('{target}', 'LineAsString')", "table function file()"),
        ("SELECT file('/etc/hostname')", "function file()"),
        ("SELECT length(FILE('/etc/hostname')) AS n", "function file()"),
        ("SELECT * FROM url('http://127.0.0.1:9/', 'CSV', 'a String')", "table function url()"),
        ("SELECT * FROM s3('http://127.0.0.1:9/b/k', 'CSV')", "table function s3()"),
        ("SELECT * FROM executable('id', 'TSV', 'a String')", "table function executable()"),
        ("SELECT * FROM remote('127.0.0.1', system.one)", "table function remote()"),
        ("SELECT * FROM mysql('127.0.0.1:3306', 'db', 't', 'u', 'p')", "table function mysql()"),
        ("SELECT 1 WHERE 1 IN (SELECT * FROM url('http://127.0.0.1:9/', 'CSV', 'a UInt8'))", "table function url()"),
        ("KILL QUERY WHERE 1", "KILL statements are refused"),
        ("KILL QUERY WHERE query LIKE 'INSERT%' SYNC", "KILL statements are refused"),
        ("SYSTEM FLUSH LOGS", "SYSTEM statements are refused"),
        ("SYSTEM SHUTDOWN", "SYSTEM statements are refused"),
        ("OPTIMIZE TABLE rftbus.tasks FINAL", "OPTIMIZE statements are refused"),
        ("DROP TABLE rftbus.tasks", "DROP statements are refused"),
        ("TRUNCATE TABLE rftbus.tasks", "TRUNCATE statements are refused"),
        ("ALTER TABLE rftbus.tasks DELETE WHERE 1", "ALTER statements are refused"),
        ("CREATE TABLE x (a Int8) ENGINE = File(RawBLOB)", "CREATE statements are refused"),
        ("BACKUP TABLE rftbus.tasks TO File('b.zip')", "BACKUP statements are refused"),
        ("SET max_execution_time = 0", "SET statements are refused"),
        ("EXPLAIN SELECT 1", "EXPLAIN statements are refused"),
        ("SELECT 1; DROP TABLE rftbus.tasks", "one statement at a time"),
        ("SELECT count() FROM system.numbers SETTINGS max_execution_time = 0", "SETTINGS clause is refused"),
        ("SELECT * FROM (SELECT 1 SETTINGS readonly = 0)", "SETTINGS clause is refused"),
        ("SELECT 1 FORMAT RawBLOB", "FORMAT clause is refused"),
        ("SHOW TABLES FORMAT RawBLOB", "FORMAT clause is refused"),
    ]


def test_every_hostile_form_is_refused_naming_what(tmp_path):
    for sql, words in hostile(str(tmp_path / "pwned")):
        with pytest.raises(RefusedStatement) as e:
            check(sql)
        assert words in str(e.value), (sql, str(e.value))


def test_read_only_statements_pass_and_quoted_words_do_not_trip_the_check():
    ok = [("SELECT 1", "SELECT"), ("select * from rftbus.experiences FINAL where id = {id:String} limit 3;", "SELECT"),
          ("WITH a AS (SELECT 1 AS x) SELECT x FROM a", "WITH"), ("(SELECT 1) UNION ALL (SELECT 2)", "SELECT"),
          ("SHOW TABLES", "SHOW"), ("SHOW TABLES LIKE '%into outfile%'", "SHOW"), ("DESCRIBE TABLE t", "DESCRIBE"),
          ("SELECT 'INTO OUTFILE /tmp/x' AS s -- into outfile", "SELECT"), ("SELECT * FROM numbers(10)", "SELECT"),
          ("SELECT a FROM t ARRAY JOIN arr AS a", "SELECT"), ("SELECT values['reward'] FROM metrics", "SELECT"),
          ("SELECT format('{} {}', 'a', 'b')", "SELECT")]
    for sql, kind in ok:
        assert check(sql) == kind, sql
    with pytest.raises(QueryError, match="Syntax error"):
        check("SELECT (1")
    with pytest.raises(QueryError, match="empty query"):
        check(" ; ")


def test_read_limits_come_from_the_config():
    cfg = load_config(overrides={"analytics": {"query_timeout_s": 3, "query_max_rows": 10}}, environ={})
    lim = read_limits(cfg.analytics)
    assert lim["max_execution_time"] == 3 and lim["max_result_rows"] == 10 and lim["result_overflow_mode"] == "throw"


@pytest.fixture
def live_sink(tmp_path):
    """A chDB folder held by the sink's writer and served by its query server, advertised as `rftbus analytics
    sink` does, with a thread inserting a task row every 50 ms; yields (config, inserted-count box)."""
    cfg = load_config(overrides={"state_dir": str(tmp_path / "state"), "serve": {"read_tokens": [READER]},
                                 "analytics": {"query_timeout_s": 2, "query_max_rows": 1000}}, environ={})
    writer = open_backend(cfg, writable=True)
    server = QueryServer(writer).start()
    status = StatusFile(cfg.state_dir, "analytics", "0")
    status.update(backend="chdb", where=where(cfg), query_url=server.url, state="running")
    status.start()
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
        status.stop(state="stopped")
        server.stop()
        writer.close()


def _studio(cfg) -> TestClient:
    app = FastAPI()
    app.mount("/studio", create_studio(cfg, publisher=object()))  # type: ignore[arg-type]  # reads only
    return TestClient(app, base_url="http://testserver/studio/")


def test_a_read_token_cannot_write_kill_or_hang_through_the_studio(live_sink, tmp_path):
    cfg, inserted = live_sink
    c, auth = _studio(cfg), {"Authorization": f"Bearer {READER}"}
    target = tmp_path / "pwned"
    existing = tmp_path / "existing.txt"
    existing.write_text("keep me\n")
    for sql, words in hostile(str(target)) + [(s.replace(str(target), str(existing)), w)
                                              for s, w in hostile(str(target)) if "OUTFILE" in s]:
        r = c.post("api/sql", headers=auth, json={"sql": sql})
        assert r.status_code == 400 and words in r.json()["error"]["message"], (sql, r.text)
    assert not target.exists() and existing.read_text() == "keep me\n"
    # The sink's own endpoint (loopback, what the studio reads through) refuses them too.
    url = read_statuses(cfg.state_dir, "analytics")[0]["query_url"]
    for sql, words in hostile(str(target))[:8]:
        r = httpx.post(url + "/query", json={"sql": sql}, trust_env=False)
        assert r.status_code == 400 and words in r.json()["error"], sql
    assert not target.exists()
    # A query that would run forever ends within max_execution_time, while the sink keeps inserting.
    before, t0 = inserted[0], time.monotonic()
    r = c.post("api/sql", headers=auth, json={"sql": "SELECT count() FROM system.numbers"})
    took = time.monotonic() - t0
    assert r.status_code == 400 and "Timeout exceeded" in r.json()["error"]["message"], r.text
    assert took < 2 + 8, took  # the 2 s limit plus the request's own overhead on a loaded machine
    assert inserted[0] - before >= 5, "the sink's inserts stopped while the long query ran"
    # A result over max_result_rows is refused, not streamed.
    r = c.post("api/sql", headers=auth, json={"sql": "SELECT number FROM numbers(5000)"})
    assert r.status_code == 400 and "Limit for result exceeded" in r.json()["error"]["message"], r.text
    # And a real read still answers, counting the rows the sink wrote meanwhile.
    r = c.post("api/sql", headers=auth, json={"sql": "SELECT count() AS n FROM rftbus.tasks"})
    assert r.status_code == 200 and r.json()["rows"][0][0] >= before, r.text
    n = run_query(cfg, "SELECT count() AS n FROM rftbus.tasks").scalar()
    assert n >= before
