"""Publishing feedback from Python (an environment, a grader, a labelling tool) straight to Kafka.

    from rftbus.producers.feedback import FeedbackClient
    with FeedbackClient(cfg) as fb:
        fb.reward(experience_id, 0.8)
        fb.thumbs(experience_id, up=False)
        fb.preference(preferred_id=a, rejected_id=b)
        fb.correction(experience_id, "the right answer", prompt="the prompt")

Same validation and records as `POST /v1/feedback` (rftbus/ground/grades/request.py); each call returns
only after Kafka acknowledged the record(s), else raises FeedbackNotAccepted. A correction here needs
`prompt` (to become an expert experience; only the proxy that recorded the experience knows its
prompt tokens, so through the proxy it is optional).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.clients import make_producer
from rftbus.ground.web.errors import field_path
from rftbus.ground.grades.request import FeedbackRequest
from rftbus.ground.models.prompt import default_task_id
from rftbus.ground.schemas import ExperienceGroup, Feedback, make_codec, topic_context


class FeedbackNotAccepted(RftbusError):
    """Invalid feedback, or Kafka did not acknowledge it in time (then nothing may be assumed)."""


@dataclass
class Published:
    feedback: Feedback
    expert: ExperienceGroup | None = None  # a correction's demonstration (a group of one)


def parse_request(fields: dict[str, Any]) -> FeedbackRequest:
    try:
        return FeedbackRequest.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as e:
        err = e.errors()[0]
        raise FeedbackNotAccepted(f"{field_path(err['loc'])}: {err['msg'].removeprefix('Value error, ')}") from None


class FeedbackClient:
    def __init__(self, cfg: Config, producer_id: str = "feedback-client", timeout_s: float = 15.0):
        self.cfg, self.producer_id, self.timeout_s = cfg, producer_id, timeout_s
        self.producer = make_producer(cfg, **{"message.timeout.ms": int(timeout_s * 1000)})
        codec = make_codec(cfg.schema_registry.url, cfg.schema_registry.client)
        self.encode_fb, self.encode_group = codec.serializer(Feedback), codec.serializer(ExperienceGroup)
        self._fmt = None

    # -- one call per kind ---------------------------------------------------------------------
    def reward(self, experience_id: str, value: float, **kw: Any) -> Published:
        return self.post(experience_id=experience_id, reward=value, **kw)

    def rating(self, experience_id: str, value: float, **kw: Any) -> Published:
        return self.post(experience_id=experience_id, rating=value, **kw)

    def thumbs(self, experience_id: str, up: bool, **kw: Any) -> Published:
        return self.post(experience_id=experience_id, thumbs="up" if up else "down", **kw)

    def preference(self, preferred_id: str, rejected_id: str, **kw: Any) -> Published:
        return self.post(preferred_id=preferred_id, rejected_id=rejected_id, **kw)

    def correction(self, experience_id: str, text: str, prompt: str | None = None, **kw: Any) -> Published:
        return self.post(experience_id=experience_id, correction=text, prompt=prompt, **kw)

    # -- the common path -----------------------------------------------------------------------
    def post(self, **fields: Any) -> Published:
        req = parse_request(fields)
        problem = req.check_rating(self.cfg.streams.rating_scale)
        if problem:
            raise FeedbackNotAccepted(f"rating: {problem}")
        fb = req.to_record()
        expert = None
        if req.correction is not None:
            if not req.prompt:
                raise FeedbackNotAccepted("prompt: a correction sent straight to Kafka needs the prompt (only the "
                                          "proxy that recorded the experience knows it: post through it instead)")
            fmt = self._prompt_format()
            ids = fmt.task(req.prompt)
            from rftbus.producers.experience import correction_group  # torch via the workflows: only for corrections

            expert = correction_group(fb, ids, req.prompt, default_task_id(ids), fmt, self.producer_id)
        errors: list[str] = []

        def on_delivery(err, msg) -> None:
            if err is not None:
                errors.append(f"{msg.topic()}: {err.str()}")
        t = self.cfg.topics
        if expert is not None:
            self.producer.produce(t.expert.name, key=expert.group_id,
                                  value=self.encode_group(expert, topic_context(t.expert.name)), on_delivery=on_delivery)
        self.producer.produce(t.feedback.name, key=fb.experience_id, value=self.encode_fb(fb, topic_context(t.feedback.name)),
                              on_delivery=on_delivery)
        left = self.producer.flush(self.timeout_s + 1)
        if left or errors:
            why = "; ".join(errors) or f"{left} record(s) not acknowledged within {self.timeout_s:g}s"
            raise FeedbackNotAccepted(f"Kafka at {self.cfg.bootstrap_servers} did not acknowledge the feedback "
                                      f"({why}); it was not accepted")
        return Published(fb, expert)

    def _prompt_format(self):
        if self._fmt is None:
            from rftbus.ground.models.loading import load_tokenizer  # transformers: only when a correction needs it
            from rftbus.ground.prompting import run_prompt_format
            self._fmt = run_prompt_format(load_tokenizer(self.cfg.model), self.cfg)
        return self._fmt

    def close(self) -> None:
        self.producer.flush(self.timeout_s)

    def __enter__(self) -> FeedbackClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def publish_feedback(cfg: Config, **fields: Any) -> Published:
    """One feedback, validated and acknowledged by Kafka (see FeedbackRequest for the fields)."""
    with FeedbackClient(cfg) as client:
        return client.post(**fields)
