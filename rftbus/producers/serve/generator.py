"""One thread owns the rollout engine: concurrent requests are batched into one `generate` call,
and new weight versions are swapped in between batches (never during one).

Requests batch together when their sampling distribution is the same (temperature, top-p, top-k);
the batch generates the largest max_tokens among them and each completion is cut to its own limit,
which is the same distribution as generating fewer tokens. The version stamped on a completion is
the engine's version when its batch ran. A request's listener hears each of its tokens as the engine
samples it (engines that `streams_tokens`), up to its own limit and first stop id.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol

from rftbus.ground.weights.follower import WeightFollower
from rftbus.ground.weights.swap import swap_in_ready
from rftbus.ground.config.explorer import SamplingConfig
from rftbus.ground.errors import RftbusError
from rftbus.ground.models.lora import Adapter
from rftbus.ground.models.vision import Pixels
from rftbus.producers.engines.base import Completion, RolloutEngine, generate

log = logging.getLogger("rftbus.serve")


@dataclass
class Generated:
    completions: list[Completion]
    version: int
    generation_ms: float


class TokenListener(Protocol):
    """Hears one request's batch from the engine thread: `started` with the weight version it runs on, then
    each sampled token of each choice (engines that stream tokens)."""

    def started(self, version: int) -> None: ...

    def token(self, choice: int, token: int) -> None: ...


@dataclass
class GenRequest:
    prompt_ids: list[int]
    n: int
    sampling: SamplingConfig
    max_new_tokens: int
    listener: TokenListener | None = None
    adapter: str | None = None  # a pushed LoRA adapter by name (serve.accept_lora_pushes); None: what is loaded
    future: Future = field(default_factory=Future)
    pixels: Pixels | None = None  # the images the prompt shows (a VLM: rftbus/ground/models/vision.py)

    @property
    def key(self) -> tuple:
        s = self.sampling
        return s.temperature, s.top_p, s.top_k, s.logprobs, self.adapter


def cut(c: Completion, limit: int, tokenizer) -> Completion:
    if len(c.response_ids) <= limit:
        return c
    ids = c.response_ids[:limit]
    return Completion(ids, c.logprobs[:limit], "length", tokenizer.decode(ids, skip_special_tokens=True),
                      dict(c.metadata))


class Generator:
    def __init__(self, engine: RolloutEngine, tokenizer, follower: WeightFollower | None, *, max_batch: int,
                 batch_wait_s: float, report: Callable[[str], None] = log.warning, stop_ids: list[int] | None = None):
        self.engine, self.tok, self.follower, self.report = engine, tokenizer, follower, report
        self.stop_ids = set(stop_ids or [])
        self.max_batch, self.batch_wait_s = max_batch, batch_wait_s
        self.max_context: int | None = getattr(engine, "max_context", None)
        self._queue: deque[GenRequest] = deque()
        self._cv = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="serve-engine", daemon=True)
        self.batches = 0
        self.adapters: dict[str, tuple[Adapter, int]] = {}  # pushed adapters by name: (adapter, version)
        self._adapter: str | None = None  # the one the engine holds

    def add_adapter(self, name: str, adapter: Adapter, version: int) -> None:
        """Serve `adapter` to requests that name it (swapped in between batches, on the engine thread)."""
        with self._cv:
            self.adapters[name] = (adapter, version)
            if self._adapter == name:
                self._adapter = None  # reloaded under the same name: swap it in again

    def remove_adapter(self, name: str) -> bool:
        with self._cv:
            return self.adapters.pop(name, None) is not None

    @property
    def version(self) -> int:
        return self.engine.version

    def start(self, weights_wait_s: float = 0.0) -> None:
        if self.follower:
            self.follower.start()
            if weights_wait_s and self.follower.caught_up.wait(weights_wait_s):
                swap_in_ready(self.follower, self.engine, self.report, wait_s=weights_wait_s)
        self._thread.start()

    def submit(self, req: GenRequest) -> Future:
        with self._cv:
            if self._stop:
                raise RuntimeError("the engine thread is stopped")
            req.future.set_running_or_notify_cancel()  # a disconnected client cannot cancel it mid-batch
            self._queue.append(req)
            self._cv.notify()
        return req.future

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(timeout=60)
        if self.follower:
            self.follower.stop()
        for req in self._queue:
            req.future.set_exception(RuntimeError("the server is shutting down"))
        self.engine.close()

    def _take_batch(self) -> list[GenRequest]:
        with self._cv:
            while not self._queue and not self._stop:
                self._cv.wait(0.2)
                if self.follower and not self._queue:
                    return []  # idle: let the loop look for new weights
            if self._stop:
                return []
        if self.batch_wait_s:
            time.sleep(self.batch_wait_s)  # let concurrent requests arrive
        with self._cv:
            first = self._queue.popleft()
            batch, prompts = [first], first.n
            longest, most = len(first.prompt_ids), first.max_new_tokens
            for req in list(self._queue):
                if prompts + req.n > self.max_batch:
                    break
                fits = (self.max_context is None or max(longest, len(req.prompt_ids))
                        + max(most, req.max_new_tokens) <= self.max_context)
                if req.key == first.key and fits:
                    self._queue.remove(req)
                    batch.append(req)
                    prompts += req.n
                    longest, most = max(longest, len(req.prompt_ids)), max(most, req.max_new_tokens)
        return batch

    def _run(self) -> None:
        while not self._stop:
            if self.follower:
                swap_in_ready(self.follower, self.engine, self.report)
            batch = self._take_batch()
            if batch:
                self._generate(batch)

    def _generate(self, batch: list[GenRequest]) -> None:
        prompts = [r.prompt_ids for r in batch for _ in range(r.n)]
        shown = [r.pixels for r in batch for _ in range(r.n)]

        most = max(r.max_new_tokens for r in batch)
        if batch[0].adapter is not None and batch[0].adapter != self._adapter:
            try:
                with self._cv:
                    adapter, v = self.adapters[batch[0].adapter]
                self.engine.load_weights(adapter, v)
                self._adapter = batch[0].adapter
            except (KeyError, RftbusError, RuntimeError, ValueError) as e:  # unloaded meanwhile, or does not fit
                for r in batch:
                    r.future.set_exception(RftbusError(f"adapter {batch[0].adapter!r} cannot be served: {e}"))
                return
        version = self.engine.version
        t0 = time.perf_counter()
        for r in batch:
            if r.listener is not None:
                r.listener.started(version)
        on_step = self._dispatch(batch) if self.engine.streams_tokens and any(r.listener for r in batch) else None
        try:
            outs = generate(self.engine, prompts, batch[0].sampling, most, on_step, shown)
        except Exception as e:  # noqa: BLE001 - one batch's failure is its requests' error; the thread goes on
            self.report(f"engine: batch of {len(prompts)} failed: {type(e).__name__}: {e}")
            for r in batch:
                r.future.set_exception(e)
            return
        ms = (time.perf_counter() - t0) * 1000
        self.batches += 1
        i = 0
        for r in batch:
            mine = [cut(c, r.max_new_tokens, self.tok) for c in outs[i:i + r.n]]
            i += r.n
            r.future.set_result(Generated(mine, version, ms))

    def _dispatch(self, batch: list[GenRequest]) -> Callable[[list[int]], None]:
        """The engine's per-step callback: each row's token to its request's listener, until the row's
        own limit or first stop id (after which the engine pads it). A listener that fails is reported and
        dropped; the batch goes on."""
        rows = [(r, i) for r in batch for i in range(r.n)]
        sent = [0] * len(rows)
        done = [r.listener is None for r, _ in rows]

        def on_step(tokens: list[int]) -> None:
            for k, tok in enumerate(tokens[:len(rows)]):
                if done[k]:
                    continue
                req, choice = rows[k]
                sent[k] += 1
                done[k] = sent[k] >= req.max_new_tokens or tok in self.stop_ids
                try:
                    assert req.listener is not None
                    req.listener.token(choice, tok)
                except Exception as e:  # noqa: BLE001 - one listener's failure is its own; the batch goes on
                    self.report(f"engine: a token listener failed: {type(e).__name__}: {e}")
                    for j, (r, _) in enumerate(rows):
                        done[j] = done[j] or r is req
        return on_step
