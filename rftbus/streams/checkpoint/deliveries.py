"""Every output write is confirmed: one that Kafka refused is written again with backoff, then quarantined.

The Emitter does not wait for each write's acknowledgement (Faust flushes before it commits, and waiting per
record would cost the worker most of its throughput), so a write the broker refuses after the input was
acknowledged (a topic whose limit shrank, a deleted or unauthorised topic) would be lost with no trace: an
acknowledged input without an outcome (#36). Each write's delivery future is watched; a failed one is sent
again `tries` times with doubling backoff, and if it still cannot be written the input's position, the
output's role and the error are appended to the quarantine file (`<state_dir>/streams/quarantine.jsonl`),
logged, and counted (`quarantined`), and the stage moves on. The run's summary reads that file.
While a write is being retried, the checkpoint commits nothing of the input partition whose record was being
handled when it was made (`holds`; a release on a grade holds the grades' partition, a feedback rejection its
feedback partition): a crash meanwhile replays the input, and the replay writes the outcome again (what landed is
skipped).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("rftbus.streams.checkpoint.deliveries")

QUARANTINE_FILE = Path("streams") / "quarantine.jsonl"

Send = Callable[[str, bytes | None, bytes, int, list], Awaitable[Any]]  # role, key, value, partition, headers


@dataclass(frozen=True)
class Write:
    role: str
    topic: str
    key: bytes | None
    value: bytes
    partition: int
    headers: list
    src: str  # the input it is an outcome of (topic/partition/offset)
    input: tuple[str, int] | None = None  # the (topic, partition) of the record being handled, if not src's


def split_src(src: str) -> tuple[str, int, int]:
    """An input's position, `topic/partition/offset`, as its parts."""
    topic, part, off = src.rsplit("/", 2)
    return topic, int(part), int(off)


def quarantine_path(state_dir: Path) -> Path:
    return state_dir / QUARANTINE_FILE


def read_quarantine(state_dir: Path) -> list[dict]:
    """The quarantined outcomes of every streams worker of a state dir (each line one)."""
    path = quarantine_path(state_dir)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Deliveries:
    def __init__(self, send: Send, state_dir: Path, counters, tries: int, backoff_s: float):
        self.send, self.counters = send, counters
        self.path = quarantine_path(state_dir)
        self.tries, self.backoff_s = tries, backoff_s
        self.retrying: set[asyncio.Task] = set()
        self.pending: Counter[tuple[str, int]] = Counter()  # input (topic, partition) -> its writes being retried

    def holds(self, topic: str, partition: int) -> bool:
        """Whether a write of this input partition is still being retried (its commit must wait)."""
        return self.pending[(topic, partition)] > 0

    def watch(self, fut: Any, w: Write) -> None:
        """Look after one write's delivery future."""
        if not hasattr(fut, "add_done_callback"):
            return
        fut.add_done_callback(lambda f: self._done(f, w))

    def _done(self, fut: Any, w: Write) -> None:
        if fut.cancelled() or fut.exception() is None:
            return
        self.counters.inc("delivery_failures")
        log.warning("write of %s's %s output to %s failed: %r; retrying", w.src, w.role, w.topic, fut.exception())
        part = w.input or split_src(w.src)[:2]
        self.pending[part] += 1
        task = asyncio.ensure_future(self._retry(w, fut.exception()))
        self.retrying.add(task)
        task.add_done_callback(lambda t: self._settled(t, part))

    def _settled(self, task: asyncio.Task, part: tuple[str, int]) -> None:
        self.retrying.discard(task)
        self.pending[part] -= 1
        if self.pending[part] <= 0:
            del self.pending[part]

    async def _retry(self, w: Write, first: BaseException) -> None:
        error: BaseException = first
        for attempt in range(self.tries):
            await asyncio.sleep(self.backoff_s * 2 ** attempt)
            try:
                await (await self.send(w.role, w.key, w.value, w.partition, w.headers))
                self.counters.inc("delivery_retried")
                log.info("write of %s's %s output to %s landed on retry %d", w.src, w.role, w.topic, attempt + 1)
                return
            except Exception as exc:  # noqa: BLE001  # any refusal: try again, then quarantine
                error = exc
        self.quarantine(w, f"{type(error).__name__}: {error} (after {self.tries} retries)")

    def quarantine(self, w: Write, reason: str) -> None:
        topic, partition, offset = split_src(w.src)
        line = {"src": w.src, "topic": topic, "partition": partition, "offset": offset,
                "output": w.role, "output_topic": w.topic, "bytes": len(w.value), "reason": reason,
                "at": time.time()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")
        self.counters.inc("quarantined")
        log.error("quarantined %s's %s output (%d bytes to %s): %s", w.src, w.role, len(w.value), w.topic, reason)
