"""The bus sections of the config: the topics, the Kafka clients, the embedded broker (and how soon its cluster
fences a silent node) and the schema registry (pydantic only: no heavy imports here)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

ClientValue = str | int | float | bool


# The embedded cluster's failure detection (rftbus/ground/broker/node_config.py): its controllers fence a node that sent
# no heartbeat for CLUSTER_FENCE_S (its partitions get new leaders), and a leader drops a silent follower from the ISR
# after CLUSTER_ISR_LAG_S (acks=all writes go on with the two left).
CLUSTER_FENCE_S = 4.0
CLUSTER_ISR_LAG_S = 5.0
DEFAULT_REQUEST_TIMEOUT_S = 10.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, validate_assignment=True)


class TopicSpec(_Strict):
    """One topic: its name, partitions, replication and retention."""

    name: str = Field(description="the topic's name in Kafka")
    partitions: int = Field(4, ge=1, description="partitions (the parallelism of its consumers)")
    replication_factor: int = Field(1, ge=1, description="copies of each partition (raised to the cluster's replicas)")
    retention_ms: int | None = Field(None, ge=-1, description="-1 keeps forever; None uses the broker default")
    cleanup_policy: Literal["delete", "compact", "compact,delete"] = Field("delete", description="delete: kept for "
                                                                           "retention_ms; compact: the newest record "
                                                                           "a key")
    config: dict[str, str] = Field(default_factory=dict, description="extra topic configs, passed as-is")

    def replicated(self, replicas: int) -> TopicSpec:
        """This topic on a cluster of `replicas` copies: at least that replication factor, and with three or
        more, `min.insync.replicas=2` (unless set), so an acks=all write survives the loss of any one node."""
        rf = max(self.replication_factor, replicas)
        conf = dict(self.config)
        if rf >= 3:
            conf.setdefault("min.insync.replicas", "2")
        return self.model_copy(update={"replication_factor": rf, "config": conf})

    def topic_config(self) -> dict[str, str]:
        """The topic-level configs rftbus declares (what `topics create` sets and compares)."""
        out: dict[str, str] = {"cleanup.policy": self.cleanup_policy}
        if self.retention_ms is not None:
            out["retention.ms"] = str(self.retention_ms)
        out.update(self.config)
        return out


WEEK_MS = 7 * 24 * 3600 * 1000


class TopicsConfig(_Strict):
    """The topics rftbus declares (names, partitions, retention): one per stage boundary."""

    tasks: TopicSpec = Field(TopicSpec(name="rft.tasks", partitions=4, retention_ms=-1),
                          description="tasks the explorers roll out (kept for good: the run's curriculum)")
    raw: TopicSpec = Field(TopicSpec(name="rft.experiences.raw", partitions=4, retention_ms=WEEK_MS),
                          description="experience groups as the explorers and serve produced them")
    curated: TopicSpec = Field(TopicSpec(name="rft.experiences.curated", partitions=4, retention_ms=WEEK_MS),
                          description="groups the streams verified, joined and scored: the trainer's normal lane")
    # The high-priority lane: streams route the experiences worth learning from first here, and the
    # trainer drains it before the normal curated lane.
    curated_priority: TopicSpec = Field(TopicSpec(name="rft.experiences.curated.priority", partitions=4, retention_ms=WEEK_MS),
                          description="the high-priority lane: groups worth learning from first (the trainer drains it first)")
    expert: TopicSpec = Field(TopicSpec(name="rft.experiences.expert", partitions=4, retention_ms=-1),
                          description="demonstrations (corrections, expert answers) for the mix and sft losses")
    rejected: TopicSpec = Field(TopicSpec(name="rft.experiences.rejected", partitions=4, retention_ms=WEEK_MS),
                          description="every group or record turned away, with its reason")
    feedback: TopicSpec = Field(TopicSpec(name="rft.feedback", partitions=4, retention_ms=-1),
                          description="grades, ratings, thumbs, corrections and preferences for served answers")
    weights: TopicSpec = Field(TopicSpec(name="rft.weights", partitions=1, cleanup_policy="compact"),
                          description="one record per published weight version (compacted: the newest a key)")
    metrics: TopicSpec = Field(TopicSpec(name="rft.metrics", partitions=1, retention_ms=WEEK_MS),
                          description="trainer steps, held-out evals and streams counters (the trackers read it)")
    # The gate's decisions (rftbus/consumers/gate/): one partition, in the order they were made, kept for good (every
    # served answer's version has the decision that let it serve)
    decisions: TopicSpec = Field(TopicSpec(name="rft.decisions", partitions=1, retention_ms=-1),
                          description="the promotion gate's decisions, in order, kept for good")

    spans: TopicSpec = Field(TopicSpec(name="rft.spans", partitions=4, retention_ms=WEEK_MS),
                          description="agents' OpenTelemetry spans as OTLP protobuf (the Collector's Kafka exporter "
                          "writes them, keyed by trace id; otel.enabled)")

    def all(self) -> dict[str, TopicSpec]:
        return {key: getattr(self, key) for key in type(self).model_fields}

    def by_name(self, name: str) -> tuple[str, TopicSpec] | None:
        for key, spec in self.all().items():
            if spec.name == name:
                return key, spec
        return None


class KafkaConfig(_Strict):
    """How every client reaches Kafka: the cluster's address and librdkafka settings."""

    bootstrap_servers: str | None = Field(
        None, description="host:port list; unset means the embedded broker's address"
    )
    replication_factor: int | None = Field(None, ge=1, description="replicas of every declared topic on this "
                                           "cluster (3: also min.insync.replicas 2); unset: each topic's own, or "
                                           "the embedded cluster's (broker.nodes)")
    wait_s: float = Field(0.0, ge=0, description="how long a command keeps asking an unreachable cluster before it "
                          "gives up (rftbus run's children: they load their models while the broker starts)")
    request_timeout_s: float | None = Field(None, ge=1, description="how long a client waits for a broker's answer "
                                            "before it asks the cluster again (librdkafka socket.timeout.ms and the "
                                            "producer's request.timeout.ms, 60 s and 30 s by default): a frozen node, "
                                            "whose connections stay open, costs this, then the new leader or "
                                            "coordinator answers. Unset: as long as the embedded cluster takes to "
                                            "fence a silent node (4 s, so a frozen node costs what a killed one "
                                            "does), else 10 s")
    client: dict[str, ClientValue] = Field(default_factory=dict, description="librdkafka settings for every client")
    producer: dict[str, ClientValue] = Field(default_factory=dict, description="librdkafka settings for producers only "
                                             "(over `client`)")
    consumer: dict[str, ClientValue] = Field(default_factory=dict, description="librdkafka settings for consumers only "
                                             "(over `client`)")
    admin: dict[str, ClientValue] = Field(default_factory=dict, description="librdkafka settings for the admin client "
                                          "only (over `client`)")


class BrokerConfig(_Strict):
    """The embedded Apache Kafka broker: one node, or a cluster of three (KRaft, every node a broker and a
    controller voter), all on loopback ports."""

    host: str = Field("127.0.0.1", description="the embedded broker's listener address")
    port: int = Field(9092, ge=1, le=65535, description="the embedded broker's client port (node 0's, with nodes > 1)")
    controller_port: int | None = Field(None, ge=1, le=65535, description="default: port + 1 (one node)")
    nodes: int = Field(1, ge=1, le=5, description="3: a replicated cluster; node k (0, 1, 2, ...) listens on port + "
                       "2k and its controller on port + 2k + 1; topics get min(3, nodes) replicas, min.insync.replicas 2 "
                       "with 3")
    kafka_version: str = Field("4.1.1", description="Apache Kafka release whose jars are fetched from Maven Central")
    heap: str = Field("512m", description="the broker JVM's heap (-Xms and -Xmx)")
    # The quick JIT alone and the serial collector: an embedded broker shares a small machine with the trainer,
    # and C2's compiler threads and G1's concurrent ones cost it more CPU than they give back at rftbus's rates
    # (docs/BENCHMARKS.md, "The embedded broker's CPU").
    jvm_opts: list[str] = Field(default_factory=lambda: ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"],
                                description="the broker JVM's flags beside its heap")
    properties: dict[str, str | int | bool] = Field(default_factory=dict, description="server.properties entries "
                                                    "set over rftbus's own (rftbus/ground/broker/node_config.py)")
    start_timeout_s: float = Field(120.0, gt=0, description="how long a node may take to answer before the start fails")
    node_id: int = Field(1, description="KRaft node id of a one-node broker")
    libs_dir: Path | None = Field(None, description="broker jars folder; default <state_dir>/kafka/libs-<version>")
    sasl_users: dict[str, SecretStr] = Field(default_factory=dict, description="when set, clients authenticate with "
                                             "SASL/PLAIN as one of these users and the broker enforces ACLs "
                                             "(`rftbus topics acls`); `admin` is the super user and must be one")

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{self.port_of(n)}" for n in self.node_ids)

    @property
    def controller(self) -> int:
        return self.controller_port if self.controller_port is not None else self.port + 1

    @property
    def node_ids(self) -> list[int]:
        return [self.node_id + k for k in range(self.nodes)]

    def port_of(self, node: int) -> int:
        return self.port + 2 * (node - self.node_id)

    def controller_of(self, node: int) -> int:
        return self.controller if self.nodes == 1 else self.port + 2 * (node - self.node_id) + 1


class SchemaRegistryConfig(_Strict):
    """Where the Avro schemas are registered: a registry, or the local schemas/ folder."""

    url: str | None = Field(None, description="Confluent-compatible registry; unset = local schemas/ folder")
    client: dict[str, ClientValue] = Field(default_factory=dict, description="e.g. basic.auth.user.info")
