"""Serve behind the promotion gate (gate.enabled), on the real broker with the real `Gate` and the real engine: a
candidate serves its canary share of new sessions, a session keeps its version, every answer names the decision
that let its version serve (and comes after it), and a candidate the graders find worse is rolled back: new
sessions go to the serving version while the candidate's sessions keep theirs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import torch

from rftbus.consumers.gate.audit import audit_log
from rftbus.consumers.gate.service import Gate
from rftbus.ground.kafka.clients import make_producer
from rftbus.ground.models.config import LoraSpec
from rftbus.ground.models.lineage import weights_key
from rftbus.ground.models.loading import load_policy, load_tokenizer
from rftbus.ground.models.lora import adapter_payload, wrap
from rftbus.producers.serve.gated import GatedVersions
from rftbus.producers.serve.sessions import SESSION_HEADER
from rftbus.ground.schemas import WeightVersion
from rftbus.ground.weights import WeightStore
from rftbus.ground.weights.store_transport import store_url
from tests.integration.test_gate import decisions, wait_for
from tests.integration.test_serve import CODEC, FB, INF, recorded, serving

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}


def publish_adapter(cfg, version: int, scale: float, lineage: str = "", lora: dict = LORA,
                    seed: int | None = None) -> None:
    """Adapter version `version` of the config's model in the store and on the weights topic (scale 0: the seed's),
    of `lineage` (another trainer's, rftbus/ground/models/lineage.py); `seed` fixes the adapter's random A matrices."""
    tok = load_tokenizer(cfg.model)
    if seed is not None:
        torch.manual_seed(seed)
    model = wrap(load_policy(cfg.model, tok), LoraSpec(**lora))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.fill_(scale)
    tensors, meta = adapter_payload(model)
    key = weights_key(cfg.model.name, lineage)
    saved = WeightStore(store_url(cfg)).save(key, version, tensors, meta)
    rec = WeightVersion(model=key, version=version, step=version, uri=saved.uri, sha256=saved.sha256,
                        bytes=saved.bytes)
    p = make_producer(cfg)
    p.produce(cfg.topics.weights.name, key=rec.model.encode(), value=CODEC.encode(rec, None))
    assert p.flush(30) == 0


@contextmanager
def gate_serving(cfg, server, timeout: float) -> Iterator[tuple[GatedVersions, float]]:
    """The real `Gate` on a thread of this test until the block ends, entered once it has promoted v0 (published
    before) and serve follows it (within `timeout` s of the promotion): yields serve's gated versions and that
    deadline (the later waits of a test count from it)."""
    gate = Gate(cfg, report=lambda m: None)
    thread = threading.Thread(target=gate.run, daemon=True)
    thread.start()
    try:
        wait_for(cfg, "promote", 0)
        gated = server.service.gated
        assert gated is not None
        deadline = time.monotonic() + timeout
        while gated.serving is None:
            assert time.monotonic() < deadline, "serve never followed the first promotion"
            time.sleep(0.2)
        yield gated, deadline
    finally:
        gate.stop()
        thread.join(30)


def ask(c: httpx.Client, session: str) -> tuple[int, str]:
    r = c.post("/v1/completions", json={"prompt": "12+30=", "max_tokens": 3}, headers={SESSION_HEADER: session})
    assert r.status_code == 200, r.text
    return int(r.headers["X-Rftbus-Model-Version"]), r.headers["X-Rftbus-Experience-Id"]


def test_serve_follows_the_gate_canary_sessions_keep_their_version_and_a_rollback(broker, tmp_path):
    more = {"gate.enabled": True, "gate.canary_share": 0.5, "gate.min_answers": 10, "gate.hold_every_s": 600.0,
            "trainer.lora": LORA, "serve.weights_wait_s": 60.0, "run.trainers": [{"lineage": "hot"}]}
    with serving(tmp_path, broker, **more) as (cfg, server):
        publish_adapter(cfg, 0, 0.0)
        with gate_serving(cfg, server, 60) as (gated, deadline):
            c = httpx.Client(base_url=server.url, timeout=60, headers={"Authorization": f"Bearer {INF}"})
            assert {ask(c, f"early-{i}")[0] for i in range(3)} == {0}
            publish_adapter(cfg, 1, 0.05)
            wait_for(cfg, "canary", 1)
            while gated.canary is None:
                assert time.monotonic() < deadline + 60, "serve never put v1 on canary"
                time.sleep(0.2)
            answers: dict[str, list[tuple[int, str]]] = {f"s{i}": [] for i in range(40)}
            for _turn in range(2):
                for session, got in answers.items():
                    got.append(ask(c, session))
            versions = {s: {v for v, _ in got} for s, got in answers.items()}
            assert all(len(v) == 1 for v in versions.values()), versions  # a session keeps its version
            on = {s for s, v in versions.items() if v == {1}}
            assert 8 <= len(on) <= 32, len(on)  # about half of the new sessions are on canary
            ids = [e for got in answers.values() for _, e in got]
            rec = recorded(cfg, ids)
            made = {d.decision_id: d for d in decisions(cfg)}
            for eid in ids:
                meta = rec[eid].metadata
                d = made[meta["gate_decision"]]  # the decision that let this version serve ...
                assert d.decision in ("promote", "canary") and rec[eid].model_version in (d.version, d.serving)
                assert d.created_at <= rec[eid].created_at  # ... came before the answer
                assert meta["gate_arm"] == ("canary" if rec[eid].model_version == 1 else "serving")
            # the graders find the candidate worse: rolled back; new sessions go to v0, v1's sessions keep v1
            f = httpx.Client(base_url=server.url, timeout=60, headers={"Authorization": f"Bearer {FB}"})
            for eid in ids:
                r = f.post("/v1/feedback", json={"experience_id": eid, "reward": 0.0 if rec[eid].model_version else 1.0})
                assert r.status_code in (200, 202), r.text
            got = wait_for(cfg, "rollback", 1)
            rb = next(d for d in got if d.decision == "rollback")
            assert rb.evidence["mean_candidate"] == 0.0 and rb.evidence["mean_serving"] == 1.0
            deadline = time.monotonic() + 30
            while gated.canary is not None:
                assert time.monotonic() < deadline, "serve kept the rolled-back candidate on canary"
                time.sleep(0.2)
            assert {ask(c, f"after-{i}")[0] for i in range(12)} == {0}
            pinned = sorted(on)[0]
            assert ask(c, pinned)[0] == 1  # no version change mid-session
            # a second trainer's version (run.trainers): its own lineage though its number, 1, is the rolled-back
            # one's; the graders like it as well as v0: promoted, and every new session is served by it
            publish_adapter(cfg, 1, 0.02, lineage="hot")
            wait_for(cfg, "canary", 1, lineage="hot")
            while gated.canary is None:
                assert time.monotonic() < deadline + 60, "serve never put hot:v1 on canary"
                time.sleep(0.2)
            hot = [ask(c, f"hot-{i}") for i in range(40)]
            rec = recorded(cfg, [e for _, e in hot])
            lineages = {rec[e].metadata["gate_lineage"] for _, e in hot}
            assert lineages == {"", "hot"}, lineages
            assert all(rec[e].metadata["gate_decision"] == f"{cfg.model.name}:hot:v1:canary"
                       for _, e in hot if rec[e].metadata["gate_lineage"] == "hot")
            for _, e in hot:
                assert f.post("/v1/feedback", json={"experience_id": e, "reward": 1.0}).status_code in (200, 202)
            got = wait_for(cfg, "promote", 1, lineage="hot")
            pr = next(d for d in got if d.decision == "promote" and d.lineage == "hot")
            assert (pr.serving, pr.serving_lineage) == (1, "hot")
            while gated.serving.lineage != "hot":  # type: ignore[union-attr]
                assert time.monotonic() < deadline + 120, "serve never served hot:v1"
                time.sleep(0.2)
            after = [ask(c, f"after-hot-{i}") for i in range(6)]
            rec = recorded(cfg, [e for _, e in after])
            assert {(v, rec[e].metadata["gate_lineage"]) for v, e in after} == {(1, "hot")}
            found = audit_log(cfg)  # the log's own account: every answer licensed before it, no session switched
            assert found["ok"] and found["unlicensed_answers"] == 0 and found["sessions_that_switched_version"] == 0
            assert found["promotes_by_lineage"] == {"": 1, "hot": 1} and found["rollbacks"][0]["version"] == "v1"
