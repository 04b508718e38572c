"""Topic ACLs on a real broker (issue #42): the embedded broker with SASL/PLAIN and KRaft's StandardAuthorizer,
the rules of rftbus/ground/kafka/acls.py applied through `rftbus topics acls --apply`, then each role tries to write the
topics that steer the run. Only the trainer writes weights; serve writes raw and feedback, never weights or
curated; a stranger (a user with no rules) writes nothing."""

from __future__ import annotations

from conftest import _free_pair, make_config, rftbus_cli
from confluent_kafka import Producer

from rftbus.ground.broker import embedded
from rftbus.ground.kafka import acls as A
from rftbus.ground.kafka.clients import make_admin
from rftbus.ground.kafka.topics import create_topics

USERS = {"admin": "admin-secret", **{f"rftbus-{r}": f"{r}-secret" for r in A.ROLES}, "stranger": "x-secret"}


def _sasl(user: str) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": user,
            "sasl.password": USERS[user]}


def _write(cfg, user: str, topic: str) -> str:
    """'ok' or the broker's error name for one acknowledged write as `user`."""
    p = Producer({"bootstrap.servers": cfg.bootstrap_servers, **_sasl(user), "acks": "all",
                  "message.timeout.ms": 10000})
    got: list[str] = []
    p.produce(topic, key=b"k", value=b"v", on_delivery=lambda err, msg: got.append("ok" if err is None else err.name()))
    p.flush(15)
    return got[0] if got else "no answer"


def test_only_the_role_that_produces_a_topic_writes_it(tmp_path):
    cfg = make_config(tmp_path / "state", _free_pair(), **{"broker.sasl_users": USERS, "kafka.client": _sasl("admin")})
    try:
        embedded.start(cfg)
        create_topics(cfg, make_admin(cfg))
        cfg_file = tmp_path / "acl.yaml"
        cfg_file.write_text("kafka:\n  client: {security.protocol: SASL_PLAINTEXT, sasl.mechanisms: PLAIN, "
                            f"sasl.username: admin, sasl.password: {USERS['admin']}}}\n")
        out = rftbus_cli(cfg, "--config", str(cfg_file), "topics", "acls", "--apply")
        assert out.returncode == 0 and "created" in out.stdout, out.stderr[-2000:]
        printed = rftbus_cli(cfg, "topics", "acls")
        assert ("--allow-principal User:rftbus-trainer --operation Read --operation Describe --operation "
                f"DescribeConfigs --operation Write --topic {cfg.topics.weights.name}") in printed.stdout
        t = cfg.topics
        assert _write(cfg, "rftbus-trainer", t.weights.name) == "ok"
        for role in ("serve", "explorer", "streams", "studio", "analytics"):
            assert _write(cfg, f"rftbus-{role}", t.weights.name) == "TOPIC_AUTHORIZATION_FAILED", role
        assert _write(cfg, "rftbus-serve", t.raw.name) == "ok" and _write(cfg, "rftbus-serve", t.feedback.name) == "ok"
        assert _write(cfg, "rftbus-serve", t.curated.name) == "TOPIC_AUTHORIZATION_FAILED"
        assert _write(cfg, "rftbus-streams", t.curated.name) == "ok"
        assert _write(cfg, "rftbus-analytics", t.raw.name) == "TOPIC_AUTHORIZATION_FAILED"
        assert _write(cfg, "stranger", t.tasks.name) == "TOPIC_AUTHORIZATION_FAILED"
    finally:
        embedded.stop(cfg)
