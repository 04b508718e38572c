"""What is never printed or handed to a tracker: values of settings named like secrets.

Typed secrets (pydantic SecretStr: serve's tokens, the SASL users, the analytics password) are masked by pydantic
itself; the free-form client settings (`kafka.client`, `schema_registry.client`) hold librdkafka's own keys as plain
strings, so `sasl.password` or `basic.auth.user.info` went into the TensorBoard event file and `rftbus config`'s
output (#63). Those are masked here by name.
"""

from __future__ import annotations

import re
from typing import Any

SECRET_KEY = re.compile(r"password|passwd|secret|api_?key|user\.info|credential|(^|[._])tokens?$", re.IGNORECASE)
MASK = "**********"


def is_secret(key: str) -> bool:
    return bool(SECRET_KEY.search(key))


def redact(data: Any, prefix: str = "") -> Any:
    """`data` (nested dicts and lists of a config dump) with every string under a secret-named key masked."""
    if isinstance(data, dict):
        return {k: redact(v, f"{prefix}{k}.") for k, v in data.items()}
    if isinstance(data, list):
        return [redact(v, prefix) for v in data]
    if isinstance(data, str) and data and is_secret(prefix[:-1]):
        return MASK
    return data
