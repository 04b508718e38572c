"""PrimedEngine with the real tiny transformers engine: several groups in one call, each handed to
the workflow call that asks for it; anything unprimed goes to the engine. The explorer path through
the real broker: tests/integration/test_explorer.py (batch_tasks)."""

from __future__ import annotations

from rftbus.ground.config import Config
from rftbus.ground.models.loading import load_tokenizer
from rftbus.producers.engines.primed import PrimedEngine
from rftbus.producers.engines.transformers import TransformersEngine
from rftbus.ground.rewards import make_rewards
from rftbus.producers.workflows import RolloutContext
from rftbus.producers.workflows.single_turn import SingleTurn
from rftbus.ground.tasksets import get_taskset


class Counting(TransformersEngine):
    calls: list[int]

    def generate(self, prompts, sampling, max_new_tokens=None):
        self.calls.append(len(prompts))
        return super().generate(prompts, sampling, max_new_tokens)


def test_one_call_for_several_groups_and_the_rest_falls_through():
    cfg = Config.model_validate({"explorer": {"sampling": {"max_new_tokens": 4, "seed": 0}}})
    tok = load_tokenizer(cfg.model)
    inner = Counting(cfg, tok)
    inner.calls = []
    eng = PrimedEngine(inner)
    ctx = RolloutContext(eng, tok, cfg.explorer.sampling, make_rewards(cfg.explorer.rewards), cfg.explorer.workflow)
    tasks = list(get_taskset("reverse").tasks("train", 3))
    reqs = [(tuple(ctx.fmt.task(t.prompt)), n) for t, n in zip(tasks, (4, 2, 4))]
    eng.prime(reqs, ctx.sampling)
    assert inner.calls == [10]
    wf = SingleTurn()
    groups = [wf.run(t, n, ctx) for t, (_, n) in zip(tasks, reqs)]
    assert inner.calls == [10] and eng.hits == 3, "every group should come from the one primed call"
    for t, (prompt, n), g in zip(tasks, reqs, groups):
        assert len(g) == n and all(tuple(s.prompt_ids) == prompt and s.prompt_text == t.prompt for s in g)
        assert all(s.metadata["batch_groups"] == "3" and s.generation_ms > 0 for s in g)
    # asked again (a retry), or for another count or sampling: the real engine answers
    wf.run(tasks[0], 4, ctx)
    wf.run(tasks[1], 3, ctx)
    hotter = ctx.sampling.model_copy(update={"temperature": 2.0})
    eng.prime([reqs[2]], ctx.sampling)
    eng.generate([list(reqs[2][0])] * 4, hotter)
    assert inner.calls == [10, 4, 3, 4, 4] and eng.hits == 3
    assert eng.clear() == 1 and eng.clear() == 0  # the unused primed group is dropped
