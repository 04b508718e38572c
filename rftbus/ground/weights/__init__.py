"""Weight checkpoints for sync: safetensors files in a checkpoint store (local folder or any fsspec URL),
addressed by URI and verified by sha256.

The store (safetensors, torch) loads on first use of one of its names, so the parts that only follow versions
or apply the staleness rule (streams, the CLI) import without torch (#35: installs per role)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rftbus.ground.weights.store import WeightsError, WeightStore, decode_payload, load_weights, sha256_hex

__all__ = ["WeightStore", "WeightsError", "decode_payload", "load_weights", "sha256_hex"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rftbus.ground.weights import store

        return getattr(store, name)
    raise AttributeError(f"module 'rftbus.ground.weights' has no attribute {name!r}")
