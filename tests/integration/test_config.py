"""Config: YAML validated at load, RFTBUS_* overrides, client settings passed through, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from rftbus.ground.config import ConfigError, load_config
from rftbus.ground.kafka.clients import consumer_conf, producer_conf
from tests.conftest import rftbus_cli


def test_defaults_are_the_embedded_broker():
    cfg = load_config(environ={})
    assert cfg.bootstrap_servers == "127.0.0.1:9092"
    assert cfg.topics.weights.cleanup_policy == "compact"
    assert cfg.topics.raw.name == "rft.experiences.raw"


def test_yaml_then_env_then_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("broker:\n  port: 19092\nkafka:\n  client:\n    security.protocol: SASL_SSL\n")
    cfg = load_config(f, environ={"RFTBUS_KAFKA__CLIENT__SASL_MECHANISM": "SCRAM-SHA-512",
                                  "RFTBUS_TOPICS__RAW__PARTITIONS": "8"})
    assert cfg.bootstrap_servers == "127.0.0.1:19092"
    assert cfg.topics.raw.partitions == 8
    conf = producer_conf(cfg)
    # Secured-cluster settings reach librdkafka unchanged; the safety defaults stay.
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["enable.idempotence"] is True and conf["acks"] == "all"
    assert consumer_conf(cfg, "g")["security.protocol"] == "SASL_SSL"
    cfg = load_config(f, overrides={"broker": {"port": 1234}}, environ={"RFTBUS_BROKER__PORT": "5"})
    assert cfg.broker.port == 1234


@pytest.mark.parametrize(
    "text, expected",
    [
        ("kafka:\n  bootstrap_serverz: x\n", "kafka.bootstrap_serverz: unknown key"),
        ("broker:\n  port: lots\n", "broker.port: Input should be a valid integer"),
        ("broker:\n  port: 99999\n", "broker.port: Input should be less than or equal to 65535"),
        ("topics:\n  weights:\n    name: w\n    cleanup_policy: shred\n", "topics.weights.cleanup_policy: Input should be"),
        ("topics:\n  raw:\n    name: r\n    partitions: 0\n", "topics.raw.partitions: Input should be greater than or equal to 1"),
        ("- just\n- a list\n", "must hold a mapping at the top level"),
        ("broker: {port: [1\n", "is not valid YAML at line"),
        ("trainer:\n  loss: grpo\n  demo_replay: 64\n", "loss 'grpo' does not read: use loss mix or sft"),
    ],
)
def test_bad_config_names_the_key(tmp_path, text, expected):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(f, environ={})
    assert expected in str(e.value)
    assert str(f) in str(e.value)


def test_bad_env_override_names_the_key():
    with pytest.raises(ConfigError) as e:
        load_config(environ={"RFTBUS_BROKER__PORT": "abc"})
    assert "broker.port" in str(e.value) and "'abc'" in str(e.value) and "RFTBUS_* environment" in str(e.value)


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml", environ={})


def test_cli_prints_config_errors_without_traceback(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("broker:\n  prot: 1\n")
    out = rftbus_cli(None, "--config", str(f), "status")
    assert out.returncode == 1
    assert "broker.prot: unknown key" in out.stderr
    assert "Traceback" not in out.stderr


def test_child_config_file_keeps_secrets_and_is_private(tmp_path):
    """model_dump(mode="json") masks SecretStr; a child given that file would log in with '**********'."""
    import os
    import stat

    from rftbus.ground.config import write_config

    cfg = load_config(overrides={"analytics": {"password": "s3cret"}, "serve": {"feedback_tokens": ["tok-a"]}},
                      environ={})
    path = write_config(cfg, tmp_path / "child.yaml")
    again = load_config(path, environ={})
    assert again.analytics.password.get_secret_value() == "s3cret"
    assert [t.get_secret_value() for t in again.serve.feedback_tokens] == ["tok-a"]
    assert again.state_dir == cfg.state_dir
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_config_command_prints_every_knob_documented_and_loadable(tmp_path):
    import yaml

    out = rftbus_cli(None, "--state-dir", str(tmp_path), "config", env={"RFTBUS_RL__MAX_STALENESS": "2"})
    assert out.returncode == 0, out.stderr
    assert "max_staleness: 2  # η:" in out.stdout  # the env override is resolved, the knob explained
    data = yaml.safe_load(out.stdout)
    again = load_config(overrides=data, environ={})  # what it prints is a config rftbus accepts as-is
    assert again.rl.max_staleness == 2
    assert again.model_dump(mode="json") == load_config(overrides={"state_dir": str(tmp_path), "rl": {
        "max_staleness": 2}}, environ={}).model_dump(mode="json")
    bad = rftbus_cli(None, "config", "rl.nope")
    assert bad.returncode == 1 and "no config section 'rl.nope'" in bad.stderr


@pytest.mark.parametrize("name", sorted(p.name for p in (Path(__file__).resolve().parents[2] / "configs").glob("*.yaml")))
def test_every_shipped_config_loads(name):
    """A `make demo-*` recipe with a misspelt or refused key fails here, not 20 minutes into a run."""
    cfg = load_config(Path(__file__).resolve().parents[2] / "configs" / name, environ={})
    assert cfg.taskset.name


def test_an_exported_token_is_not_read_as_config(tmp_path, capfd):
    """#45: `export RFTBUS_FEEDBACK_TOKEN=...` (what docs/LIVE_TRAFFIC.md tells graders) broke every command as an
    unknown key. Documented non-config variables are left alone, other unknown names are a warning, a config
    section with a bad key is still an error naming it."""
    cfg = load_config(environ={"RFTBUS_FEEDBACK_TOKEN": "grader-1", "RFTBUS_JUDGE_TOKEN": "x",
                               "RFTBUS_STATE_DIR": str(tmp_path), "RFTBUS_MY_OWN_THING": "1"})
    assert cfg.state_dir == tmp_path
    err = capfd.readouterr().err
    assert "RFTBUS_MY_OWN_THING is not a config key" in err and "FEEDBACK_TOKEN" not in err
    with pytest.raises(ConfigError, match="broker.prot: unknown key"):
        load_config(environ={"RFTBUS_BROKER__PROT": "1"})
    out = rftbus_cli(None, "config", env={"RFTBUS_FEEDBACK_TOKEN": "grader-1"})
    assert out.returncode == 0, out.stderr


def test_the_config_command_never_prints_a_secret(tmp_path):
    """kafka.client and schema_registry.client are free-form librdkafka settings, so their secrets were plain
    strings and `rftbus config` printed them (#63); typed secrets were masked already."""
    f = tmp_path / "c.yaml"
    f.write_text("kafka:\n  client: {security.protocol: SASL_PLAINTEXT, sasl.username: me, sasl.password: hunter2-k}\n"
                 "schema_registry:\n  client: {basic.auth.user.info: 'me:hunter2-r'}\n"
                 "serve:\n  inference_tokens: [hunter2-t]\n")
    for args in (("config",), ("config", "kafka"), ("config", "kafka.client"), ("config", "schema_registry")):
        out = rftbus_cli(None, "--config", str(f), *args)
        assert out.returncode == 0, out.stderr
        assert "hunter2" not in out.stdout + out.stderr, (args, out.stdout)
    kafka = rftbus_cli(None, "--config", str(f), "config", "kafka").stdout
    assert '"sasl.username": "me"' in kafka and '"sasl.password": "**********"' in kafka, kafka
