"""Per-client rate limits: requests and tokens per minute, answered 429 with `Retry-After` (as OpenAI's).

A client is the authenticated identity (TokenAuth.identity: a digest of its token however the header is spelt,
or its address where the scope is open). Each limit is a token bucket that
refills continuously at limit/60 per second up to the limit. A request is charged one request and its prompt
tokens plus max_tokens when admitted (what it may cost); the tokens it did not generate are refunded when it
finishes, so the tokens budget tracks what was really used. 0 turns a limit off.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rftbus.ground.web.errors import TooManyRequests


class RateLimited(TooManyRequests):
    def __init__(self, message: str, retry_after_s: float):
        super().__init__(message, code="rate_limit_exceeded")
        self.retry_after_s = retry_after_s


@dataclass
class _Bucket:
    level: float
    at: float


class RateLimiter:
    def __init__(self, requests_per_minute: int, tokens_per_minute: int, clock: Callable[[], float] = time.monotonic,
                 max_clients: int = 100_000):
        self.rpm, self.tpm, self.clock, self.max_clients = requests_per_minute, tokens_per_minute, clock, max_clients
        self._req: dict[str, _Bucket] = {}
        self._tok: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    @property
    def on(self) -> bool:
        return bool(self.rpm or self.tpm)

    def _level(self, buckets: dict[str, _Bucket], key: str, limit: int, now: float) -> _Bucket:
        b = buckets.get(key)
        if b is None:
            if len(buckets) >= self.max_clients:  # forget the idlest client: its bucket has refilled the most
                buckets.pop(min(buckets, key=lambda k: buckets[k].at))
            b = buckets[key] = _Bucket(float(limit), now)
        b.level = min(float(limit), b.level + (now - b.at) * limit / 60.0)
        b.at = now
        return b

    def admit(self, key: str, tokens: int) -> None:
        """Charge one request and `tokens`, or raise RateLimited naming the limit and when to retry."""
        if not self.on:
            return
        with self._lock:
            now = self.clock()
            waits = []
            r = self._level(self._req, key, self.rpm, now) if self.rpm else None
            t = self._level(self._tok, key, self.tpm, now) if self.tpm else None
            if r is not None and r.level < 1:
                waits.append(((1 - r.level) * 60 / self.rpm, f"{self.rpm} requests per minute"))
            if t is not None:
                if tokens > self.tpm:
                    raise RateLimited(f"this request may use {tokens} tokens (prompt + max_tokens): more than the "
                                      f"limit of {self.tpm} tokens per minute", math.inf)
                if t.level < tokens:
                    waits.append(((tokens - t.level) * 60 / self.tpm, f"{self.tpm} tokens per minute"))
            if waits:
                wait, what = max(waits)
                raise RateLimited(f"rate limit reached: {what} for this client; retry after {math.ceil(wait)} s",
                                  wait)
            if r is not None:
                r.level -= 1
            if t is not None:
                t.level -= tokens

    def refund(self, key: str, tokens: int) -> None:
        """Give back tokens charged at admission but not used."""
        if not self.tpm or tokens <= 0:
            return
        with self._lock:
            b = self._tok.get(key)
            if b is not None:
                b.level = min(float(self.tpm), b.level + tokens)
