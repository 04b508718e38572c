"""Verify stage: one raw record's bytes -> an Experience, or the reason it is rejected.

Pure logic (no Kafka, no Faust), so every reason is unit-testable; the worker calls it per record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rftbus.schemas import DecodeError, Experience

# DecodeError reasons that mean "these bytes name a schema we cannot use" rather than "garbage".
SCHEMA_DECODE_REASONS = frozenset({"unknown_schema", "no_registry", "wrong_record_type"})


@dataclass(slots=True)
class Verdict:
    experience: Experience | None
    reason: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.reason is None


def decode_experience(data: bytes | None, decode, max_bytes: int) -> Verdict:
    """Decode and check the shape; version checks need the follower and happen after."""
    if data is None:
        return Verdict(None, "malformed", "null value (tombstone) on the raw topic")
    if len(data) > max_bytes:
        return Verdict(None, "too_large", f"{len(data)} bytes > streams.max_message_bytes={max_bytes}")
    try:
        rec = decode(data, None)
    except DecodeError as e:
        reason = "schema" if e.reason in SCHEMA_DECODE_REASONS else "malformed"
        return Verdict(None, reason, f"{e.reason}: {e.detail}")
    if not isinstance(rec, Experience):
        return Verdict(None, "schema", f"expected rftbus.Experience, got {type(rec).SCHEMA_NAME}")
    return check_experience(rec)


def check_experience(e: Experience) -> Verdict:
    if e.group_size < 1 or not 0 <= e.sample_index < e.group_size:
        return Verdict(e, "schema", f"sample_index {e.sample_index} outside group_size {e.group_size}")
    if not e.experience_id or not e.group_id:
        return Verdict(e, "schema", "empty experience_id or group_id")
    if not e.response_ids:
        return Verdict(e, "schema", "empty response_ids")
    n = len(e.response_ids)
    if len(e.logprobs) != n or len(e.loss_mask) != n:
        return Verdict(e, "length_mismatch", f"response_ids {n}, logprobs {len(e.logprobs)}, "
                                             f"loss_mask {len(e.loss_mask)}")
    # A sum is finite iff every term is (logprobs are far from float overflow): one C loop, not n checks.
    if not math.isfinite(sum(e.logprobs)):
        return Verdict(e, "schema", "logprobs contain NaN or inf")
    if e.reward is not None and not math.isfinite(e.reward):
        return Verdict(e, "non_finite_reward", f"reward {e.reward}")
    return Verdict(e)


def check_version(e: Experience, latest: int) -> Verdict:
    """Known = 0 <= model_version <= latest published (v0 always exists: it is built from the seed)."""
    if e.model_version < 0 or e.model_version > latest:
        return Verdict(e, "unknown_version", f"model_version {e.model_version}, latest published {latest}")
    return Verdict(e)


def check_limits(e: Experience, max_tokens: int, reward_min: float, reward_max: float) -> Verdict:
    """Per-experience filters (stage filter); the group still counts the sample as arrived."""
    tokens = len(e.prompt_ids) + len(e.response_ids)
    if tokens > max_tokens:
        return Verdict(e, "over_length", f"{tokens} tokens > streams.max_tokens={max_tokens}")
    if e.reward is not None and not reward_min <= e.reward <= reward_max:
        return Verdict(e, "reward_out_of_range", f"reward {e.reward} outside [{reward_min}, {reward_max}]")
    return Verdict(e)
