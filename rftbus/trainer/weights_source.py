"""Which weights an eval-only run loads: the newest published version (verified by its sha256),
else the newest file in the store, else version 0 from the seed."""

from __future__ import annotations

from typing import Any

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError


def newest_weights(cfg: Config, model: Any) -> tuple[Any, int, str]:
    """(the model holding those weights, version, where from); with LoRA versions the model returned is the
    PEFT wrapper around the one given."""
    from rftbus.ground.kafka.clients import check_reachable
    from rftbus.ground.models.lora import load_version
    from rftbus.ground.weights import decode_payload
    from rftbus.ground.weights.follower import latest_published
    from rftbus.ground.weights.store_transport import StoreTransport
    from rftbus.ground.weights.transport import make_transport

    try:
        check_reachable(cfg, timeout=3)
        rec = latest_published(cfg)
    except RftbusError:  # no broker: fall back to the store on disk
        rec = None
    transport = make_transport(cfg)
    if rec is not None:
        return load_version(model, transport.fetch(rec)), rec.version, rec.uri
    if not isinstance(transport, StoreTransport):  # only files outlive the broker
        return model, 0, "seed"
    store = transport.store
    versions = store.versions(cfg.model.name)
    if versions:
        uri = store.uri(cfg.model.name, versions[-1])
        with store.fs.open(uri.removeprefix("file://") if store.local else uri, "rb") as f:
            model = load_version(model, decode_payload(f.read(), uri))
        return model, versions[-1], uri + " (unverified: no broker)"
    return model, 0, "seed"
