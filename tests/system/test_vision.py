"""Images in the loop (#62), through the real broker, explorer, streams and trainer: `rftbus run configs/vision.yaml`
(the tiny VLM on the Pillow shapes taskset) carries every task's image into its groups as the same records, the
trainer trains on them, and the books reconcile; the token layout the explorer recorded is the one the trainer's
forward reads, with the same pixel values (the behaviour logprobs recomputed through the trainer's own collate and
forward); an oversized or forged image, on a task or in a group, is rejected with its reason."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from pathlib import Path

import torch

from rftbus.apps.bench.processes import read_all
from rftbus.ground.config import Config
from rftbus.ground.kafka.clients import make_admin, make_producer
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.models.loading import load_policy, load_tokenizer
from rftbus.ground.prompting import run_prompt_format
from rftbus.ground.models.lora import load_version
from rftbus.ground.schemas import Experience, ExperienceGroup, Image, Rejection, Task, WeightVersion, make_codec
from rftbus.ground.weights.store import load_weights
from rftbus.ground.tasksets import get_taskset
from rftbus.trainer.batch import collate, rows_of
from rftbus.trainer.policy import PolicyWithValue, token_logp_entropy
from tests.conftest import REPO, rftbus_cli
from tests.system.test_run import _env

CODEC = make_codec(None)


def _tagged(broker: Config, tag: str) -> Config:
    """The run's own topics; tasks on one partition, so the bad tasks written first are the first the explorer
    reads (on four, it read one partition's tasks ahead of another's and once stopped before reaching one)."""
    topics = broker.topics.model_copy(update={k: spec.model_copy(update={"name": f"e2e{tag}.{spec.name}"}
                                                                  | ({"partitions": 1} if k == "tasks" else {}))
                                              for k, spec in broker.topics.all().items()})
    return broker.model_copy(update={"topics": topics})


def _poison(cfg: Config) -> dict[str, str]:
    """Records with bad images on the run's tasks and raw topics, before it starts: id -> the reason expected."""
    task = next(get_taskset("shapes").tasks("train", 1, seed=99))
    img = task.images[0]
    big = dataclasses.replace(img, data=img.data + b"\0" * 70_000, size=len(img.data) + 70_000)  # > max_inline_bytes
    forged = dataclasses.replace(img, sha256=hashlib.sha256(b"other bytes").hexdigest())
    elsewhere = Image(media_type="image/png", sha256=img.sha256, size=img.size, uri="file:///etc/passwd")
    bad_tasks = {"img-big": (big, "image_too_large"), "img-forged": (forged, "image_refused")}
    expect: dict[str, str] = {}
    p = make_producer(cfg)
    for tid, (image, reason) in bad_tasks.items():
        t = dataclasses.replace(task, task_id=f"{tid}-{uuid.uuid4().hex[:6]}", images=[image])
        p.produce(cfg.topics.tasks.name, key=t.task_id.encode(), value=CODEC.serializer(Task)(t, None))
        expect[t.task_id] = reason
    for gid, image in (("grp-forged", forged), ("grp-elsewhere", elsewhere)):
        g = ExperienceGroup(group_id=f"{gid}-{uuid.uuid4().hex[:6]}", task_id=task.task_id, explorer_id="poison",
                            prompt_ids=[1, 2, 3], images=[image], samples=[
                                Experience(response_ids=[5], logprobs=[-0.1], loss_mask=[True], model_version=0,
                                           reward=1.0)])
        p.produce(cfg.topics.raw.name, key=g.group_id.encode(), value=CODEC.serializer(ExperienceGroup)(g, None))
        expect[g.group_id] = "image_refused"
    assert p.flush(30) == 0
    return expect


def test_a_vlm_trains_on_the_bus_from_records_that_carry_its_images(broker, tmp_path):
    tag = uuid.uuid4().hex[:6]
    cfg = _tagged(broker, tag)
    create_topics(cfg, make_admin(cfg))
    state = tmp_path / "state"
    expect = _poison(cfg)
    env = {**_env(broker, tag), "RFTBUS_RUN__TASKS": "400", "RFTBUS_TOPICS__TASKS__PARTITIONS": "1"}
    out = rftbus_cli(None, "--state-dir", str(state), "run", str(REPO / "configs" / "vision.yaml"),
                     "--max-steps", "48", "--minutes", "6", "--summary-json", str(tmp_path / "s.json"),
                     env=env, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["counts_reconcile"] is True and s["experiences_lost"] == 0 and s["duplicated"] == 0, s
    # (48 steps: the trainer steps on demonstrations from its first second, and at η = 1 the explorer's first groups
    # can be stale by the time they are decided; 20 steps once ended with only demonstrations trained)
    assert s["experiences_trained"] > 0 and s["expert_experiences_trained"] > 0 and s["trainer_steps"] >= 48, s

    # Every bad image was rejected with its reason, naming its task or group.
    rejected = [r for r in read_all(cfg, cfg.topics.rejected.name, decode=CODEC.deserializer(), idle_s=0.5)
                if isinstance(r, Rejection)]
    for ident, reason in expect.items():
        named = [r for r in rejected if ident in (r.detail or "") or ident == r.group_id]
        assert [r.reason for r in named] == [reason], (ident, [(r.reason, r.detail) for r in named])
    assert s["tasks_rejected"].get("image_too_large") == 1 and s["tasks_rejected"].get("image_refused") == 1

    # The groups carry their tasks' image records, the same bytes.
    tasks = {t.task_id: t for t in read_all(cfg, cfg.topics.tasks.name, decode=CODEC.deserializer(), idle_s=0.5)
             if isinstance(t, Task) and t.task_id not in expect}
    groups = [g for g in read_all(cfg, cfg.topics.raw.name, decode=CODEC.deserializer(), idle_s=0.5)
              if isinstance(g, ExperienceGroup) and g.explorer_id != "poison"]
    assert groups and all(g.images == tasks[g.task_id].images and g.images for g in groups)

    # The token layout the explorer recorded is what the trainer's forward reads, with the same pixel values: the
    # trainer's collate and forward on the group's weight version give back the explorer's behaviour logprobs.
    run_cfg = cfg.model_copy(update={"model": Config.model_validate(
        {"model": {"name": "tiny-vlm", "tiny": {"max_position_embeddings": 64, "vision": {}}}}).model,
        "state_dir": state})
    tok = load_tokenizer(run_cfg.model)
    fmt = run_prompt_format(tok, run_cfg)
    vision = fmt.vision
    published = {w.version: w for w in read_all(cfg, cfg.topics.weights.name, decode=CODEC.deserializer(), idle_s=0.5)
                 if isinstance(w, WeightVersion) and w.model == "tiny-vlm"}
    kept = [g for g in groups if len({x.model_version for x in g.samples}) == 1 and g.samples[0].model_version in
            published and Path(published[g.samples[0].model_version].uri.removeprefix("file://")).is_file()]
    assert kept, "no group whose weight version is still in the store"
    g = max(kept, key=lambda x: x.samples[0].model_version)
    lm = load_version(load_policy(run_cfg.model, tok), load_weights(published[g.samples[0].model_version].uri,
                                                                     published[g.samples[0].model_version].sha256))
    lm.eval()
    n_tokens = g.prompt_ids.count(vision.token_id)
    pixels = vision.pixels(g.images)
    with torch.no_grad():
        features = lm.get_image_features(pixel_values=pixels)
    per_image = getattr(features, "pooler_output", features)  # (transformers 5: the projected features per image)
    n_features = sum(int(f.shape[0]) for f in per_image) if isinstance(per_image, (list, tuple)) else \
        int(per_image.shape[0] * per_image.shape[1])
    assert n_tokens == vision.token_count(g.images) == n_features == 16, (n_tokens, n_features)
    assert fmt.of_task(tasks[g.task_id]) == g.prompt_ids
    batch = collate(rows_of(g), tok.pad_token_id, 64, vision)
    assert batch.pixel_values is not None and torch.equal(batch.shown_pixels()[:1], pixels)
    for i in range(len(g.samples)):
        assert batch.input_ids[i, :len(g.prompt_ids)].tolist() == g.prompt_ids
    with torch.no_grad():
        logits, _ = PolicyWithValue(lm, value_head=False)(batch.input_ids, batch.attention_mask, 0, None,
                                                          batch.shown_pixels())
        logp, _ = token_logp_entropy(logits, batch, 0)
    got = logp[batch.mask]
    want = batch.behav_logp[batch.mask]
    assert torch.allclose(got, want, atol=1e-3), (got[:8], want[:8])
    # ... and with another picture's pixels they would not be.
    other = vision.pixels(next(t for t in tasks.values() if t.images and t.images[0].sha256 != g.images[0].sha256).images)
    with torch.no_grad():
        logits2, _ = PolicyWithValue(lm, value_head=False)(batch.input_ids, batch.attention_mask, 0, None,
                                                           other.repeat(len(g.samples), 1, 1, 1))
        logp2, _ = token_logp_entropy(logits2, batch, 0)
    assert not torch.allclose(logp2[batch.mask], want, atol=1e-3)
