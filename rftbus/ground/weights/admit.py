"""Whether a WeightVersion record on the weights topic is believed: checked before anything is fetched.

Anyone who can write the weights topic could otherwise point every follower at any URL (`http://`, `file:///etc`),
or publish version 10**6 and become every process's latest: streams then rejected every group as stale and
serving pinned itself on bad weights (issue #42). A record is admitted only if
- the weights transport says it points where the trainer puts that version, and the bytes are there
  (`WeightTransport.refusal`; the store's: the uri is `<store>/<model>/v<version>.safetensors`, a regular file of
  the recorded `bytes`);
- its version and size are not negative, and it is not far ahead of the newest admitted version
  (`trainer.max_version_jump`): the trainer publishes one version per step, so a jump of thousands is not the
  trainer's.
A refused record is reported and counted, and the follower keeps the version it had. Topic ACLs (docs/DEPLOY.md)
keep strangers off the topic; this keeps a mistake or a stranger who got on it from steering the run.
"""

from __future__ import annotations

from rftbus.ground.config import Config
from rftbus.ground.schemas import WeightVersion
from rftbus.ground.weights.transport import WeightTransport, make_transport


def refusal(rec: WeightVersion, cfg: Config, newest: int | None, look: bool = True,
            transport: WeightTransport | None = None) -> str | None:
    """Why `rec` is not believed, or None. `newest`: the newest version admitted so far (None before any);
    `look`: also check that the bytes are there; `transport`: the run's (made from `cfg` when not given)."""
    if rec.version < 0 or rec.bytes < 0:
        return "a negative version or size"
    jump = cfg.trainer.max_version_jump
    if newest is not None and rec.version > newest + jump:
        return f"v{rec.version} is more than trainer.max_version_jump ({jump}) ahead of v{newest}"
    return (transport or make_transport(cfg)).refusal(rec, look)
