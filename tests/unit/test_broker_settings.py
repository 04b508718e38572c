"""The embedded broker's settings a user can change: server.properties entries over rftbus's own, and the JVM's
flags (the lean defaults are measured by `rftbus bench broker`)."""

from __future__ import annotations

from rftbus.ground.broker import embedded, node_config
from rftbus.ground.config import BrokerConfig, Config


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


def test_clients_give_up_on_a_silent_node_when_the_embedded_cluster_fences_it(tmp_path):
    """#46: a frozen node (its connections stay open) held each request sent to it for the clients' whole request
    timeout (10 s), a killed one only until the controllers fenced it (4 s): the trainer stalled 2.5x as long. On
    the embedded cluster the clients' default timeout is the cluster's fencing time, read from its own settings."""
    from rftbus.ground.config import KafkaConfig

    cluster = Config(broker=BrokerConfig(nodes=3))
    props = _props(cluster, tmp_path)
    assert cluster.request_timeout_s * 1000 == int(props["broker.session.timeout.ms"])
    assert Config().request_timeout_s == 10.0  # one node: nothing to fail over to
    external = Config(broker=BrokerConfig(nodes=3), kafka=KafkaConfig(bootstrap_servers="kafka:9092"))
    assert external.request_timeout_s == 10.0  # a cluster rftbus does not run: its fencing time is not known here
    assert Config(broker=BrokerConfig(nodes=3), kafka=KafkaConfig(request_timeout_s=7)).request_timeout_s == 7
    # the setting survives a dump and a reload unset, so a copy with more nodes still follows its cluster
    again = Config.model_validate({**Config().model_dump(), "broker": {"nodes": 3}})
    assert again.request_timeout_s == cluster.request_timeout_s
