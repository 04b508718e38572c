"""Who may write each topic: one table, printed as `kafka-acls.sh` lines or applied through the admin API.

Every stage believes what its input topic holds once it decodes (a weight record is also checked against the
store: rftbus/ground/weights/admit.py), so the line of defence is that only the stage that produces a topic can write
it: a leaked inference token must not become a weights writer. Principals are one per role
(`User:rftbus-<role>`, SASL usernames); every role may read and describe every rftbus topic and use consumer
groups and transactional ids under the `rftbus` prefix (reads are not what steers the run); streams also owns
its internal topics (prefix streams.app_id). docs/USAGE.md ("Topic ACLs") says how to turn this on.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaException

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.registry import TOPICS

ROLES = ("tasks", "explorer", "serve", "studio", "streams", "trainer", "evaluator", "analytics", "gate", "otel",
         "synthesize")

# topic key -> the roles that write it (everything else is refused a write by the broker): the registry's.
WRITERS: dict[str, tuple[str, ...]] = {t.key: t.writers for t in TOPICS}


@dataclass(frozen=True)
class Acl:
    principal: str
    resource: str  # topic | group | transactional_id
    name: str
    pattern: str  # literal | prefixed
    operation: str  # WRITE | READ | DESCRIBE | ALL | DESCRIBE_CONFIGS



def commands(rules: list[Acl], bootstrap: str) -> list[str]:
    """`kafka-acls.sh` lines, one per principal and resource (its operations together: one JVM start each)."""
    grouped: dict[tuple[str, str, str, str], list[str]] = {}
    for r in rules:
        grouped.setdefault((r.principal, r.resource, r.name, r.pattern), []).append(r.operation)
    out = []
    for (who, resource, name, pattern), ops in grouped.items():
        res = {"topic": "--topic", "group": "--group", "transactional_id": "--transactional-id"}[resource]
        pat = " --resource-pattern-type prefixed" if pattern == "prefixed" else ""
        operations = " ".join(f"--operation {op.title().replace('_', '')}" for op in ops)
        out.append(f"kafka-acls.sh --bootstrap-server {bootstrap} --add --allow-principal {who} {operations} "
                   f"{res} {name}{pat}")
    return out


def principal(role: str) -> str:
    return f"User:rftbus-{role}"


def acls(cfg: Config) -> list[Acl]:
    """Every allow rule for the topics of `cfg`; a write not listed is denied by the broker's authorizer."""
    topics = cfg.topics.all()
    missing = set(topics) - set(WRITERS)
    if missing:
        raise ValueError(f"topic keys {sorted(missing)} are not in the registry (rftbus/ground/kafka/registry.py)")
    out: list[Acl] = []
    for role in ROLES:
        p = principal(role)
        for key, spec in topics.items():
            for op in ("READ", "DESCRIBE", "DESCRIBE_CONFIGS"):
                out.append(Acl(p, "topic", spec.name, "literal", op))
            if role in WRITERS[key]:
                out.append(Acl(p, "topic", spec.name, "literal", "WRITE"))
        out += [Acl(p, "group", "rftbus", "prefixed", "READ"), Acl(p, "group", "rftbus", "prefixed", "DESCRIBE"),
                Acl(p, "transactional_id", "rftbus", "prefixed", "WRITE"),
                Acl(p, "transactional_id", "rftbus", "prefixed", "DESCRIBE")]
    app = cfg.streams.app_id
    out += [Acl(principal("streams"), "topic", app, "prefixed", "ALL"),
            Acl(principal("streams"), "group", app, "prefixed", "ALL"),
            Acl(principal("streams"), "transactional_id", app, "prefixed", "ALL")]
    return out


def apply(cfg: Config, rules: list[Acl], timeout_s: float = 30.0) -> int:
    """Create the rules through the admin API (the client must be a super user); the number created."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)

    from rftbus.ground.kafka.clients import make_admin

    kinds = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
             "transactional_id": ResourceType.TRANSACTIONAL_ID}
    bindings = [AclBinding(kinds[r.resource], r.name, ResourcePatternType[r.pattern.upper()], r.principal, "*",
                           AclOperation[r.operation], AclPermissionType.ALLOW) for r in rules]
    admin = make_admin(cfg)  # held until every answer is in: a collected client fails its futures
    futures = admin.create_acls(bindings, request_timeout=timeout_s)
    try:
        for f in futures.values():
            f.result(timeout=timeout_s)
    except KafkaException as e:
        raise RftbusError(f"creating ACLs failed: {e.args[0].str() if e.args else e} (the client must be a super "
                          "user of a broker with an authorizer: kafka.client holds its SASL settings)") from None
    return len(bindings)
