"""Serve's per-client rate limits (#34): requests and tokens per minute, refills, refunds, Retry-After."""

from __future__ import annotations

import math

import pytest

from rftbus.producers.serve.limits import RateLimited, RateLimiter


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_requests_per_minute_refill_continuously_and_name_the_wait():
    clock = Clock()
    lim = RateLimiter(requests_per_minute=2, tokens_per_minute=0, clock=clock)
    lim.admit("a", 10)
    lim.admit("a", 10)
    with pytest.raises(RateLimited, match="2 requests per minute") as e:
        lim.admit("a", 10)
    assert e.value.status == 429 and e.value.retry_after_s == pytest.approx(30.0)
    lim.admit("b", 10)  # another client has its own budget
    clock.t = 30.0
    lim.admit("a", 10)  # half a minute refilled one request


def test_tokens_per_minute_charge_the_request_and_refund_what_it_did_not_use():
    clock = Clock()
    lim = RateLimiter(requests_per_minute=0, tokens_per_minute=100, clock=clock)
    lim.admit("a", 80)
    with pytest.raises(RateLimited, match="100 tokens per minute") as e:
        lim.admit("a", 50)
    assert e.value.retry_after_s == pytest.approx(18.0)  # 30 tokens short at 100/60 per second
    lim.refund("a", 60)  # it generated 20 of the 80 it could have
    lim.admit("a", 50)
    with pytest.raises(RateLimited, match="more than the limit") as e:
        lim.admit("a", 101)
    assert math.isinf(e.value.retry_after_s)


def test_off_by_default_and_clients_are_keyed_without_their_token():
    lim = RateLimiter(0, 0)
    for _ in range(1000):
        lim.admit("a", 10_000)
    from pydantic import SecretStr

    from rftbus.ground.web.auth import TokenAuth

    auth = TokenAuth([SecretStr("secret-token")], [])
    key = auth.identity("Bearer secret-token", "1.2.3.4")
    assert "secret" not in key and key.startswith("t:") and auth.identity(None, "1.2.3.4") == "a:1.2.3.4"
    # One token is one client however the header is spelt (the scheme's case, spaces): one bucket, not eight.
    spellings = ["Bearer secret-token", "bearer secret-token", "BEARER secret-token", "Bearer  secret-token",
                 " Bearer secret-token", "Bearer secret-token ", "bEaReR secret-token", "Bearer\tsecret-token"]
    assert {auth.identity(h, "1.2.3.4") for h in spellings[:-1]} == {key}
    assert auth.identity("Bearer not-a-token", "1.2.3.4") == "a:1.2.3.4"  # an unknown token is its address
