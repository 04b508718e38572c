"""#34: what an operator's Prometheus scrapes during `rftbus run` (with serve and the studio among its children):
every family, read by prometheus_client's own parser, present and moving between two scrapes. #45: the same run
reports to TensorBoard, W&B (offline) and MLflow (its SQLite store), and each holds the held-out eval curve after it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import json
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO, stop_run
from tests.integration.test_trackers import tracked_eval_curves
from tests.system.test_run import _env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> dict[str, float]:
    """family -> the sum of its samples (sum of _count for histograms): one number that moves when it does."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(httpx.get(url, timeout=10).text):
        samples = [s for s in fam.samples if fam.type != "histogram" or s.name.endswith("_count")]
        out[fam.name] = sum(s.value for s in samples)  # 0 for a family with no samples yet (present, not moved)
    return out


MOVING = ("rftbus_trainer_steps", "rftbus_weight_version", "rftbus_explorer_experiences", "rftbus_streams_curated")


def wait_scrape(url: str, proc: subprocess.Popen, log: Path, timeout: float = 240) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            return scrape(url)
        except httpx.HTTPError:
            assert time.monotonic() < deadline, f"{url} never answered: {log.read_text()[-3000:]}"
            time.sleep(1)


@pytest.mark.timeout(600)
def test_metrics_of_a_run_and_its_children_are_present_and_moving(broker, tmp_path):
    run_port, serve_port, studio_port = free_port(), free_port(), free_port()
    env = {**os.environ, **_env(broker, uuid.uuid4().hex[:6]), "RFTBUS_RUN__METRICS_PORT": str(run_port),
           "RFTBUS_RUN__SERVE": "true", "RFTBUS_SERVE__PORT": str(serve_port), "RFTBUS_RUN__STUDIO": "true",
           "RFTBUS_STUDIO__PORT": str(studio_port), "RFTBUS_STUDIO__MOUNT_IN_SERVE": "false"}
    config = yaml.safe_load((REPO / "configs" / "toy.yaml").read_text())
    config["run"].update(report_to=["tensorboard", "wandb", "mlflow"], eval_every_versions=5)
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump(config))
    state = tmp_path / "state"
    cmd = [str(Path(sys.executable).parent / "rftbus"), "--state-dir", str(state), "run",
           str(tmp_path / "toy.yaml"), "--max-steps", "400", "--minutes", "6"]
    log = tmp_path / "run.out"
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
    run_url, serve_url = f"http://127.0.0.1:{run_port}/metrics", f"http://127.0.0.1:{serve_port}"
    studio_url = f"http://127.0.0.1:{studio_port}/studio"
    try:
        wait_scrape(run_url, proc, log)
        deadline = time.monotonic() + 240
        while (not (first := scrape(run_url)).get("rftbus_trainer_steps", 0) >= 2
               or not first.get("rftbus_consumer_lag", 0) >= 0 or "rftbus_eval_reward" not in first):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(1)
        s1, st1 = wait_scrape(serve_url + "/metrics", proc, log), wait_scrape(studio_url + "/metrics", proc, log)
        c = httpx.Client(base_url=serve_url, timeout=60)
        for _ in range(3):
            c.post("/v1/completions", json={"prompt": "1+2=", "max_tokens": 4})
            with c.stream("POST", "/v1/completions", json={"prompt": "3+4=", "max_tokens": 4, "stream": True}) as r:
                r.read()
        c.post("/v1/completions", json={"prompt": "1+2=", "logit_bias": {"1": 2}})  # a rejection
        httpx.get(studio_url + "/dashboard", timeout=60)
        deadline = time.monotonic() + 120  # until the loop's counters have moved on from the first scrape
        while not all((second := scrape(run_url)).get(f, 0) > first.get(f, 0) for f in MOVING):
            assert proc.poll() is None and time.monotonic() < deadline, (second, log.read_text()[-3000:])
            time.sleep(0.5)
        s2, st2 = scrape(serve_url + "/metrics"), scrape(studio_url + "/metrics")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(180)
        finally:
            stop_run(proc, state)
    assert 0 <= second["rftbus_eval_reward"] <= 1 and "rftbus_eval_version" in second
    points = [json.loads(line) for line in (state / "run" / "eval.jsonl").read_text().splitlines()]
    assert len(points) >= 2, points  # v0 and the last version at least
    curves = tracked_eval_curves(state)
    assert {k: len(v) for k, v in curves.items()} == dict.fromkeys(("tensorboard", "wandb", "mlflow"), len(points)), \
        (curves, points)
    for name, curve in curves.items():  # the same points, in the same order, in every tracker
        assert curve == pytest.approx([p["reward"] for p in points]), name
    for fam in MOVING:
        assert second[fam] > first[fam], (fam, first.get(fam), second.get(fam))
    for fam in ("rftbus_trainer_staleness", "rftbus_trainer_tokens_per_second", "rftbus_consumer_lag",
                "rftbus_streams_rejected", "rftbus_child_restarts"):
        assert fam in second, fam
    for fam in ("rftbus_serve_request_seconds", "rftbus_serve_time_to_first_token_seconds",
                "rftbus_serve_completion_tokens", "rftbus_serve_requests", "rftbus_serve_rejections"):
        assert s2[fam] > s1.get(fam, 0), (fam, s1.get(fam), s2.get(fam))
    assert "rftbus_serve_model_version" in s2 and s2["rftbus_serve_model_version"] >= 0
    assert st2["rftbus_studio_request_seconds"] > st1.get("rftbus_studio_request_seconds", 0)
