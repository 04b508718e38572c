"""Weight lineages (rftbus/ground/models/lineage.py) and run.trainers: a second trainer on the same stream is its own
consumer group, status, checkpoints, books and weights key."""

from __future__ import annotations

import pytest

from rftbus.ground.config import Config, ConfigError, load_config
from rftbus.ground.models.lineage import check_lineage, label, lineage_of, weights_key
from rftbus.ground.schemas import GateDecision
from rftbus.trainer.rejects import rejection_id
from rftbus.ground.weights.decisions import ServedVersions


def test_keys_labels_and_names():
    assert weights_key("m", "") == "m" and weights_key("m", "hot") == "m@hot"
    assert lineage_of("m", "m") == "" and lineage_of("m@hot", "m") == "hot" and lineage_of("mx", "m") is None
    assert label("", 4) == "v4" and label("hot", 4) == "hot:v4"
    for bad in ("Hot", "a b", "../x", "x" * 33, "-x"):
        with pytest.raises(ValueError, match="lineage"):
            check_lineage(bad)


def cfg_with(tmp_path, trainers, gate: bool = True) -> Config:
    path = tmp_path / "c.yaml"
    path.write_text(f"state_dir: {tmp_path}\ngate: {{enabled: {str(gate).lower()}}}\n"
                    "trainer: {lora: {r: 4, alpha: 8, target_modules: [q_proj]}}\n")
    return load_config(path, {"run": {"trainers": trainers}})


def test_a_further_trainer_is_its_own_group_status_and_checkpoints(tmp_path):
    cfg = cfg_with(tmp_path, [{"lineage": "hot", "lr": 0.5, "threads": 1}])
    t = cfg.lineage_trainer(0)
    assert (t.lineage, t.lr, t.threads, t.group_id, t.id) == ("hot", 0.5, 1, "rftbus-trainer-hot", "hot")
    assert t.checkpoint_dir == str(tmp_path / "checkpoints" / "lineage-hot")
    assert t.loss == cfg.trainer.loss and cfg.trainer.lineage == ""
    assert rejection_id("t", 0, 5, "stale", "trainer@hot") != rejection_id("t", 0, 5, "stale")


@pytest.mark.parametrize("trainers,gate,said", [
    ([{"lr": 0.1}], True, "lineage '' is missing"),
    ([{"lineage": "hot"}, {"lineage": "hot"}], True, "lineage 'hot' is taken"),
    ([{"lineage": "hot", "lr": -1}], True, "run.trainers[0]: ('lr',)"),
    ([{"lineage": "hot", "nope": 1}], True, "run.trainers[0]: ('nope',)"),
    ([{"lineage": "hot"}], False, "needs the promotion gate"),
])
def test_bad_further_trainers_are_named(tmp_path, trainers, gate, said):
    with pytest.raises(ConfigError) as e:
        cfg_with(tmp_path, trainers, gate)
    assert said in str(e.value)


def test_each_trainer_keeps_only_its_own_served_versions_out_of_gc(tmp_path):
    cfg = cfg_with(tmp_path, [{"lineage": "hot"}])
    first, hot = ServedVersions(cfg, ""), ServedVersions(cfg, "hot")
    d = GateDecision(decision_id="x", model=cfg.model.name, decision="canary", version=7, serving=5, candidate=7,
                     gate="gate", reason="r", lineage="hot", serving_lineage="", canary_share=0.3)
    for s in (first, hot):
        s._on(d)
    assert first.versions() == {5} and hot.versions() == {7}


def test_a_further_trainer_judges_staleness_in_the_first_lineages_numbers():
    from types import SimpleNamespace

    from rftbus.trainer.components import Components

    first = SimpleNamespace(first_lineage=None)
    assert Components.staleness_reference(first, 7, [9]) == 7  # its own version: a newer group is unknown_version
    other = SimpleNamespace(first_lineage=SimpleNamespace(version=12))
    assert Components.staleness_reference(other, 3) == 12  # not its own 3: the rollouts carry the first one's
    assert Components.staleness_reference(other, 3, [11, 13]) == 13  # a record its follower has not read yet


def test_the_gate_without_lora_is_refused_at_load(tmp_path):
    """Serve holds each gated version as a named adapter: a gate without trainer.lora crash-looped serve (#63)."""
    path = tmp_path / "c.yaml"
    path.write_text(f"state_dir: {tmp_path}\ngate: {{enabled: true}}\n")
    with pytest.raises(ConfigError, match="gate.enabled needs trainer.lora"):
        load_config(path)
