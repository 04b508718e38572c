"""Verify stage: one raw record's bytes -> a GroupView, or why the whole record is rejected; then which
samples of a good group are dropped, each with its reason.

Pure logic (no Kafka, no Faust), so every reason is unit-testable. A record is rejected whole when it
is not a usable group at all (bytes, schema, ids); a bad sample costs only itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aiokafka.partitioner import murmur2

from rftbus.ground.schemas import DecodeError, ExperienceGroup
from rftbus.ground.schemas.bounds import bound_key
from rftbus.ground.config.streams import StreamsConfig
from rftbus.ground.schemas.view import GroupReader, GroupView

# DecodeError reasons that mean "these bytes name a schema we cannot use" rather than "garbage".
SCHEMA_DECODE_REASONS = frozenset({"unknown_schema", "no_registry", "wrong_record_type"})


@dataclass(slots=True)
class Verdict:
    group: GroupView | None
    reason: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.reason is None


@dataclass(slots=True)
class Drop:
    """One sample the group loses, and why."""

    reason: str
    detail: str
    stage: str = "verify"


def read_group(data: bytes | None, read: GroupReader, max_bytes: int, max_samples: int = 1024) -> Verdict:
    """Read and check the shape of the whole record."""
    if data is None:
        return Verdict(None, "malformed", "null value (tombstone) on the raw topic")
    try:
        rec = read(data)
    except DecodeError as e:
        if len(data) > max_bytes:
            return Verdict(None, "too_large", f"{len(data)} bytes > streams.max_message_bytes={max_bytes}")
        reason = "schema" if e.reason in SCHEMA_DECODE_REASONS else "malformed"
        return Verdict(None, reason, f"{e.reason}: {e.detail}")
    if not isinstance(rec, GroupView):
        got = type(rec).SCHEMA_NAME if rec is not None else "nothing"
        return Verdict(None, "schema", f"expected {ExperienceGroup.SCHEMA_NAME}, got {got}: producers write one "
                                       "ExperienceGroup record per group")
    if len(data) > max_bytes:  # named with its ids, so every experience in it is accounted for
        return Verdict(rec, "too_large", f"{len(data)} bytes > streams.max_message_bytes={max_bytes}")
    if len(rec.samples) > max_samples:  # a 10,000-sample group was curated and trained in one step (+1.5 GB, #42)
        return Verdict(rec, "group_too_large", f"group {rec.group_id} has {len(rec.samples)} samples > "
                                               f"streams.max_n_samples={max_samples}")
    return check_group(rec)


def placement(key: bytes | None, group_id: str, partition: int, partitions: int) -> str | None:
    """Why a group's record is not where its group id puts it, or None.

    The raw dedupe remembers group ids per partition, so it holds across partitions only if every copy of
    a group lands on one partition: keyed by its group id and placed by Kafka's default (murmur2)
    partitioner, which every rftbus producer uses (`kafka.clients.producer_conf`). A copy under another
    key, a null key or an explicit partition would slip past the dedupe and train again (#36)."""
    want = group_id.encode()
    if key != want:
        shown = "a null key" if key is None else f"key {bound_key(key)!r}"
        return f"group {group_id} under {shown}: raw records are keyed by their group_id"
    home = (murmur2(want) & 0x7FFFFFFF) % partitions
    if partition != home:
        return (f"group {group_id} on partition {partition}; its key hashes to partition {home} of {partitions} "
                "(Kafka's default murmur2 partitioner)")
    return None


def check_group(g: GroupView) -> Verdict:
    if not g.group_id:
        return Verdict(g, "schema", "empty group_id")
    if not g.samples:
        return Verdict(g, "schema", f"group {g.group_id} has no samples")
    if not g.prompt_len:
        return Verdict(g, "schema", f"group {g.group_id} has an empty prompt")
    return Verdict(g)


def check_sample(g: GroupView, i: int, latest: int, seen_ids: set[str]) -> Drop | None:
    """Whether sample ``i`` can be used at all (stage verify); ``seen_ids`` holds the ids before it."""
    s = g.samples[i]
    if not s.experience_id:
        return Drop("schema", "empty experience_id")
    if s.experience_id in seen_ids:
        return Drop("duplicate", f"experience {s.experience_id} appears twice in group {g.group_id}", "filter")
    n = s.response_len
    if not n:
        return Drop("schema", "empty response_ids")
    if s.logprobs_len != n or s.mask_len != n:
        return Drop("length_mismatch", f"response_ids {n}, logprobs {s.logprobs_len}, loss_mask {s.mask_len}")
    if not s.logprobs_finite:
        return Drop("schema", "logprobs contain NaN or inf")
    if s.reward is not None and not math.isfinite(s.reward):
        return Drop("non_finite_reward", f"reward {s.reward}")
    if s.model_version < 0 or s.model_version > latest:
        return Drop("unknown_version", f"model_version {s.model_version}, latest published {latest}")
    return None


def check_limits(g: GroupView, i: int, sc: StreamsConfig) -> Drop | None:
    """Per-sample filters (stage filter): over length, reward out of range, no reward at all."""
    s = g.samples[i]
    drop = over_length(g, i, sc)
    if drop is not None:
        return drop
    if s.reward is None:
        if "session_id" in g.metadata:  # one call of an agent's episode that nobody graded
            return Drop("episode_no_feedback", f"session {g.metadata['session_id']}: the episode was not graded "
                        "(no feedback on the session or this call)", "join")
        return Drop("no_feedback", "reward is null and no feedback was joined", "join")
    return reward_refusal(s.reward, sc)


def over_length(g: GroupView, i: int, sc: StreamsConfig) -> Drop | None:
    tokens = g.prompt_len + g.samples[i].response_len
    if tokens > sc.max_tokens:
        return Drop("over_length", f"{tokens} tokens > streams.max_tokens={sc.max_tokens}", "filter")
    return None


def reward_refusal(reward: float, sc: StreamsConfig) -> Drop | None:
    """A reward the streams will not train on (the gate does not count it as evidence either)."""
    if not math.isfinite(reward):
        return Drop("non_finite_reward", f"reward {reward}")
    if not sc.reward_min <= reward <= sc.reward_max:
        return Drop("reward_out_of_range", f"reward {reward} outside [{sc.reward_min}, {sc.reward_max}]", "filter")
    return None


def live_answers(data: bytes | None, key: bytes | None, partition: int, partitions: int, read: GroupReader,
                 sc: StreamsConfig) -> tuple[GroupView | None, list[int]]:
    """A live record as the streams take it before any grade: the group and the indices of its samples they keep
    (the verify stage's checks, but for rewards, which come later), or (None, []) when they reject it whole. The
    promotion gate counts only these answers as evidence: the streams' rule, not a copy of it."""
    v = read_group(data, read, sc.max_message_bytes, sc.max_n_samples)
    g = v.group
    if not v.ok or g is None or g.source.value != "live" or placement(key, g.group_id, partition, partitions):
        return None, []
    kept: list[int] = []
    seen: set[str] = set()
    for i, s in enumerate(g.samples):
        # (the version is the gate's to judge: only the serving version's and the candidate's answers count)
        if (check_sample(g, i, s.model_version, seen) or over_length(g, i, sc)) is None:
            kept.append(i)
        seen.add(s.experience_id)
    return g, kept


def sample_drops(g: GroupView, latest: int, sc: StreamsConfig) -> dict[int, Drop]:
    """sample index -> why it is dropped, for every sample that is (the others stay candidates)."""
    out: dict[int, Drop] = {}
    seen: set[str] = set()
    for i, s in enumerate(g.samples):
        drop = check_sample(g, i, latest, seen) or check_limits(g, i, sc)
        if drop is not None:
            out[i] = drop
        seen.add(s.experience_id)
    return out


HELD_SOURCES = ("live", "trace")  # answers whose grades come later (serve's, and traced calls: rftbus/streams/traces/)


def needs_feedback(g: GroupView) -> bool:
    """A live group with a sample still waiting for its reward is held for the feedback join."""
    return g.source.value in HELD_SOURCES and any(s.reward is None for s in g.samples)
