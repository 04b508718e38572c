"""Serve behind the gate under faults and forged records (#63), a real `rftbus serve` process on the real broker:
it starts from what the decisions leave serving (the first promoted version's file long collected, as the trainer's
garbage collection does), believes no decision the gate did not make (another writer's, a share outside [0, 1],
hundreds of rollbacks, canaries of lineages nobody trains, which leaked a weights follower each), keeps its threads
and file descriptors, and answers again within a stated time after a kill -9."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

from rftbus.ground.config import write_config
from rftbus.consumers.gate.state import GateState
from rftbus.ground.kafka.clients import make_admin, make_producer
from rftbus.ground.kafka.topics import create_topics
from rftbus.producers.serve.sessions import SESSION_HEADER
from rftbus.ground.schemas import GateDecision, now_ms
from rftbus.ground.status import read_statuses
from rftbus.ground.weights.store_transport import store_url, version_uri
from tests.integration.test_serve import CODEC, INF, serve_config
from tests.integration.test_serve_gate import LORA, publish_adapter

RESTART_S = 90.0  # a killed serve answers again within this (the suite's machines; ~10-20 s measured here)


def gates_own_decisions(cfg) -> list[GateDecision]:
    """What the real gate state decides for: v0 seeds, v1 on canary and promoted on equal grades, v2 on canary."""
    state = GateState(cfg.model.name, cfg.gate, cfg.gate.id)
    t = now_ms() - 60_000
    state.published(0)
    made = state.look(t)
    state.published(1)
    made += state.look(t + 1000)
    for i in range(cfg.gate.min_answers):
        for v in (0, 1):
            state.served(f"{v}-{i}", v, t + 2000)
            state.graded(f"{v}-{i}", 1.0)
    made += state.look(t + 3000)
    state.published(2)
    made += state.look(t + 4000)
    assert [(d.decision, d.version) for d in made] == [("promote", 0), ("canary", 1), ("promote", 1), ("canary", 2)]
    return made


def forged_decisions(cfg, n: int) -> list[GateDecision]:
    def d(decision_id: str, **kw) -> GateDecision:
        base = dict(model=cfg.model.name, decision="canary", version=0, serving=1, candidate=0, canary_share=0.3,
                    gate=cfg.gate.id, reason="forged")
        return GateDecision(decision_id=decision_id, **{**base, **kw})

    return ([d("intruder", gate="intruder", version=9, candidate=9, canary_share=0.9),
             d("old", serving=0, version=3, candidate=3),  # new sessions back on v0
             d("nan", version=3, candidate=3, canary_share=math.nan),
             d("big", version=3, candidate=3, canary_share=7.0)]
            + [d(f"rb-{i}", decision="rollback", version=2, serving=0, candidate=None, canary_share=0.0)
               for i in range(n)]
            + [d(f"lin-{i}", version=3, candidate=3, lineage=f"nobody-{i}") for i in range(n)])


def write(cfg, decisions: list[GateDecision]) -> None:
    p = make_producer(cfg)
    for d in decisions:
        p.produce(cfg.topics.decisions.name, key=d.model.encode(), value=CODEC.encode(d, None))
    assert p.flush(30) == 0


def start(path: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rftbus", "--config", str(path), "serve", "--log-level", "warning"],
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)


def first_answer(url: str, proc: subprocess.Popen, log: Path, timeout: float = RESTART_S) -> float:
    """Seconds until serve answers a completion with 200."""
    t0 = time.monotonic()
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() - t0 < timeout, f"serve did not answer in {timeout} s:\n{log.read_text()[-3000:]}"
        try:
            r = httpx.post(url + "/v1/completions", json={"prompt": "1+1=", "max_tokens": 2},
                           headers={"Authorization": f"Bearer {INF}"}, timeout=30)
            if r.status_code == 200:
                return time.monotonic() - t0
        except httpx.TransportError:
            pass
        time.sleep(0.3)


def status(cfg, pid: int, want=lambda s: True, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        found = [s for s in read_statuses(cfg.state_dir, "serve") if s.get("pid") == pid]
        if found and want(found[0]):
            return found[0]
        assert time.monotonic() < deadline, found
        time.sleep(0.3)


OTHER = "inference-token-of-another-client"


def versions(url: str, sessions: list[str], token: str = INF) -> dict[str, int]:
    out = {}
    with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {token}"}) as c:
        for s in sessions:
            r = c.post("/v1/completions", json={"prompt": "3+4=", "max_tokens": 2}, headers={SESSION_HEADER: s})
            assert r.status_code == 200, r.text
            out[s] = int(r.headers["X-Rftbus-Model-Version"])
    return out


def counts(pid: int) -> tuple[int, int]:
    return len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd"))


def test_serve_restarts_on_what_serves_and_believes_no_forged_decision(broker, tmp_path):
    cfg = serve_config(tmp_path / "state", broker.broker.port, uuid.uuid4().hex[:6], **{
        "gate.enabled": True, "gate.min_answers": 2, "trainer.lora": LORA, "serve.weights_wait_s": 30.0,
        "serve.inference_tokens": [INF, OTHER], "serve.max_sessions": 4})
    create_topics(cfg, make_admin(cfg))
    for v, scale in ((0, 0.0), (1, 0.02), (2, 0.04)):
        publish_adapter(cfg, v, scale)
    write(cfg, gates_own_decisions(cfg))
    Path(version_uri(store_url(cfg), cfg.model.name, 0).removeprefix("file://")).unlink()  # collected long ago
    path, log = write_config(cfg, tmp_path / "serve.yaml"), tmp_path / "serve.log"
    url = f"http://{cfg.serve.host}:{cfg.serve.port}"
    proc = start(path, log)
    try:
        took = first_answer(url, proc, log)
        st = status(cfg, proc.pid, lambda s: s.get("gate_candidate") == 2)
        assert (st["gate_serving"], st["gate_candidate"], st["gate_decisions"]) == (1, 2, 4), st
        assert st["gate_adapters_loaded"] == 2  # what serves and the candidate, not every version ever named
        before = counts(proc.pid)
        n = 100
        write(cfg, forged_decisions(cfg, n))
        st = status(cfg, proc.pid, lambda s: s.get("gate_decisions_refused", 0) >= 4 + 2 * n)
        assert (st["gate_serving"], st["gate_candidate"], st["gate_decisions"]) == (1, 2, 4), st
        after = counts(proc.pid)
        assert after[0] == before[0] and after[1] <= before[1] + 2, (before, after)  # no follower per lineage
        got = versions(url, [f"s{i}" for i in range(30)])
        assert set(got.values()) == {1, 2}, got  # the candidate's 30 %, never v0 or a forged version
        assert 2 <= sum(v == 2 for v in got.values()) <= 18, got
        # pins are per client: another client's many new sessions never evict this one's (serve.max_sessions 4)
        mine = {s: got[s] for s in list(got)[-4:]}  # this client's last 4 sessions
        versions(url, [f"theirs-{i}" for i in range(40)], token=OTHER)
        assert versions(url, list(mine)) == mine

        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        proc = start(path, log)
        again = first_answer(url, proc, log)
        st = status(cfg, proc.pid, lambda s: s.get("gate_candidate") == 2)
        assert (st["gate_serving"], st["gate_candidate"], st["gate_decisions"]) == (1, 2, 4), st
        print(f"serve answered {took:.1f} s after its first start, {again:.1f} s after a kill -9")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
