"""docker-compose.yml and the Dockerfile agree with the config defaults (no Docker needed: YAML only).

The deployment stack is the one part of rftbus that nothing else exercises here, so these checks pin
down every place where it must say the same thing as rftbus/ground/config.py or the embedded broker.
"""

from __future__ import annotations

import base64
import re
import shlex
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from rftbus.ground.config import ENV_PREFIX, BrokerConfig, Config, ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"

# Each rftbus process and the command it runs (arguments after the image's `rftbus` entrypoint).
RFTBUS_SERVICES = {
    "topics": ["topics", "create"],
    "tasks": ["tasks", "publish", "addition", "--expert"],
    "explorer": ["explore", "--metrics-port", "9464"],
    "streams": ["streams", "--metrics-port", "9464"],
    "trainer": ["train", "--metrics-port", "9464"],
    "serve": ["serve"],
    "gate": ["gate"],
    "analytics-sink": ["analytics", "sink"],
}
# Long-running services that load checkpoints by the path the trainer publishes.
CHECKPOINT_SHARERS = ("trainer", "explorer", "serve")
# Config sections that later issues add. Their RFTBUS_* variables are skipped until the section exists
# in Config, and validated from then on; any other unknown section is a typo and fails.
PENDING_SECTIONS: set[str] = set()
# The variables every rftbus process needs, which the current config already knows.
REQUIRED_ENV = ("RFTBUS_KAFKA__BOOTSTRAP_SERVERS", "RFTBUS_SCHEMA_REGISTRY__URL", "RFTBUS_STATE_DIR")


# --- reading the compose file -------------------------------------------------------------------

_INTERPOLATION = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def _interpolate(value: str) -> str:
    """Compose's ${VAR:-default} with the process environment ignored: the file's own defaults."""
    return _INTERPOLATION.sub(lambda m: m.group(2) or "", value).replace("$$", "$")


@pytest.fixture(scope="module")
def compose() -> dict:
    assert COMPOSE.exists(), "docker-compose.yml is missing at the repo root"
    data = yaml.safe_load(COMPOSE.read_text())  # resolves the x-rftbus anchors and `<<:` merges
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    return data


@pytest.fixture(scope="module")
def services(compose) -> dict[str, dict]:
    return compose["services"]


def env(service: dict) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, "") for item in raw)
    return {k: _interpolate(str(v).lower() if isinstance(v, bool) else str(v)) for k, v in raw.items()}


def rftbus_env(service: dict) -> dict[str, str]:
    return {k: v for k, v in env(service).items() if k.startswith(ENV_PREFIX)}


def published(service: dict) -> dict[int, int]:
    """Host port -> container port, from short ("[ip:]host:container[/proto]") or long syntax."""
    out: dict[int, int] = {}
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            if entry.get("published") is not None:
                out[int(entry["published"])] = int(entry["target"])
            continue
        parts = str(entry).split("/")[0].split(":")
        if len(parts) >= 2:
            out[int(parts[-2])] = int(parts[-1])
    return out


def listeners(spec: str) -> dict[str, tuple[str, int]]:
    """'PLAINTEXT://kafka:9092,CONTROLLER://:9093' -> {'PLAINTEXT': ('kafka', 9092), ...}."""
    out = {}
    for item in spec.split(","):
        name, _, address = item.strip().partition("://")
        host, _, port = address.rpartition(":")
        out[name] = (host, int(port))
    return out


def kafka_property_name(env_name: str) -> str:
    """The apache/kafka image's rule: KAFKA_ dropped, ___ -> '-', __ -> '_', _ -> '.', lower case."""
    name = env_name[len("KAFKA_"):]
    return name.replace("___", "\0").replace("__", "\1").replace("_", ".").replace("\0", "-").replace("\1", "_").lower()


def internal_listener(services) -> tuple[str, int]:
    """(host, port) that containers use: the inter-broker listener as the broker advertises it."""
    kenv = env(services["kafka"])
    name = kenv.get("KAFKA_INTER_BROKER_LISTENER_NAME", "PLAINTEXT")
    return listeners(kenv["KAFKA_ADVERTISED_LISTENERS"])[name]


# --- the file as a whole ------------------------------------------------------------------------


def test_compose_spec_file_has_the_whole_stack(compose, services):
    assert "version" not in compose, "the Compose spec has no top-level `version:`"
    assert {"kafka", "schema-registry", "clickhouse"} | set(RFTBUS_SERVICES) <= set(services)


def test_rftbus_services_are_the_ones_built_from_the_dockerfile(services):
    ours = {name for name, svc in services.items() if "build" in svc or rftbus_env(svc)}
    assert ours == set(RFTBUS_SERVICES)
    images = set()
    for name in RFTBUS_SERVICES:
        svc = services[name]
        build = svc.get("build")
        assert build is not None, f"{name} is not built from the repo"
        if isinstance(build, str):
            build = {"context": build}
        context = (REPO / build.get("context", ".")).resolve()
        assert context == REPO, f"{name} builds from {context}, not the repo root"
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert dockerfile == DOCKERFILE and dockerfile.exists(), f"{name} builds from {dockerfile}"
        command = svc.get("command")
        command = shlex.split(command) if isinstance(command, str) else command
        assert command == RFTBUS_SERVICES[name], f"{name} runs {command}"
        images.add(svc.get("image"))
    # One tag for all: compose builds the image once instead of once per service.
    assert len(images) == 1 and None not in images, f"rftbus services use images {images}"


# --- RFTBUS_* variables against the config ------------------------------------------------------


@pytest.mark.parametrize("name", sorted(RFTBUS_SERVICES))
def test_rftbus_env_vars_are_real_config_keys(services, name, monkeypatch, tmp_path):
    # load_config also reads RFTBUS_CONFIG and ./rftbus.yaml; keep both out of the way.
    monkeypatch.delenv("RFTBUS_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    variables = rftbus_env(services[name])
    for required in REQUIRED_ENV:
        assert required in variables, f"{name} does not set {required}"

    sections = set(Config.model_fields)
    known, pending = {}, {}
    for var, value in variables.items():
        section = var[len(ENV_PREFIX):].split("__")[0].lower()
        (known if section in sections else pending)[var] = value
    unknown = {v for v in pending if v[len(ENV_PREFIX):].split("__")[0].lower() not in PENDING_SECTIONS}
    assert not unknown, f"{name}: {sorted(unknown)} name no config section ({sorted(sections)})"

    try:
        cfg = load_config(environ=known)
    except ConfigError as e:
        pytest.fail(f"{name}'s environment is not a valid config:\n{e}")
    assert cfg.kafka.bootstrap_servers == variables["RFTBUS_KAFKA__BOOTSTRAP_SERVERS"]
    assert cfg.schema_registry.url == variables["RFTBUS_SCHEMA_REGISTRY__URL"]
    assert str(cfg.state_dir) == variables["RFTBUS_STATE_DIR"]


def test_bootstrap_servers_are_the_brokers_internal_listener(services):
    host, port = internal_listener(services)
    assert host == "kafka" and "kafka" in services, "containers must reach the broker by its service name"
    kenv = env(services["kafka"])
    name = kenv.get("KAFKA_INTER_BROKER_LISTENER_NAME", "PLAINTEXT")
    assert listeners(kenv["KAFKA_LISTENERS"])[name][1] == port, "advertised and bound ports differ"
    for svc in RFTBUS_SERVICES:
        servers = rftbus_env(services[svc])["RFTBUS_KAFKA__BOOTSTRAP_SERVERS"].split(",")
        assert servers == [f"{host}:{port}"], f"{svc} bootstraps from {servers}"
    registry_store = env(services["schema-registry"])["SCHEMA_REGISTRY_KAFKASTORE_BOOTSTRAP_SERVERS"]
    assert registry_store.split("://")[-1] == f"{host}:{port}"


def test_schema_registry_url_is_the_registry_service(services):
    for svc in RFTBUS_SERVICES:
        url = urlsplit(rftbus_env(services[svc])["RFTBUS_SCHEMA_REGISTRY__URL"])
        assert url.hostname in services and url.hostname == "schema-registry", f"{svc}: {url.geturl()}"
        registry = services[url.hostname]
        ports = published(registry)
        assert url.port in ports.values(), f"{svc}: port {url.port} is not one the registry exposes"
        # Same port on the host, so http://localhost:<port> works outside the network too.
        assert ports.get(url.port) == url.port
        listen = env(registry)["SCHEMA_REGISTRY_LISTENERS"]
        assert urlsplit(listen).port == url.port, f"the registry listens on {listen}"


# --- the broker ---------------------------------------------------------------------------------


def test_kafka_image_is_the_embedded_brokers_version(services):
    # The embedded broker and the compose broker run the same Kafka.
    assert services["kafka"]["image"] == f"apache/kafka:{BrokerConfig().kafka_version}"


def test_kafka_publishes_the_default_broker_port(services):
    """A host-side rftbus with the default config (the embedded broker's address) reaches this broker."""
    b = BrokerConfig()
    ports = published(services["kafka"])
    assert b.port in ports, f"kafka publishes {sorted(ports)}, not {b.port}"
    kenv = env(services["kafka"])
    bound = listeners(kenv["KAFKA_LISTENERS"])
    names = [name for name, (_, port) in bound.items() if port == ports[b.port]]
    assert len(names) == 1, f"host port {b.port} maps to container port {ports[b.port]}, where no listener is"
    assert names[0] != kenv["KAFKA_CONTROLLER_LISTENER_NAMES"]
    # Clients are redirected to the advertised address, so it must be the one the host used.
    assert listeners(kenv["KAFKA_ADVERTISED_LISTENERS"])[names[0]] == (b.host, b.port)


def test_kafka_is_a_single_kraft_node(services):
    kenv = env(services["kafka"])
    assert set(kenv["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    controller = kenv["KAFKA_CONTROLLER_LISTENER_NAMES"]
    _, controller_port = listeners(kenv["KAFKA_LISTENERS"])[controller]
    assert kenv["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{kenv['KAFKA_NODE_ID']}@kafka:{controller_port}"
    for key in ("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
                "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"):
        assert kenv.get(key) == "1", f"{key} must be 1 on one broker, not {kenv.get(key)}"
    # A Kafka Uuid: unpadded URL-safe base64 of 16 bytes, or storage formatting fails.
    cluster_id = kenv["CLUSTER_ID"]
    assert len(cluster_id) == 22 and len(base64.urlsafe_b64decode(cluster_id + "==")) == 16
    data_volumes = [v.split(":")[1] for v in services["kafka"].get("volumes", []) if isinstance(v, str)]
    assert kenv["KAFKA_LOG_DIRS"] in data_volumes, "broker data is not on a volume"


def test_kafka_auto_topic_creation_is_off(services):
    # Topics come from `rftbus topics create`, with their declared partitions and retention.
    assert env(services["kafka"]).get("KAFKA_AUTO_CREATE_TOPICS_ENABLE") == "false"


def test_compose_broker_settings_match_the_embedded_broker(services, tmp_path):
    """Every embedded server.properties value that is not about addresses or paths is the same here."""
    from rftbus.ground.broker import node_config

    # If the embedded broker's code changes shape this fails (AttributeError, TypeError) instead of
    # skipping: a check that quietly stops running is no check.
    props_text = node_config.server_properties(Config(), node_config.BrokerPaths(tmp_path), 1)
    embedded_props = dict(line.split("=", 1) for line in props_text.splitlines() if "=" in line)
    compose_props = {
        kafka_property_name(k): v for k, v in env(services["kafka"]).items() if k.startswith("KAFKA_")
    }
    network_or_path = {"listeners", "advertised.listeners", "listener.security.protocol.map",
                       "controller.quorum.voters", "log.dirs"}
    differ = {
        key: (value, compose_props.get(key))
        for key, value in embedded_props.items()
        if key not in network_or_path and compose_props.get(key) != value
    }
    assert not differ, f"embedded vs compose broker settings (embedded, compose): {differ}"


def test_health_conditions_have_healthchecks(services):
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        if isinstance(deps, list):
            continue
        for target, spec in deps.items():
            assert target in services, f"{name} depends on unknown service {target}"
            if spec.get("condition") == "service_healthy":
                assert services[target].get("healthcheck"), f"{name} waits for {target}, which has no healthcheck"
    kafka_check = " ".join(services["kafka"]["healthcheck"]["test"])
    assert f"localhost:{internal_listener(services)[1]}" in kafka_check
    # Long-running processes start only after the topics exist.
    for name in set(RFTBUS_SERVICES) - {"topics"}:
        cond = (services[name].get("depends_on") or {}).get("topics", {}).get("condition")
        assert cond == "service_completed_successfully", f"{name} does not wait for `topics create`"
    assert services["topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert services["topics"].get("restart") in ("no", None), "`topics create` is one-shot"


def test_checkpoint_folder_is_shared(services, compose):
    """Weight URIs the trainer publishes must resolve in the explorers and `serve`."""
    mounts = {}
    for name in CHECKPOINT_SHARERS:
        state_dir = rftbus_env(services[name])["RFTBUS_STATE_DIR"]
        sources = {
            v.split(":")[0] for v in services[name].get("volumes", [])
            if isinstance(v, str) and v.split(":")[1].rstrip("/") == state_dir.rstrip("/")
        }
        assert len(sources) == 1, f"{name} has no volume at its state dir {state_dir}"
        mounts[name] = (sources.pop(), state_dir)
    assert len(set(mounts.values())) == 1, f"checkpoint mounts differ: {mounts}"
    source = next(iter(mounts.values()))[0]
    assert source in (compose.get("volumes") or {}), f"volume {source} is not declared"


def test_analytics_sink_points_at_clickhouse(services):
    ch = services["clickhouse"]
    assert ch["image"].startswith("clickhouse/clickhouse-server:")
    ports = published(ch)
    assert {8123, 9000} <= set(ports.values())
    assert ch.get("ulimits", {}).get("nofile"), "ClickHouse wants a high open-files limit"
    url = urlsplit(rftbus_env(services["analytics-sink"])["RFTBUS_ANALYTICS__URL"])
    assert url.hostname == "clickhouse" and url.port == 8123
    assert services["analytics-sink"]["depends_on"]["clickhouse"]["condition"] == "service_healthy"


def test_the_studio_reads_the_analytics_the_sink_writes(services):
    """The studio is mounted in serve: it must read the backend the sink writes (it read an empty chDB folder)."""
    keys = ("BACKEND", "URL", "DATABASE", "USER", "PASSWORD")
    sink, serve = rftbus_env(services["analytics-sink"]), rftbus_env(services["serve"])
    assert {k: serve.get(f"RFTBUS_ANALYTICS__{k}") for k in keys} == {k: sink[f"RFTBUS_ANALYTICS__{k}"] for k in keys}


# --- the image ----------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    assert DOCKERFILE.exists(), "Dockerfile is missing at the repo root"
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def copied_sources() -> set[str]:
    out = set()
    for word, rest in dockerfile_instructions():
        if word == "COPY" and not rest.startswith("--from"):
            args = [a for a in shlex.split(rest) if not a.startswith("--")]
            out.update(a.rstrip("/") for a in args[:-1])
    return out


def test_dockerfile_installs_with_constraints():
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    assert {"pyproject.toml", "constraints.txt", "README.md"} <= copied_sources()
    installs = [rest for word, rest in instructions if word == "RUN" and "pip install" in rest]
    assert any(re.search(r"(-c|--constraint)[ =]constraints\.txt", r) for r in installs), installs
    assert ("ENTRYPOINT", '["rftbus"]') in instructions
    users = [rest for word, rest in instructions if word == "USER"]
    assert users and users[-1] not in ("root", "0"), "the image must not run as root"


def test_dockerfile_copies_every_package_folder():
    """The package is one folder, rftbus/ (pyproject finds its packages there): the image must COPY it whole."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["tool"]["setuptools"]["packages"]["find"]["include"] == ["rftbus*"]
    assert "rftbus" in copied_sources(), "Dockerfile does not COPY rftbus/"


def test_dockerignore_keeps_the_context_small_but_complete():
    assert DOCKERIGNORE.exists()
    patterns = {
        p.strip().rstrip("/") for p in DOCKERIGNORE.read_text().splitlines()
        if p.strip() and not p.startswith("#")
    }
    assert {".venv", ".rftbus", ".git"} <= patterns
    excluded = copied_sources() & patterns
    assert not excluded, f".dockerignore excludes {excluded}, which the Dockerfile copies"


def test_cluster_overlay_matches_the_embedded_cluster():
    """docker-compose.cluster.yml: three voters, each node's id and ports as `rftbus up --nodes 3` lays them out,
    replicated internal topics, and every rftbus service pointed at all three with 3 replicas per topic."""
    from rftbus.ground.broker.node_config import BrokerPaths, server_properties
    from rftbus.ground.config import load_config

    over = yaml.safe_load((REPO / "docker-compose.cluster.yml").read_text())["services"]
    nodes = {name: svc["environment"] for name, svc in over.items() if name.startswith("kafka")}
    assert sorted(nodes) == ["kafka", "kafka-2", "kafka-3"]
    voters = {env["KAFKA_CONTROLLER_QUORUM_VOTERS"] for env in nodes.values()}
    assert voters == {"1@kafka:9093,2@kafka-2:9093,3@kafka-3:9093"}
    assert sorted(env["KAFKA_NODE_ID"] for env in nodes.values()) == ["1", "2", "3"]
    cfg = load_config(overrides={"broker": {"nodes": 3}}, environ={})
    assert [int(p.split(":")[0]) for p in (over["kafka-2"]["ports"] + over["kafka-3"]["ports"])] == \
        [cfg.broker.port_of(2), cfg.broker.port_of(3)]
    props = dict(line.split("=", 1) for line in
                 server_properties(cfg, BrokerPaths.of(cfg, 1), 1).splitlines())
    for key in ("offsets.topic.replication.factor", "min.insync.replicas", "transaction.state.log.min.isr",
                "broker.session.timeout.ms", "replica.lag.time.max.ms"):
        env = "KAFKA_" + key.upper().replace(".", "_")
        assert nodes["kafka-2"][env] == props[key], key
    for svc in ("topics", "explorer", "streams", "trainer", "serve", "analytics-sink"):
        env = over[svc]["environment"]
        assert env["RFTBUS_KAFKA__BOOTSTRAP_SERVERS"].count(":9092") == 3 and env["RFTBUS_KAFKA__REPLICATION_FACTOR"] == "3"


def test_shipped_topic_acls_are_what_the_table_says():
    """docs/kafka-acls.sh (the compose file's topics) is `rftbus topics acls` for the default config, and every
    topic has its writers listed (a topic added without them would be writable by nobody)."""
    from rftbus.ground.config import Config
    from rftbus.ground.kafka.acls import WRITERS, acls, commands

    cfg = Config()
    assert set(WRITERS) == set(cfg.topics.all())
    shipped = (REPO / "docs" / "kafka-acls.sh").read_text()
    body = shipped[shipped.index("kafka-acls.sh --bootstrap"):]
    assert body == "".join(line + "\n" for line in commands(acls(cfg), '"$BOOTSTRAP"')), \
        "regenerate docs/kafka-acls.sh (see its header)"
    weights = [line for line in body.splitlines() if f"--topic {cfg.topics.weights.name}" in line and "Write" in line]
    assert len(weights) == 1 and "User:rftbus-trainer" in weights[0]
