"""What one embedded Kafka node is given: its folder's layout, its server.properties (rftbus's settings, SASL
and ACLs when users are configured, then `broker.properties` over them) and its java command line
(`broker.heap`, `broker.jvm_opts`). rftbus/ground/broker/embedded.py starts and stops the nodes."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from rftbus.ground.config import Config
from rftbus.ground.config.bus import CLUSTER_FENCE_S, CLUSTER_ISR_LAG_S
from rftbus.ground.errors import RftbusError


@dataclass(frozen=True)
class BrokerPaths:
    root: Path

    @classmethod
    def of(cls, cfg: Config, node: int | None = None) -> BrokerPaths:
        """A node's folder (`node` None: the first node's)."""
        if cfg.broker.nodes == 1:
            return cls(cfg.state_dir / "kafka")
        return cls(cfg.state_dir / "kafka" / f"node-{cfg.broker.node_id if node is None else node}")

    data = property(lambda self: self.root / "data")
    logs = property(lambda self: self.root / "logs")
    props = property(lambda self: self.root / "server.properties")
    pidfile = property(lambda self: self.root / "broker.pid")
    meta = property(lambda self: self.root / "data" / "meta.properties")
    stdout = property(lambda self: self.root / "logs" / "stdout.log")


def server_properties(cfg: Config, paths: BrokerPaths, node: int) -> str:
    b = cfg.broker
    port, ctl = b.port_of(node), b.controller_of(node)
    rf = cfg.replicas
    props = {
        "process.roles": "broker,controller",
        "node.id": node,
        "controller.quorum.voters": ",".join(f"{n}@{b.host}:{b.controller_of(n)}" for n in b.node_ids),
        "listeners": f"PLAINTEXT://{b.host}:{port},CONTROLLER://{b.host}:{ctl}",
        "advertised.listeners": f"PLAINTEXT://{b.host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": paths.data,
        "num.partitions": 1,
        "offsets.topic.replication.factor": rf,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": 2 if rf >= 3 else 1,
        "transaction.state.log.num.partitions": 4,  # (50 by default) created on the first fence, in its path
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": 2 if rf >= 3 else 1,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "false",
        "message.max.bytes": 16 * 1024 * 1024 + 1024,
        "log.cleaner.enable": "true",
        # The active controller appends a no-op record to the metadata log every 500 ms by default, so that
        # observers see it alive; each is an append, a commit and a publish in every node: most of an idle
        # node's CPU. Every 5 s here (nothing waits on them: heartbeats fence nodes, not no-ops).
        "metadata.max.idle.interval.ms": 5000,
    }
    if b.sasl_users:  # SASL/PLAIN for clients and between nodes, ACLs enforced (StandardAuthorizer, KRaft)
        props.update(sasl_properties(b))
    if b.nodes > 1:
        # Failover time is how soon the controllers fence a silent node (its partitions then get new leaders)
        # and drop it from the ISR (acks=all writes then go on with the two left): 9 s and 30 s by default,
        # 4 s and 5 s here (heartbeats every 1 s).
        props.update({"default.replication.factor": rf, "min.insync.replicas": 2 if rf >= 3 else 1,
                      "broker.session.timeout.ms": int(CLUSTER_FENCE_S * 1000), "broker.heartbeat.interval.ms": 1000,
                      "replica.lag.time.max.ms": int(CLUSTER_ISR_LAG_S * 1000),
                      # leadership returns to each partition's preferred replica once a node is back: checked
                      # every 10 s (300 s by default; a chaos campaign saw one node lead everything for 14 min)
                      "leader.imbalance.check.interval.seconds": 10})
    props.update(b.properties)
    return "".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n" for k, v in props.items())


def sasl_properties(b) -> dict[str, str]:
    if "admin" not in b.sasl_users:
        raise RftbusError("broker.sasl_users must hold `admin` (the super user the nodes and `rftbus topics acls "
                          "--apply` use)")
    users = " ".join(f'user_{u}="{p.get_secret_value()}"' for u, p in b.sasl_users.items())
    admin = b.sasl_users["admin"].get_secret_value()
    jaas = (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            f'password="{admin}" {users};')
    return {"listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.plaintext.plain.sasl.jaas.config": jaas,
            "listener.name.controller.plain.sasl.jaas.config": jaas,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin", "allow.everyone.if.no.acl.found": "false"}


def java_cmd(cfg: Config, java: str, classpath: str, main: str, *args: str, node: int | None = None) -> list[str]:
    paths = BrokerPaths.of(cfg, node)
    log4j = resources.files("rftbus.ground.broker") / "log4j2.properties"
    return [
        java, f"-Xmx{cfg.broker.heap}", f"-Xms{cfg.broker.heap}", *cfg.broker.jvm_opts,
        "-Djava.awt.headless=true", f"-Dkafka.logs.dir={paths.logs}", f"-Dlog4j2.configurationFile={log4j}",
        "-cp", classpath, main, *args,
    ]
