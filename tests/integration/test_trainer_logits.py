"""The trainer computes logits only from the first trained position (#43): on SmolLM2's shapes and chat template,
with LoRA, the logprobs, entropy and gradients of the trained tokens equal those of the full computation, and
positions before it cost no LM head."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from rftbus.ground.models.config import LoraSpec, ModelConfig
from rftbus.ground.models.loading import load_tokenizer
from rftbus.ground.models.lora import wrap
from rftbus.ground.models.prompt import prompt_format
from rftbus.ground.schemas import Experience, ExperienceGroup
from rftbus.trainer.batch import collate, rows_of
from rftbus.ground.models.loading import takes_logits_to_keep
from rftbus.trainer.policy import PolicyWithValue, first_trained, reference_logp, token_logp_entropy


def _batch(folder, tok):
    fmt = prompt_format(tok, ModelConfig(path=str(folder)))
    torch.manual_seed(0)
    groups = []
    for i, q in enumerate(["What is 7 times 8?", "What is 12 times 3? Answer with the number only."]):
        ids = fmt.task(q)
        samples = [Experience(response_ids=[int(x) for x in torch.randint(100, 2000, (3 + 2 * k,))],
                              logprobs=[-1.0] * (3 + 2 * k), loss_mask=[True] * (3 + 2 * k), model_version=0,
                              reward=float(k % 2), advantage=1.0 if k % 2 else -1.0) for k in range(3)]
        groups.append(ExperienceGroup(task_id=f"t{i}", explorer_id="x", prompt_ids=ids, samples=samples,
                                      survivors=[0, 1, 2]))
    return collate([r for g in groups for r in rows_of(g)], tok.pad_token_id, 256)


def test_logits_from_the_first_trained_position_only_change_nothing_that_trains(smollm2_two_layers):
    tok = load_tokenizer(ModelConfig(path=str(smollm2_two_layers)))
    lm = wrap(AutoModelForCausalLM.from_pretrained(smollm2_two_layers), LoraSpec(r=4, alpha=8)).train()
    assert takes_logits_to_keep(lm)
    policy = PolicyWithValue(lm, value_head=False)
    batch = _batch(smollm2_two_layers, tok)
    first = first_trained(batch)
    assert 10 < first < batch.targets.shape[1] - 3  # the chat prompt is most of the row
    got = {}
    for k in (0, first):
        policy.zero_grad()
        logits, _ = policy(batch.input_ids, batch.attention_mask, k)
        assert logits.shape[1] == batch.targets.shape[1] - k
        logp, entropy = token_logp_entropy(logits, batch, k)
        ((logp * batch.mask).sum() + 0.1 * (entropy * batch.mask).sum()).backward()
        grads = [p.grad.clone() for p in lm.parameters() if p.requires_grad]
        got[k] = (logp.detach(), entropy.detach(), grads)
    (lp0, en0, g0), (lp1, en1, g1) = got[0], got[first]
    m = batch.mask
    assert torch.allclose(lp0[m], lp1[m], atol=1e-5) and torch.allclose(en0[m], en1[m], atol=1e-4)
    assert all(torch.allclose(a, b, atol=1e-5, rtol=1e-4) for a, b in zip(g0, g1))
    assert (lp1[:, :first] == 0).all() and (en1[:, :first] == 0).all()
    ref = AutoModelForCausalLM.from_pretrained(smollm2_two_layers).eval()
    full = token_logp_entropy(ref(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1],
                              batch)[0]
    assert torch.allclose(reference_logp(ref, batch)[m], full[m], atol=1e-5)


def test_bench_step_times_both_ways_on_the_trainers_engine(tmp_path):
    """`rftbus bench step` runs (the tiny model, one rep): the three ways timed on one engine, the figures sane."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([str(Path(sys.executable).parent / "rftbus"), "--config", str(repo / "configs" / "toy.yaml"),
                          "--state-dir", str(tmp_path), "bench", "step", "--reps", "1", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["rows"] > 0 and 0 < r["first_trained_position"] < r["tokens_per_row"]
    assert r["shared_prompt_s"] > 0 and r["one_pass_s"] > 0 and r["every_position_s"] > 0
    assert len(r["runs"]["shared_prompt"]) == 1


def test_a_shared_prompt_read_once_changes_nothing_that_trains(smollm2_two_layers):
    """rftbus/trainer/shared_prompt.py: two groups whose prompts differ in length, three answers each; the prompts read
    once give the trained tokens' logprobs, entropy and LoRA gradients of the one-pass forward."""
    from rftbus.trainer.shared_prompt import plan, prompt_lengths

    tok = load_tokenizer(ModelConfig(path=str(smollm2_two_layers)))
    lm = wrap(AutoModelForCausalLM.from_pretrained(smollm2_two_layers), LoraSpec(r=4, alpha=8)).train()
    policy = PolicyWithValue(lm, value_head=False)
    batch = _batch(smollm2_two_layers, tok)
    lengths = prompt_lengths(batch.response)
    assert len(set(lengths.tolist())) == 2
    shared = plan(batch.input_ids, lengths)
    assert shared is not None and len(shared[0]) == 2 and shared[1] == [0, 0, 0, 1, 1, 1]
    first = first_trained(batch)
    got = []
    for how in (None, lengths):
        policy.zero_grad()
        logits, _ = policy(batch.input_ids, batch.attention_mask, first, how)
        assert logits.shape[1] == batch.targets.shape[1] - first
        logp, entropy = token_logp_entropy(logits, batch, first)
        ((logp * batch.mask).sum() + 0.1 * (entropy * batch.mask).sum()).backward()
        got.append((logp.detach(), entropy.detach(), [p.grad.clone() for p in lm.parameters() if p.requires_grad]))
    (lp0, en0, g0), (lp1, en1, g1) = got
    m = batch.mask
    assert torch.allclose(lp0[m], lp1[m], atol=1e-4) and torch.allclose(en0[m], en1[m], atol=1e-4)
    assert all(torch.allclose(a, b, atol=1e-5, rtol=1e-3) for a, b in zip(g0, g1))
    assert any(float(g.abs().sum()) > 0 for g in g1)
    # rows that share nothing (a prompt each) take the one-pass forward
    assert plan(batch.input_ids[[0, 3]], lengths[[0, 3]]) is None
