"""Which weights an eval-only run loads: the newest published version (verified by its sha256),
else the newest file in the store, else version 0 from the seed."""

from __future__ import annotations

from rftbus.config import Config
from rftbus.errors import RftbusError


def newest_weights(cfg: Config, model) -> tuple[int, str]:
    from safetensors.torch import load_file

    from rftbus.kafka.clients import check_reachable
    from rftbus.weights import WeightStore, load_weights
    from rftbus.weights.follower import latest_published

    try:
        check_reachable(cfg, timeout=3)
        rec = latest_published(cfg)
    except RftbusError:  # no broker: fall back to the store on disk
        rec = None
    if rec is not None:
        model.load_state_dict(load_weights(rec.uri, rec.sha256))
        return rec.version, rec.uri
    store = WeightStore(cfg.trainer.store_url or str(cfg.state_dir / "weights"))
    versions = store.versions(cfg.model.name)
    if versions:
        uri = store.uri(cfg.model.name, versions[-1])
        model.load_state_dict(load_file(uri.removeprefix("file://")) if store.local else {})
        return versions[-1], uri + " (unverified: no broker)"
    return 0, "seed"
