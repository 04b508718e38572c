"""The embedded broker's settings a user can change: server.properties entries over rftbus's own, and the JVM's
flags (the lean defaults are measured by `rftbus bench broker`)."""

from __future__ import annotations

from rftbus.broker import embedded, node_config
from rftbus.config import BrokerConfig, Config


def _props(cfg: Config, tmp_path) -> dict[str, str]:
    text = node_config.server_properties(cfg, node_config.BrokerPaths(tmp_path), 1)
    return dict(line.split("=", 1) for line in text.splitlines())


def test_properties_override_rftbus_defaults_and_add_new_ones(tmp_path):
    base = _props(Config(), tmp_path)
    assert base["metadata.max.idle.interval.ms"] == "5000" and base["log.cleaner.enable"] == "true"
    cfg = Config(broker=BrokerConfig(properties={"metadata.max.idle.interval.ms": 500, "log.cleaner.enable": False,
                                                 "num.io.threads": 2}))
    props = _props(cfg, tmp_path)
    assert props["metadata.max.idle.interval.ms"] == "500"
    assert props["log.cleaner.enable"] == "false"  # a YAML boolean is written the way Kafka reads it
    assert props["num.io.threads"] == "2"
    assert {k: v for k, v in props.items() if k not in cfg.broker.properties} == \
        {k: v for k, v in base.items() if k not in cfg.broker.properties}


def test_the_jvm_gets_the_configured_flags_after_its_heap(tmp_path):
    cfg = Config(state_dir=tmp_path)
    cmd = node_config.java_cmd(cfg, "java", "cp", embedded.MAIN_CLASS)
    assert cmd[1:5] == ["-Xmx512m", "-Xms512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
    cfg = Config(state_dir=tmp_path, broker=BrokerConfig(jvm_opts=["-XX:+UseG1GC"], heap="1g"))
    cmd = node_config.java_cmd(cfg, "java", "cp", embedded.MAIN_CLASS)
    assert cmd[1:4] == ["-Xmx1g", "-Xms1g", "-XX:+UseG1GC"] and "-XX:+UseSerialGC" not in cmd
