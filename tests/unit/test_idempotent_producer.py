"""Faust's producer is idempotent under at_least_once (streams/idempotent.py): without the patch faust-streaming
0.15.3 builds aiokafka producers with idempotence off outside exactly_once, and a broker kill -9 can append a
retried batch twice. Checked on the producer the worker's own Faust settings build."""

from __future__ import annotations

import asyncio

import faust

from rftbus.config import load_config
from rftbus.streams import idempotent
from rftbus.streams.faust_conf import faust_settings


def _producer_of(tmp_path):
    cfg = load_config(overrides={"state_dir": str(tmp_path)}, environ={})
    settings = faust_settings(cfg, str(tmp_path / "faust"))
    kwargs = dict(settings.kwargs)
    app = faust.App(kwargs.pop("id", "rftbus-test"), **kwargs)

    async def build():  # aiokafka builds its producer inside a running loop
        return app.producer._new_producer()

    return asyncio.run(build())


def test_the_streams_producer_is_idempotent_only_with_the_patch(tmp_path):
    idempotent.uninstall()
    try:
        plain = _producer_of(tmp_path / "a")
        assert plain._txn_manager is None, "faust-streaming now enables idempotence itself: drop the patch"
        idempotent.install()
        patched = _producer_of(tmp_path / "b")
        assert patched._txn_manager is not None  # aiokafka's idempotence: producer id + sequence numbers
    finally:
        idempotent.install()
