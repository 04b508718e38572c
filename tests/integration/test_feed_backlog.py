"""`rftbus run` counts the demonstrations its trainer has still to take from the trainer's own positions and the
lane's end offsets, not from the trainer group's committed offsets (#46: those stand still, and reading them waited
10-30 s, while the group's coordinator is frozen, and the run starved its trainer of demonstrations); records on a
partition whose leader does not answer are not counted (the trainer cannot fetch them either)."""

from __future__ import annotations

from rftbus.ground.kafka.clients import make_admin, make_producer
from rftbus.ground.kafka.inspect import backlog
from rftbus.apps.run.feed import trainer_positions
from tests.conftest import make_config
from tests.explorer_kafka import fresh_config


def test_backlog_is_the_end_past_the_readers_own_positions_of_the_partitions_that_answer(broker, tmp_path):
    cfg = fresh_config(make_config, tmp_path, broker)
    topic = cfg.topics.expert.name
    producer = make_producer(cfg)
    for i in range(10):
        producer.produce(topic, key=b"k", value=b"x", partition=i % 2)
    producer.flush(10)
    admin = make_admin(cfg)
    # (wait_s longer than a run's 2 s: under the whole suite's load a healthy broker took over 2 s to answer, and
    # both partitions then counted as not answering: the rule this test is not about)
    assert backlog(admin, topic, {0: 2, 1: 0}, wait_s=15.0) == 3 + 5
    # a partition whose end does not come back (here: no such partition; in a run: its leader frozen) counts as
    # nothing waiting, and the others are still read
    producer.produce(topic, key=b"k", value=b"x", partition=0)
    producer.flush(10)
    assert backlog(admin, topic, {0: 2, 1: 5, 99: 4}, wait_s=8.0) == 4 + 0


def test_the_trainers_positions_come_from_its_status():
    statuses = [{"role": "explorer", "positions": [{"topic": "t", "partition": 0, "offset": 9}]},
                {"role": "trainer", "positions": [{"topic": "rft.experiences.expert", "partition": 0, "offset": 4},
                                                  {"topic": "rft.experiences.expert", "partition": 3, "offset": 7},
                                                  {"topic": "rft.experiences.curated", "partition": 0, "offset": 1}]}]
    assert trainer_positions(statuses, "rft.experiences.expert") == {0: 4, 3: 7}
    assert trainer_positions(statuses, "other") is None and trainer_positions([], "x") is None
