"""Writing and reading policy weights for sync.

The trainer writes `<store>/<model>/v<version>.safetensors` (atomically on local disk: write, fsync,
rename), then publishes a WeightVersion with the URI and sha256. Explorers read the URI and refuse
any file whose hash differs, so a torn or corrupt checkpoint is never loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import fsspec
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from rftbus.ground.errors import RftbusError
from rftbus.ground.models import lora
from rftbus.ground.models.lora import Adapter
from rftbus.ground.weights.store_transport import is_local, version_uri, write_whole

Payload = dict[str, torch.Tensor] | Adapter  # one version as read: full weights or a LoRA adapter
_NAME = re.compile(r"^v(\d+)\.safetensors$")


class WeightsError(RftbusError):
    """A checkpoint is missing, unreadable or does not match its sha256."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class SavedWeights:
    uri: str
    sha256: str
    bytes: int


def state_bytes(state_dict: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> bytes:
    # Clone so tied parameters (embeddings shared with the LM head) are stored as separate tensors.
    return st_save({k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()}, metadata=metadata)


def header_metadata(data: bytes) -> dict[str, str]:
    """The `__metadata__` of a safetensors payload (the library reads it only from files: the header is an
    8-byte little-endian length and that much JSON, by the format's definition)."""
    if len(data) < 8:
        return {}
    n = int.from_bytes(data[:8], "little")
    try:
        return dict(json.loads(data[8:8 + n]).get("__metadata__") or {})
    except (ValueError, AttributeError):
        return {}


class WeightStore:
    def __init__(self, base_url: str | os.PathLike[str]):
        self.base = str(base_url).rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.base)
        self.local = is_local(self.fs)

    def uri(self, model: str, version: int) -> str:
        return version_uri(self.base, model, version)

    def save(self, model: str, version: int, state_dict: dict[str, torch.Tensor],
             metadata: dict[str, str] | None = None) -> SavedWeights:
        data = state_bytes(state_dict, metadata)
        write_whole(self.uri(model, version), data)
        return SavedWeights(self.uri(model, version), sha256_hex(data), len(data))

    def versions(self, model: str) -> list[int]:
        try:
            names = [Path(p).name for p in self.fs.ls(f"{self.root}/{model}", detail=False)]
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := _NAME.match(n)))

    def gc(self, model: str, keep: int, protect: frozenset[int] | set[int] = frozenset()) -> list[int]:
        """Delete all but the newest `keep` versions, never one in `protect` (still being loaded)."""
        versions = self.versions(model)
        doomed = [v for v in versions[:-keep] if v not in protect] if keep > 0 else []
        for v in doomed:
            self.fs.rm(f"{self.root}/{model}/v{v}.safetensors")
        return doomed


def load_weights(uri: str, sha256: str) -> Payload:
    """Read and verify a checkpoint: a full state dict, or an Adapter (a LoRA version, models/lora.py);
    WeightsError if it is missing, corrupt or not what was published."""
    try:
        with fsspec.open(uri, "rb") as f:
            data = f.read()
    except (FileNotFoundError, OSError) as e:
        raise WeightsError(f"checkpoint {uri} cannot be read: {e}") from None
    got = sha256_hex(data)
    if got != sha256:
        raise WeightsError(f"checkpoint {uri} has sha256 {got[:12]}…, but {sha256[:12]}… was published")
    payload = decode_payload(data, uri)
    tensors = payload.state if isinstance(payload, Adapter) else payload
    bad = next((k for k, t in tensors.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())), None)
    if bad is not None:  # NaN weights made every answer fail and no later version could replace them (#42)
        raise WeightsError(f"checkpoint {uri} holds non-finite values ({bad})")
    return payload


def decode_payload(data: bytes, uri: str) -> Payload:
    """A weights file's bytes as a full state dict or an Adapter (by its header's metadata)."""
    try:
        state = st_load(data)
    except Exception as e:  # safetensors raises its own SafetensorError for malformed headers
        raise WeightsError(f"checkpoint {uri} is not a valid safetensors file: {e}") from None
    meta = header_metadata(data)
    if meta.get("rftbus.format") == lora.FORMAT:
        try:
            return lora.from_payload(state, meta)
        except RftbusError as e:
            raise WeightsError(f"checkpoint {uri}: {e}") from None
    return state
