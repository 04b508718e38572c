"""Load: 200 concurrent completion + feedback pairs against a real `rftbus serve` process on loopback.
Bounded in count (200 pairs) and time (the whole run has a deadline). Every acknowledged record is
on its topic exactly once, and nothing unacknowledged is there either."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections import Counter

import httpx
from conftest import make_config

from rftbus.ground.kafka.clients import make_admin
from rftbus.ground.kafka.read import read_to_end
from rftbus.ground.kafka.topics import create_topics
from rftbus.apps.bench.processes import ServeProcess
from rftbus.ground.schemas import make_codec
from serve_helpers import TOPIC_KEYS, free_port

PAIRS = 200
DEADLINE_S = 240.0  # generous: the machine is shared; the figures are printed, not asserted tight
DECODE = make_codec(None).deserializer()


async def pair(c: httpx.AsyncClient, i: int, inf: str, fb: str) -> dict:
    t0 = time.perf_counter()
    r = await c.post("/v1/completions", headers={"Authorization": f"Bearer {inf}"},
                     json={"prompt": f"{i % 50}+{i % 7}=", "max_tokens": 4, "task_id": f"load-{i % 20}"})
    t1 = time.perf_counter()
    out = {"completion": r.status_code, "completion_s": t1 - t0}
    if r.status_code != 200:
        return out
    out["experience_id"] = r.headers["X-Rftbus-Experience-Id"]
    f = await c.post("/v1/feedback", headers={"Authorization": f"Bearer {fb}"},
                     json={"experience_id": out["experience_id"], "reward": (i % 5) / 4})
    out.update(feedback=f.status_code, feedback_s=time.perf_counter() - t1)
    if f.status_code == 202:
        out["feedback_id"] = f.json()["feedback_id"]
    return out


async def run_pairs(url: str, inf: str, fb: str) -> list[dict]:
    # No keep-alive: uvicorn closes an idle connection after 5 s, and a request sent on it in that instant
    # fails with ReadError (a client-side race, seen once on a loaded machine), not a refusal by serve.
    limits = httpx.Limits(max_connections=PAIRS, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=DEADLINE_S, limits=limits) as c:
        return await asyncio.wait_for(asyncio.gather(*(pair(c, i, inf, fb) for i in range(PAIRS))), DEADLINE_S)


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q) - 1] if len(xs) > 1 else xs[0]


def test_200_concurrent_pairs_each_record_exactly_once(broker, tmp_path):
    tag = uuid.uuid4().hex[:6]
    inf, fb = f"inf-{uuid.uuid4().hex}", f"fb-{uuid.uuid4().hex}"
    cfg = make_config(tmp_path, broker.broker.port, **{f"topics.{k}.name": f"sl{tag}.{k}" for k in TOPIC_KEYS},
                      **{"serve.port": free_port(), "serve.id": f"serve-load-{tag}", "serve.ack_timeout_s": 60.0,
                         "serve.max_batch": 64, "serve.weights_wait_s": 2.0})
    create_topics(cfg, make_admin(cfg))
    p = ServeProcess(cfg, tmp_path / "serve.log", env={"RFTBUS_SERVE__INFERENCE_TOKENS": inf,
                                                       "RFTBUS_SERVE__FEEDBACK_TOKENS": fb})
    try:
        p.wait_ready(180)
        t0 = time.perf_counter()
        results = asyncio.run(run_pairs(p.url, inf, fb))
        wall = time.perf_counter() - t0
    finally:
        assert p.stop() == 0, p.tail()

    acked_exp = [r["experience_id"] for r in results if r["completion"] == 200]
    acked_fb = [r["feedback_id"] for r in results if r.get("feedback") == 202]
    failures = Counter((r["completion"], r.get("feedback")) for r in results if "feedback_id" not in r)
    lat_c = [r["completion_s"] for r in results if r["completion"] == 200]
    lat_f = [r["feedback_s"] for r in results if r.get("feedback") == 202]
    print(f"\n{PAIRS} pairs in {wall:.1f}s ({PAIRS / wall:.1f} pairs/s); completion p50 {pct(lat_c, 50):.2f}s "
          f"p95 {pct(lat_c, 95):.2f}s; feedback p50 {pct(lat_f, 50) * 1000:.0f}ms p95 {pct(lat_f, 95) * 1000:.0f}ms; "
          f"failures {dict(failures)}")
    assert not failures and len(acked_exp) == len(acked_fb) == PAIRS  # a healthy local broker refuses nothing
    assert wall < DEADLINE_S

    raw = Counter(e.experience_id for g in (DECODE(m.value(), None) for m in read_to_end(cfg, cfg.topics.raw.name))
                  if g.explorer_id == cfg.serve.id for e in g.samples)
    fbs = Counter(f.feedback_id for f in (DECODE(m.value(), None) for m in read_to_end(cfg, cfg.topics.feedback.name)))
    assert {raw[i] for i in acked_exp} == {1} and sum(raw.values()) == len(acked_exp)
    assert {fbs[i] for i in acked_fb} == {1} and sum(fbs.values()) == len(acked_fb)
    assert len(set(acked_exp)) == PAIRS

