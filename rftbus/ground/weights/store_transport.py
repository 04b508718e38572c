"""The built-in weights transport: safetensors files in the weight store (`trainer.store_url`, a folder or any
fsspec URL), one per version at `<store>/<model>/v<version>.safetensors`, sha256 in the record.

A record is believed only if its uri is exactly where the trainer writes that version (so a forged record needs a
file the trainer wrote under that name, and never points a follower at `http://` or `file:///etc`) and, when
looked at, the file is there, a regular file of the recorded size (a FIFO or a huge file is never opened). The
store itself (torch, safetensors) loads on first use, so a process that only checks records imports no torch."""

from __future__ import annotations

import stat
from typing import TYPE_CHECKING, Any

import fsspec

from rftbus.ground.weights.transport import Placed, WeightTransport

if TYPE_CHECKING:
    from rftbus.ground.config import Config
    from rftbus.ground.schemas import WeightVersion
    from rftbus.ground.weights.store import Payload, WeightStore


def store_url(cfg: Config) -> str:
    """The weight store the trainer writes (trainer.store_url, default <state_dir>/weights)."""
    return cfg.trainer.store_url or str(cfg.state_dir / "weights")


def version_uri(base_url: str, model: str, version: int) -> str:
    """Where the store at `base_url` keeps `version` of `model` (the one spelling of it: the trainer writes this
    URI into the record, followers compare with it)."""
    fs, root = fsspec.core.url_to_fs(str(base_url).rstrip("/"))
    path = f"{root}/{model}/v{version}.safetensors"
    local = fs.protocol in ("file", ("file", "local")) or "file" in fs.protocol
    return f"file://{path}" if local else fs.unstrip_protocol(path)


class StoreTransport(WeightTransport):
    def __init__(self, cfg: Config | None, base_url: str | None = None):
        """`base_url` overrides the config's store (`StoreTransport(None, url)`: a store outside a run's config)."""
        super().__init__(cfg)
        if base_url is None and cfg is None:
            raise ValueError("StoreTransport needs a config or a base_url")
        self.base = base_url if base_url is not None else store_url(cfg)  # type: ignore[arg-type]
        self._store: WeightStore | None = None

    @property
    def store(self) -> WeightStore:
        if self._store is None:
            from rftbus.ground.weights.store import WeightStore

            self._store = WeightStore(self.base)
        return self._store

    def publish(self, model: str, version: int, state_dict: dict[str, Any],
                metadata: dict[str, str] | None = None) -> Placed:
        saved = self.store.save(model, version, state_dict, metadata)
        return Placed(saved.uri, saved.sha256, saved.bytes)

    def fetch(self, rec: WeightVersion) -> Payload:
        from rftbus.ground.weights.store import load_weights

        return load_weights(rec.uri, rec.sha256)

    def refusal(self, rec: WeightVersion, look: bool = True) -> str | None:
        want = version_uri(self.base, rec.model, rec.version)
        if rec.uri != want:
            return f"uri {rec.uri[:200]!r} is not the weight store's for v{rec.version} ({want})"
        if not look:
            return None
        try:
            fs, path = fsspec.core.url_to_fs(rec.uri)
            info = fs.info(path)
        except (OSError, ValueError) as e:
            return f"no file at {rec.uri} ({type(e).__name__})"
        mode = info.get("mode")
        if info.get("type") != "file" or (mode is not None and not stat.S_ISREG(mode)):
            return f"{rec.uri} is not a regular file"
        if info.get("size") != rec.bytes:
            return f"{rec.uri} is {info.get('size')} bytes, the record says {rec.bytes}"
        return None

    def versions(self, model: str) -> list[int]:
        return self.store.versions(model)

    def gc(self, model: str, keep: int, protect: set[int] | frozenset[int] = frozenset()) -> list[int]:
        return self.store.gc(model, keep, protect)
