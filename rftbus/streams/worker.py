"""Run one streams worker process: prepare topics, build the app, run Faust until SIGTERM/SIGINT.

More processes with the same app id share the partitions (Kafka consumer group rebalancing).
"""

from __future__ import annotations

import cProfile
import logging
import os
import time

from rftbus.ground.config import Config
from rftbus.streams.telemetry import StatusFile, worker_id
from rftbus.streams.topology import prepare

log = logging.getLogger("rftbus.streams")
PROFILE_ENV = "STREAMS_WORKER_PROFILE"  # a path: the worker writes cProfile stats there on a clean stop


def run(cfg: Config, wid: str | None = None, on_ready=None) -> int:
    wid = wid or worker_id(cfg)
    # At once, before the heavy imports, the topics and the Faust start (its first status comes from a timer, after
    # table recovery, which under load took over two minutes): whoever watches sees this process is up, starting.
    StatusFile(cfg, wid).write({"state": "starting", "started_at": time.time()})
    import faust  # noqa: F401  (heavy import only when a worker really starts)
    from faust import Worker

    from rftbus.streams.app import build
    from rftbus.streams.faust_patches import require_versions

    require_versions()  # before anything is built: a wrong faust-streaming or aiokafka is one clear line
    topo = prepare(cfg)
    sa = build(cfg, topo, wid)
    if sa.untranslated:
        log.warning("kafka.client settings not translated for the streams worker (aiokafka): %s",
                    ", ".join(sa.untranslated))
    sa.follower.start()
    sa.follower.caught_up.wait(15)
    if on_ready is not None:
        on_ready(sa)
    worker = Worker(sa.app, loglevel=cfg.streams.log_level, quiet=True, redirect_stdouts=False)
    profile_path = os.environ.get(PROFILE_ENV)
    profiler = cProfile.Profile() if profile_path else None
    try:
        if profiler is not None:
            profiler.enable()
        worker.execute_from_commandline()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    else:
        code = 0
    finally:
        if profiler is not None and profile_path:
            profiler.disable()
            profiler.dump_stats(profile_path)
        sa.follower.stop()
        sa.side_producer.flush(10)
    logging.getLogger("rftbus.streams").info("worker %s stopped", wid)
    return code
