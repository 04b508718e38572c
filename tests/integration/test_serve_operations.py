"""#34, operations: `rftbus serve`'s /metrics read by prometheus_client's own parser while traffic flows (every
family present and moving), and per-client rate limits answered 429 with Retry-After, seen by the OpenAI SDK."""

from __future__ import annotations

import uuid

import httpx
import pytest
from conftest import make_config
from prometheus_client.parser import text_string_to_metric_families

from rftbus.ground.kafka.clients import make_admin
from rftbus.ground.kafka.topics import create_topics
from rftbus.producers.serve.server import BackgroundServer
from tests.integration.test_serve import TOPIC_KEYS, free_port

FAMILIES = ["rftbus_serve_request_seconds", "rftbus_serve_time_to_first_token_seconds",
            "rftbus_serve_completion_tokens", "rftbus_serve_prompt_tokens", "rftbus_serve_requests",
            "rftbus_serve_rejections", "rftbus_serve_feedback", "rftbus_serve_model_version",
            "rftbus_serve_records_inflight"]


def scrape(url: str) -> dict[str, float]:
    """sample name{labels} -> value, parsed by prometheus_client."""
    text = httpx.get(url + "/metrics", timeout=10).text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "le")
            if "le" not in s.labels:
                out[f"{s.name}{{{labels}}}"] = s.value
        out[f"family:{fam.name}"] = 1
    return out


@pytest.fixture(scope="module")
def cfg(broker, tmp_path_factory):
    tag = uuid.uuid4().hex[:6]
    c = make_config(tmp_path_factory.mktemp("ops"), broker.broker.port,
                    **{f"topics.{k}.name": f"op{tag}.{k}" for k in TOPIC_KEYS},
                    **{"serve.port": free_port(), "serve.weights_wait_s": 0.0, "explorer.sampling.max_new_tokens": 8,
                       "serve.rate_limit_requests_per_minute": 6, "serve.inference_tokens": ["tok-a", "tok-b"]})
    create_topics(c, make_admin(c))
    return c


def test_metrics_are_present_and_move_with_traffic(cfg):
    openai = pytest.importorskip("openai")
    with BackgroundServer(cfg) as s:
        before = scrape(s.url)
        assert all(f"family:{f}" in before for f in FAMILIES), [f for f in FAMILIES if f"family:{f}" not in before]
        sdk = openai.OpenAI(base_url=s.url + "/v1", api_key="tok-a", max_retries=0)
        r = sdk.completions.create(model="tiny", prompt="1+1=", max_tokens=6)
        for _ in sdk.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "2+2="}],
                                             max_tokens=6, stream=True):
            pass
        httpx.post(s.url + "/v1/feedback", json={"experience_id": r.choices[0].experience_id, "thumbs": "up"})
        httpx.post(s.url + "/v1/completions", json={"prompt": "1+1=", "max_tokens": 1, "logit_bias": {"1": 5}},
                   headers={"Authorization": "Bearer tok-a"})
        after = scrape(s.url)
    moved = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    assert moved["rftbus_serve_request_seconds_count{endpoint=completions,stream=false}"] == 1
    assert moved["rftbus_serve_request_seconds_count{endpoint=chat.completions,stream=true}"] == 1
    assert moved["rftbus_serve_time_to_first_token_seconds_count{endpoint=chat.completions}"] == 1
    assert moved["rftbus_serve_completion_tokens_total{}"] >= 2 and moved["rftbus_serve_prompt_tokens_total{}"] >= 8
    assert moved["rftbus_serve_requests_total{endpoint=completions,status=200}"] == 1
    assert moved["rftbus_serve_rejections_total{reason=unsupported}"] == 1
    assert moved["rftbus_serve_feedback_total{kind=thumbs}"] == 1
    assert after["rftbus_serve_model_version{}"] == 0


def test_a_client_over_its_rate_limit_gets_429_with_retry_after(cfg):
    openai = pytest.importorskip("openai")
    with BackgroundServer(cfg) as s:
        a = openai.OpenAI(base_url=s.url + "/v1", api_key="tok-a", max_retries=0)
        b = openai.OpenAI(base_url=s.url + "/v1", api_key="tok-b", max_retries=0)
        for _ in range(6):
            a.completions.create(model="tiny", prompt="1+1=", max_tokens=2)
        with pytest.raises(openai.RateLimitError) as e:
            a.completions.create(model="tiny", prompt="1+1=", max_tokens=2)
        assert e.value.status_code == 429 and 1 <= int(e.value.response.headers["Retry-After"]) <= 10
        assert "6 requests per minute" in e.value.message
        b.completions.create(model="tiny", prompt="1+1=", max_tokens=2)  # another token: its own budget
        assert scrape(s.url)["rftbus_serve_rejections_total{reason=rate_limit_exceeded}"] == 1
