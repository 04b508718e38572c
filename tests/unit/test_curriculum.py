"""`run.curriculum`'s logic: stages switch at their steps, each topped up to two passes just in time.
The same through the real loop: tests/system/test_run.py::test_curriculum_stage_runs_first_then_the_configured_taskset."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rftbus.ground.config import Config
from rftbus.producers.tasks.sources import SourceError
from rftbus.apps.run.curriculum import Curriculum


def _cfg(*stages: dict) -> Config:
    return Config.model_validate({"taskset": {"name": "reverse", "params": {"length": 4}},
                                  "run": {"curriculum": list(stages)}})


def _curriculum(*stages: dict) -> tuple[Curriculum, list[str]]:
    out: list[str] = []
    cur = Curriculum(_cfg(*stages), publish=lambda rows: len([out.append(r.task.task_id) for r in rows]),
                     then=lambda: out.append("configured"))
    return cur, out


def test_stages_top_up_the_backlog_and_switch_at_their_steps():
    cur, out = _curriculum({"params": {"length": 2}, "tasks": 10, "until_step": 5},
                           {"params": {"length": 3}, "tasks": 20, "until_step": 9})
    cur.tick(0, backlog=0)
    assert len(out) == 20 and all(t.endswith((".c1p1", ".c1p2")) for t in out)  # two passes when empty
    assert len(set(out)) == 20, "a pass must give every task a new id"
    cur.tick(3, backlog=12)
    assert len(out) == 20  # more than a pass waiting: nothing published
    cur.tick(4, backlog=9)
    assert len(out) == 30 and out[-1].endswith(".c1p3")
    events = cur.tick(5, backlog=25)  # stage 1 done: stage 2 starts, its backlog counts the old tasks
    assert any("stage 1 done at step 5" in e for e in events) and cur.stage == 1
    assert len(out) == 30
    cur.tick(6, backlog=4)
    assert len(out) == 50 and out[-1].endswith(".c2p1")
    cur.tick(12, backlog=0)  # past the last stage: the configured taskset, nothing more of the stages
    assert out[-1] == "configured" and cur.done and cur.stage is None
    cur.tick(13, backlog=0)
    assert out.count("configured") == 1
    s = cur.summary()
    assert [r["stage"] for r in s] == [1, 2] and [r["passes"] for r in s] == [3, 1]
    assert [(r["started_step"], r["ended_step"]) for r in s] == [(0, 5), (5, 12)]
    assert [r["published"] for r in s] == [30, 20]


def test_a_step_past_several_stages_skips_them():
    cur, out = _curriculum({"params": {"length": 2}, "tasks": 4, "until_step": 2},
                           {"params": {"length": 3}, "tasks": 4, "until_step": 4})
    cur.tick(0, backlog=0)
    cur.tick(10, backlog=0)
    assert cur.done and out[-1] == "configured" and len(out) == 9


def test_a_stage_pass_is_its_tasks_in_a_new_order():
    cur, out = _curriculum({"params": {"length": 2}, "tasks": 30, "until_step": 5})
    cur.tick(0, backlog=0)
    first, second = [t.split(".")[0] for t in out[:30]], [t.split(".")[0] for t in out[30:]]
    assert sorted(first) == sorted(second) and first != second


def test_no_curriculum_is_done_from_the_start():
    cur, out = _curriculum()
    assert cur.done and cur.tick(0, 0) == [] and out == []


def test_bad_stages_are_clear_errors_at_start():
    with pytest.raises(ValidationError, match="until_step must increase"):
        _cfg({"tasks": 4, "until_step": 5}, {"tasks": 4, "until_step": 5})
    with pytest.raises(ValidationError, match="until_step"):
        _cfg({"tasks": 4})
    with pytest.raises(SourceError, match=r"run.curriculum stage 1 .*fewer than 100 distinct train"):
        _curriculum({"params": {"length": 1}, "tasks": 100, "until_step": 5})
    with pytest.raises(SourceError, match="run.curriculum stage 1"):
        _curriculum({"params": {"width": 3}, "tasks": 4, "until_step": 5})


def test_a_file_stage_reports_rows_that_are_not_tasks(tmp_path):
    src = tmp_path / "easy.jsonl"
    src.write_text('{"prompt": "rev:ab=", "answer": "ba"}\n{"answer": "no prompt"}\n{"prompt": "rev:cd=", "answer": "dc"}\n')
    cur, out = _curriculum({"source": str(src), "tasks": 3, "until_step": 5})
    events = cur.tick(0, backlog=0)
    assert len(out) == 4  # the 2 good rows, two passes
    assert any("1 rows skipped" in e and ".jsonl:2" in e and "prompt" in e for e in events), events
