"""#63: one record ClickHouse will not take (a timestamp out of DateTime64's range) failed the analytics sink's
whole batch insert, and the sink retried and stopped. Now the real sink process, on the real broker and chDB,
inserts the rest of the batch, quarantines that one row as `undecodable` (insert_refused) with its position, and
goes on."""

from __future__ import annotations

import uuid

from rftbus.ground.kafka.clients import make_admin, make_producer
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.schemas import Task
from tests.integration.test_analytics import CODEC, _sink, _sink_cfg


def test_one_row_clickhouse_refuses_is_quarantined_and_the_batch_goes_in(broker, tmp_path):
    from rftbus.consumers.analytics.query import run_query as query

    cfg, path = _sink_cfg(broker, tmp_path, uuid.uuid4().hex[:6])
    create_topics(cfg, make_admin(cfg))
    p = make_producer(cfg)
    tasks = [Task(taskset="addition", prompt=f"{i}+1=", answer=str(i + 1)) for i in range(30)]
    tasks[17].created_at = -5  # ms before the epoch: ClickHouse cannot read the DateTime64 it becomes
    for t in tasks:
        p.produce(cfg.topics.tasks.name, key=t.task_id.encode(), value=CODEC.encode(t, None), partition=0)
    assert p.flush(30) == 0
    sink = _sink(path, "--until-end", env={"RFTBUS_ANALYTICS__INSERT_RETRIES": "1"})
    assert sink.wait(180) == 0, [log.read_text()[-2000:] for log in path.parent.glob("sink-*.log")]
    stored = query(cfg, "SELECT task_id FROM tasks FINAL").rows
    assert sorted(r[0] for r in stored) == sorted(t.task_id for i, t in enumerate(tasks) if i != 17)
    bad = query(cfg, "SELECT topic, partition, offset, reason, detail FROM undecodable FINAL").rows
    assert [(b[0], b[1], b[2], b[3]) for b in bad] == [("tasks", 0, 17, "insert_refused")], bad
    assert bad[0][4].startswith("tasks: ")  # the table and ClickHouse's own words
