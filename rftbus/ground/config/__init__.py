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
from typing import Any

import yaml
from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator, model_validator

from rftbus.ground.config.analytics import AnalyticsConfig
from rftbus.ground.config.bus import CLUSTER_FENCE_S, DEFAULT_REQUEST_TIMEOUT_S, SchemaRegistryConfig, _Strict
from rftbus.ground.config.bus import BrokerConfig as BrokerConfig  # (re-exported: the sections most callers name)
from rftbus.ground.config.bus import KafkaConfig as KafkaConfig
from rftbus.ground.config.bus import TopicsConfig as TopicsConfig
from rftbus.ground.config.bus import TopicSpec as TopicSpec
from rftbus.ground.errors import RftbusError
from rftbus.ground.models.config import ModelConfig
from rftbus.ground.config.explorer import ExplorerConfig, TasksetConfig
from rftbus.ground.config.gate import GateConfig
from rftbus.ground.config.otel import OtelConfig
from rftbus.ground.config.images import ImagesConfig
from rftbus.ground.config.synthesis import SynthesisConfig
from rftbus.ground.config.serve import ServeConfig
from rftbus.ground.config.simulate import SimulateConfig
from rftbus.ground.config.studio import StudioConfig
from rftbus.ground.config.run import RunConfig
from rftbus.ground.config.streams import StreamsConfig
from rftbus.ground.config.trainer import TrainerConfig

ENV_PREFIX = "RFTBUS_"
CONFIG_ENV = "RFTBUS_CONFIG"
# RFTBUS_* variables that are not config: the config file's path and the clients' own tokens (#45: an exported
# RFTBUS_FEEDBACK_TOKEN, as docs/LIVE_TRAFFIC.md tells graders to, broke every command as an unknown key).
USER_CODE_ENV = "RFTBUS_USER_CODE_PATH"  # folders of a user's modules, appended to a child's sys.path (cli/context.py)
OTHER_ENV = frozenset({CONFIG_ENV, USER_CODE_ENV, "RFTBUS_FEEDBACK_TOKEN", "RFTBUS_JUDGE_TOKEN"})
DEFAULT_CONFIG_NAME = "rftbus.yaml"
# Passthrough maps whose keys are librdkafka names (dotted); env overrides spell dots as underscores.
PASSTHROUGH_KEYS = {"client", "producer", "consumer", "admin"}

class ConfigError(RftbusError, ValueError):
    """A configuration problem, with a message that names the key and why it is wrong."""


class RLConfig(_Strict):
    """The knobs every component agrees on (explorer admission, streams filters, trainer)."""

    max_staleness: int = Field(1, ge=0, description="η: an experience from version v may train the step "
                               "publishing s+1 only if s - v <= η; 0 = synchronous on-policy")
    max_feedback_staleness: int = Field(
        100, ge=0, description="the bound for answers graded by feedback (live traffic, human grades): a grade "
        "that comes back hours later finds the answer this many versions behind and still trains, its behaviour "
        "logprobs corrected (trainer.late_m2_tau); explorer rollouts keep max_staleness")
    max_rollout_staleness: int | None = Field(
        None, ge=0, description="explorer rollouts that arrive past η (a slow generation, a backlog) train up to "
        "this many versions behind, corrected as late grades are (trainer.late_m2_tau), instead of being rejected "
        "stale; admission still paces explorers by η. None: η (a rollout past η is rejected stale)")
    group_size: int = Field(8, ge=1, description="n: samples per task (one GRPO group)")
    batch_groups: int = Field(8, ge=1, description="B: groups per trainer step")
    sync_interval: int = Field(1, ge=1, description="trainer steps between published weight versions")


class Config(_Strict):
    state_dir: Path = Field(Path(".rftbus"), validate_default=True, description="the run's folder: the embedded "
                            "broker's data, checkpoints, weights, status files and logs")
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
    otel: OtelConfig = OtelConfig()
    synthesis: SynthesisConfig = SynthesisConfig()
    images: ImagesConfig = ImagesConfig()

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
        if self.gate.enabled and self.trainer.lora is None:
            raise ValueError("gate.enabled needs trainer.lora: serve holds each version the gate serves as a named "
                             "LoRA adapter beside the base model (set trainer.lora, or turn the gate off)")
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
    def lineages(self) -> frozenset[str]:
        """The weight lineages this config trains: "" (the first trainer) and each of run.trainers'."""
        return frozenset({""} | {self.lineage_trainer(i).lineage for i in range(len(self.run.trainers))})

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
        node[parts[-1]] = _env_value(name, parts, value)
    return out


def _env_value(name: str, parts: list[str], value: str) -> Any:
    """A variable's value: JSON for a key that holds a list or a map (compose and Kubernetes set config this way),
    the text as it is for any other (pydantic converts it)."""
    import json  # (here, not at the top: a user's json.py beside the config must never be what a probe imports)

    from rftbus.ground.config.keys import takes_json

    if not value.lstrip().startswith(("[", "{")) or not takes_json(Config, parts):
        return value  # (a list key given as text: its own validator may read it, e.g. comma-separated tokens)
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise ConfigError(f"environment variable {name}: {'.'.join(parts)} is a list or map and this is not JSON "
                          f"({e.msg} at character {e.pos}), e.g. '[\"a\", \"b\"]' or '{{\"k\": 1}}'") from None


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
            from rftbus.ground.config.keys import did_you_mean

            lines.append(f"  {key}: unknown key{did_you_mean(Config, [str(p) for p in e['loc']])}")
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


MAX_CONFIG_BYTES = 16 << 20  # a config (or a file read like one) larger than this is not a config


class _NoAliases(yaml.SafeLoader):
    """YAML without anchors' aliases: a few lines of nested aliases (a "billion laughs") grew to gigabytes when
    validated, before any child started (#63)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "YAML aliases (*name) are refused in a config: write the "
                                              "value out", event.start_mark)
        return super().compose_node(parent, index)


def read_text_file(path: Path, what: str = "config file", max_bytes: int = MAX_CONFIG_BYTES) -> str:
    """A regular file's text, refused in one line first when it is not one (a FIFO blocks for ever, /dev/zero
    never ends) or is over `max_bytes`."""
    import stat

    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} does not exist") from None
    except OSError as e:
        raise ConfigError(f"{what} {path} cannot be read: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{what} {path} is not a regular file")
    if st.st_size > max_bytes:
        raise ConfigError(f"{what} {path} is {st.st_size} bytes, over {max_bytes}")
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise ConfigError(f"{what} {path} cannot be read: {e.strerror}") from None
    if len(data) > max_bytes:
        raise ConfigError(f"{what} {path} is over {max_bytes} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} {path} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_yaml(path: Path) -> dict[str, Any]:
    text = read_text_file(path)
    try:
        data = yaml.load(text, Loader=_NoAliases)  # noqa: S506 - a SafeLoader, without aliases
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}: {getattr(e, 'problem', e)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level, not {type(data).__name__}")
    return data


# The inputs a config file names (data, model): a relative one is looked for beside the file first, as reward modules
# are; where it is not there, it stays as written (the working directory's, or a hub id).
INPUT_PATHS = (("taskset", "path"), ("taskset", "eval", "path"), ("model", "path"), ("model", "gguf_file"))


def beside(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """`data` with each of INPUT_PATHS that exists relative to `folder` made absolute (the config file's folder)."""
    for keys in INPUT_PATHS:
        node: Any = data
        for k in keys[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        value = node.get(keys[-1]) if isinstance(node, dict) else None
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            there = folder / value
            if there.exists():
                node[keys[-1]] = str(there.resolve())
    return data


def where_looked(value: str, config_file: Path | None) -> str:
    """Where a relative input path was looked for, for the message that says it is not there."""
    places = [Path(value).expanduser().resolve()]
    if config_file is not None and not Path(value).expanduser().is_absolute():
        places.insert(0, (config_file.parent / value).resolve())
    return " and ".join(str(p) for p in dict.fromkeys(places))


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> Config:
    """Build the Config; raises ConfigError naming every bad key."""
    environ = dict(os.environ if environ is None else environ)
    file = find_config_file(path)
    data: dict[str, Any] = beside(read_yaml(file), file.parent) if file else {}
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
