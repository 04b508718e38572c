"""Faust's producer writes idempotently (acks=all, enable_idempotence) under every processing guarantee.

faust-streaming 0.15.3 turns aiokafka's idempotence on only inside exactly_once (`Producer._settings_extra` in
faust/transport/drivers/aiokafka.py returns it only when `app.in_transaction`); at_least_once, which rftbus
runs, leaves it off, so a batch in flight when the *broker* is killed -9 is appended twice by aiokafka's retry
(a CI-budget chaos run saw two rejections written twice at a broker restart; the worker's recovery dedupe
cannot see it because the worker did not restart). aiokafka supports idempotence without transactions: the
broker drops a retried batch by its producer id and sequence number. No upstream issue asks for it (the
nearest, faust-streaming/faust#177, is about sends outside a transaction). Pinned with faust-streaming 0.15.3
(streams/fastpath.py's `require_faust`); tests/unit/test_idempotent_producer.py fails without `install`.
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers.aiokafka import Producer

_original = Producer._settings_extra


def _settings_extra(self: Producer) -> Any:
    return {**_original(self), "acks": "all", "enable_idempotence": True}


def install() -> None:
    from rftbus.streams.fastpath import require_faust

    require_faust()
    Producer._settings_extra = _settings_extra  # type: ignore[method-assign]  # the patch


def uninstall() -> None:
    Producer._settings_extra = _original  # type: ignore[method-assign]  # the patch, by design
