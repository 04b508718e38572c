"""A weight version a follower believes (rftbus/ground/weights/admit.py), for tests that only need the version number on
the topic: a file at the store's uri for that version, and a record naming it with its size and hash."""

from __future__ import annotations

import hashlib
from pathlib import Path

from rftbus.ground.config import Config
from rftbus.ground.schemas import WeightVersion
from rftbus.ground.weights.store_transport import store_url, version_uri


def placeholder_version(cfg: Config, version: int, model: str | None = None) -> WeightVersion:
    """A record the streams' follower admits (it never loads the file: only its place and size are checked)."""
    model = model or cfg.model.name
    uri = version_uri(store_url(cfg), model, version)
    path = Path(uri.removeprefix("file://"))
    path.parent.mkdir(parents=True, exist_ok=True)
    data = f"placeholder v{version}".encode()
    path.write_bytes(data)
    return WeightVersion(model=model, version=version, step=version, uri=uri, sha256=hashlib.sha256(data).hexdigest(),
                         bytes=len(data))
