"""A function called every few seconds in a thread of its own, off `rftbus run`'s watch loop.

Reads that go to Kafka (consumer lags, backlogs for the next pass) can wait seconds on a frozen node; on the
watch loop they held everything behind them (#46). An error in one call is reported and the next call goes on."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Ticker:
    def __init__(self, fn: Callable[[], None], every_s: float, name: str, note: Callable[[str], None]):
        self.fn, self.every_s, self.name, self.note = fn, every_s, name, note
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> Ticker:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.fn()
            except Exception as e:  # noqa: BLE001 - one failed call is reported; the next one goes on
                self.note(f"{self.name}: {type(e).__name__}: {e}")
            self._stop.wait(self.every_s)

    def stop(self, timeout_s: float = 30.0) -> bool:
        """True once the thread ended (False: a call still waits on a node; it ends with the process)."""
        self._stop.set()
        self._thread.join(timeout=timeout_s)
        return not self._thread.is_alive()
