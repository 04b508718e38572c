"""Who a caller is, through a real `rftbus serve` (issue #42): a session belongs to the token that opened it, and
one token is one rate-limited client however its header is spelt."""

from __future__ import annotations

import uuid

import httpx

from rftbus.ground.kafka.clients import make_admin
from rftbus.ground.kafka.topics import create_topics
from rftbus.producers.serve.server import BackgroundServer
from tests.integration.test_serve import serve_config

ALICE, MALLORY = "alice-" + uuid.uuid4().hex, "mallory-" + uuid.uuid4().hex


def _chat(url: str, authorization: str, session: str | None = None) -> httpx.Response:
    path = f"/sessions/{session}/v1/chat/completions" if session else "/v1/chat/completions"
    return httpx.post(url + path, headers={"Authorization": authorization}, timeout=60,
                      json={"messages": [{"role": "user", "content": "1+1="}], "max_tokens": 2})


def test_sessions_belong_to_their_token_and_one_token_is_one_client(broker, tmp_path):
    tag = uuid.uuid4().hex[:6]
    cfg = serve_config(tmp_path, broker.broker.port, tag, **{
        "serve.inference_tokens": [ALICE, MALLORY], "serve.rate_limit_requests_per_minute": 6})
    create_topics(cfg, make_admin(cfg))
    with BackgroundServer(cfg) as s:
        session = f"ep-{tag}"
        assert _chat(s.url, f"Bearer {ALICE}", session).status_code == 200
        r = _chat(s.url, f"Bearer {MALLORY}", session)
        assert r.status_code == 403 and r.json()["error"]["code"] == "session_not_yours", r.text
        ok = _chat(s.url, f"Bearer {ALICE}", session)
        assert ok.status_code == 200 and ok.headers.get("X-Rftbus-Session-Turn", "1") == "1"
        # Alice has spent 2 of her 6 requests a minute; spelling her token 8 ways does not make 8 clients.
        spellings = [f"Bearer {ALICE}", f"bearer {ALICE}", f"BEARER {ALICE}", f"Bearer  {ALICE}", f"bEaReR {ALICE}",
                     f"BEARER  {ALICE}", f"BeArEr {ALICE}", f"bearer  {ALICE}"]
        codes = [_chat(s.url, h).status_code for h in spellings]
        assert codes.count(200) == 4 and codes.count(429) == 4, codes
        assert _chat(s.url, f"Bearer {MALLORY}").status_code == 200  # her own bucket is untouched
