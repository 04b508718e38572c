"""The synthesize stage on the real broker (rftbus/producers/synthesis/): parents chosen by their outcome, a
synthesizer that raises, hangs or returns junk isolated, duplicates, wrong, held-out and unverifiable tasks refused
with their reasons, the new tasks' lineage readable from the topic with the project's `.avsc` files alone, and the
quotas and the committed offsets holding across a restart."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import fastavro
from conftest import make_config
from explorer_kafka import fresh_config

from rftbus.ground.kafka.clients import make_producer
from rftbus.ground.kafka.read import read_to_end
from rftbus.ground.schemas import Experience, ExperienceGroup, Source, Task, make_codec
from rftbus.ground.tasksets import get_taskset
from rftbus.ground.tasksets.files import Row
from rftbus.producers.synthesis.stage import Synthesize
from rftbus.producers.tasks.publish import publish_tasks

CODEC = make_codec(None)
AVSC = Path(__file__).resolve().parents[2] / "rftbus" / "ground" / "schemas" / "Task.avsc"
MODES = ["good", "raise", "slow", "not_a_list", "malformed", "duplicate", "wrong", "held_out", "unverifiable"]


def _group(task: Task, *rewards: float) -> ExperienceGroup:
    return ExperienceGroup(task_id=task.task_id, source=Source.explorer, explorer_id="e0", prompt_ids=[1, 2],
                           metadata={"taskset": task.taskset, "split": "train"},
                           samples=[Experience(response_ids=[3], logprobs=[-0.5], loss_mask=[1], reward=r,
                                               model_version=0) for r in rewards])


def _send(cfg, groups: list[ExperienceGroup]) -> None:
    p = make_producer(cfg)
    for g in groups:
        p.produce(cfg.topics.raw.name, key=g.group_id, value=CODEC.encode(g, None))
    p.flush(30)


def _run_until(s: Synthesize, done, timeout: float = 90.0) -> None:
    t = threading.Thread(target=s.run, daemon=True)
    t.start()
    deadline = time.monotonic() + timeout
    try:
        while not done(s):
            assert time.monotonic() < deadline, f"stage did not get there: {dict(s.counts)} {dict(s.refused)}"
            assert t.is_alive(), "the stage stopped"
            time.sleep(0.2)
    finally:
        s.stop()
        t.join(30)


def _tasks_with_the_avsc(cfg) -> list[dict]:
    """The tasks topic read with fastavro and Task.avsc alone (single-object encoding: C3 01, fingerprint, body)."""
    schema = fastavro.parse_schema(json.loads(AVSC.read_text()))
    out = []
    for m in read_to_end(cfg, cfg.topics.tasks.name, timeout_s=20):
        v = m.value()
        assert v[:2] == b"\xc3\x01"
        out.append(fastavro.schemaless_reader(io.BytesIO(v[10:]), schema))
    return out


def test_the_stage_publishes_checked_new_tasks_with_lineage_and_isolates_bad_synthesizers(broker, tmp_path):
    cfg = fresh_config(make_config, tmp_path, broker, **{
        "taskset.name": "times", "synthesis.synthesizer.name": "synth_plugins:by_mode", "synthesis.parents": ["failed"],
        "synthesis.timeout_s": 1.0, "synthesis.per_parent": 2, "synthesis.max_share": 0.9,
        "synthesis.max_generation": 1, "synthesis.group_id": f"synth-{tmp_path.name[-12:]}"})
    base = list(get_taskset("times").tasks("train", len(MODES) + 1))
    parents = [Task(task_id=t.task_id, taskset="times", prompt=t.prompt, answer=t.answer,
                    metadata={**t.metadata, "mode": mode}) for t, mode in zip(base, MODES, strict=False)]
    mastered = base[-1]
    rep = publish_tasks(cfg, [Row(f"t{i}", task=t) for i, t in enumerate([*parents, mastered])])
    assert rep.published == len(MODES) + 1
    _send(cfg, [_group(t, 0.0, 0.0) for t in parents] + [_group(mastered, 1.0, 1.0)])

    s = Synthesize(cfg, report=lambda m: None)
    _run_until(s, lambda s: s.counts["groups"] >= len(MODES) + 1 and s.counts["published"] >= 2)
    assert s.counts["parents"] == len(MODES)  # the mastered task is no parent under parents: [failed]
    assert s.counts["published"] == 2
    assert s.counts["synthesizer_errors"] == 2 and s.counts["synthesizer_timeouts"] == 1  # raise, not a list; slow
    assert dict(s.refused) == {"malformed": 1, "duplicate": 1, "wrong_answer": 1, "held_out": 1, "unverified": 1}

    rows = _tasks_with_the_avsc(cfg)
    new = [r for r in rows if r["parent_task_id"] is not None]
    good = parents[0]
    assert len(new) == 2 and {r["parent_task_id"] for r in new} == {good.task_id}
    times = get_taskset("times")
    for r in new:
        assert r["synthesizer"] == "synth_plugins:by_mode" and r["generation"] == 1 and r["parent_outcome"] == "failed"
        assert r["answer"] == times.answer_of(r["prompt"]) and r["metadata"]["verified"] == "recompute"
        assert int(r["answer"]) <= int(good.answer)  # a failed parent asks for easier
    assert all(r["parent_task_id"] is None and r["generation"] == 0 for r in rows if r not in new)

    # A restart: the committed offsets hold (nothing redone); the good parent failing again, and a synthesized
    # task failing, make nothing: the parent's quota is spent and generation 2 is past synthesis.max_generation.
    children = [Task(task_id=r["task_id"], taskset="times", prompt=r["prompt"], answer=r["answer"],
                     parent_task_id=r["parent_task_id"], generation=r["generation"]) for r in new]
    _send(cfg, [_group(good, 0.0, 0.0), _group(children[0], 0.0, 0.0)])
    again = Synthesize(cfg, report=lambda m: None)
    _run_until(again, lambda s: s.counts["groups"] >= 2)
    assert again.counts["groups"] == 2 and again.counts["published"] == 0
    assert dict(again.refused) == {"parent_quota": 1, "generation_limit": 1}
    assert len([r for r in _tasks_with_the_avsc(cfg) if r["parent_task_id"]]) == 2


def test_the_stages_reader_of_the_tasks_topic_sees_what_comes_later(broker, tmp_path):
    """The stage reads the tasks topic again and again with one consumer (read_to_end from where it stopped): a
    partition read to its end is paused, and the next read must see what was published since (librdkafka keeps
    the pause across assignments)."""
    cfg = fresh_config(make_config, tmp_path, broker, **{"taskset.name": "times"})
    tasks = list(get_taskset("times").tasks("train", 6))
    publish_tasks(cfg, [Row(f"t{i}", task=t) for i, t in enumerate(tasks[:3])])
    s = Synthesize(cfg, report=lambda m: None)
    s.read_tasks()
    assert s.quota.total == 3
    publish_tasks(cfg, [Row(f"t{i}", task=t) for i, t in enumerate(tasks[3:])])
    s.read_tasks()
    assert s.quota.total == 6 and {t.task_id for t in tasks} <= set(s.parents)


def test_an_answer_that_is_not_math_is_checked_as_text():
    """The recompute check compares text first and math only then: a reversed string matches its recomputation
    (math-verify cannot parse it, and every `reverse` variant was refused `wrong_answer` before)."""
    from rftbus.ground.config.synthesis import SynthesisConfig
    from rftbus.producers.synthesis.base import Candidate
    from rftbus.producers.synthesis.verify import AnswerCheck

    check = AnswerCheck(SynthesisConfig(), get_taskset("reverse"), None)
    assert check(Candidate(prompt="rev:abcd=", answer="dcba")).refusal is None
    assert check(Candidate(prompt="rev:abcd=", answer="abcd")).refusal == "wrong_answer"
    times = AnswerCheck(SynthesisConfig(), get_taskset("times"), None)
    assert times(Candidate(prompt="What is 7 times 8? Answer with the number only.", answer="56.0")).refusal is None
