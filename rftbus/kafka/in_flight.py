"""Records one sink produced that Kafka has not acknowledged yet, apart from the others a shared producer holds.

`producer.flush()` waits for everything the producer holds: a trainer checkpoint that must wait for its own
rejections also waited for the metrics and weight records beside them, and a frozen leader of any of those
topics held the step for a request timeout or two. `wait` serves the producer's callbacks until this sink's
own records are acknowledged; a delivery that failed is kept and raised, naming the record.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class DeliveryError(RuntimeError):
    """Kafka refused or gave up on a record (after the producer's own retries)."""


class InFlight:
    def __init__(self, what: str):
        self.what = what  # "rejection", "weight version": named in errors
        self.outstanding = 0
        self.failed: list[str] = []

    def expect(self, name: str) -> Callable[[Any, Any], None]:
        """One more record on its way; the delivery callback to produce it with."""
        self.outstanding += 1

        def on_delivery(err: Any, _msg: Any) -> None:
            self.outstanding -= 1
            if err is not None:
                self.failed.append(f"{self.what} {name}: {err.str()}")
        return on_delivery

    def raise_failed(self) -> None:
        if self.failed:
            failed, self.failed = self.failed, []
            raise DeliveryError(f"not acknowledged by the broker: {'; '.join(failed)}")

    def wait(self, producer: Any, timeout: float) -> None:
        """Serve the producer's callbacks until every record of this sink is acknowledged (or `timeout`)."""
        deadline = time.monotonic() + timeout
        while self.outstanding > 0 and time.monotonic() < deadline:
            producer.poll(min(0.1, max(0.0, deadline - time.monotonic())))
        self.raise_failed()
        if self.outstanding > 0:
            raise DeliveryError(f"{self.outstanding} {self.what}(s) not acknowledged by the broker within {timeout:g} s")
