"""The studio's data over chDB (rftbus/consumers/studio/data.py): what its pages ask of the analytics tables, written
the way the analytics sink writes them (the records' rows through `to_rows`)."""

from __future__ import annotations

import time

from rftbus.consumers.analytics.backends import open_backend
from rftbus.consumers.analytics.reader import open_reader
from rftbus.consumers.analytics.rows import Position, to_rows
from rftbus.ground.schemas import Experience, ExperienceGroup, Source, Task, make_codec

CODEC = make_codec(None)
DECODE = CODEC.deserializer()


def test_the_studio_queue_offers_traced_answers_to_grade(tmp_path):
    """A model call read from an agent's trace (source `trace`) waits for a grade as serve's answers do: the studio's
    feedback queue lists it beside a live answer, and not an explorer's group (scored already)."""
    from rftbus.apps.bench.synthetic import make_group
    from rftbus.ground.config import load_config
    from rftbus.consumers.studio.data import Reader, queue
    from rftbus.ground.schemas import Source

    cfg = load_config(overrides={"state_dir": str(tmp_path)}, environ={})
    now = int(time.time() * 1000)
    writer = open_backend(cfg, writable=True)
    try:
        for i, source in enumerate((Source.live, Source.trace, Source.explorer)):
            g = make_group(rewards=[None], response_tokens=4, source=source, seed=i, group_id=f"q-{source.value}")
            g.created_at = now
            for table, row in to_rows(DECODE, Position("raw", "rft.experiences.raw", 0, i, now), CODEC.encode(g, None)):
                writer.insert(table, [row])
    finally:
        writer.close()
    with open_reader(cfg) as r:
        got = {q.group_id for q in queue(Reader(r), ttl_s=3600, limit=10, oldest_first=True, now_ms=now + 1000)}
    assert got == {"q-live", "q-trace"}, got


def test_a_task_family_in_analytics_and_the_studio(tmp_path):
    """Synthesized tasks' lineage (Task v3) lands in the tasks table, and the studio's family of a task lists its
    parent chain, the tasks written from it and how the policy did on each (a later pass, `<id>.p2`, counted with
    its task), over chDB."""
    from rftbus.ground.config import load_config
    from rftbus.consumers.studio.data import Reader, path

    cfg = load_config(overrides={"state_dir": str(tmp_path)}, environ={})
    now = int(time.time() * 1000)
    seed = Task(task_id="seed", taskset="times", prompt="What is 7 times 8?", answer="56")
    kid = Task(task_id="syn-1", taskset="times", prompt="What is 7 times 6?", answer="42", parent_task_id="seed",
               synthesizer="taskset", generation=1, parent_outcome="failed")
    grandkid = Task(task_id="syn-2", taskset="times", prompt="What is 5 times 6?", answer="30",
                    parent_task_id="syn-1", synthesizer="taskset", generation=2, parent_outcome="failed")

    def rollout(task_id: str, rewards: list[float], gid: str) -> ExperienceGroup:
        return ExperienceGroup(group_id=gid, task_id=task_id, explorer_id="e0", prompt_ids=[1], source=Source.explorer,
                               created_at=now, samples=[Experience(response_ids=[4], logprobs=[-0.5], loss_mask=[True],
                                                                   reward=r, model_version=1) for r in rewards])

    recs = [("tasks", seed), ("tasks", kid), ("tasks", grandkid), ("raw", rollout("seed", [0.0, 0.0], "g1")),
            ("raw", rollout("seed.p2", [1.0, 0.0], "g2")), ("raw", rollout("syn-1", [1.0, 1.0], "g3"))]
    writer = open_backend(cfg, writable=True)
    try:
        for off, (key, rec) in enumerate(recs):
            for table, row in to_rows(DECODE, Position(key, f"t.{key}", 0, off, now), CODEC.encode(rec, None)):
                writer.insert(table, [row])
    finally:
        writer.close()
    with open_reader(cfg) as r:
        mid, top = path(Reader(r), "syn-1"), path(Reader(r), "seed")
    assert mid.task["generation"] == 1 and mid.task["parent_outcome"] == "failed"
    assert [a["task_id"] for a in mid.family.ancestors] == ["seed"]
    assert [c["task_id"] for c in mid.family.children] == ["syn-2"]
    assert mid.family.outcomes["syn-1"]["mean_reward"] == 1.0 and "syn-2" not in mid.family.outcomes
    assert top.family.ancestors == [] and [c["task_id"] for c in top.family.children] == ["syn-1"]
    assert top.family.outcomes["seed"]["answers"] == 4 and top.family.outcomes["seed"]["mean_reward"] == 0.25
