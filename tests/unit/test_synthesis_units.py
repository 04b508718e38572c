"""The synthesize stage's rules, without a broker: parents by outcome, the candidates a synthesizer may return,
the fingerprint that finds near-duplicates, the quotas, the built-in variants and the llm synthesizer's reply."""

from __future__ import annotations

import random

import pytest

from rftbus.ground.config.synthesis import SynthesisConfig, SynthesizerSpec
from rftbus.ground.errors import RftbusError
from rftbus.ground.schemas import Experience, ExperienceGroup, Source, Task
from rftbus.ground.tasksets import get_taskset
from rftbus.producers.synthesis.base import BadCandidate, Outcome, as_candidate, make_synthesizer, outcome_of
from rftbus.producers.synthesis.builtin import TasksetSynthesizer
from rftbus.producers.synthesis.llm import parse_reply
from rftbus.producers.synthesis.novelty import Novelty, fingerprint
from rftbus.producers.synthesis.quota import Quota


def _group(*rewards: float, source: Source = Source.explorer) -> ExperienceGroup:
    return ExperienceGroup(task_id="t1", source=source, explorer_id="e0", prompt_ids=[1],
                           samples=[Experience(response_ids=[2], logprobs=[-0.1], loss_mask=[1], reward=r,
                                               model_version=0) for r in rewards])


def test_parents_are_picked_by_their_outcome_and_the_difficulty_follows_it():
    sc = SynthesisConfig(parents=["failed", "mastered"])
    assert outcome_of(_group(0.0, 0.0), sc, "t1").difficulty == "easier"
    assert outcome_of(_group(1.0, 1.0), sc, "t1").difficulty == "harder"
    assert outcome_of(_group(0.0, 1.0), sc, "t1") is None  # mixed: not asked for
    assert outcome_of(_group(0.0, 1.0), SynthesisConfig(parents=["mixed"]), "t1").kind == "mixed"
    zv = SynthesisConfig(parents=["zero_variance"], solved_at=0.9)
    assert outcome_of(_group(0.5, 0.5), zv, "t1").kind == "failed" and outcome_of(_group(0.5, 0.7), zv, "t1") is None
    assert outcome_of(_group(0.0, 0.0, source=Source.live), SynthesisConfig(parents=["any"]), "t1") is None
    assert outcome_of(_group(0.0), SynthesisConfig(difficulty="harder"), "t1").difficulty == "harder"


def test_a_candidate_is_a_prompt_with_its_answer():
    assert as_candidate({"prompt": "2+2=", "answer": "4", "metadata": {"a": 2}}).metadata == {"a": "2"}
    for bad, why in [({"prompt": "2+2="}, "no answer"), ({"prompt": " ", "answer": "1"}, "no prompt"),
                     ({"prompt": "x", "answer": "1", "solution": "..."}, "unknown keys"), ("2+2=", "not a Candidate")]:
        with pytest.raises(BadCandidate, match=why):
            as_candidate(bad)


def test_the_fingerprint_finds_near_duplicates_and_keeps_operations_apart():
    assert fingerprint("What is 7 times 8? Answer with the number only.") == \
        fingerprint("  what is 7 TIMES 8 answer with the number only ")
    assert fingerprint("3+4=") != fingerprint("3-4=") and fingerprint("3+4=") != fingerprint("34=")
    n = Novelty(held_out=lambda p: p == "held")
    n.add("What is 7 times 8?")
    assert n.refusal("what is 7 times 8") == "duplicate" and n.refusal("held") == "held_out"
    assert n.refusal("What is 7 times 9?") is None


def test_the_quotas_count_each_task_once_from_the_topic_and_from_this_stage():
    q = Quota(SynthesisConfig(per_parent=2, per_minute=3, max_share=0.5, max_generation=2))
    for i in range(4):
        q.seen(Task(task_id=f"t{i}", taskset="times", prompt=f"p{i}"))
    parent = Task(task_id="t0", taskset="times", prompt="p0")
    child = Task(task_id="c1", taskset="times", prompt="c", parent_task_id="t0", generation=1)
    assert q.refusal(parent, 0.0) is None
    q.taken(child, 0.0)
    q.seen(child)  # read back: the same task, counted once
    assert len(q.children["t0"]) == 1 and q.total == 5
    q.taken(Task(task_id="c2", taskset="times", prompt="c2", parent_task_id="t0", generation=1), 1.0)
    assert q.refusal(parent, 2.0) == "parent_quota"
    other = Task(task_id="t1", taskset="times", prompt="p1")
    assert q.refusal(other, 2.0) is None
    q.taken(Task(task_id="c3", taskset="times", prompt="c3", parent_task_id="t1", generation=1), 2.0)
    assert q.refusal(Task(task_id="t2", taskset="times", prompt="p2"), 3.0) == "rate_limit"
    t2 = Task(task_id="t2", taskset="times", prompt="p2")
    assert q.refusal(t2, 70.0) is None  # the 4th of 8 tasks: half
    q.taken(Task(task_id="c4", taskset="times", prompt="c4", parent_task_id="t2", generation=1), 70.0)
    assert q.refusal(Task(task_id="t3", taskset="times", prompt="p3"), 71.0) == "share_limit"  # a 5th of 9: over half
    assert q.refusal(Task(task_id="g2", taskset="times", prompt="g", generation=2), 70.0) == "generation_limit"


def test_the_built_in_synthesizer_writes_checked_variants_of_the_difficulty_asked():
    times = get_taskset("times")
    syn = TasksetSynthesizer("times", variants=3)
    parent = next(times.tasks("train", 1))
    for difficulty, cmp in [("easier", lambda x, y: x <= y), ("harder", lambda x, y: x >= y)]:
        made = syn(parent, Outcome(parent.task_id, (0.0,), 0, difficulty))
        assert len(made) == 3 and made == syn(parent, Outcome(parent.task_id, (0.0,), 0, difficulty))  # replayable
        for c in made:
            assert times.answer_of(c.prompt) == c.answer
            assert cmp(int(c.answer), int(parent.answer))
    with pytest.raises(RftbusError, match="built-in taskset"):
        TasksetSynthesizer("my-data.jsonl")
    add = get_taskset("addition")
    assert add.answer_of("12+30=") == "42" and add.answer_of("12-30=") is None
    made = [add.variant({"a": "37", "b": "45"}, "same", random.Random(s))[0] for s in range(8)]
    assert all(p.startswith("37+") or p.endswith("+45=") for p in made) and len(set(made)) > 4  # one operand moved


def test_synthesizers_are_named_like_rewards():
    syn = make_synthesizer(SynthesizerSpec(name="taskset", params={"variants": 1}), "times", {})
    assert isinstance(syn, TasksetSynthesizer) and syn.variants == 1
    with pytest.raises(RftbusError, match="synthesizer 'no_such_module:f'"):
        make_synthesizer(SynthesizerSpec(name="no_such_module:f"), "times", {})


def test_the_llm_synthesizers_reply_is_read_from_its_json():
    assert parse_reply('Sure! {"problem": "What is 3 times 4?", "answer": 12}') == ("What is 3 times 4?", "12")
    assert parse_reply("```json\n{\"problem\": \"x\", \"answer\": \"y\"}\n```") == ("x", "y")
    assert parse_reply("no json here") is None and parse_reply('{"problem": "x"}') is None
    assert parse_reply('{"problem": "x", "answer": [1]}') is None
