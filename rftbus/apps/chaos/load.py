"""Load above steady state: a burst of whole GRPO groups straight onto raw (as a second, unthrottled
explorer fleet would produce them), and live traffic through `serve` (completion + feedback).

Burst experiences are made of real task text run through the model's own tokenizer, stamped with
the newest published version, so they are as trainable as an explorer's; whatever the trainer
cannot take within the staleness bound must come back as `stale`, never vanish.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from rftbus.ground.config import Config
from rftbus.ground.kafka.clients import make_producer
from rftbus.ground.models.loading import load_tokenizer
from rftbus.ground.schemas import Experience, ExperienceGroup, Source, make_codec, topic_context
from rftbus.ground.tasksets import get_taskset


@dataclass
class LoadReport:
    groups: int = 0
    experiences: int = 0
    seconds: float = 0.0
    live_ok: int = 0
    live_failed: int = 0
    feedback_ok: int = 0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return dict(self.__dict__)


def burst_groups(cfg: Config, n_groups: int, version: int, seed: int = 0) -> list[ExperienceGroup]:
    rng = random.Random(seed)
    tok = load_tokenizer(cfg.model)
    taskset = get_taskset(cfg.taskset.name, **cfg.taskset.params)
    n = cfg.rl.group_size
    out = []
    for task in taskset.tasks("train", n_groups, seed=seed + 7919):
        samples = []
        for _ in range(n):
            right = rng.random() < 0.5
            text = task.answer if right and task.answer else str(rng.randrange(200))
            resp = list(tok(text, add_special_tokens=False)["input_ids"]) or [tok.eos_token_id]
            samples.append(Experience(
                response_ids=resp, logprobs=[-rng.uniform(0.1, 3.0) for _ in resp], loss_mask=[True] * len(resp),
                reward=1.0 if right else 0.0, reward_components={"burst": 1.0}, model_version=version,
                response_text=text, finish_reason="stop"))
        out.append(ExperienceGroup(
            task_id=f"burst-{task.task_id}", source=Source.explorer, explorer_id="chaos-burst",
            prompt_ids=list(tok(task.prompt, add_special_tokens=False)["input_ids"]), prompt_text=task.prompt,
            samples=samples, metadata={"taskset": task.taskset, "chaos": "burst"}))
    return out


def burst(cfg: Config, n_groups: int, version: int, seed: int = 0) -> LoadReport:
    """Produce `n_groups` groups to raw as fast as the producer goes; returns what was acknowledged."""
    codec = make_codec(cfg.schema_registry.url, cfg.schema_registry.client)
    producer = make_producer(cfg)
    groups = burst_groups(cfg, n_groups, version, seed)
    acked, failed = [0], []
    topic = cfg.topics.raw.name

    def done(n: int):
        def cb(err, _msg):
            if err is None:
                acked[0] += n
            else:
                failed.append(err.str())
        return cb

    t0 = time.monotonic()
    for g in groups:
        while True:
            try:
                producer.produce(topic, key=g.group_id.encode(), value=codec.encode(g, topic_context(topic)),
                                 on_delivery=done(len(g.samples)))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    producer.flush(60)
    rep = LoadReport(groups=len(groups), experiences=acked[0], seconds=time.monotonic() - t0)
    if failed:
        rep.notes.append(f"{len(failed)} burst records not acknowledged: {failed[0]}")
    return rep


def live_traffic(cfg: Config, n: int, timeout_s: float = 60.0) -> LoadReport:
    """`n` completions through `rftbus serve`, each graded through /v1/feedback (as an agent would).

    A request refused or cut off (serve may be restarting) is counted, not retried: the client never
    got an answer, so nothing was promised. What serve answered, Kafka has (serve.record_ack=kafka)."""
    import httpx

    rep = LoadReport()
    taskset = get_taskset(cfg.taskset.name, **cfg.taskset.params)
    base = f"http://{cfg.serve.host}:{cfg.serve.port}"
    t0 = time.monotonic()
    with httpx.Client(base_url=base, timeout=timeout_s) as client:
        for task in taskset.tasks("train", n, seed=104729):
            try:
                r = client.post("/v1/completions", json={"prompt": task.prompt, "max_tokens": 6, "task_id": task.task_id})
                r.raise_for_status()
                choice = r.json()["choices"][0]
            except (httpx.HTTPError, KeyError, ValueError) as e:
                rep.live_failed += 1
                if len(rep.notes) < 5:
                    rep.notes.append(f"completion failed: {type(e).__name__}: {str(e)[:120]}")
                continue
            rep.live_ok += 1
            reward = float(taskset.score(choice.get("text", ""), task.answer or "")["reward"])
            try:
                f = client.post("/v1/feedback", json={"experience_id": choice["experience_id"], "reward": reward})
                f.raise_for_status()
                rep.feedback_ok += 1
            except (httpx.HTTPError, KeyError) as e:
                if len(rep.notes) < 5:
                    rep.notes.append(f"feedback failed: {type(e).__name__}: {str(e)[:120]}")
    rep.seconds = time.monotonic() - t0
    return rep
