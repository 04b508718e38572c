"""rftbus Config -> faust.App settings, including what of `kafka.client` aiokafka can take.

The worker's aiokafka clients wait for a broker's answer as long as every other client: `kafka.request_timeout_s`
(Faust's own 90 s consumer and 1,200 s producer let a frozen node stall the worker for the whole freeze), set on
the clients by transport.py (`client_timeout`) because Faust's one request-timeout setting per client also
bounds other things there: the producer's batches keep Faust's 1,200 s to wait for a leader, and Faust's check
that the session is no longer than the request timeout is met. A JoinGroup waits longer (`join_timeout_s`), as
the coordinator may hold it for the rebalance timeout.

librdkafka settings are translated where aiokafka has the same thing (security protocol, SASL
PLAIN/SCRAM/GSSAPI credentials, TLS CA / client certificate / key); everything else is listed in
`untranslated` and logged at start, so a secured cluster that needs more fails visibly, not silently.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError

TRANSLATED = {"security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
              "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
              "sasl.kerberos.service.name", "sasl.kerberos.domain.name", "enable.ssl.certificate.verification",
              "ssl.endpoint.identification.algorithm"}
# Settings that do not change how aiokafka connects, so leaving them out loses nothing.
HARMLESS = {"client.id", "enable.idempotence", "acks", "linger.ms", "compression.type", "message.max.bytes",
            "fetch.message.max.bytes", "isolation.level", "auto.offset.reset", "enable.auto.commit"}


class StreamsConfigError(RftbusError):
    """The Kafka client settings cannot be expressed for Faust/aiokafka."""


@dataclass
class FaustSettings:
    kwargs: dict[str, Any]
    untranslated: list[str] = field(default_factory=list)


def _ssl_context(client: dict[str, Any]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=client.get("ssl.ca.location"))
    if client.get("ssl.certificate.location"):
        ctx.load_cert_chain(client["ssl.certificate.location"], client.get("ssl.key.location"),
                            client.get("ssl.key.password"))
    if str(client.get("enable.ssl.certificate.verification", "true")).lower() == "false":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif str(client.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        ctx.check_hostname = False
    return ctx


def credentials(client: dict[str, Any]) -> Any:
    import faust  # heavy; only when a worker starts

    proto = str(client.get("security.protocol", "PLAINTEXT")).upper()
    if proto == "PLAINTEXT":
        return None
    ctx = _ssl_context(client) if proto in ("SSL", "SASL_SSL") else None
    if proto == "SSL":
        return faust.SSLCredentials(ctx)
    if proto not in ("SASL_PLAINTEXT", "SASL_SSL"):
        raise StreamsConfigError(f"kafka.client security.protocol={proto!r} is not supported by the streams "
                                 "worker (aiokafka): use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    mech = str(client.get("sasl.mechanism", client.get("sasl.mechanisms", "PLAIN"))).upper()
    if mech == "GSSAPI":
        return faust.GSSAPICredentials(
            kerberos_service_name=str(client.get("sasl.kerberos.service.name", "kafka")),
            kerberos_domain_name=client.get("sasl.kerberos.domain.name"), ssl_context=ctx, mechanism=mech)
    if mech not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        raise StreamsConfigError(f"kafka.client sasl.mechanism={mech!r} is not translated for the streams "
                                 "worker (aiokafka supports PLAIN, SCRAM-SHA-256/512, GSSAPI here)")
    return faust.SASLCredentials(username=client.get("sasl.username"), password=client.get("sasl.password"),
                                 ssl_context=ctx, mechanism=mech)


def faust_settings(cfg: Config, datadir: str) -> FaustSettings:
    client = {**cfg.kafka.client}
    sc = cfg.streams
    brokers = ";".join(f"kafka://{h.strip()}" for h in cfg.bootstrap_servers.split(",") if h.strip())
    kwargs: dict[str, Any] = dict(
        broker=brokers,
        broker_credentials=credentials(client),
        key_serializer="raw",
        value_serializer="raw",
        store=f"{sc.table_store}://",  # rocksdb: faust's store over rocksdict (pinned in pyproject)
        datadir=datadir,
        processing_guarantee=sc.processing_guarantee,
        broker_commit_interval=sc.commit_interval_s,
        producer_linger_ms=sc.linger_ms,
        broker_session_timeout=sc.session_timeout_s,
        broker_heartbeat_interval=min(3.0, sc.session_timeout_s / 4),
        broker_rebalance_timeout=max(10.0, sc.session_timeout_s * 2),
        # (Faust refuses a session timeout over the request timeout; the clients' network wait is set apart,
        # transport.py `client_timeout`. Not the producer's: aiokafka's produce request timeout is also how long a
        # batch may wait for a leader, and 10 s there lost a group while a single broker restarted)
        broker_request_timeout=max(cfg.request_timeout_s, sc.session_timeout_s),
        # ~6 KB experiences: aiokafka's 16 KB default batch holds two, and one request is in flight per broker
        producer_max_batch_size=1024 * 1024,
        producer_max_request_size=max(16 * 1024 * 1024, sc.max_message_bytes + 65536),
        consumer_max_fetch_size=16 * 1024 * 1024,
        producer_acks=-1,
        web_enabled=False,
        autodiscover=False,
        topic_allow_declare=False,  # rftbus declares its topics itself (right partitions, retention)
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        table_cleanup_interval=3600.0,
        # No standby tables: a standby applies a change as soon as it is in the changelog, before its input is
        # committed, and a standby promoted at a kill -9 would start ahead of the inputs it replays (the rule in
        # rftbus/streams/state.py is for recovery from the changelog). A worker taking over reads the changelog instead.
        table_standby_replicas=0,
        stream_wait_empty=False,
        # Faust's repaired Cython fast paths (opt-in in 0.15.3): a stream takes an event already in its
        # buffer without awaiting the channel. Measured: ~10 % less worker CPU per experience (6 of 6
        # back-to-back pairs). The conductor's other repaired path (decode once for several channels of
        # one topic) does not apply: every topic here has one subscriber.
        cython_optimizations=True,
    )
    untranslated = sorted(k for k in client if k not in TRANSLATED | HARMLESS)
    return FaustSettings(kwargs, untranslated)


def join_timeout_s(kwargs: dict[str, Any]) -> float:
    """How long the worker's JoinGroup may wait (faust_patches.py, `join_group_timeout`): the rebalance timeout
    and 5 s, or the request timeout if that is longer (Kafka's Java client, KAFKA-5570)."""
    from rftbus.streams.faust_patches import JOIN_GROUP_LAPSE_S

    return max(kwargs["broker_request_timeout"], kwargs["broker_rebalance_timeout"] + JOIN_GROUP_LAPSE_S)
