"""Two DeepSpeed ranks on CPU (gloo, ZeRO-1, launched by `rftbus train --ranks 2` via torchrun) train
disjoint experiences of the same topics: rank r reads partitions p with p % 2 == r."""

from __future__ import annotations

import json
import uuid

from rftbus.ground.kafka.clients import make_producer
from rftbus.ground.schemas import ExperienceGroup
from rftbus.trainer.checkpoint import read_lineage
from tests.integration.test_trainer import CODEC, curated_group, start_trainer, trainer_config


def test_two_ranks_train_disjoint_partitions(broker, tmp_path):
    cfg, path = trainer_config(tmp_path, broker, **{"trainer.zero_stage": 1})
    topic = cfg.topics.curated.name
    producer = make_producer(cfg)
    ser = CODEC.serializer(ExperienceGroup)
    ids_by_partition: dict[int, list[str]] = {}
    for p in range(4):  # 2 groups of 2 per partition: 4 groups per rank = 2 steps of B=2 each
        for _ in range(2):
            g = curated_group(f"m{uuid.uuid4().hex[:6]}", 2)
            producer.produce(topic, key=g.group_id, value=ser(g, None), partition=p)
            ids_by_partition.setdefault(p, []).extend(g.experience_ids())
    assert producer.flush(30) == 0

    proc = start_trainer(cfg, path, "--mode", "replay", "--ranks", "2", "--json")
    out, err = proc.communicate(timeout=150)
    assert proc.returncode == 0, err[-4000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["steps"] == 2

    lineage = read_lineage(cfg.state_dir / "checkpoints" / "lineage.jsonl")
    assert sorted((line["step"], line["rank"]) for line in lineage) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    per_rank: dict[int, set[str]] = {0: set(), 1: set()}
    for line in lineage:
        assert all(part % 2 == line["rank"] for _, part, _ in line["offsets"]), line["offsets"]
        per_rank[line["rank"]] |= set(line["experience_ids"])
    assert not per_rank[0] & per_rank[1]
    assert per_rank[0] == set(ids_by_partition[0] + ids_by_partition[2])
    assert per_rank[1] == set(ids_by_partition[1] + ids_by_partition[3])
    manifest = json.loads(next((cfg.state_dir / "checkpoints").glob("step-00000002-*/manifest.json")).read_text())
    assert manifest["world"] == 2 and len(manifest["positions"]) == 2
