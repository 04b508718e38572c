"""`rftbus export`: a stored weight version becomes a Hugging Face folder that `model.path` loads as
exactly those weights, with the same tokenizer (no broker: the hash check is faked where needed)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from rftbus.ground.weights import export as export_mod
from rftbus.ground.models.config import ModelConfig
from rftbus.ground.weights.export import ExportError, export_weights
from rftbus.ground.models.loading import load_policy, load_tokenizer
from rftbus.ground.weights import WeightStore
from conftest import _free_pair, make_config, rftbus_cli


def trained_state(seed: int = 5) -> dict[str, torch.Tensor]:
    """Tiny-model weights that differ from the seed's version 0 (as a trained version does)."""
    model = load_policy(ModelConfig())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model.state_dict()


@pytest.fixture
def stored(tmp_path):
    """A config whose broker is not running and whose store holds v3 and v7 of the tiny model."""
    cfg = make_config(tmp_path / "state", _free_pair())
    store = WeightStore(cfg.state_dir / "weights")
    states = {v: trained_state(v) for v in (3, 7)}
    saved = {v: store.save(cfg.model.name, v, s) for v, s in states.items()}
    return SimpleNamespace(cfg=cfg, states=states, saved=saved)


def test_export_reads_back_as_the_same_policy(stored, tmp_path):
    out = tmp_path / "hf"
    report = export_weights(stored.cfg, out)
    assert report.version == 7 and report.sha256 == stored.saved[7].sha256
    assert report.verified == "not checked: broker unreachable"
    manifest = json.loads((out / export_mod.MANIFEST).read_text())
    assert manifest["version"] == 7 and manifest["sha256"] == stored.saved[7].sha256

    # what `model.path` does in every process: the same weights, the same tokenizer, the same answers
    mc = ModelConfig(path=str(out))
    tok, ref_tok = load_tokenizer(mc), load_tokenizer(ModelConfig())
    model = load_policy(mc, tok).eval()
    got = model.state_dict()
    for k, v in stored.states[7].items():
        assert torch.equal(got[k], v), k
    assert tok.padding_side == "left" and tok.pad_token_id == ref_tok.pad_token_id
    assert tok.eos_token_id == ref_tok.eos_token_id and len(tok) == len(ref_tok)
    assert tok("12+7=", add_special_tokens=False)["input_ids"] == ref_tok("12+7=", add_special_tokens=False)["input_ids"]
    ref = load_policy(ModelConfig(), ref_tok).eval()
    ref.load_state_dict(stored.states[7])
    enc = ref_tok(["12+7=", "99+1="], return_tensors="pt", padding=True)
    with torch.no_grad():
        a = model.generate(**enc, do_sample=False, max_new_tokens=5, pad_token_id=tok.pad_token_id)
        b = ref.generate(**enc, do_sample=False, max_new_tokens=5, pad_token_id=tok.pad_token_id)
    assert torch.equal(a, b)


def test_export_a_chosen_version_and_refuse_what_is_not_there(stored, tmp_path):
    assert export_weights(stored.cfg, tmp_path / "v3", version=3).sha256 == stored.saved[3].sha256
    with pytest.raises(ExportError, match="v5 of 'tiny' is not in"):
        export_weights(stored.cfg, tmp_path / "v5", version=5)
    with pytest.raises(ExportError, match="exists and is not empty"):
        export_weights(stored.cfg, tmp_path / "v3", version=7)
    assert export_weights(stored.cfg, tmp_path / "v3", version=7, force=True).version == 7


def test_export_checks_the_published_sha256(stored, tmp_path, monkeypatch):
    good = {7: SimpleNamespace(sha256=stored.saved[7].sha256)}
    monkeypatch.setattr(export_mod, "published_versions", lambda cfg: good)
    assert export_weights(stored.cfg, tmp_path / "ok").verified.startswith("sha256 matches")
    monkeypatch.setattr(export_mod, "published_versions", lambda cfg: {7: SimpleNamespace(sha256="0" * 64)})
    with pytest.raises(ExportError, match="was published"):
        export_weights(stored.cfg, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_export_refuses_weights_of_another_shape(stored, tmp_path):
    small = make_config(stored.cfg.state_dir, stored.cfg.broker.port, **{"model.tiny.hidden_size": 64})
    with pytest.raises(ExportError, match="does not fit the configured model"):
        export_weights(small, tmp_path / "x")


def test_export_cli(stored, tmp_path):
    out = rftbus_cli(stored.cfg, "export", str(tmp_path / "cli"), "--version", "3")
    assert out.returncode == 0, out.stderr
    assert "exported v3 of tiny" in out.stdout
    assert (tmp_path / "cli" / "model.safetensors").is_file()
    missing = rftbus_cli(stored.cfg, "export", str(tmp_path / "none"), "--version", "4")
    assert missing.returncode == 1 and missing.stderr.startswith("error: v4 of 'tiny' is not in")


def test_the_grpo_warm_start_configs_fit_together():
    """`make demo-grpo`: the warm start exports where the GRPO run reads, and the two never share a broker."""
    from pathlib import Path

    from rftbus.ground.config import load_config

    repo = Path(__file__).resolve().parents[2]
    warm = load_config(repo / "configs" / "toy-grpo-warm.yaml", environ={})
    grpo = load_config(repo / "configs" / "toy-grpo.yaml", environ={})
    assert warm.trainer.loss == "sft" and warm.run.expert and warm.run.max_steps
    assert grpo.trainer.loss == "grpo" and not grpo.run.expert and grpo.run.max_minutes == 15
    make = (repo / "Makefile").read_text()
    assert f"export {grpo.model.path} --force" in make and "configs/toy-grpo-warm.yaml export" in make
    assert warm.state_dir != grpo.state_dir and warm.broker.port != grpo.broker.port
    assert Path(grpo.model.path).parts[:2] == Path(".rftbus/grpo-warm").parts
