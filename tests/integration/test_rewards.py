"""Reward functions: math equivalence, format rules, taskset, weights, dotted-path custom, reward model."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForSequenceClassification

from rftbus.ground.models.tokenizer import build_char_tokenizer
from rftbus.ground.config.explorer import RewardSpec
from rftbus.ground.rewards import make_rewards
from rftbus.ground.schemas import Task


@pytest.mark.parametrize("response,ref,ok", [
    ("so the answer is \\boxed{\\frac{1}{2}}", "0.5", True),
    ("\\boxed{\\sqrt{8}}", "2\\sqrt{2}", True),
    ("\\boxed{x^2-1}", "(x-1)(x+1)", True),
    ("we get 1,000 apples", "1000", True),
    ("\\boxed{\\dfrac12}", "\\frac{1}{2}", True),  # the old verifier raised NameError
    ("... so 72 in all.\n#### 72", "72", True),
    ("\\boxed{\\{2,1\\}}", "\\{1,2\\}", True),
    ("\\boxed{x = 3}", "3", True),
    ("First \\boxed{3}, corrected: \\boxed{4}", "4", True),
    ("\\boxed{3}", "4", False),
    ("\\boxed{x+1}", "x-1", False),
    ("\\boxed{__import__('os').system('true')}", "0", False),
    ("no answer here", "3", False),
])
def test_math_verify_equivalence(response, ref, ok):
    fn = make_rewards([RewardSpec(name="math")])
    got = fn.score(Task(taskset="m", prompt="?", answer=ref), response)
    assert got.reward == (1.0 if ok else 0.0), (response, ref)


def test_math_require_boxed_and_an_unreadable_reference():
    strict = make_rewards([RewardSpec(name="math", params={"require_boxed": True})])
    task = Task(taskset="m", prompt="?", answer="7")
    assert strict.score(task, "it is 7").reward == 0.0 and strict.score(task, "\\boxed{7}").reward == 1.0
    with pytest.raises(ValueError, match="not math that math-verify can read"):
        strict.score(Task(taskset="m", prompt="?", answer="\\"), "\\boxed{7}")


def test_math_verify_is_timed_in_a_helper_process_and_never_hangs():
    """math-verify's own timeout is SIGALRM (main thread only, and the explorer's deadline holds it): a
    helper process is killed and replaced when it overruns, and the next answer is checked as usual."""
    import threading
    import time

    from rftbus.ground.rewards.math_verify import MathVerifyReward

    fn = MathVerifyReward(timeout_s=2)
    out: dict = {}

    def score() -> None:
        t0 = time.monotonic()
        out["slow"] = fn(Task(taskset="m", prompt="?", answer="1"), "\\boxed{9^{9^{9^{9^{9}}}}}")
        out["slow_s"] = time.monotonic() - t0
        out["next"] = fn(Task(taskset="m", prompt="?", answer="\\frac13"), "\\boxed{1/3}")

    th = threading.Thread(target=score)
    th.start()
    th.join(60)
    assert out["slow"]["timeout"] == 1.0 and out["slow"]["reward"] == 0.0 and out["slow_s"] < 10, out
    assert out["next"]["reward"] == 1.0 and out["next"]["timeout"] == 0.0


def test_a_helper_that_is_slow_to_start_does_not_time_the_answer_out():
    """The helper's start (python, math-verify and sympy imported: over a second) is not the answer's time: a
    bound shorter than the start still scores the first answer (it timed out when the start counted)."""
    from rftbus.ground.rewards.math_verify import MathVerifyReward

    fn = MathVerifyReward(timeout_s=0.5)
    out = fn(Task(taskset="m", prompt="?", answer="7"), "so \\boxed{7}")
    assert out["reward"] == 1.0 and out["timeout"] == 0.0, out


def test_the_verifier_table_beats_the_old_verifier():
    """`rftbus bench verifiers`' hand-written cases: math-verify agrees with the person on more of them."""
    from rftbus.apps.bench.verifiers import CASES, run_cases, summary

    assert len(CASES) >= 40
    sums = summary(run_cases())["all"]
    assert sums["math_verify"] >= sums["old"] + 8 and sums["math_verify"] >= 0.9 * sums["n"], sums


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
    from rftbus.ground.tasksets.addition import digit_credit, place_value_credit

    assert digit_credit(response, answer)["reward"] == pytest.approx(left)
    assert place_value_credit(response, answer)["reward"] == pytest.approx(right)
    task = Task(taskset="addition", prompt="37+45=", answer=answer)
    scored = make_rewards([RewardSpec(name="rftbus.ground.tasksets.addition:PlaceValueReward")]).score(task, response)
    assert scored.reward == pytest.approx(right)


def test_group_and_async_rewards_by_dotted_path():
    """A group reward sees the whole group once; an async per-answer reward's calls overlap."""
    import time

    from explorer_plugins import RankGroup

    rs = make_rewards([RewardSpec(name="explorer_plugins.RankGroup"), RewardSpec(name="explorer_plugins.slow_len",
                                                                                   weight=0.5)])
    task = Task(taskset="m", prompt="?", answer="x")
    t0 = time.monotonic()
    scored = rs.score_group(task, ["a", "abc", "ab", "a", "ab", "a", "a", "a"])
    assert time.monotonic() - t0 < 1.0  # 8 x 0.2 s in sequence would be 1.6 s
    assert RankGroup.calls == 1
    assert [s.components["RankGroup"] for s in scored] == [0, 1, 0, 0, 0, 0, 0, 0]
    assert scored[1].reward == 1 + 0.5 * 3 and scored[1].components["RankGroup.rank_of"] == 8.0
    assert rs.score(task, "abcd").reward == 1 + 0.5 * 4
