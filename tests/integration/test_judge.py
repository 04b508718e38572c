"""judge_llm over HTTP against a real `rftbus serve` (the tiny model standing in as the judge): a group of 8
ranked in one chat completions call, pointwise grading with bounded concurrency, through the reward set the
explorer uses; and the parsing of what a judge says. The tiny model's grades are noise: what is checked is
the protocol (calls, order, shape, parse), not the judgement."""

from __future__ import annotations


import pytest

from rftbus.ground.config.explorer import RewardSpec
from rftbus.ground.rewards import make_rewards
from rftbus.ground.rewards.base import Response
from rftbus.ground.rewards.judge_llm import LLMJudge, parse_grade, parse_grades
from rftbus.ground.schemas import Task
from tests.integration.test_serve import INF, serving

SHORT = "{answers}\nGrade {n}:"  # the tiny model's context is small: a short prompt, the same protocol


@pytest.fixture(scope="module")
def judge_server(broker, tmp_path_factory):
    with serving(tmp_path_factory.mktemp("judge"), broker, **{
            "model.tiny.max_position_embeddings": 512, "serve.max_body_bytes": 65536,
            "serve.max_tokens_limit": 128}) as both:
        yield both


def test_parse_grades():
    assert parse_grade("I'd say 7/10") == 7.0 and parse_grade("no idea") is None and parse_grade("10") == 10.0
    assert parse_grades("sure: [1, 10, 3.5]", 3) == [1.0, 10.0, 3.5]
    assert parse_grades("[1, 2] then [4, 5, 6]", 3) == [4.0, 5.0, 6.0]
    assert parse_grades("[1, 11, 2]", 3) is None and parse_grades("[1, 2]", 3) is None and parse_grades("", 1) is None


def test_a_group_of_8_is_ranked_in_one_call(judge_server):
    cfg, server = judge_server
    judge = LLMJudge(f"{server.url}/v1", cfg.model.name, api_key=INF, mode="group", template=SHORT, max_tokens=24)
    task = Task(taskset="t", prompt="1+1=", answer="2")
    before = server.service.counts["completions"]
    from rftbus.ground.rewards.aio import resolve

    scores = resolve(judge.score_group(task, [Response(str(i)) for i in range(8)]))
    assert judge.calls == 1 and server.service.counts["completions"] == before + 1
    assert len(scores) == 8 and all(0.0 <= s["reward"] <= 1.0 and s["parsed"] in (0.0, 1.0) for s in scores)
    assert len({s["parsed"] for s in scores}) == 1  # one answer for the group: all parsed or none


def test_pointwise_grading_through_the_reward_set_with_bounded_concurrency(judge_server):
    cfg, server = judge_server
    spec = RewardSpec(name="judge_llm", params={"base_url": f"{server.url}/v1", "model": cfg.model.name,
                                                 "api_key": INF, "mode": "pointwise", "max_concurrency": 3,
                                                 "template": "{response}=", "max_tokens": 4})
    assert "inf-" not in repr(spec) and "inf-" not in str(spec.model_dump(mode="json"))  # a secret stays one
    rs = make_rewards([spec])
    judge = rs.terms[0][2]
    before = server.service.counts["completions"]
    scored = rs.score_group(Task(taskset="t", prompt="1+1=", answer="2"), ["2", "3", "11", "x", "2", "4"])
    assert judge.calls == 6 and server.service.counts["completions"] == before + 6
    assert [s.components["judge_llm.parsed"] in (0.0, 1.0) for s in scored] == [True] * 6
