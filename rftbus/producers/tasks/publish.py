"""Publishing Tasks to `topics.tasks` (key = task_id), with delivery accounting.

Nothing counts as published until Kafka acknowledged it; bad rows are collected with their
position and skipped. Re-publishing creates records with the same stable task ids, which the
explorers skip (rftbus.producers.seen_tasks), so no task is rolled out twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka import Producer

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.clients import make_producer
from rftbus.ground.kafka.in_flight import InFlight
from rftbus.producers.tasks.sources import Row
from rftbus.ground.schemas import ExperienceGroup, Task, make_codec, topic_context


class PublishError(RftbusError):
    """Kafka did not acknowledge some records."""


@dataclass
class PublishReport:
    published: int = 0
    expert: int = 0
    bad: list[tuple[str, str]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def publish_tasks(cfg: Config, rows: Iterable[Row], *, expert: bool = False, tasks: bool = True,
                  on_row: Callable[[Row], None] | None = None,
                  on_produced: Callable[[], None] | None = None,
                  demo_of: Callable[[Task], ExperienceGroup | None] | None = None,
                  producer: Producer | None = None) -> PublishReport:
    """Publish each row's Task (unless `tasks` is false) and, with `expert`, its demonstration. `on_produced`:
    called once every record is handed to the producer, before waiting for Kafka's acknowledgements.
    `demo_of`: an `expert_maker(cfg)` kept by a caller that publishes again and again (it loads the tokenizer).
    `producer`: one kept by such a caller (several publishes may share it at once; each waits for its own records
    only). A new producer first asks a bootstrap node for metadata and a producer id, and a frozen node held that
    question for a request timeout: a run's pass every few seconds did, while the trainer waited for it (#46)."""
    codec = make_codec(cfg.schema_registry.url, cfg.schema_registry.client)
    enc_task, enc_group = codec.serializer(Task), codec.serializer(ExperienceGroup)
    producer = make_producer(cfg) if producer is None else producer
    report = PublishReport()
    demo_of = (demo_of or expert_maker(cfg)) if expert else None
    # this publish's own records (a shared producer holds others' too); acknowledged = sent - refused - waiting
    flights = {"task": InFlight("task"), "expert": InFlight("demonstration")}
    sent = {"task": 0, "expert": 0}

    def produce(topic: str, key: str, value: bytes | None, kind: str) -> None:
        on_delivery = flights[kind].expect(f"{topic} key={key!r}")
        sent[kind] += 1
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                return
            except BufferError:
                producer.poll(0.1)

    for row in rows:
        if row.task is None:
            report.bad.append((row.where, row.error or "invalid"))
        else:
            if tasks:
                produce(cfg.topics.tasks.name, row.task.task_id, enc_task(row.task, topic_context(cfg.topics.tasks.name)),
                        "task")
            if demo_of is not None:
                demo = demo_of(row.task)
                if demo is not None:
                    produce(cfg.topics.expert.name, demo.group_id,
                            enc_group(demo, topic_context(cfg.topics.expert.name)), "expert")
        producer.poll(0)
        if on_row:
            on_row(row)
    if on_produced:
        on_produced()
    deadline, acked = time.monotonic() + 60.0, {}
    for kind, flight in flights.items():
        refused, waiting = flight.settle(producer, max(0.0, deadline - time.monotonic()))
        acked[kind] = sent[kind] - len(refused) - waiting
        report.failed += refused + ([f"{waiting} {kind} records still unacknowledged after 60 s"] if waiting else [])
    report.published, report.expert = acked["task"], acked["expert"]
    return report


def expert_maker(cfg: Config) -> Callable[[Task], ExperienceGroup | None]:
    """Demonstrations from the built-in tasksets' `.expert` (tokenized with the policy's tokenizer)."""
    from rftbus.ground.models.loading import load_tokenizer
    from rftbus.ground.prompting import run_prompt_format
    from rftbus.producers.experience import expert_group
    from rftbus.ground.tasksets import get_taskset, taskset_names
    fmt = run_prompt_format(load_tokenizer(cfg.model), cfg)

    def make(task: Task) -> ExperienceGroup | None:
        if task.taskset not in taskset_names():
            return None if task.answer is None else expert_group(task, task.answer, fmt, "tasks-publish")
        return expert_group(task, get_taskset(task.taskset).expert(task), fmt, "tasks-publish")
    return make
