"""Opening the analytics data for reading, wherever it is and whoever holds it.

A server: connect directly (any number of readers). A chDB folder: if a live sink holds it, ask the
sink (its status file advertises a loopback query endpoint); otherwise open the folder read-only
ourselves. Both can race with a sink starting or stopping, so this retries for `lock_wait_s`.
"""

from __future__ import annotations

import time

import psutil

from rftbus.config import Config
from rftbus.status import read_statuses

from .backends import Backend, FolderLocked, is_embedded, open_backend, where

ROLE = "analytics"


def live_sinks(cfg: Config) -> list[dict]:
    """Status snapshots of sink processes that are alive and write where this config reads."""
    out = []
    for st in read_statuses(cfg.state_dir, ROLE):
        if st.get("where") == where(cfg) and st.get("query_url") and st.get("state") not in ("stopped", "failed") \
                and psutil.pid_exists(int(st.get("pid", -1))):
            out.append(st)
    return out


def open_reader(cfg: Config) -> Backend:
    if not is_embedded(cfg):
        return open_backend(cfg, writable=False)
    import httpx

    from .backends.remote import SinkBackend

    deadline = time.monotonic() + cfg.analytics.lock_wait_s
    while True:
        for st in live_sinks(cfg):
            try:
                return SinkBackend(st["query_url"], cfg.analytics.database)
            except httpx.HTTPError:
                continue  # stopping, or not serving yet: try the folder, then again
        try:
            return open_backend(cfg, writable=False)
        except FolderLocked:
            if time.monotonic() > deadline:
                raise FolderLocked(f"{where(cfg)} is held by another process that does not serve queries "
                                   f"(waited {cfg.analytics.lock_wait_s:g} s); stop it or query through a running sink") from None
        time.sleep(0.3)
