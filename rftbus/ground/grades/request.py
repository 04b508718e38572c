"""The feedback request (serve's HTTP body, the studio's form, CLI flags, Python API all validate through it) and
the record it becomes: one Feedback for `rft.feedback` (keyed by experience_id, which is what rftbus/streams/join.py
joins on); a correction also becomes a demonstration for `rft.experiences.expert` (rftbus/producers/experience.py).

Exactly one signal per request: reward | rating | thumbs | preferred_id+rejected_id | correction.
The mapping to a reward is the streams' (rftbus/ground/grades/rules.py); checks here mirror it so a bad
request is a 400 naming the field instead of a `bad_feedback` rejection later.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rftbus.ground.otel.ids import TRACE_ID
from rftbus.ground.schemas import Feedback, FeedbackKind
from rftbus.ground.grades.rules import credit
from rftbus.ground.schemas.records import new_id, rating_problem, rating_reward

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9:._-]{0,127}$"
_ID = re.compile(ID_PATTERN)
SIGNALS = ("reward", "rating", "thumbs", "preference", "correction")
MAX_CORRECTION_CHARS = 100_000


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    experience_id: str | None = Field(None, pattern=ID_PATTERN, description="the graded experience "
                                      "(for a preference: defaults to preferred_id)")
    session_id: str | None = Field(None, pattern=ID_PATTERN, description="grade a whole episode instead: every "
                                   "call of the session is credited (serve.episode_credit)")
    trace_id: str | None = Field(None, pattern=TRACE_ID.pattern, description="grade every model call an agent's "
                                 "OpenTelemetry trace recorded (otel.enabled), by the trace's 32-hex id")
    reward: float | None = Field(None, description="scalar reward, used as given")
    rating: float | None = Field(None, description="a rating on streams.rating_scale, mapped to 0..1")
    thumbs: Literal["up", "down"] | None = None
    preferred_id: str | None = Field(None, pattern=ID_PATTERN)
    rejected_id: str | None = Field(None, pattern=ID_PATTERN)
    correction: str | None = Field(None, min_length=1, max_length=MAX_CORRECTION_CHARS,
                                   description="the response it should have given: also an expert experience")
    prompt: str | None = Field(None, min_length=1, max_length=MAX_CORRECTION_CHARS,
                               description="correction: the prompt, when the server did not record it itself")
    feedback_id: str | None = Field(None, pattern=ID_PATTERN, description="stable id: a retry with the same id "
                                    "is one feedback downstream")
    annotator: str | None = Field(None, max_length=200)
    metadata: dict[str, str] = Field(default_factory=dict, max_length=16)

    @field_validator("thumbs", mode="before")
    @classmethod
    def _thumbs(cls, v: Any) -> Any:
        if isinstance(v, bool):
            return "up" if v else "down"
        return v

    @field_validator("reward", "rating")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v

    @model_validator(mode="after")
    def _one_signal(self) -> FeedbackRequest:
        given = [k for k in SIGNALS if self._has(k)]
        if len(given) != 1:
            what = ", ".join(given) if given else "none"
            raise ValueError(f"exactly one of reward, rating, thumbs, preferred_id+rejected_id, correction "
                             f"is needed (got {what})")
        if self.preferred_id or self.rejected_id:
            if not (self.preferred_id and self.rejected_id):
                raise ValueError("a preference needs both preferred_id and rejected_id")
            if self.preferred_id == self.rejected_id:
                raise ValueError("preferred_id and rejected_id must differ")
            if self.experience_id and self.experience_id not in (self.preferred_id, self.rejected_id):
                raise ValueError("experience_id of a preference must be preferred_id or rejected_id")
        whole = "session_id" if self.session_id is not None else "trace_id" if self.trace_id is not None else None
        if whole is not None:  # an episode (a session's calls, an agent trace's calls): one score for all of them
            if self.experience_id or self.preferred_id or self.kind not in (
                    FeedbackKind.reward, FeedbackKind.rating, FeedbackKind.thumbs):
                raise ValueError(f"{whole} grades an episode with reward, rating or thumbs, without experience_id")
        elif not (self.experience_id or self.preferred_id):
            raise ValueError("experience_id is required")
        if self.prompt and self.correction is None:
            raise ValueError("prompt is only used with a correction")
        return self

    def _has(self, kind: str) -> bool:
        if kind == "preference":
            return bool(self.preferred_id or self.rejected_id)
        return getattr(self, kind) is not None

    @property
    def kind(self) -> FeedbackKind:
        return next(FeedbackKind(k) for k in SIGNALS if self._has(k))

    @property
    def target(self) -> str:
        return self.experience_id or self.preferred_id  # type: ignore[return-value]

    def check_rating(self, scale: tuple[float, float]) -> str | None:
        """A message when the rating is outside the scale the streams map from (they would clamp it)."""
        return None if self.rating is None else rating_problem(self.rating, scale)

    def value(self, scale: tuple[float, float]) -> float:
        """The reward this grade means (the streams' mapping): for crediting an episode's calls."""
        if self.reward is not None:
            return self.reward
        if self.rating is not None:
            return rating_reward(self.rating, scale)
        return 1.0 if self.thumbs == "up" else 0.0

    def episode(self, calls: list[tuple[int, list[str]]], scale: tuple[float, float], mode: str,
                discount: float) -> list[Feedback]:
        """One Feedback per experience of the session's calls. The same grade on each (`same`), or its reward
        discounted by the distance from the last call. Ids derive from the episode's feedback_id, so a retried
        episode grade is the same records downstream."""
        base_id = self.feedback_id or new_id()
        out = []
        for k, (turn, ids) in enumerate(calls):
            for j, eid in enumerate(ids):
                fb = self.model_copy(update={"session_id": None, "experience_id": eid}).to_record()
                if mode == "discounted":
                    fb = Feedback(experience_id=eid, kind=FeedbackKind.reward, reward=credit(
                        self.value(scale), len(calls), k, mode, discount), annotator=self.annotator,
                        metadata=dict(self.metadata))
                fb.feedback_id = f"{base_id}:{turn}.{j}"
                fb.metadata.update({"session_id": str(self.session_id), "session_turn": str(turn),
                                    "episode_feedback_id": base_id, "episode_credit": mode})
                out.append(fb)
        return out

    def to_record(self) -> Feedback:
        fb = Feedback(experience_id=self.target, kind=self.kind, reward=self.reward, rating=self.rating,
                      thumbs_up=None if self.thumbs is None else self.thumbs == "up",
                      preferred_id=self.preferred_id, rejected_id=self.rejected_id, correction=self.correction,
                      annotator=self.annotator, metadata=dict(self.metadata))
        if self.feedback_id:
            fb.feedback_id = self.feedback_id
        return fb


def valid_id(s: str) -> bool:
    return bool(_ID.match(s))
