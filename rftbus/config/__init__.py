"""Configuration: one YAML file, validated by pydantic, with RFTBUS_* environment overrides.

Precedence (last wins): built-in defaults < YAML file < environment < command-line flags.
Kafka client settings under `kafka.client` / `kafka.producer` / `kafka.consumer` are passed to
librdkafka unchanged, so SASL_SSL, SCRAM and mTLS work without rftbus knowing about them.
"""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from rftbus.config.analytics import AnalyticsConfig
from rftbus.errors import RftbusError
from rftbus.models.config import ModelConfig
from rftbus.config.explorer import ExplorerConfig, TasksetConfig
from rftbus.config.gate import GateConfig
from rftbus.config.serve import ServeConfig
from rftbus.config.simulate import SimulateConfig
from rftbus.config.studio import StudioConfig
from rftbus.config.run import RunConfig
from rftbus.config.streams import StreamsConfig
from rftbus.config.trainer import TrainerConfig

ENV_PREFIX = "RFTBUS_"
CONFIG_ENV = "RFTBUS_CONFIG"
# RFTBUS_* variables that are not config: the config file's path and the clients' own tokens (#45: an exported
# RFTBUS_FEEDBACK_TOKEN, as docs/LIVE_TRAFFIC.md tells graders to, broke every command as an unknown key).
OTHER_ENV = frozenset({CONFIG_ENV, "RFTBUS_FEEDBACK_TOKEN", "RFTBUS_JUDGE_TOKEN"})
DEFAULT_CONFIG_NAME = "rftbus.yaml"
# Passthrough maps whose keys are librdkafka names (dotted); env overrides spell dots as underscores.
PASSTHROUGH_KEYS = {"client", "producer", "consumer", "admin"}

ClientValue = str | int | float | bool


class ConfigError(RftbusError, ValueError):
    """A configuration problem, with a message that names the key and why it is wrong."""


# The embedded cluster's failure detection (rftbus/broker/node_config.py): its controllers fence a node that sent
# no heartbeat for CLUSTER_FENCE_S (its partitions get new leaders), and a leader drops a silent follower from the ISR
# after CLUSTER_ISR_LAG_S (acks=all writes go on with the two left).
CLUSTER_FENCE_S = 4.0
CLUSTER_ISR_LAG_S = 5.0
DEFAULT_REQUEST_TIMEOUT_S = 10.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TopicSpec(_Strict):
    name: str
    partitions: int = Field(4, ge=1)
    replication_factor: int = Field(1, ge=1)
    retention_ms: int | None = Field(None, ge=-1, description="-1 keeps forever; None uses the broker default")
    cleanup_policy: Literal["delete", "compact", "compact,delete"] = "delete"
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
    tasks: TopicSpec = TopicSpec(name="rft.tasks", partitions=4, retention_ms=-1)
    raw: TopicSpec = TopicSpec(name="rft.experiences.raw", partitions=4, retention_ms=WEEK_MS)
    curated: TopicSpec = TopicSpec(name="rft.experiences.curated", partitions=4, retention_ms=WEEK_MS)
    # The high-priority lane: streams route the experiences worth learning from first here, and the
    # trainer drains it before the normal curated lane.
    curated_priority: TopicSpec = TopicSpec(name="rft.experiences.curated.priority", partitions=4, retention_ms=WEEK_MS)
    expert: TopicSpec = TopicSpec(name="rft.experiences.expert", partitions=4, retention_ms=-1)
    rejected: TopicSpec = TopicSpec(name="rft.experiences.rejected", partitions=4, retention_ms=WEEK_MS)
    feedback: TopicSpec = TopicSpec(name="rft.feedback", partitions=4, retention_ms=-1)
    weights: TopicSpec = TopicSpec(name="rft.weights", partitions=1, cleanup_policy="compact")
    metrics: TopicSpec = TopicSpec(name="rft.metrics", partitions=1, retention_ms=WEEK_MS)
    # The gate's decisions (consumers/gate/): one partition, in the order they were made, kept for good (every
    # served answer's version has the decision that let it serve)
    decisions: TopicSpec = TopicSpec(name="rft.decisions", partitions=1, retention_ms=-1)

    def all(self) -> dict[str, TopicSpec]:
        return {key: getattr(self, key) for key in type(self).model_fields}

    def by_name(self, name: str) -> tuple[str, TopicSpec] | None:
        for key, spec in self.all().items():
            if spec.name == name:
                return key, spec
        return None


class KafkaConfig(_Strict):
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
    producer: dict[str, ClientValue] = Field(default_factory=dict)
    consumer: dict[str, ClientValue] = Field(default_factory=dict)
    admin: dict[str, ClientValue] = Field(default_factory=dict)


class BrokerConfig(_Strict):
    """The embedded Apache Kafka broker: one node, or a cluster of three (KRaft, every node a broker and a
    controller voter), all on loopback ports."""

    host: str = "127.0.0.1"
    port: int = Field(9092, ge=1, le=65535)
    controller_port: int | None = Field(None, ge=1, le=65535, description="default: port + 1 (one node)")
    nodes: int = Field(1, ge=1, le=5, description="3: a replicated cluster; node k (0, 1, 2, ...) listens on port + "
                       "2k and its controller on port + 2k + 1; topics get min(3, nodes) replicas, min.insync.replicas 2 "
                       "with 3")
    kafka_version: str = "4.1.1"
    heap: str = "512m"
    # The quick JIT alone and the serial collector: an embedded broker shares a small machine with the trainer,
    # and C2's compiler threads and G1's concurrent ones cost it more CPU than they give back at rftbus's rates
    # (docs/BENCHMARKS.md, "The embedded broker's CPU").
    jvm_opts: list[str] = Field(default_factory=lambda: ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"],
                                description="the broker JVM's flags beside its heap")
    properties: dict[str, str | int | bool] = Field(default_factory=dict, description="server.properties entries "
                                                    "set over rftbus's own (rftbus/broker/node_config.py)")
    start_timeout_s: float = Field(120.0, gt=0)
    node_id: int = 1
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
    url: str | None = Field(None, description="Confluent-compatible registry; unset = local schemas/ folder")
    client: dict[str, ClientValue] = Field(default_factory=dict, description="e.g. basic.auth.user.info")


class RLConfig(_Strict):
    """The knobs every component agrees on (explorer admission, streams filters, trainer)."""

    max_staleness: int = Field(1, ge=0, description="η: an experience from version v may train the step "
                               "publishing s+1 only if s - v <= η; 0 = synchronous on-policy")
    group_size: int = Field(8, ge=1, description="n: samples per task (one GRPO group)")
    batch_groups: int = Field(8, ge=1, description="B: groups per trainer step")
    sync_interval: int = Field(1, ge=1, description="trainer steps between published weight versions")


class Config(_Strict):
    state_dir: Path = Field(Path(".rftbus"), validate_default=True)
    kafka: KafkaConfig = KafkaConfig()
    broker: BrokerConfig = BrokerConfig()
    schema_registry: SchemaRegistryConfig = SchemaRegistryConfig()
    topics: TopicsConfig = TopicsConfig()
    rl: RLConfig = RLConfig()
    model: ModelConfig = ModelConfig()
    taskset: TasksetConfig = TasksetConfig()
    explorer: ExplorerConfig = ExplorerConfig()
    streams: StreamsConfig = StreamsConfig()
    trainer: TrainerConfig = TrainerConfig()
    run: RunConfig = RunConfig()
    serve: ServeConfig = ServeConfig()
    simulate: SimulateConfig = SimulateConfig()
    studio: StudioConfig = StudioConfig()
    analytics: AnalyticsConfig = AnalyticsConfig()
    gate: GateConfig = GateConfig()

    @field_validator("state_dir")
    @classmethod
    def _absolute(cls, v: Path) -> Path:
        # Absolute at load time: child processes (java, mvn) may run from other working directories.
        return Path(os.path.expanduser(str(v))).absolute()

    @model_validator(mode="after")
    def _model_cache(self) -> Config:
        # GGUF conversions live with the run's other state unless the config says where.
        if self.model.cache_dir is None:
            self.model.cache_dir = self.state_dir / "models"
        return self

    @model_validator(mode="after")
    def _more_trainers(self) -> Config:
        seen = {""}
        for i, _ in enumerate(self.run.trainers):
            t = self.lineage_trainer(i)
            if t.lineage in seen:
                raise ValueError(f"run.trainers[{i}]: lineage {t.lineage!r} is "
                                 + ("missing (each further trainer names its own)" if not t.lineage else "taken"))
            seen.add(t.lineage)
        if self.run.trainers and not self.gate.enabled:
            raise ValueError("run.trainers: more than one trainer needs the promotion gate (gate.enabled) to choose "
                             "among their versions")
        return self

    def lineage_trainer(self, i: int) -> TrainerConfig:
        """run.trainers[i] as a whole trainer: section: the first trainer's, with the entry's changes, its own
        consumer group, status id and checkpoints (so the two never share offsets or state)."""
        over = dict(self.run.trainers[i])
        lineage = str(over.get("lineage") or "")
        base = self.trainer.model_dump()
        base.update(group_id=f"{self.trainer.group_id}-{lineage}", id=lineage or None,
                    checkpoint_dir=str(Path(self.trainer.checkpoint_dir or self.state_dir / "checkpoints")
                                       / f"lineage-{lineage}"))
        try:
            return TrainerConfig.model_validate({**base, **over})
        except ValidationError as e:
            raise ValueError(f"run.trainers[{i}]: {e.errors()[0]['loc']}: {e.errors()[0]['msg']}") from None

    @property
    def replicas(self) -> int:
        """Copies of each partition on the embedded cluster (3 with three nodes), else as each topic declares."""
        if self.kafka.replication_factor:
            return self.kafka.replication_factor
        return min(3, self.broker.nodes) if not self.kafka.bootstrap_servers else 1

    def declared_topics(self) -> dict[str, TopicSpec]:
        """The topics as they are created here (replicated on the embedded cluster)."""
        return {k: s.replicated(self.replicas) for k, s in self.topics.all().items()}

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka.bootstrap_servers or self.broker.bootstrap

    @property
    def request_timeout_s(self) -> float:
        """kafka.request_timeout_s, or its default: a client gives up on a silent node when the cluster does. On the
        embedded cluster a killed node's partitions move after CLUSTER_FENCE_S, while a frozen one (SIGSTOP, a long
        pause, a partition that drops packets) held every request sent to it for a 10 s timeout first, and stalled
        the trainer 2.5x as long as a kill (#46)."""
        if self.kafka.request_timeout_s is not None:
            return self.kafka.request_timeout_s
        embedded_cluster = not self.kafka.bootstrap_servers and self.broker.nodes > 1
        return CLUSTER_FENCE_S if embedded_cluster else DEFAULT_REQUEST_TIMEOUT_S


_warned: set[str] = set()


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    """RFTBUS_KAFKA__BOOTSTRAP_SERVERS=x -> {"kafka": {"bootstrap_servers": "x"}}.

    Inside a passthrough map the last part's underscores become dots, so
    RFTBUS_KAFKA__CLIENT__SASL_MECHANISM=PLAIN sets librdkafka's `sasl.mechanism`.
    """
    out: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name in OTHER_ENV:
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX):].split("__") if p]
        if not parts:
            continue
        if parts[0] not in Config.model_fields:  # not a config section or key: said once, never fatal
            if name not in _warned:
                _warned.add(name)
                print(f"warning: environment variable {name} is not a config key (config variables are "
                      "RFTBUS_<SECTION>__<KEY>, e.g. RFTBUS_KAFKA__BOOTSTRAP_SERVERS); ignored", file=sys.stderr)
            continue
        if len(parts) >= 2 and parts[-2] in PASSTHROUGH_KEYS:
            parts[-1] = parts[-1].replace("_", ".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment variable {name}: {'.'.join(parts)} conflicts with another override")
        node[parts[-1]] = value
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _format_errors(err: ValidationError, origin: str) -> str:
    lines = [f"invalid configuration ({origin}):"]
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "<root>"
        if e["type"] == "extra_forbidden":
            lines.append(f"  {key}: unknown key")
        else:
            got = e.get("input")
            shown = "" if isinstance(got, dict) else f" (got {got!r})"
            lines.append(f"  {key}: {e['msg']}{shown}")
    return "\n".join(lines)


def find_config_file(path: str | os.PathLike[str] | None = None) -> Path | None:
    if path:
        return Path(path)
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    local = Path(DEFAULT_CONFIG_NAME)
    return local if local.exists() else None


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}: {getattr(e, 'problem', e)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level, not {type(data).__name__}")
    return data


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> Config:
    """Build the Config; raises ConfigError naming every bad key."""
    environ = dict(os.environ if environ is None else environ)
    file = find_config_file(path)
    data: dict[str, Any] = read_yaml(file) if file else {}
    origins = [str(file) if file else "defaults"]
    env = _env_overrides(environ)
    if env:
        data = _merge(data, env)
        origins.append("RFTBUS_* environment")
    if overrides:
        data = _merge(data, overrides)
        origins.append("command line")
    # Overlay onto the full default tree, so a partial section (one topic's partitions) keeps the rest.
    data = _merge(Config().model_dump(), data)
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_errors(e, " + ".join(origins))) from None


def plain_data(cfg: BaseModel) -> dict[str, Any]:
    """The config as plain YAML/JSON data with secrets in clear: what a child process must be given.

    model_dump(mode="json") masks every SecretStr as "**********", which a child would then use as
    the password or token. Callers write the result only to private files (see write_config).
    """
    def plain(v: Any) -> Any:
        if isinstance(v, SecretStr):
            return v.get_secret_value()
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, Path):
            return str(v)
        if isinstance(v, Enum):
            return v.value
        return v

    return plain(cfg.model_dump(mode="python"))


def write_config(cfg: BaseModel, path: Path) -> Path:
    """Write the resolved config for child processes, readable by this user only (it holds secrets)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(plain_data(cfg), f, sort_keys=False)
    os.chmod(path, 0o600)  # an existing file keeps its old mode through O_CREAT
    return path
