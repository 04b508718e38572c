"""The built-in weights transport: safetensors files in the weight store (`trainer.store_url`, a folder or any
fsspec URL), one per version at `<store>/<model>/v<version>.safetensors`, sha256 in the record.

A record is believed only if its uri is exactly where the trainer writes that version (so a forged record needs a
file the trainer wrote under that name, and never points a follower at `http://` or `file:///etc`) and, when
looked at, the file is there, a regular file of the recorded size (a FIFO or a huge file is never opened). The
store itself (torch, safetensors) loads on first use, so a process that only checks records imports no torch."""

from __future__ import annotations

import os
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


def is_local(fs: Any) -> bool:
    """Is this fsspec filesystem the local disk?"""
    return fs.protocol in ("file", ("file", "local")) or "file" in fs.protocol


def store_uri(base_url: str, relative: str) -> str:
    """The URI of `relative` under the store at `base_url` (the one spelling of a store's files: writers put it in
    their records, readers compare with it): `file://` plus the path on local disk, the fsspec URL otherwise."""
    fs, root = fsspec.core.url_to_fs(str(base_url).rstrip("/"))
    path = f"{root}/{relative}"
    return f"file://{path}" if is_local(fs) else fs.unstrip_protocol(path)


def version_uri(base_url: str, model: str, version: int) -> str:
    """Where the store at `base_url` keeps `version` of `model` (the trainer writes this URI into the record,
    followers compare with it)."""
    return store_uri(base_url, f"{model}/v{version}.safetensors")


def file_refusal(uri: str, size: int) -> str | None:
    """Why the file a record points at is not to be opened (missing, not a regular file, or not the recorded
    size: a FIFO or a huge file is never read), or None."""
    try:
        fs, path = fsspec.core.url_to_fs(uri)
        info = fs.info(path)
    except (OSError, ValueError) as e:
        return f"no file at {uri} ({type(e).__name__})"
    mode = info.get("mode")
    if info.get("type") != "file" or (mode is not None and not stat.S_ISREG(mode)):
        return f"{uri} is not a regular file"
    if info.get("size") != size:
        return f"{uri} is {info.get('size')} bytes, the record says {size}"
    return None


def write_whole(uri: str, data: bytes) -> None:
    """Write `data` at `uri` whole or not at all: on local disk a temporary file, fsync'd and renamed into place
    (and the folder fsync'd); elsewhere one write, which an object store makes visible only when complete."""
    fs, path = fsspec.core.url_to_fs(uri)
    folder = path.rsplit("/", 1)[0]
    if not is_local(fs):
        fs.makedirs(folder, exist_ok=True)
        with fs.open(path, "wb") as f:
            f.write(data)
        return
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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
        return file_refusal(rec.uri, rec.bytes)

    def versions(self, model: str) -> list[int]:
        return self.store.versions(model)

    def gc(self, model: str, keep: int, protect: set[int] | frozenset[int] = frozenset()) -> list[int]:
        return self.store.gc(model, keep, protect)
