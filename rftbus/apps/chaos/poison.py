"""Poison for every input topic: bytes and records no component should ever accept, each with the
rejection reason(s) that count as handling it.

`catalogue` is pure (it builds the records); `inject` produces them and notes where each landed, so
reconciliation can look for the rejection that names exactly that topic, partition and offset.
Topics whose readers are followers (weights) or the analytics sink (metrics) have no rejected-topic
path: there the proof is that every process lives on and versions keep coming.
"""

from __future__ import annotations

import math
import random
import uuid
from dataclasses import dataclass, replace

from aiokafka.partitioner import murmur2

from rftbus.ground.config import Config
from rftbus.ground.kafka.clients import make_producer
from rftbus.ground.schemas import (Experience, ExperienceGroup, Feedback, FeedbackKind, Source, Task, WeightVersion, make_codec,
                            new_id)

ANY = frozenset({"*"})  # valid but odd input: any accounted outcome (trained or rejected) is right
NONE: frozenset[str] = frozenset()  # no rejection path (followers skip it): liveness is the check


@dataclass(frozen=True)
class Poison:
    topic_key: str  # config topic key (tasks, raw, ...)
    label: str
    value: bytes | None
    key: bytes | None
    expect: frozenset[str]  # rejection reasons that mean "handled"
    at_partition: int | None = None  # produce to this partition (None: the key decides)
    topic: str = ""
    partition: int | None = None
    offset: int | None = None

    @property
    def where(self) -> tuple[str, int, int] | None:
        return None if self.offset is None else (self.topic, self.partition or 0, self.offset)

    def to_json(self) -> dict:
        return {"topic": self.topic or self.topic_key, "label": self.label, "partition": self.partition,
                "offset": self.offset, "expect": sorted(self.expect), "bytes": len(self.value or b"")}


def _group(rng: random.Random, version: int, rewards=(1.0,), curated: bool = False, **sample) -> ExperienceGroup:
    """A group of len(rewards) samples; `sample` overrides every sample's fields. `curated` makes it look
    like a streams output (survivors and advantages set), for the trainer's lanes."""
    samples = []
    for i, r in enumerate(rewards):
        resp = [rng.randrange(4, 49) for _ in range(6)]
        base = dict(response_ids=resp, logprobs=[-1.0] * len(resp), loss_mask=[True] * len(resp), reward=r,
                    model_version=version, response_text="46", finish_reason="stop",
                    advantage=(1.0 if i % 2 == 0 else -1.0) if curated else None)
        base.update(sample)
        samples.append(Experience(**base))
    return ExperienceGroup(group_id=f"poison-{uuid.uuid4().hex[:12]}", task_id="poison", source=Source.explorer,
                           explorer_id="chaos", prompt_ids=[rng.randrange(4, 49) for _ in range(8)],
                           prompt_text="12+34=", samples=samples,
                           survivors=list(range(len(samples))) if curated else [])


def _bad_utf8(codec, g: ExperienceGroup) -> bytes:
    """A well-framed group whose prompt_text bytes are not UTF-8 (same length, so framing holds)."""
    marker = "MARKER\u00e9\u00e9"  # 10 bytes in UTF-8
    data = codec.encode(replace(g, prompt_text=marker), None)
    i = data.index(marker.encode())
    return data[:i] + b"\xff\xfe\xc3\x28\xa0\xa1\xed\xa0\x80\xc0" + data[i + len(marker.encode()):]


def catalogue(cfg: Config, latest_version: int, seed: int = 0) -> list[Poison]:
    """Every poison record, per input topic (the order is the injection order)."""
    codec = make_codec(cfg.schema_registry.url, cfg.schema_registry.client)
    enc = lambda rec: codec.encode(rec, None)  # noqa: E731  # crafted inputs, whatever topic they are thrown at
    rng = random.Random(seed)
    k = lambda: f"poison-{uuid.uuid4().hex[:8]}".encode()  # noqa: E731
    own = lambda g: (enc(g), g.group_id.encode())  # noqa: E731  # a raw group keyed as producers key it
    home = lambda g: (murmur2(g.group_id.encode()) & 0x7FFFFFFF) % cfg.topics.raw.partitions  # noqa: E731
    exp = lambda **o: _group(rng, latest_version, **o)  # noqa: E731
    task = Task(taskset=cfg.taskset.name, prompt="1+1=", answer="2")
    good = exp()
    huge = cfg.streams.max_message_bytes + 4096
    mismatch = exp(logprobs=[-1.0] * 5)  # 6 response tokens
    stray = exp(rewards=(1.0, 0.0))
    curated_mismatch = exp(rewards=(1.0, 0.0), curated=True, logprobs=[-1.0] * 5)
    model = cfg.model.name.encode()
    hostile = _unicode_group(rng, latest_version)
    cur = lambda **o: _group(rng, latest_version, rewards=(1.0, 0.0), curated=True, **o)  # noqa: E731
    oov = [5, 6, 10**6, 7]  # a token id far past any vocabulary
    long = dict(response_ids=[5] * 4096, logprobs=[-1.0] * 4096, loss_mask=[True] * 4096)  # past any toy context
    demo = lambda **o: replace(_group(rng, latest_version, **{"logprobs": [0.0] * 6, **o}),  # noqa: E731
                               source=Source.expert)
    # a valid group just under the broker's own limit (16 MiB; streams take up to max_message_bytes)
    at_limit = _group(rng, latest_version, rewards=(1.0, 0.0) * 340, response_ids=[5] * 4000,
                      logprobs=[-1.0] * 4000, loss_mask=[True] * 4000)
    out = [
        # tasks -> explorers (stage explorer)
        Poison("tasks", "garbage bytes", b"\x13\x37 not avro at all", k(), frozenset({"malformed"})),
        Poison("tasks", "truncated Task frame", enc(task)[:-5], k(), frozenset({"malformed"})),
        Poison("tasks", "an ExperienceGroup on the tasks topic", enc(good), k(), frozenset({"malformed"})),
        Poison("tasks", "tombstone (null value)", None, k(), frozenset({"malformed"})),
        Poison("tasks", "garbage under a key that is not UTF-8", b"\x00garbage", b"\xff\xfe\xfd", frozenset({"malformed"})),
        Poison("tasks", "a prompt of 40,000 tokens (far past the model's context)",
               enc(replace(task, prompt="12+34=" * 8000)), k(), frozenset({"prompt_too_long"})),
        # bounded work (#36): never a 10,000-sample group, never an import a task names
        # (new task ids: an explorer skips a task id it already handled in that partition, without a rejection)
        Poison("tasks", "n_samples 10,000", enc(replace(task, task_id=new_id(), n_samples=10_000)), k(),
               frozenset({"n_samples_out_of_bounds"})),
        Poison("tasks", "a workflow naming a module to import",
               enc(replace(task, task_id=new_id(), workflow="os:system")), k(), frozenset({"unknown_workflow"})),
        # (#42) bounded before it is tokenized; a group past streams.max_n_samples and past the ids a rejection lists
        Poison("tasks", "a prompt of 600 KB (explorer.max_prompt_chars)",
               enc(replace(task, task_id=new_id(), prompt="7" * 600_000)), k(), frozenset({"prompt_too_long"})),
        # raw -> streams (stage verify)
        Poison("raw", "garbage bytes", b"hello, not avro", k(), frozenset({"malformed"})),
        Poison("raw", "wrong schema id (Confluent framing, id 99999)", b"\x00" + (99999).to_bytes(4, "big") + b"body",
               k(), frozenset({"schema"})),
        Poison("raw", "unknown schema fingerprint", b"\xc3\x01" + rng.randbytes(8) + b"body", k(), frozenset({"schema"})),
        Poison("raw", "truncated frame", enc(exp())[:-7], k(), frozenset({"malformed"})),
        Poison("raw", f"huge record ({huge // 1024} KiB > streams.max_message_bytes)",
               b"\xc3\x01" + bytes(huge), k(), frozenset({"too_large"})),
        Poison("raw", "NaN reward", *own(exp(reward=math.nan)), frozenset({"non_finite_reward"})),
        Poison("raw", "unknown model version", *own(exp(model_version=latest_version + 1_000_000)),
               frozenset({"unknown_version"})),
        Poison("raw", "invalid UTF-8 in prompt_text", _bad_utf8(codec, exp()), k(), frozenset({"malformed"})),
        Poison("raw", "tombstone (null value)", None, k(), frozenset({"malformed"})),
        Poison("raw", "a valid group of 680 samples at the broker's size limit (~16 MiB)", *own(at_limit),
               frozenset({"too_large"})),
        Poison("raw", "a Task on the raw topic", enc(task), k(), frozenset({"schema"})),
        Poison("raw", "a group of 5,000 samples (streams.max_n_samples; a rejection lists 4,096 ids)",
               *own(_group(rng, latest_version, rewards=(1.0, 0.0) * 2500)), frozenset({"group_too_large"})),
        Poison("raw", "length mismatch (logprobs shorter than response)", *own(mismatch),
               frozenset({"length_mismatch"})),
        # a copy away from its group id's partition would slip past the per-partition dedupe
        Poison("raw", "a valid group under another key", enc(stray), k(), frozenset({"bad_key"})),
        Poison("raw", "a valid group with a null key", enc(stray), None, frozenset({"bad_key"})),
        Poison("raw", "a valid group on a partition its key does not hash to", *own(stray), frozenset({"bad_key"}),
               at_partition=(home(stray) + 1) % cfg.topics.raw.partitions),
        Poison("raw", "garbage under a 300 KB key (its rejection must still fit)", b"\x01", b"K" * 300_000,
               frozenset({"malformed"})),
        # feedback -> streams (stage feedback / join)
        Poison("feedback", "garbage bytes", b"\x00\x01\x02", k(), frozenset({"malformed", "schema"})),
        Poison("feedback", "rating NaN", enc(Feedback(experience_id="nobody", kind=FeedbackKind.rating,
                                                       rating=math.nan)), k(), frozenset({"bad_feedback"})),
        Poison("feedback", "feedback for an experience that never existed",
               enc(Feedback(experience_id=f"ghost-{uuid.uuid4().hex}", kind=FeedbackKind.thumbs, thumbs_up=True)),
               k(), frozenset({"orphan_feedback"})),
        Poison("feedback", "tombstone (null value)", None, k(), frozenset({"malformed"})),
        Poison("feedback", "rating 6 on the 1..5 scale (HTTP refuses it; so must Kafka)",
               enc(Feedback(experience_id="nobody", kind=FeedbackKind.rating, rating=6.0)), k(),
               frozenset({"bad_feedback"})),
        # curated lanes and expert -> trainer (stage trainer)
        Poison("curated", "garbage bytes", b"not an experience", k(), frozenset({"malformed"})),
        Poison("curated", "length mismatch", enc(curated_mismatch), k(), frozenset({"length_mismatch"})),
        Poison("curated", "a raw group (no survivors) on a curated lane", enc(good), k(), frozenset({"schema"})),
        Poison("curated", "tombstone (null value)", None, k(), frozenset({"malformed"})),
        Poison("curated", "NaN advantage", enc(cur(advantage=math.nan)), k(), frozenset({"non_finite_advantage"})),
        Poison("curated", "a token id past the vocabulary", enc(cur(response_ids=oov, logprobs=[-1.0] * 4,
                                                                    loss_mask=[True] * 4)),
               k(), frozenset({"token_out_of_vocab"})),
        Poison("curated", "4,096 response tokens (past the model's context)", enc(cur(**long)), k(),
               frozenset({"over_context"})),
        Poison("curated", "a finite advantage of 1e308", enc(cur(advantage=1e308)), k(),
               frozenset({"advantage_out_of_bounds"})),
        Poison("curated", "a positive logprob", enc(cur(logprobs=[0.5] + [-1.0] * 5)), k(),
               frozenset({"logprob_out_of_bounds"})),
        Poison("curated", "survivors that point past the samples", enc(replace(cur(), survivors=[0, 7])), k(),
               frozenset({"schema"})),
        Poison("curated_priority", "truncated frame", enc(exp())[:-9], k(), frozenset({"malformed"})),
        Poison("curated_priority", "a Task on a curated lane", enc(task), k(), frozenset({"schema"})),
        Poison("curated_priority", "NaN advantage", enc(cur(advantage=math.nan)), k(),
               frozenset({"non_finite_advantage"})),
        Poison("curated_priority", "a model version past the newest published",
               enc(cur(model_version=latest_version + 1_000_000)), k(), frozenset({"unknown_version"})),
        Poison("curated_priority", "a token id past the vocabulary",
               enc(cur(response_ids=oov, logprobs=[-1.0] * 4, loss_mask=[True] * 4)), k(),
               frozenset({"token_out_of_vocab"})),
        Poison("expert", "garbage bytes", b"\xc3\x01garbage", k(), frozenset({"malformed", "schema"})),
        Poison("expert", "a Task on the expert topic", enc(task), k(), frozenset({"schema"})),
        Poison("expert", "a demonstration with a NaN advantage", enc(demo(advantage=math.nan)), k(),
               frozenset({"non_finite_advantage"})),
        Poison("expert", "a demonstration with a token id past the vocabulary",
               enc(demo(response_ids=oov, logprobs=[0.0] * 4, loss_mask=[True] * 4)), k(),
               frozenset({"token_out_of_vocab"})),
        # weights -> explorers, streams, trainer (followers: skip and carry on)
        Poison("weights", "garbage under the model's own key", b"\xc3\x01" + rng.randbytes(40), model, NONE),
        Poison("weights", "a WeightVersion of another model",
               enc(WeightVersion(model="not-" + cfg.model.name, version=10**6, step=0, uri="file:///nowhere",
                                 sha256="0" * 64, bytes=1)), b"not-" + model, NONE),
        Poison("weights", "tombstone under another key", None, b"not-" + model, NONE),
        # metrics -> analytics sink
        Poison("metrics", "garbage bytes", b"metrics? no", k(), NONE),
        # valid but hostile text: must flow through like any experience
        Poison("raw", "valid group with hostile unicode text", enc(hostile), hostile.group_id.encode(), ANY),
    ]
    return out


def _unicode_group(rng: random.Random, version: int) -> ExperienceGroup:
    text = "\u202e\u0000\U0001f4a5 \u0645\u0631\u062d\u0628\u0627 \ufeff\U0010fffd z\u0301\u0301\u0301"
    g = _group(rng, version, rewards=(1.0, 0.0), response_text=text[::-1])
    g.prompt_text = text
    return g


def inject(cfg: Config, poisons: list[Poison], timeout_s: float = 60.0) -> list[Poison]:
    """Produce every poison record; returns them with topic, partition and offset filled in."""
    producer = make_producer(cfg)
    names = cfg.topics.all()
    landed: dict[int, tuple[str, int, int]] = {}
    errors: dict[int, str] = {}

    def cb(i):
        def done(err, msg):
            if err is not None:
                errors[i] = err.str()
            else:
                landed[i] = (msg.topic(), msg.partition(), msg.offset())
        return done

    for i, p in enumerate(poisons):
        if p.at_partition is None:
            producer.produce(names[p.topic_key].name, value=p.value, key=p.key, on_delivery=cb(i))
        else:
            producer.produce(names[p.topic_key].name, value=p.value, key=p.key, on_delivery=cb(i),
                             partition=p.at_partition)
        producer.poll(0)
    left = producer.flush(timeout_s)
    out = []
    for i, p in enumerate(poisons):
        if i in landed:
            t, part, off = landed[i]
            out.append(replace(p, topic=t, partition=part, offset=off))
        else:
            out.append(replace(p, topic=names[p.topic_key].name,
                               label=f"{p.label} [NOT DELIVERED: {errors.get(i, 'timeout' if left else '?')}]"))
    return out
