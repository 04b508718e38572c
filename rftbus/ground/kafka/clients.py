"""Building confluent-kafka clients from the config.

User settings (kafka.client + the per-role map) are applied last, as-is, so anything librdkafka
supports (SASL_SSL, SCRAM, mTLS, ...) works. Producers default to idempotent, acks=all: nothing is
acknowledged to a caller before the broker has it.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError

# librdkafka logs every refused connection; rftbus reports reachability itself, so keep it out of the console.
_quiet = logging.getLogger("rftbus.librdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


class BrokerUnreachable(RftbusError):
    """The configured bootstrap servers did not answer."""


def _base(cfg: Config) -> dict[str, Any]:
    ms = int(cfg.request_timeout_s * 1000)
    return {"bootstrap.servers": cfg.bootstrap_servers, "socket.timeout.ms": ms, **cfg.kafka.client}


def producer_conf(cfg: Config, **extra: Any) -> dict[str, Any]:
    conf = {
        **_base(cfg),
        "enable.idempotence": True,
        "acks": "all",
        # Java's and aiokafka's partitioner (librdkafka's default is CRC32): a key lands on one partition
        # whichever client wrote it, which the streams' raw dedupe relies on (rftbus/streams/verify.placement)
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "request.timeout.ms": int(cfg.request_timeout_s * 1000),  # a frozen leader: ask the new one sooner
        "compression.type": "lz4",
        "message.max.bytes": 16 * 1024 * 1024,
    }
    conf.update(extra)
    conf.update(cfg.kafka.producer)
    return conf


def consumer_conf(cfg: Config, group_id: str, **extra: Any) -> dict[str, Any]:
    conf = {
        **_base(cfg),
        "group.id": group_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "fetch.message.max.bytes": 16 * 1024 * 1024,
    }
    conf.update(extra)
    conf.update(cfg.kafka.consumer)
    return conf


def admin_conf(cfg: Config) -> dict[str, Any]:
    return {**_base(cfg), **cfg.kafka.admin}


def make_producer(cfg: Config, **extra: Any) -> Producer:
    return Producer(producer_conf(cfg, **extra), logger=_quiet)


def make_consumer(cfg: Config, group_id: str, **extra: Any) -> Consumer:
    return Consumer(consumer_conf(cfg, group_id, **extra), logger=_quiet)


def make_admin(cfg: Config) -> AdminClient:
    return AdminClient(admin_conf(cfg), logger=_quiet)


def check_reachable(cfg: Config, timeout: float = 5.0, wait: bool = True) -> AdminClient:
    """An AdminClient whose cluster answered a metadata request, or BrokerUnreachable. With `kafka.wait_s`
    (and `wait`) it keeps asking that long first: `rftbus run` starts its children beside the broker, so
    they import and build their models while the JVM boots instead of after it."""
    deadline = time.monotonic() + (cfg.kafka.wait_s if wait else 0.0)
    while True:
        try:
            return _answered(cfg, timeout if not wait or not cfg.kafka.wait_s
                             else max(0.5, min(timeout, deadline - time.monotonic())))
        except BrokerUnreachable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.25)


def _listening(bootstrap: str, timeout: float) -> bool:
    """Whether any bootstrap address accepts a TCP connection. librdkafka's metadata request waits out its
    whole timeout when nothing listens (3 s at every `rftbus run` start, before the embedded broker was
    even launched); a refused connect answers at once. An address it cannot parse counts as listening."""
    for addr in filter(None, (a.strip() for a in bootstrap.split(","))):
        host, _, port = addr.split("://")[-1].rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=timeout):
                return True
        except ValueError:
            return True
        except OSError:
            continue
    return False


def _answered(cfg: Config, timeout: float) -> AdminClient:
    if not _listening(cfg.bootstrap_servers, min(timeout, 1.0)):
        raise BrokerUnreachable(
            f"Kafka at {cfg.bootstrap_servers} is not reachable (nothing accepts connections there); "
            "start the embedded broker with `rftbus up` or set kafka.bootstrap_servers")
    admin = make_admin(cfg)
    try:
        md = admin.list_topics(timeout=timeout)
    except KafkaException as e:
        raise BrokerUnreachable(
            f"Kafka at {cfg.bootstrap_servers} is not reachable ({e.args[0].str() if e.args else e}); "
            "start the embedded broker with `rftbus up` or set kafka.bootstrap_servers"
        ) from None
    if not md.brokers:
        raise BrokerUnreachable(f"Kafka at {cfg.bootstrap_servers} answered but lists no brokers")
    return admin
