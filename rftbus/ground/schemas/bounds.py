"""Rejections bounded by construction: whatever a hostile record carries, its rejection fits the rejected topic.

A rejection names what it rejects (ids, key, source position) and may copy the original as evidence. Each of
those came from the input, so an input with a multi-megabyte `experience_id` or key made a rejection over the
topic's limit: writing it raised, and the stage that rejected it crash-looped (#36). Here an id or a key longer
than `MAX_ID` keeps a readable prefix and a sha256 of the whole (the same input gives the same bounded id, so
a rejection produced again after a crash is still the same one), the list of ids and the detail are capped,
and the original is copied only into the room left under the topic's limit; otherwise the rejection points at
it by topic, partition and offset.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from .records import Rejection

MAX_ID = 256  # characters of an id (and bytes of a key) kept as they are
MAX_IDS = 4096  # experience ids one rejection lists (a group is capped far below by explorer.max_n_samples)
MAX_DETAIL = 2000
REJECTION_MAX_BYTES = 900 * 1024  # under a broker's default 1 MB message limit (streams ask the topic itself)
OVERHEAD = 4096  # Avro framing, field tags, the schema fingerprint, Kafka's record overhead: generously


def bound_id(value: str | None) -> str | None:
    if value is None or len(value) <= MAX_ID:
        return value
    return f"{value[:64]}…sha256:{hashlib.sha256(value.encode('utf-8', 'surrogatepass')).hexdigest()}"


def bound_key(key: bytes | None) -> bytes | None:
    """A Kafka key reused for a rejection, at most about MAX_ID bytes."""
    if key is None or len(key) <= MAX_ID:
        return key
    return key[:64] + b"...sha256:" + hashlib.sha256(key).hexdigest().encode()


def fitted_rejection(*, max_bytes: int, reason: str, stage: str, original: bytes | None = None,
                     experience_ids: Sequence[str] = (), experience_id: str | None = None, group_id: str | None = None,
                     detail: str = "", rejection_id: str | None = None, source_topic: str | None = None,
                     partition: int | None = None, offset: int | None = None) -> Rejection:
    """A Rejection whose encoding stays under `max_bytes` (the rejected topic's message limit)."""
    ids = [i for i in (bound_id(x) for x in experience_ids) if i is not None]
    if len(ids) > MAX_IDS:
        detail = f"{detail} ({len(ids)} experiences; the first {MAX_IDS} listed)"
        ids = ids[:MAX_IDS]
    detail = detail[:MAX_DETAIL]
    rec = Rejection(experience_ids=ids, experience_id=bound_id(experience_id), group_id=bound_id(group_id),
                    detail=detail, reason=reason[:MAX_ID], stage=stage[:MAX_ID], source_topic=bound_id(source_topic),
                    partition=partition, offset=offset)
    if rejection_id is not None:
        rec.rejection_id = bound_id(rejection_id) or rec.rejection_id
    used = OVERHEAD + len(rec.detail.encode()) + sum(len(i) + 8 for i in ids) + sum(
        len(str(v)) for v in (rec.experience_id, rec.group_id, rec.rejection_id, rec.reason, rec.stage,
                              rec.source_topic) if v)
    if original is not None:
        if used + len(original) <= max_bytes:
            rec.original = original
        else:
            rec.detail = (f"{rec.detail} (original of {len(original)} bytes not copied: over the room left under "
                          f"the rejected topic's {max_bytes} bytes)")[: MAX_DETAIL + 200]
    return rec
