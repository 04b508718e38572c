"""A streams worker that kills itself with SIGKILL at its n-th event (#57 item 5's proof by exhaustion).

`python -m rftbus.apps.chaos.kill_worker --config C --worker-id W --kill-at N [--mode landed|now] [--events F]` runs the
real worker (`rftbus.streams.worker.run`) with four kinds of event counted, in the order they happen:

- read: a record handed to a stage (ingest, join, feedback fan-out), before it is handled;
- table: a change of a table (`live`, `pending`), after it is made;
- send: a record handed to the producer (outputs, internal records, changelogs), after the call;
- commit: input offsets committed, after the broker took them.

At event N it dies. `now`: at once (what was buffered is lost, the usual crash). `landed`: after the producer
flushed what was handed to it so far (the hard case: the outputs and the changelog are in the log, the inputs are
not committed). Each event is a line of the events file (for the sweep's range and a failure's report). The
counting is done by wrapping classes in this process only: the runtime knows nothing of it.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

EVENTS = ("read", "table", "send", "commit")


class KillSwitch:
    def __init__(self, at: int, mode: str, events: Path | None):
        self.at, self.mode, self.n, self.dying = at, mode, 0, False
        self.log = events.open("a", buffering=1) if events is not None else None
        self.producer: Any = None  # Faust's producer, for `landed`

    def event(self, kind: str, what: str) -> None:
        if self.dying:
            return
        self.n += 1
        if self.log is not None:
            self.log.write(json.dumps({"i": self.n, "kind": kind, "what": what}) + "\n")
        if self.n != self.at:
            return
        self.dying = True
        if self.mode == "now" or self.producer is None:
            os.kill(os.getpid(), signal.SIGKILL)
        asyncio.ensure_future(self._die_landed())

    async def _die_landed(self) -> None:
        try:
            await asyncio.wait_for(self.producer.flush(), 30)
        finally:
            os.kill(os.getpid(), signal.SIGKILL)


def install(switch: KillSwitch) -> None:
    """Wrap the stages' handlers, Faust's table hooks, the producer's send and the consumer's commit."""
    from faust.tables.table import Table
    from faust.transport.drivers import aiokafka as driver

    from rftbus.streams.ingest import Ingest
    from rftbus.streams.join import FeedbackFanout, Join

    def reads(cls: type, stage: str) -> None:
        orig = cls.handle  # type: ignore[attr-defined]

        @functools.wraps(orig)
        async def handle(self: Any, event: Any) -> None:
            m = event.message
            switch.event("read", f"{stage} {m.topic}/{m.partition}/{m.offset}")
            await orig(self, event)
        cls.handle = handle  # type: ignore[attr-defined]

    reads(Ingest, "ingest")
    reads(Join, "join")
    reads(FeedbackFanout, "feedback")

    for name in ("on_key_set", "on_key_del"):
        orig_hook = getattr(Table, name)

        def hook(self: Any, key: Any, *rest: Any, _orig: Any = orig_hook, _name: str = name) -> None:
            _orig(self, key, *rest)
            switch.event("table", f"{self.name} {_name[7:]} {key!r}"[:200])
        setattr(Table, name, hook)

    orig_send = driver.Producer.send

    @functools.wraps(orig_send)
    async def send(self: Any, topic: str, key: Any, value: Any, partition: Any, *a: Any, **kw: Any) -> Any:
        switch.producer = self
        fut = await orig_send(self, topic, key, value, partition, *a, **kw)
        switch.event("send", f"{topic}/{partition} {len(value or b'')} bytes")
        return fut
    driver.Producer.send = send  # type: ignore[method-assign]

    orig_commit = driver.AIOKafkaConsumerThread.commit

    @functools.wraps(orig_commit)
    async def commit(self: Any, offsets: Any) -> bool:
        ok = await orig_commit(self, offsets)
        if ok:
            switch.event("commit", ", ".join(f"{tp.topic}/{tp.partition}@{o}" for tp, o in sorted(offsets.items())))
        return ok
    driver.AIOKafkaConsumerThread.commit = commit  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rftbus.apps.chaos.kill_worker")
    ap.add_argument("--config", required=True, type=Path)
    ap.add_argument("--worker-id", required=True)
    ap.add_argument("--kill-at", type=int, default=0, help="the event to die at (0: never)")
    ap.add_argument("--mode", choices=("landed", "now"), default="landed")
    ap.add_argument("--events", type=Path, default=None)
    args = ap.parse_args(argv)

    from rftbus.ground.config import load_config
    from rftbus.streams.worker import run

    cfg = load_config(args.config)
    install(KillSwitch(args.kill_at, args.mode, args.events))
    return run(cfg, args.worker_id)


if __name__ == "__main__":
    sys.exit(main())
