"""Helpers shared by the serve tests in integration/ and system/: a free local port and every topic key
(a module of its own, so a test in one folder does not import a test module from another)."""

from __future__ import annotations

import socket

from rftbus.ground.config import TopicsConfig

TOPIC_KEYS = list(TopicsConfig.model_fields)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
