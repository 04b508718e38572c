"""#45: a stage started on its own (`rftbus train | explore | streams --metrics-port`) serves /metrics of its own
status file, as `rftbus run` does for all of them: scraped over real HTTP, read with prometheus_client's parser."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from rftbus.apps.cli.own_metrics import serve_own
from rftbus.ground.config import Config
from rftbus.ground.status import write_status


def samples(url: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(httpx.get(url, timeout=10).text)}


def test_a_standalone_explorer_serves_its_own_figures_only(tmp_path):
    cfg = Config.model_validate({"state_dir": str(tmp_path)})
    write_status(tmp_path, "trainer", "0", {"role": "trainer", "id": "0", "step": 7, "version": 7, "staleness": 1.0})
    write_status(tmp_path, "explorer", "e0", {"role": "explorer", "id": "e0", "version": 6,
                                              "experiences_produced": 128})
    write_status(tmp_path, "explorer", "e1", {"role": "explorer", "id": "e1", "version": 5,
                                              "experiences_produced": 64})
    said: list[str] = []
    stop = serve_own(cfg, "explorer", "e0", 0, said.append)
    assert stop is not None and said and said[0].startswith("metrics: http://127.0.0.1:")
    try:
        got = samples(said[0].split(" ", 1)[1])
    finally:
        stop()
    assert [(s.labels, s.value) for s in got["rftbus_explorer_experiences"]] == [({"id": "e0"}, 128.0)]
    assert [(s.labels, s.value) for s in got["rftbus_weight_version"]] == [({"role": "explorer", "id": "e0"}, 6.0)]
    assert got["rftbus_trainer_steps"] == []  # the trainer's file is not this process's


def test_no_port_serves_nothing_and_a_taken_port_is_said(tmp_path):
    import socket

    cfg = Config.model_validate({"state_dir": str(tmp_path)})
    assert serve_own(cfg, "trainer", None, None, print) is None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        said: list[str] = []
        assert serve_own(cfg, "trainer", None, s.getsockname()[1], said.append) is None
    assert said and "cannot listen" in said[0]
