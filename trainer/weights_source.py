"""Which weights an eval-only run loads: the newest published version (verified by its sha256),
else the newest file in the store, else version 0 from the seed."""

from __future__ import annotations

from rftbus.config import Config
from rftbus.errors import RftbusError


def newest_weights(cfg: Config, model) -> tuple[int, str]:
    from safetensors.torch import load_file

    from rftbus.kafka.clients import check_reachable, make_consumer
    from rftbus.schemas import WeightVersion, make_codec
    from rftbus.trainer.publish import latest_published
    from rftbus.weights import WeightStore, load_weights

    try:
        check_reachable(cfg, timeout=3)
        probe = make_consumer(cfg, f"{cfg.trainer.group_id}-eval-probe")
        try:
            rec = latest_published(probe, cfg.topics.weights.name, cfg.model.name,
                                   make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer(WeightVersion))
        finally:
            probe.close()
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
