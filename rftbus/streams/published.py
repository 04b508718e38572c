"""What the streams publish for readers outside the worker: the live groups held for their grades right now.

The run's books balance raw records against outputs, and a live group still waiting has no output yet. They read it
here, from the live table's changelog headers (`rftbus-held`: the raw record of a waiting group; a change without it
is a release or a delete), not from the table's own encoding, and as the streams would recover the table: a change
whose input the worker will read again is not part of it (rftbus/streams/state.py).
"""

from __future__ import annotations

from rftbus.ground.config import Config
from rftbus.ground.kafka import registry
from rftbus.ground.kafka.clients import make_admin
from rftbus.ground.kafka.read import read_to_end
from rftbus.streams.headers import H_HELD, H_INPUT, header
from rftbus.streams.state import ReadAgain, ReadFromCache, replayed


def held_groups(cfg: Config, timeout_s: float = 60.0) -> set[str]:
    """The raw records (`topic/partition/offset`) of the live groups held now."""
    name = registry.LIVE_CHANGELOG.name(cfg)
    if name not in make_admin(cfg).list_topics(timeout=10).topics:
        return set()
    read_from = ReadFromCache(ReadAgain(cfg, cfg.streams.app_id))
    last: dict[bytes, bytes | None] = {}  # group id -> its raw record while it waits, else None
    try:
        for msg in read_to_end(cfg, name, timeout_s=timeout_s):
            headers = msg.headers()
            pos = header(headers, H_INPUT)
            if pos is not None and replayed(pos, read_from):
                continue
            last[msg.key() or b""] = header(headers, H_HELD)
    finally:
        read_from.close()
    return {src.decode() for src in last.values() if src}
