"""Whether a WeightVersion record on the weights topic is believed: checked before anything is fetched.

Anyone who can write the weights topic could otherwise point every follower at any URL (`http://`, `file:///etc`),
or publish version 10**6 and become every process's latest: streams then rejected every group as stale and
serving pinned itself on bad weights (issue #42). A record is admitted only if
- its `uri` is exactly where the trainer writes that version: `<store>/<model>/v<version>.safetensors` in the
  configured weight store (so a forged version needs a file the trainer wrote under that name);
- that file is there, a regular file of the recorded `bytes` (a FIFO or a huge file is never opened);
- it is not far ahead of the newest admitted version (`trainer.max_version_jump`): the trainer publishes one
  version per step, so a jump of thousands is not the trainer's.
A refused record is reported and counted, and the follower keeps the version it had. Topic ACLs (docs/DEPLOY.md)
keep strangers off the topic; this keeps a mistake or a stranger who got on it from steering the run.
"""

from __future__ import annotations

import stat

import fsspec

from rftbus.ground.config import Config
from rftbus.ground.schemas import WeightVersion


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


def refusal(rec: WeightVersion, cfg: Config, newest: int | None, look: bool = True) -> str | None:
    """Why `rec` is not believed, or None. `newest`: the newest version admitted so far (None before any);
    `look`: also check that the file is there with the recorded size."""
    want = version_uri(store_url(cfg), rec.model, rec.version)
    if rec.uri != want:
        return f"uri {rec.uri[:200]!r} is not the weight store's for v{rec.version} ({want})"
    if rec.version < 0 or rec.bytes < 0:
        return "a negative version or size"
    jump = cfg.trainer.max_version_jump
    if newest is not None and rec.version > newest + jump:
        return f"v{rec.version} is more than trainer.max_version_jump ({jump}) ahead of v{newest}"
    if look:
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
