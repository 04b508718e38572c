"""The Grafana dashboard and the Prometheus config shipped with compose (deploy/): every query names a metric an
rftbus process really exports (read from the real collectors, not a list), and Prometheus scrapes every process
that serves /metrics. Grafana itself is not run here: its server is AGPL-licensed and not served by the
registries this machine reaches, so the dashboard is checked against Grafana's dashboard model instead."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from rftbus.ground.status import write_status

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "rftbus.json"
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}


def exported(registry: CollectorRegistry) -> set[str]:
    names = set()
    for family in registry.collect():
        names |= {family.name + s for s in SUFFIXES.get(family.type, ("",))}
    return names


def every_exported_metric(tmp_path) -> set[str]:
    from rftbus.producers.serve.metrics import ServeMetrics
    from rftbus.apps.run.metrics import StatusCollector

    write_status(tmp_path, "trainer", "0", {"role": "trainer", "id": "0", "step": 3, "staleness": 0.5, "version": 3,
                                            "throughput_tokens_s": 100.0, "last_loss": 0.1})
    write_status(tmp_path, "explorer", "e0", {"role": "explorer", "id": "e0", "version": 2, "experiences_produced": 64})
    write_status(tmp_path, "streams", "s0", {"role": "streams", "id": "s0", "latest_version": 3, "curated": 10,
                                             "rejected_by_reason": {"zero_variance": 4}})
    run = CollectorRegistry()
    run.register(StatusCollector(tmp_path, lambda: {"trainer": 5}, lambda: {"explorer-0": 1},
                                 lambda: {"version": 3, "reward": 0.5}))
    return exported(run) | exported(ServeMetrics(lambda: 1.0, lambda: 0.0).registry)


def test_the_dashboard_is_a_grafana_dashboard_model():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) >= 10
    for panel in dash["panels"]:
        assert panel["type"] == "timeseries" and panel["targets"], panel["title"]
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        for t in panel["targets"]:
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
            assert t["datasource"]["uid"] == "${datasource}"  # the variable below, so any Prometheus works
    assert [v["name"] for v in dash["templating"]["list"]] == ["datasource"]


def test_every_query_names_a_metric_rftbus_exports(tmp_path):
    have = every_exported_metric(tmp_path)
    assert "rftbus_eval_reward" in have and "rftbus_trainer_staleness" in have  # the gauges #45 asked for
    queried = {m for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]
               for m in re.findall(r"\brftbus_[a-z0-9_]+", t["expr"])}
    assert queried and not queried - have, f"queries name metrics nothing exports: {sorted(queried - have)}"


def test_prometheus_scrapes_every_process_with_metrics():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    prom = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())
    targets = {t for job in prom["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
    for name, svc in compose.items():
        cmd = svc.get("command") or []
        if "--metrics-port" in cmd:
            assert f"{name}:{cmd[cmd.index('--metrics-port') + 1]}" in targets, name
            assert svc["environment"]["RFTBUS_RUN__METRICS_HOST"] == "0.0.0.0", name
    assert "serve:8000" in targets
    grafana = compose["grafana"]
    assert any(v.startswith("./deploy/grafana/dashboards:") for v in grafana["volumes"])
    source = yaml.safe_load((REPO / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
    assert source["datasources"][0]["url"] == "http://prometheus:9090"
