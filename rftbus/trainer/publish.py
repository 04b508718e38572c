"""Publishing weight versions: the bytes through the weights transport (rftbus/ground/weights/transport.py; the
store of safetensors files by default), then the WeightVersion that announces them on rft.weights.

The record goes out only after the bytes are durable. `publish` does not wait for the broker to acknowledge it
(a frozen leader of the weights partition held every step for a request timeout or two): a version whose record
failed stops the trainer at its next publish or at `wait`, and a restart publishes the checkpoint's version
again if its record never landed (loop.py `_ensure_published`). Garbage collection (why a version is safe to delete):
- an explorer loads the newest version it has seen, and one admitted under the bound may still be
  generating with — or about to load — any version within η of the newest, so versions
  ≥ newest − (η + 1) are never deleted (the +1 covers a version superseded mid-load);
- a version superseded less than `gc_grace_s` ago is never deleted (an explorer that read its
  record just before the next one may still be reading the file);
- the versions the promotion gate has serving or on canary (`serving`, from its decisions) are never deleted:
  a serve that restarts loads them again, however far behind the newest they are;
- beyond that, the newest `keep_versions` are kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rftbus.ground.kafka.in_flight import InFlight
from rftbus.ground.schemas import WeightVersion, topic_context
from rftbus.ground.weights.transport import WeightTransport


def protected_versions(versions: list[int], newest: int, eta: int, superseded_at: dict[int, float],
                       grace_s: float, now: float) -> set[int]:
    """The versions GC must not touch (see module doc)."""
    keep = {v for v in versions if v >= newest - (eta + 1)}
    keep |= {v for v in versions if now - superseded_at.get(v, now) < grace_s}
    return keep


class WeightPublisher:
    def __init__(self, transport: WeightTransport, model: str, producer, serializer, topic: str, eta: int,
                 keep: int, grace_s: float, serving: Callable[[], set[int]] = set):
        self.transport = transport
        self.model = model
        self.producer, self.serialize, self.topic = producer, serializer, topic
        self.eta, self.keep, self.grace_s = eta, keep, grace_s
        self.serving = serving
        self.superseded_at: dict[int, float] = {}
        self.last: WeightVersion | None = None
        self.in_flight = InFlight("weight version")

    def publish(self, state_dict, version: int, step: int, meta: dict[str, str] | None = None) -> WeightVersion:
        """`meta`: the file's safetensors metadata (a LoRA adapter's shape and base model)."""
        self.producer.poll(0)
        self.in_flight.raise_failed()  # an earlier version Kafka gave up on stops the trainer here
        saved = self.transport.publish(self.model, version, state_dict, meta)
        fmt = (meta or {}).get("rftbus.format", "safetensors")
        rec = WeightVersion(model=self.model, version=version, step=step, uri=saved.uri, sha256=saved.sha256,
                            bytes=saved.bytes, format=fmt, metadata={"trainer_step": str(step)})
        self.producer.produce(self.topic, key=self.model.encode(), value=self.serialize(rec, topic_context(self.topic)),
                              on_delivery=self.in_flight.expect(f"v{version}"))
        self.producer.poll(0)
        now = time.time()
        for v in self.transport.versions(self.model):
            if v < version:
                self.superseded_at.setdefault(v, now)
        self.last = rec
        self.gc(version)
        return rec

    def wait(self, timeout: float = 30.0) -> None:
        """Every version published so far acknowledged (at a stop), or DeliveryError."""
        self.in_flight.wait(self.producer, timeout)

    def gc(self, newest: int) -> list[int]:
        versions = self.transport.versions(self.model)
        protect = protected_versions(versions, newest, self.eta, self.superseded_at, self.grace_s, time.time())
        protect |= self.serving()
        return self.transport.gc(self.model, keep=max(self.keep, 1), protect=protect)
