"""The worker's tables on disk (`streams.table_store: rocksdb`, under <state_dir>/streams/<worker>) are kept only
across a clean stop.

Faust writes a table change to rocksdb at once and to the table's changelog topic asynchronously, and on start it
replays the changelog only from the offset rocksdb holds: after a kill -9 the local store can hold a change whose
changelog record never landed. So it did in a fresh-clone suite (stop 54, tests/system/test_live.py): a live group
released by the feedback TTL had its DONE marker in rocksdb, the kill lost the marker's changelog record and the
release's rejection, and the restarted worker, reading DONE, never released the group again: one experience lost.
Kafka Streams wipes its stores after an unclean stop under exactly-once for the same reason. Here: a marker file is
written when the worker stops cleanly and removed when it starts; a start without it removes the local tables, and
Faust rebuilds them from their changelogs (compacted: the groups waiting for feedback, the join index)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

log = logging.getLogger("rftbus.streams")

CLEAN = "clean-stop"


def open_local_state(datadir: Path) -> bool:
    """At the worker's start: True if the tables on disk are kept (the last stop was clean, or there are none);
    otherwise they are removed. The marker goes either way: a kill from now on leaves none."""
    marker = datadir / CLEAN
    clean = marker.exists()
    marker.unlink(missing_ok=True)
    tables = [d for d in datadir.glob("*/tables") if d.is_dir()]
    if clean or not tables:
        return True
    for d in tables:
        shutil.rmtree(d)
    log.warning("the last stop of this worker was not clean: its local tables (%s) are rebuilt from their changelogs",
                ", ".join(str(d) for d in tables))
    return False


def mark_clean(datadir: Path) -> None:
    """After Faust stopped cleanly (its changelog records flushed, rocksdb closed)."""
    (datadir / CLEAN).write_text("")
