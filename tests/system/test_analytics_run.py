"""A short real `rftbus run` with the analytics sink: killed mid-run (the supervisor restarts it),
feedback and garbage injected; afterwards ClickHouse holds exactly what each Kafka topic holds, the
`trained` table is the trainer's lineage, and the report draws every plot from that run's data.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from rftbus.ground.config import load_config
from rftbus.consumers.analytics.query import run_query
from rftbus.consumers.analytics.reader import open_reader
from rftbus.consumers.analytics.tally import table_counts
from rftbus.ground.kafka.clients import make_producer
from rftbus.ground.kafka.read import read_to_end
from rftbus.ground.schemas import ExperienceGroup, Feedback, FeedbackKind
from rftbus.trainer.checkpoint import read_lineage
from tests.conftest import REPO, stop_run
from tests.integration.test_analytics import CODEC, DECODE, TOPIC_KEYS, assert_counts_match, kafka_truth

SECTIONS = ["reward_by_version", "staleness", "rejections", "throughput", "latency", "task_pass_rate", "feedback"]


def colored_pixels(png: Path) -> int:
    """Data marks are colored; axes, ticks, text and an empty frame are gray scale."""
    import matplotlib.image as mpimg

    img = mpimg.imread(str(png))[..., :3]
    return int(((img.max(axis=-1) - img.min(axis=-1)) > 0.15).sum())


def _status(state: Path) -> dict:
    try:
        return json.loads((state / "status" / "analytics-0.json").read_text())
    except (OSError, ValueError):
        return {}


def _trainer_step(state: Path) -> int:
    try:
        return int(json.loads((state / "status" / "trainer-0.json").read_text()).get("step", 0))
    except (OSError, ValueError):
        return 0


def _wait(pred, timeout: float, what: str, proc: subprocess.Popen):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        assert proc.poll() is None, f"rftbus run exited early while waiting for {what}"
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _feedback(cfg, n: int) -> int:
    """Thumbs and rewards for real raw experiences (half agreeing with their reward), plus garbage."""
    groups = [DECODE(m.value(), None) for m in read_to_end(cfg, cfg.topics.raw.name, strict=False, timeout_s=20)]
    exps = [e for g in groups if isinstance(g, ExperienceGroup) for e in g.samples if e.reward is not None][:n]
    producer = make_producer(cfg)
    for i, e in enumerate(exps):
        passed = e.reward >= cfg.analytics.pass_threshold
        fb = (Feedback(experience_id=e.experience_id, kind=FeedbackKind.thumbs, thumbs_up=passed == (i % 2 == 0),
                       annotator="a1") if i % 3 else
              Feedback(experience_id=e.experience_id, kind=FeedbackKind.reward, reward=e.reward, annotator="a2"))
        producer.produce(cfg.topics.feedback.name, key=e.experience_id.encode(), value=CODEC.encode(fb, None))
    for _ in range(2):
        producer.produce(cfg.topics.feedback.name, key=b"x", value=b"\x00garbage")
    producer.flush(30)
    return len(exps)


READER, SECRET = "read-" + uuid.uuid4().hex, "feedback-" + uuid.uuid4().hex


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _hostile_sql_on_the_live_studio(cfg, state: Path) -> None:
    """#42 through a live `rftbus run`: the studio it supervises, a read token, the sweep's forms aimed at the run's
    own 0600 config (which holds the feedback token): refused, no secret, while a real read answers."""
    import httpx

    from hostile_sql import hostile

    url = f"http://127.0.0.1:{cfg.studio.port}/studio/api/sql"
    auth = {"Authorization": f"Bearer {READER}"}
    secret_file = str(state / "run" / "config.yaml")
    assert SECRET in Path(secret_file).read_text()
    for sql, words in hostile(str(state / "pwned")) + [(s.replace("/etc/passwd", secret_file), w)
                                                       for s, w in hostile("x") if "/etc/passwd" in s]:
        r = httpx.post(url, headers=auth, json={"sql": sql}, timeout=60, trust_env=False)
        assert r.status_code == 400 and words in r.json()["error"]["message"], (sql, r.text[:300])
        assert SECRET not in r.text and "root:x:0:0" not in r.text
    assert not (state / "pwned").exists()
    r = httpx.post(url, headers=auth, json={"sql": "SELECT count() AS n FROM experiences"}, timeout=60,
                   trust_env=False)
    assert r.status_code == 200 and r.json()["rows"][0][0] > 0, r.text[:300]
    assert httpx.post(url, json={"sql": "SELECT 1"}, timeout=60, trust_env=False).status_code == 401


def test_run_with_sink_counts_match_kafka_and_report_plots(broker, tmp_path):
    tag = uuid.uuid4().hex[:6]
    env = {f"RFTBUS_TOPICS__{k.upper()}__NAME": f"an{tag}.{spec.name}" for k, spec in broker.topics.all().items()}
    env.update({
        "RFTBUS_KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "RFTBUS_EXPLORER__GROUP_ID": f"an{tag}-explorers", "RFTBUS_STREAMS__APP_ID": f"an{tag}-streams",
        "RFTBUS_TRAINER__GROUP_ID": f"an{tag}-trainer", "RFTBUS_ANALYTICS__GROUP_ID": f"an{tag}-analytics",
        "RFTBUS_ANALYTICS__BATCH_SECONDS": "0.5",
        "RFTBUS_RUN__TASKS": "120", "RFTBUS_RUN__EVAL_N": "8", "RFTBUS_RUN__TASK_PASSES": "1",
        "RFTBUS_RUN__EXPERT_EPOCHS": "1", "RFTBUS_RL__GROUP_SIZE": "4", "RFTBUS_RL__BATCH_GROUPS": "4",
        "RFTBUS_STUDIO__PORT": str(_free_port()), "RFTBUS_SERVE__READ_TOKENS": READER,
        "RFTBUS_SERVE__FEEDBACK_TOKENS": SECRET,
    })
    state = tmp_path / "state"
    cfg = load_config(REPO / "configs" / "toy.yaml", {"state_dir": str(state)}, environ={**os.environ, **env})
    cmd = [str(Path(sys.executable).parent / "rftbus"), "--state-dir", str(state), "run",
           str(REPO / "configs" / "toy.yaml"), "--minutes", "8",
           "--summary-json", str(tmp_path / "s.json")]
    log = open(tmp_path / "run.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env})
    try:
        first = _wait(lambda: _status(state) if _status(state).get("messages", 0) > 0 else None, 300,
                      "the sink's first batch", proc)
        _wait(lambda: sum(1 for _ in read_to_end(cfg, cfg.topics.raw.name, strict=False, timeout_s=5)) >= 12,
              300, "raw experiences", proc)
        assert _feedback(cfg, 12) >= 6
        _hostile_sql_on_the_live_studio(cfg, state)
        os.kill(first["pid"], signal.SIGKILL)  # mid-run; the supervisor restarts the sink
        _wait(lambda: _status(state).get("pid") not in (None, first["pid"]) and _status(state).get("messages", 0) > 0,
              120, "the restarted sink's first batch", proc)
        _wait(lambda: _trainer_step(state) >= 4, 300, "trainer step 4", proc)
        proc.send_signal(signal.SIGINT)  # the user's clean stop (a step budget could end the run before the sink is back)
        assert proc.wait(600) == 0, (tmp_path / "run.log").read_text()[-3000:]
    finally:
        stop_run(proc, state)
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["restarts"].get("analytics", 0) >= 1 and s["exit_codes"].get("analytics") == 0, s

    # ClickHouse vs Kafka, topic by topic.
    truth = kafka_truth(cfg)
    with open_reader(cfg) as r:
        assert_counts_match(table_counts(r), truth)
    assert truth["feedback"]["undecodable"] == 2 and truth["raw"]["records"] > 0 and truth["metrics"]["records"] > 0

    # The trained table is the trainer's lineage (published only after durable checkpoints).
    lineage = {e for line in read_lineage(state / "checkpoints" / "lineage.jsonl") for e in line["experience_ids"]}
    trained = run_query(cfg, "SELECT experience_id, staleness FROM trained FINAL")
    assert {r[0] for r in trained.rows} == lineage and lineage
    rl = truth["raw"]["ids"]
    assert max(st for e, st in trained.rows if e in rl) <= cfg.rl.max_staleness

    # The report: every section drawn from this run's data.
    report = tmp_path / "report"
    out = subprocess.run([str(Path(sys.executable).parent / "rftbus"), "--state-dir", str(state), "analytics",
                          "report", "--out", str(report)], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=180)
    assert out.returncode == 0, out.stderr
    summary = json.loads((report / "report.json").read_text())
    md = (report / "README.md").read_text()
    for name in SECTIONS:
        sec = summary["sections"][name]
        assert sec["points"] > 0 and sec["png"], (name, sec)
        png = report / sec["png"]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert colored_pixels(png) > 300, f"{png.name}: no data drawn"
        assert f"]({sec['png']})" in md
    assert summary["counts"]["raw"]["records"] == truth["raw"]["records"]
    assert set(summary["counts"]) == set(TOPIC_KEYS)
