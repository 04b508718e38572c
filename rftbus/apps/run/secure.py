"""`rftbus run`'s own broker runs with a SASL user per role and the project's ACL table (#63): only the gate
writes decisions, only the trainer weights, and so on (rftbus/ground/kafka/acls.py), so a process that is not the gate
cannot get a record onto the decisions topic however it reaches the broker.

When the run starts its embedded broker (no `kafka.bootstrap_servers`, no `broker.sasl_users` of the user's own,
nothing already listening on its port), it makes one password per role (kept in `<state_dir>/kafka/users.json`,
readable by this user only, so a broker left from an earlier run takes the same ones), starts the broker with
SASL/PLAIN and KRaft's StandardAuthorizer, applies the ACL table as `admin` (the run's own user: it publishes the
tasks, creates the topics and reads the books), and gives each child its role's user in its environment
(`RFTBUS_KAFKA__CLIENT__SASL_*`), never in the config file the children share. What the table does not name (a
consumer group of another prefix, the cluster's idempotent-write right) is left to every authenticated user
(`allow.everyone.if.no.acl.found`: a client without a password of this run cannot connect at all).

`run.acls: false` opens it (said in the run's first lines); a broker the run did not start (one already answering
on the port, `kafka.bootstrap_servers`) keeps its own rules.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from pathlib import Path

from pydantic import SecretStr

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.acls import ROLES, principal

ADMIN = "admin"

# a child's name (before its "-<n>") -> the role whose user it is
ROLE_OF = {"trainer": "trainer", "streams": "streams", "explorer": "explorer", "analytics": "analytics",
           "serve": "serve", "gate": "gate", "studio": "studio", "simulate": "serve", "otelcol": "otel",
           "synthesize": "synthesize"}


def username(role: str) -> str:
    return principal(role).removeprefix("User:")


def users_file(cfg: Config) -> Path:
    return cfg.state_dir / "kafka" / "users.json"


def stored(cfg: Config) -> dict[str, str]:
    """The users the state folder holds (none yet: {})."""
    path = users_file(cfg)
    if not path.exists():
        return {}
    try:
        return {str(k): str(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError) as e:
        raise RftbusError(f"{path} cannot be read ({e}): remove it, and the broker's data folder with it") from None


def credentials(cfg: Config) -> dict[str, str]:
    """admin and one user per role -> password, made once per state folder (0600)."""
    path = users_file(cfg)
    want = [ADMIN, *(username(r) for r in ROLES)]
    have = stored(cfg)
    if all(u in have for u in want):
        return have
    users = {**{u: secrets.token_urlsafe(24) for u in want}, **have}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(users, f)
    return users


def sasl(user: str, password: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": user,
            "sasl.password": password}


def _listening(cfg: Config) -> bool:
    try:
        with socket.create_connection((cfg.broker.host, cfg.broker.port), timeout=0.5):
            return True
    except OSError:
        return False


def plan(cfg: Config) -> tuple[Config | None, str]:
    """(the run's config with its broker secured, or None; the line that says which)."""
    if cfg.kafka.bootstrap_servers:
        return None, f"Kafka at {cfg.kafka.bootstrap_servers}: its own users and ACLs"
    if cfg.broker.sasl_users:
        return None, "Kafka: the embedded broker with broker.sasl_users (apply the ACLs: rftbus topics acls --apply)"
    if not cfg.run.acls:
        return None, ("[bold red]run.acls is false: the embedded broker takes any client, and any process that "
                      f"reaches {cfg.broker.bootstrap} can write any topic, the gate's decisions included[/]")
    if _listening(cfg) and not users_file(cfg).exists():
        return None, (f"Kafka: a broker already answers at {cfg.broker.bootstrap} that this run did not start: its "
                      "own users and ACLs")
    users = credentials(cfg)
    broker = cfg.broker.model_copy(update={
        "sasl_users": {u: SecretStr(p) for u, p in users.items()},
        "properties": {"allow.everyone.if.no.acl.found": "true", **cfg.broker.properties}})
    kafka = cfg.kafka.model_copy(update={"client": {**cfg.kafka.client, **sasl(ADMIN, users[ADMIN])}})
    secured = cfg.model_copy(update={"broker": broker, "kafka": kafka})
    return secured, "Kafka: a SASL user per role and the ACL table (only the gate writes decisions; run.acls: false opens it)"


def child_env(child: str, cfg: Config) -> dict[str, str]:
    """The environment that makes child `child` (trainer, streams-0, explorer-1, ...) its role's user."""
    role = ROLE_OF[child.split("-")[0]]
    user = username(role)
    password = cfg.broker.sasl_users[user].get_secret_value()
    return {f"RFTBUS_KAFKA__CLIENT__{k.upper().replace('.', '_')}": v for k, v in sasl(user, password).items()}


def _without_login(client: dict) -> dict:
    return {k: v for k, v in client.items() if not k.startswith("sasl.") and k != "security.protocol"}


def for_children(cfg: Config, original: Config) -> Config:
    """The config file the children share: no passwords of the broker's users (each child gets its own)."""
    return cfg.model_copy(update={"broker": cfg.broker.model_copy(update={"sasl_users": {}}),
                                  "kafka": cfg.kafka.model_copy(update={"client": _without_login(
                                      original.kafka.client)})})


def as_admin_of_the_run(cfg: Config) -> Config:
    """A command given the state folder of a run that secured its broker (`rftbus tail`, `status`, `topics`, ...)
    logs in as that run's admin, unless it was given a login of its own (a run's child has its role's)."""
    if cfg.kafka.bootstrap_servers or cfg.broker.sasl_users or "sasl.username" in cfg.kafka.client \
            or not cfg.run.acls:
        return cfg
    try:
        users = stored(cfg)
    except RftbusError:  # (`rftbus run` says so; another command goes on without the run's login)
        return cfg
    if ADMIN not in users:
        return cfg
    return cfg.model_copy(update={"kafka": cfg.kafka.model_copy(update={
        "client": {**cfg.kafka.client, **sasl(ADMIN, users[ADMIN])}})})
