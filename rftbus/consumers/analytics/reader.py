"""Opening the analytics data for reading, wherever it is and whoever holds it.

A server: connect directly, read-only (its own process is the engine's boundary). A chDB folder: the sandboxed
reader (jail.py), which opens the folder read-only in a process that can reach nothing else, whether or not a
sink holds it. Every read goes this way: user SQL, the studio's pages, reports, counts.
"""

from __future__ import annotations

from rftbus.ground.config import Config

from .backends import Backend, chdb_path, is_embedded, open_backend


def open_reader(cfg: Config) -> Backend:
    if not is_embedded(cfg):
        return open_backend(cfg, writable=False)
    from .jail import JailedChdb

    return JailedChdb(chdb_path(cfg), cfg.analytics.database, cfg.analytics)
