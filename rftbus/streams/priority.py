"""Per-task pass rates (a streaming EMA of group mean reward) and the priority / lane rule.

priority(experience) = |advantage| * recency_decay ** (latest - model_version)
                       + difficulty_weight * 4 p (1 - p),   p = the task's pass rate before this group
A group goes to the priority lane when the mean priority of its survivors >= priority_threshold.
Balanced groups (|A| near 1 for every sample) and tasks of middling difficulty land there first;
lopsided groups (one success in eight) and solved or hopeless tasks go to the normal lane.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import MutableMapping, Sequence
from typing import Protocol


class Rates(Protocol):
    """What a decision reads and moves: one partition's pass rates."""

    def get(self, key: str) -> float | None: ...

    def update(self, key: str, mean_reward: float, alpha: float | None = None) -> float: ...


class PassRates:
    """EMA of group mean reward per key (a task id, or `class:<name>` for a prompt class), per raw partition.

    In the worker `store` is the checkpointed table `rates` (rftbus/streams/app.py): a partition's rates are the fold of the
    groups its committed inputs decided, so they are recovered with it after a kill -9 and move with it at a
    rebalance, and a replayed group is decided with the rates the first run had (the run without a kill and the run
    with one write the same priorities and lanes: `rftbus chaos --every-event`). Rates that lived in the worker's
    memory started empty after every restart. At most `max_keys` are kept per partition, least recently updated
    dropped first: live traffic brings a new task id with almost every prompt, and hours of it must not grow the
    state without bound. Without a store (tests, the simulator) a plain dict."""

    def __init__(self, alpha: float, max_keys: int = 200_000, store: MutableMapping[bytes, bytes] | None = None):
        self.alpha = alpha
        self.max_keys = max_keys
        self.store: MutableMapping[bytes, bytes] = {} if store is None else store
        self.order: dict[int, OrderedDict[bytes, None]] = {}  # partition -> its keys, least recently updated first
        self.changed: dict[str, float] = {}  # key -> its newest rate since the last metric

    def of(self, partition: int) -> PartitionRates:
        return PartitionRates(self, partition)

    def get(self, key: str, partition: int = 0) -> float | None:
        raw = self.store.get(_key(partition, key))
        return None if raw is None else struct.unpack(">d", raw)[0]

    def update(self, key: str, mean_reward: float, alpha: float | None = None, partition: int = 0) -> float:
        a = self.alpha if alpha is None else alpha
        old = self.get(key, partition)
        new = mean_reward if old is None else (1 - a) * old + a * mean_reward
        k = _key(partition, key)
        self.store[k] = struct.pack(">d", new)
        order = self._order(partition)
        order[k] = None
        order.move_to_end(k)
        while len(order) > self.max_keys:  # (only this partition's keys: a change goes to its input's changelog)
            gone, _ = order.popitem(last=False)
            self.store.pop(gone, None)
            self.changed.pop(gone.split(b"\x00", 1)[1].decode(), None)
        self.changed[key] = new
        return new

    def _order(self, partition: int) -> OrderedDict[bytes, None]:
        """The partition's keys in update order; after a restart those recovered come first, in the store's order."""
        order = self.order.get(partition)
        if order is None:
            prefix = f"{partition}\x00".encode()
            order = self.order[partition] = OrderedDict((k, None) for k in list(self.store.keys())
                                                        if k.startswith(prefix))
        return order

    def forget(self, partition: int) -> None:
        """A partition this worker lost: its key order is rebuilt from the store if it comes back."""
        self.order.pop(partition, None)

    def take_changed(self) -> dict[str, float]:
        out, self.changed = self.changed, {}
        return out


class PartitionRates:
    """One partition's pass rates, as a decision sees them (`Rates`)."""

    def __init__(self, rates: PassRates, partition: int):
        self.rates, self.partition = rates, partition

    def get(self, key: str) -> float | None:
        return self.rates.get(key, self.partition)

    def update(self, key: str, mean_reward: float, alpha: float | None = None) -> float:
        return self.rates.update(key, mean_reward, alpha, self.partition)


def _key(partition: int, key: str) -> bytes:
    return f"{partition}\x00{key}".encode()


def difficulty_bonus(pass_rate: float | None, weight: float) -> float:
    if pass_rate is None:
        return 0.0
    p = min(1.0, max(0.0, pass_rate))
    return weight * 4.0 * p * (1.0 - p)


def priorities(advantages: Sequence[float], versions: Sequence[int], latest: int, decay: float,
               bonus: float) -> list[float]:
    return [abs(a) * decay ** max(0, latest - v) + bonus for a, v in zip(advantages, versions)]
