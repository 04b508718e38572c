"""The run's books read the live groups the streams publish as held, as the streams recover the table
(rftbus/apps/run/ledger.py `held_live_groups`, rftbus/streams/published.py).

A live group's DONE marker can reach the changelog while the grade that released it is not yet committed; after a
kill -9 the streams skip that change and release the group again (rftbus/streams/state.py). Read naively, the books saw
the group released with no curated record yet and counted it lost (tests/system/test_live.py, kill -9 of streams
late in a run on a loaded machine). Here on the real broker: a changelog written by hand, offsets committed.
"""

from __future__ import annotations

import uuid

from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from rftbus.ground.kafka import registry
from rftbus.ground.kafka.clients import make_admin, make_consumer, make_producer
from rftbus.ground.kafka.retry import retrying
from rftbus.ground.kafka.topics import create_new
from rftbus.apps.run.ledger import held_live_groups
from rftbus.streams.headers import H_INPUT
from rftbus.streams.live import DONE, WAITING, Held, pack, published
from tests.conftest import make_config


def test_a_release_past_the_commit_is_still_held_and_one_before_it_is_not(broker, tmp_path):
    tag = uuid.uuid4().hex[:6]
    cfg = make_config(tmp_path, broker.broker.port, **{"streams.app_id": f"bh{tag}"})
    raw, joined, changelog = f"bh{tag}.raw", registry.JOINED.name(cfg), registry.LIVE_CHANGELOG.name(cfg)
    create_new(make_admin(cfg), [NewTopic(t, 1, 1) for t in (raw, joined, changelog)])
    producer = make_producer(cfg)

    def change(group: str, state: int, src: str, made_by: str) -> None:
        value = pack(Held(state, 0, 0, src, b"t0", b"group bytes"))  # as the worker's live table writes it
        producer.produce(changelog, key=group.encode(), value=value,
                         headers=[(H_INPUT, made_by.encode()), *published(value)])

    change("a", WAITING, f"{raw}/0/5", f"{raw}/0/5")
    change("a", DONE, f"{raw}/0/5", f"{joined}/0/7")  # its grade at joined 7: not committed (3), read again
    change("b", WAITING, f"{raw}/0/6", f"{raw}/0/6")
    change("b", DONE, f"{raw}/0/6", f"{joined}/0/2")  # its grade is committed: released for good
    change("c", WAITING, f"{raw}/0/20", f"{raw}/0/20")  # its raw record is not committed (10): read again
    assert producer.flush(30) == 0
    for topic, n in ((raw, 30), (joined, 10)):  # offsets to commit need records under them
        for _ in range(n):
            producer.produce(topic, value=b"x")
    assert producer.flush(30) == 0
    consumer = make_consumer(cfg, cfg.streams.app_id)
    try:
        retrying(lambda: consumer.commit(offsets=[TopicPartition(raw, 0, 10), TopicPartition(joined, 0, 3)],
                                         asynchronous=False), timeout_s=60)
    finally:
        consumer.close()

    assert held_live_groups(cfg, timeout_s=30) == {f"{raw}/0/5"}
