"""Reward functions: math equivalence, format rules, taskset, weights, dotted-path custom, reward model."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForSequenceClassification

from rftbus.models.tokenizer import build_char_tokenizer
from rftbus.config.explorer import RewardSpec
from rftbus.producers.rewards import make_rewards
from rftbus.producers.rewards.math_answer import equivalent, extract_answer
from rftbus.schemas import Task


@pytest.mark.parametrize("response,ref,ok", [
    ("so the answer is \\boxed{\\frac{1}{2}}", "0.5", True),
    ("\\boxed{\\sqrt{8}}", "2\\sqrt{2}", True),
    ("\\boxed{x^2-1}", "(x-1)(x+1)", True),
    ("we get 1,000 apples", "1000", True),
    ("\\boxed{\\dfrac{3}{4}}", "\\frac{6}{8}", True),
    ("\\boxed{2\\pi}", "6.283185307", True),
    ("\\boxed{3}", "4", False),
    ("\\boxed{x+1}", "x-1", False),
    ("\\boxed{__import__('os').system('true')}", "0", False),
    ("no answer here", "3", False),
])
def test_math_answer_equivalence(response, ref, ok):
    fn = make_rewards([RewardSpec(name="math")])
    got = fn.score(Task(taskset="m", prompt="?", answer=ref), response)
    assert got.reward == (1.0 if ok else 0.0), (response, ref)


def test_math_extract_and_require_boxed():
    assert extract_answer("first \\boxed{1} then \\boxed{{2}+1}") == "{2}+1"
    strict = make_rewards([RewardSpec(name="math", params={"require_boxed": True})])
    task = Task(taskset="m", prompt="?", answer="7")
    assert strict.score(task, "it is 7").reward == 0.0 and strict.score(task, "\\boxed{7}").reward == 1.0
    assert equivalent("7.0000001", "7") == (True, True)


def test_format_taskset_custom_and_weights():
    rs = make_rewards([
        RewardSpec(name="taskset", weight=1.0),
        RewardSpec(name="format", weight=0.5, params={"rules": [
            {"name": "digits_only", "pattern": r"^\d+$"}, {"name": "no_space", "pattern": " ", "must_match": False}]}),
        RewardSpec(name="explorer_plugins.half_reward", weight=2.0),
    ])
    task = Task(taskset="addition", prompt="12+30=", answer="42")
    right = rs.score(task, "42")
    assert right.components["taskset"] == 1.0 and right.components["format"] == 1.0
    assert right.components["half_reward"] == 0.5 and right.components["half_reward.length"] == 2.0
    assert right.reward == pytest.approx(1.0 + 0.5 * 1.0 + 2.0 * 0.5)
    wrong = rs.score(task, "4 3")
    assert wrong.components["format.digits_only"] == 0.0 and wrong.components["format.no_space"] == 0.0
    assert wrong.components["taskset.digits"] == pytest.approx(1 / 3)
    with pytest.raises(Exception, match="neither a built-in"):
        make_rewards([RewardSpec(name="nonsense")])


def test_reward_model_judge(tmp_path):
    tok = build_char_tokenizer()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, num_labels=1, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    LlamaForSequenceClassification(config).save_pretrained(tmp_path / "rm")
    tok.save_pretrained(tmp_path / "rm")
    rs = make_rewards([RewardSpec(name="judge_model", params={"path": str(tmp_path / "rm")})])
    task = Task(taskset="addition", prompt="1+1=", answer="2")
    a, b = rs.score(task, "2"), rs.score(task, "99 bottles")
    for s in (a, b):
        assert 0.0 < s.reward < 1.0 and s.reward == pytest.approx(torch.sigmoid(torch.tensor(s.components["judge_model.logit"])).item())
    assert a.reward != b.reward  # the model really reads the response


@pytest.mark.parametrize("response, answer, left, right", [
    ("11", "82", 0.0, 0.0),       # the GRPO plateau answer: nothing either way here ...
    ("11", "146", 1 / 6, 0.0),    # ... but left-aligned credit pays its leading 1 for any sum >= 100
    ("2", "82", 0.0, 0.25),       # the ones digit right: only place value pays for it
    ("82", "82", 1.0, 1.0),
    (" 182", "82", 0.0, 1 / 3),
])
def test_place_value_credit_pays_ones_with_ones(response, answer, left, right):
    from rftbus.tasksets.addition import digit_credit, place_value_credit

    assert digit_credit(response, answer)["reward"] == pytest.approx(left)
    assert place_value_credit(response, answer)["reward"] == pytest.approx(right)
    task = Task(taskset="addition", prompt="37+45=", answer=answer)
    scored = make_rewards([RewardSpec(name="rftbus.tasksets.addition:PlaceValueReward")]).score(task, response)
    assert scored.reward == pytest.approx(right)
