"""#34: an agent's episode through the real broker, a real `rftbus streams` worker and a real `rftbus train`:
five calls tied by a session (the `/sessions/{id}/v1` base URL and the header), one grade on the session,
credited to every call (discounted: the last call gets the whole grade), each call trained exactly once."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from rftbus.apps.bench.processes import WorkerProcess, read_all
from rftbus.producers.serve.server import BackgroundServer
from rftbus.ground.schemas import make_codec
from rftbus.trainer.checkpoint import read_lineage
from tests.integration.test_serve import free_port
from tests.integration.test_trainer import start_trainer, trainer_config, wait_for

DECODE = make_codec(None).deserializer()


@pytest.mark.timeout(600)
def test_an_episode_of_five_calls_graded_once_trains_each_call_once(broker, tmp_path):
    tag = uuid.uuid4().hex[:6]
    cfg, path = trainer_config(tmp_path, broker, **{
        "rl.group_size": 1, "rl.batch_groups": 5, "rl.max_staleness": 1000, "trainer.step_wait_s": 30.0,
        "streams.app_id": f"ep{tag}", "streams.tick_interval_s": 0.5, "streams.commit_interval_s": 0.2,
        "streams.version_wait_s": 0.5, "streams.feedback_ttl_s": 120.0,
        "serve.port": free_port(), "serve.weights_wait_s": 2.0, "serve.id": f"serve-{tag}",
        "serve.episode_credit": "discounted", "serve.episode_discount": 0.5})
    worker = WorkerProcess(cfg, f"w{tag}", tmp_path / "worker.log")
    trainer = None
    try:
        worker.wait_ready(120)
        session = f"agent-{tag}"
        with BackgroundServer(cfg) as s:
            calls = []
            for turn in range(5):  # both ways of naming the session
                url, headers = (f"{s.url}/sessions/{session}/v1/chat/completions", {}) if turn % 2 else \
                    (f"{s.url}/v1/chat/completions", {"X-Rftbus-Session-Id": session})
                r = httpx.post(url, headers=headers, timeout=60, json={
                    "messages": [{"role": "user", "content": f"{turn}+1="}], "max_tokens": 4, "task_id": "episode"})
                assert r.status_code == 200, r.text
                calls.append(r.headers["X-Rftbus-Experience-Id"])
            fb = httpx.post(f"{s.url}/v1/feedback", json={"session_id": session, "reward": 1.0}, timeout=60)
            assert fb.status_code == 202, fb.text
            body = fb.json()
            assert body["experience_ids"] == calls and body["credited"] == [0.0625, 0.125, 0.25, 0.5, 1.0]
            unknown = httpx.post(f"{s.url}/v1/feedback", json={"session_id": "nobody", "reward": 1.0}, timeout=60)
            assert unknown.status_code == 404 and "session 'nobody'" in unknown.json()["error"]["message"]
        raw = read_all(cfg, cfg.topics.raw.name, decode=DECODE, idle_s=0.3)
        turns = {g.samples[0].experience_id: g.metadata for g in raw}
        assert [turns[c]["session_turn"] for c in calls] == ["0", "1", "2", "3", "4"]
        assert {turns[c]["session_id"] for c in calls} == {session}
        # the streams join each credited grade to its call
        deadline = time.monotonic() + 90
        while True:
            curated = [g for role in ("curated", "curated_priority")
                       for g in read_all(cfg, getattr(cfg.topics, role).name, decode=DECODE, idle_s=0.3)]
            got = {e.experience_id: (g, e) for g in curated for e in g.kept()}
            if set(calls) <= set(got) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert set(calls) <= set(got), worker.tail()
        assert [got[c][1].reward for c in calls] == [0.0625, 0.125, 0.25, 0.5, 1.0]
        assert {got[c][0].metadata["session_id"] for c in calls} == {session}
        # the trainer trains every call once
        lineage_file = cfg.state_dir / "checkpoints" / "lineage.jsonl"
        trainer = start_trainer(cfg, path, "--max-steps", "1")
        wait_for(lambda: set(calls) <= {i for line in read_lineage(lineage_file) for i in line["experience_ids"]},
                 300, "the episode's calls in the trainer's lineage", trainer)
        trained = [i for line in read_lineage(lineage_file) for i in line["experience_ids"]]
        assert sorted(i for i in trained if i in calls) == sorted(calls)
    finally:
        if trainer is not None and trainer.poll() is None:
            trainer.terminate()
            trainer.wait(60)
        assert worker.stop() == 0, worker.tail()
