"""The `simulate:` config section: live agents and graders against `rftbus serve` (pydantic only)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class GradersConfig(BaseModel):
    """How simulated people and environments grade answers. What they say comes from the taskset's own
    scorer, so the feedback is honest; the knobs make it late, partial, noisy and repeated like real feedback."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    delay_median_s: float = Field(5.0, gt=0, description="median delay from answer to feedback (log-normal)")
    delay_sigma: float = Field(1.2, ge=0, description="log-normal sigma of the delay: 1.2 gives a p99 of ~16x "
                               "the median (a tail of minutes for a median of seconds)")
    delay_min_s: float = Field(0.0, ge=0, description="delays are clipped to [delay_min_s, delay_max_s]")
    delay_max_s: float = Field(600.0, gt=0, description="the longest delay (a clipped tail)")
    ungraded_share: float = Field(0.05, ge=0, le=1, description="answers nobody ever grades (-> no_feedback)")
    correction_share: float = Field(0.2, ge=0, le=1, description="a wrong answer gets a correction (the "
                                    "reference answer: a demonstration) with this probability, else a score")
    preference_share: float = Field(0.5, ge=0, le=1, description="a request with two choices of different "
                                    "scores is graded by one preference between them with this probability")
    duplicate_share: float = Field(0.02, ge=0, le=1, description="a second grader grades the same answer "
                                   "again, later (-> duplicate_feedback)")
    flip_rate: float = Field(0.05, ge=0, le=1, description="thumbs that say the opposite of the score")
    late_share: float = Field(0.0, ge=0, le=1, description="answers whose grade is held back until the published "
                              "weights are late_versions past the version that answered (a grade that comes "
                              "the next morning: `rftbus bench late-feedback`)")
    late_versions: int = Field(10, ge=1, description="how many versions a held-back grade waits for")
    kinds: dict[str, float] = Field(default_factory=lambda: {"reward": 0.4, "rating": 0.3, "thumbs": 0.3},
                                    description="relative weights of the score kinds: reward (the score), "
                                    "rating (1-5 from the score), thumbs (up when the score >= 0.5); a kind left out of a config file "
                                    "keeps its default weight, 0 turns it off")

    @model_validator(mode="after")
    def _check(self) -> GradersConfig:
        bad = set(self.kinds) - {"reward", "rating", "thumbs"}
        if bad or not self.kinds or any(w < 0 for w in self.kinds.values()) or sum(self.kinds.values()) <= 0:
            raise ValueError(f"kinds takes non-negative weights of reward, rating, thumbs (not all 0); got {self.kinds}")
        if self.delay_max_s < self.delay_min_s:
            raise ValueError(f"delay_max_s {self.delay_max_s} < delay_min_s {self.delay_min_s}")
        return self


class SimulateConfig(BaseModel):
    """`rftbus simulate`: agents that call serve and graders that grade their answers."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    url: str | None = Field(None, description="the proxy's /v1 base URL; default http://serve.host:serve.port/v1")
    agents: int = Field(8, ge=1, description="concurrent agents (each waits for its answer before the next)")
    rate_per_s: float | None = Field(None, gt=0, description="requests per second over all agents; None = as "
                                     "fast as the agents get answers")
    tasks: int = Field(5000, ge=1, description="distinct train tasks of the configured taskset the agents ask")
    n2_share: float = Field(0.1, ge=0, le=1, description="requests asking for two choices (n=2); the rest n=1")
    multi_turn_share: float = Field(0.1, ge=0, le=1, description="a wrong single-turn answer is followed by a "
                                    "second turn (the tool's verdict in the conversation), with this probability")
    max_tokens: int | None = Field(None, ge=1, description="default: serve's default (explorer sampling)")
    temperature: float | None = Field(None, ge=0, le=2, description="what the agents ask for; None = serve's "
                                      "default (explorer sampling). The live reward scores what they got")
    duration_s: float | None = Field(None, gt=0, description="stop after this long; None = until stopped")
    seed: int = Field(0, description="seed of the simulated agents and graders")
    graders: GradersConfig = GradersConfig()
    posts_in_flight: int = Field(32, ge=1, description="feedback posts sent at once (the HTTP pool's size); the "
                                 "rest wait their turn in the simulator, not in the pool")
    status_interval_s: float = Field(1.0, gt=0, description="seconds between status-file writes")
    traced: bool = Field(False, description="the agents are instrumented with opentelemetry-instrumentation-openai-v2 "
                         "and export their calls' traces to the run's Collector (otel.host:http_port); the graders "
                         "grade each call's trace by its id (/v1/feedback trace_id). One answer a call (n=1), scores "
                         "only: a trace grade has no preference or correction")
