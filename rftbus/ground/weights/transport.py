"""How a weight version's bytes travel from the trainer to every process that follows it: one interface, so the
trainer and the followers never name a store.

The version is always announced by a WeightVersion record on `rft.weights` (the control plane: compacted, ordered,
replayable, what staleness and the promotion gate read), written by the trainer's publisher after the transport has
placed the bytes (the data plane). A transport says where the bytes go (`publish`), whether a record points where
it puts them (`refusal`, checked before anything is fetched: a forged record must not steer a follower anywhere),
and how a follower gets them back, verified (`fetch`). The built-in is the store of safetensors files
(`store_transport.py`: a folder, or any fsspec URL, object stores included). Another is one module with a
`WeightTransport` subclass, named by `trainer.weights_transport` as an entry point in `rftbus.weight_transports` or
`module:Class`: an in-cluster broadcast (NCCL from the trainer's rank 0 into the inference workers, as prime-rl's and
verl's do) would put the bytes on the wire in `publish`, receive them in `fetch`, and name its group and step in
the record's uri.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rftbus.ground.errors import RftbusError

if TYPE_CHECKING:
    from rftbus.ground.config import Config
    from rftbus.ground.schemas import WeightVersion
    from rftbus.ground.weights.store import Payload


@dataclass(frozen=True)
class Placed:
    """Where `publish` put a version's bytes: what the WeightVersion record announces."""

    uri: str
    sha256: str
    bytes: int


class WeightTransport(ABC):
    """Publish a version (the trainer), fetch a version (explorers, serve, the evaluator, the gate's checks)."""

    def __init__(self, cfg: Config | None):
        self.cfg = cfg

    @abstractmethod
    def publish(self, model: str, version: int, state_dict: dict[str, Any],
                metadata: dict[str, str] | None = None) -> Placed:
        """Place `version` of `model` where followers can fetch it; durable before it returns (the record that
        announces it goes out next). `metadata`: the payload's header (a LoRA adapter's shape and base model)."""

    @abstractmethod
    def fetch(self, rec: WeightVersion) -> Payload:
        """The version a record announces: full weights or a LoRA adapter, verified against the record's sha256
        (rftbus.ground.weights.WeightsError if it is missing, corrupt or not what was announced)."""

    @abstractmethod
    def refusal(self, rec: WeightVersion, look: bool = True) -> str | None:
        """Why a record does not point where this transport puts versions, or None; `look`: also check that the
        bytes are there (never fetching them)."""

    def versions(self, model: str) -> list[int]:
        """The versions still fetchable, oldest first (for garbage collection and `rftbus export`)."""
        return []

    def gc(self, model: str, keep: int, protect: set[int] | frozenset[int] = frozenset()) -> list[int]:
        """Drop all but the newest `keep` versions, never one in `protect`; the versions dropped."""
        return []


BUILTIN = {"store": "rftbus.ground.weights.store_transport:StoreTransport"}


def make_transport(cfg: Config) -> WeightTransport:
    """The transport `trainer.weights_transport` names (the same in every process of a run)."""
    from rftbus.ground.plugins import load_object

    name = cfg.trainer.weights_transport
    cls = load_object(BUILTIN.get(name, name), group="rftbus.weight_transports", what="weights transport")
    if not (isinstance(cls, type) and issubclass(cls, WeightTransport)):
        raise RftbusError(f"trainer.weights_transport {name!r} is {cls!r}, not a subclass of "
                          "rftbus.ground.weights.transport.WeightTransport")
    return cls(cfg)
