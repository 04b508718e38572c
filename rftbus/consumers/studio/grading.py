"""Where a grade goes: exactly the path of `POST /v1/feedback`, acknowledged by Kafka before it is shown.

Mounted in `rftbus serve`, the serve's own LiveService publishes it (the same call as /v1/feedback). Run
alone (`rftbus studio`), the FeedbackClient does (the same FeedbackRequest validation and records; a
correction gets its prompt from the recorded experience, which the studio reads from analytics).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

import anyio

from rftbus.ground.config import Config
from rftbus.ground.web.errors import BadRequest, Unavailable
from rftbus.ground.grades.request import FeedbackRequest
from rftbus.ground.schemas import Feedback

if TYPE_CHECKING:
    from rftbus.producers.feedback import FeedbackClient


class Publisher(Protocol):
    async def publish(self, req: FeedbackRequest) -> Feedback: ...

    def close(self) -> None: ...


class ServePublisher:
    """Through a running serve's LiveService (the studio mounted in `rftbus serve`)."""

    def __init__(self, service):
        self.service = service

    async def publish(self, req: FeedbackRequest) -> Feedback:
        fbs, _expert = await self.service.publish_feedback(req)
        return fbs[0]

    def close(self) -> None:
        pass


class KafkaPublisher:
    """Straight to Kafka through the FeedbackClient (one producer, one post at a time: each waits for its ack)."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self._client: FeedbackClient | None = None
        self._lock = threading.Lock()

    def _post(self, req: FeedbackRequest) -> Feedback:
        from rftbus.producers.feedback import FeedbackClient, FeedbackNotAccepted

        problem = req.check_rating(self.cfg.streams.rating_scale)
        if problem:
            raise BadRequest(problem, param="rating", code="out_of_range")
        with self._lock:
            if self._client is None:
                self._client = FeedbackClient(self.cfg, producer_id="studio", timeout_s=self.cfg.serve.ack_timeout_s)
            try:
                return self._client.post(**req.model_dump(exclude_none=True)).feedback
            except FeedbackNotAccepted as e:
                raise Unavailable(str(e), code="kafka_unavailable") from None

    async def publish(self, req: FeedbackRequest) -> Feedback:
        return await anyio.to_thread.run_sync(self._post, req)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
