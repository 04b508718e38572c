"""The weights transport is a seam (rftbus/ground/weights/transport.py): a transport named by
`trainer.weights_transport` carries the bytes, and the trainer's publisher and every follower go through it, on
the real broker. The test's transport keeps versions in this process's memory (what an in-cluster broadcast would
put on the wire); the record on the weights topic still announces each version, and a record that does not point
where the transport puts versions is refused with the transport's reason."""

from __future__ import annotations


import torch
from conftest import make_config
from explorer_kafka import fresh_config
from waiting import until

from rftbus.ground.kafka.clients import make_producer
from rftbus.ground.schemas import WeightVersion, make_codec
from rftbus.ground.weights.follower import WeightFollower, published
from rftbus.ground.weights.store import decode_payload, sha256_hex, state_bytes
from rftbus.ground.weights.transport import Placed, WeightTransport, make_transport
from rftbus.trainer.publish import WeightPublisher

CODEC = make_codec(None)
HELD: dict[str, bytes] = {}  # uri -> bytes: the "wire"


class MemoryTransport(WeightTransport):
    def publish(self, model, version, state_dict, metadata=None):
        data = state_bytes(state_dict, metadata)
        uri = f"mem://{model}/v{version}"
        HELD[uri] = data
        return Placed(uri, sha256_hex(data), len(data))

    def fetch(self, rec):
        return decode_payload(HELD[rec.uri], rec.uri)

    def refusal(self, rec, look=True):
        if rec.uri != f"mem://{rec.model}/v{rec.version}":
            return f"uri {rec.uri!r} is not where the memory transport puts v{rec.version}"
        return None if not look or rec.uri in HELD else f"nothing held at {rec.uri}"

    def versions(self, model):
        return sorted(int(u.rsplit("/v", 1)[1]) for u in HELD if u.startswith(f"mem://{model}/"))


def test_a_configured_transport_carries_the_versions_and_judges_the_records(broker, tmp_path):
    cfg = fresh_config(make_config, tmp_path, broker, **{"trainer.weights_transport": f"{__name__}:MemoryTransport"})
    transport = make_transport(cfg)
    assert isinstance(transport, MemoryTransport)
    producer = make_producer(cfg)
    pub = WeightPublisher(transport, cfg.model.name, producer, CODEC.serializer(WeightVersion),
                          cfg.topics.weights.name, eta=1, keep=4, grace_s=0.0)
    follower = WeightFollower(cfg).start()
    try:
        pub.publish({"w": torch.full((3,), 1.0)}, 1, 1)
        pub.wait(30)
        until(lambda: follower.version == 1, "v1 admitted", timeout=60)
        forged = WeightVersion(model=cfg.model.name, version=2, step=2, uri="file:///etc/passwd", sha256="0" * 64,
                               bytes=10)
        producer.produce(cfg.topics.weights.name, key=cfg.model.name, value=CODEC.encode(forged, None))
        producer.flush(30)
        until(lambda: 2 in follower.refused, "the forged v2 judged", timeout=60)
        pub.publish({"w": torch.full((3,), 3.0)}, 3, 3)
        pub.wait(30)
        got: list = []
        until(lambda: bool(got.append(follower.take_ready(1)) or got[-1]), "v3 fetched", timeout=60)
        ready = got[-1]
        rec, payload = ready
        assert rec.version == 3 and rec.uri == f"mem://{cfg.model.name}/v3"
        assert torch.equal(payload["w"], torch.full((3,), 3.0))
        assert "not where the memory transport puts v2" in follower.refused[2]
        assert torch.equal(follower.load(1)["w"], torch.full((3,), 1.0))  # any version it announced, by record
        on_topic = published(cfg)
        assert sorted(on_topic) == [1, 2, 3] and on_topic[3].sha256 == sha256_hex(HELD[on_topic[3].uri])
    finally:
        follower.stop()


def test_check_names_a_transport_that_cannot_be_made(tmp_path):
    from rftbus.apps.run.check import Report, check_weights_transport

    cfg = make_config(tmp_path, 9092, **{"trainer.weights_transport": "no_such_module:Transport"})
    rep = Report()
    check_weights_transport(cfg, rep)
    assert len(rep.errors) == 1 and rep.errors[0].startswith("trainer.weights_transport:")
    assert "no_such_module" in rep.errors[0]
