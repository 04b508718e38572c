"""Forged weight records on the real weights topic (issue #42), read by the one follower every process uses: with
prefetch (explorers, serve, the run's evaluator) and without (the streams' staleness rule). A record is believed
only if its uri is the store's for its version, its file is there with its size, and it is not far ahead; a
refused one never becomes anyone's latest, and what it points at is never fetched."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager

from conftest import make_config
from explorer_kafka import fresh_config
from probe_server import probe_server
from waiting import until

from rftbus.ground.kafka.clients import make_producer
from rftbus.ground.models.loading import load_policy, load_tokenizer
from rftbus.ground.schemas import WeightVersion, make_codec
from rftbus.ground.weights import WeightStore
from rftbus.ground.weights.store_transport import store_url, version_uri
from rftbus.ground.weights.follower import WeightFollower, latest_published

ENC = make_codec(None)


@contextmanager
def _stopping(*followers: WeightFollower) -> Iterator[None]:
    try:
        yield
    finally:
        for f in followers:
            f.stop()


def test_forged_weight_records_are_refused_and_followers_keep_their_version(broker, tmp_path):
    cfg = fresh_config(make_config, tmp_path, broker)
    store, model = WeightStore(store_url(cfg)), cfg.model.name
    state = load_policy(cfg.model, load_tokenizer(cfg.model)).state_dict()
    p = make_producer(cfg)

    def announce(version, uri, sha, size):
        rec = WeightVersion(model=model, version=version, step=version, uri=uri, sha256=sha, bytes=size)
        p.produce(cfg.topics.weights.name, key=model, value=ENC.encode(rec, None))
        p.flush(10)

    v1 = store.save(model, 1, {k: v + 0.01 for k, v in state.items()})
    announce(1, v1.uri, v1.sha256, v1.bytes)
    serving, streams = [], []
    served = WeightFollower(cfg, report=serving.append).start()
    staleness = WeightFollower(cfg, report=streams.append, prefetch=False).start()
    with probe_server() as (port, hits), _stopping(served, staleness):
        until(lambda: served.version == 1 and staleness.version == 1 and served.take_ready(0) is not None,
              "v1 admitted and fetched", timeout=60)
        data = open(v1.uri.removeprefix("file://"), "rb").read()
        nan = store.save(model, 3, {k: (v * float("nan") if v.is_floating_point() else v) for k, v in state.items()})
        fifo = store.uri(model, 4).removeprefix("file://")
        os.mkfifo(fifo)
        forged = [
            (2, f"http://127.0.0.1:{port}/w.safetensors", v1.sha256, v1.bytes),  # right sha, elsewhere
            (2, "file:///etc/passwd", hashlib.sha256(open("/etc/passwd", "rb").read()).hexdigest(), 0),
            (10**6, version_uri(store_url(cfg), model, 10**6), v1.sha256, v1.bytes),  # far ahead, no such file
            (2 * 10**12, version_uri(store_url(cfg), model, 2 * 10**12), v1.sha256, v1.bytes),
            (3, nan.uri, nan.sha256, nan.bytes),  # in the store, the right hash, NaN inside
            (4, "file://" + fifo, v1.sha256, v1.bytes),  # a FIFO: opening it would block the follower
        ]
        for version, uri, sha, size in forged:
            announce(version, uri, sha, size)
        v5 = store.save(model, 5, {k: v + 0.02 for k, v in state.items()})
        announce(5, v5.uri, v5.sha256, v5.bytes)
        until(lambda: served.version == 5 and staleness.version == 5, "the trainer's next version admitted", timeout=60)
        until(lambda: served.take_ready(1) is not None, "v5 fetched", timeout=60)
        assert {2, 10**6, 2 * 10**12, 4} <= set(served.refused) and 3 in served.refused, served.refused
        assert "non-finite" in served.refused[3] and "not the weight store's" in served.refused[2]
        assert "trainer.max_version_jump" in served.refused[2 * 10**12] or "no file" in served.refused[2 * 10**12]
        assert {2, 10**6, 2 * 10**12, 4} <= set(staleness.refused)  # the streams' version never went past 5
        assert hits == [] and data == open(v1.uri.removeprefix("file://"), "rb").read()
        assert any("refused" in m for m in serving) and any("refused" in m for m in streams)
        assert latest_published(cfg).version == 5  # the trainer's own question after a crash
