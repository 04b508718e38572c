"""Weight checkpoints for sync: safetensors files in a checkpoint store (local folder or any fsspec URL),
addressed by URI and verified by sha256."""

from rftbus.weights.store import WeightsError, WeightStore, decode_payload, load_weights, sha256_hex

__all__ = ["WeightStore", "WeightsError", "decode_payload", "load_weights", "sha256_hex"]
