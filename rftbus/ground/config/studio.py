"""The `studio:` config section (pydantic only: no heavy imports here)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class StudioConfig(BaseModel):
    """`rftbus studio`: the browser console where people grade answers and watch the run."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    host: str = Field("127.0.0.1", description="`rftbus studio` listen address; tokens: serve.feedback_tokens "
                      "(graders) and serve.read_tokens (dashboard, experience browser, SQL)")
    port: int = Field(8100, ge=1, le=65535, description="the studio's HTTP port")
    mount_in_serve: bool = Field(True, description="`rftbus serve` also serves the studio under /studio")
    refresh_s: float = Field(5.0, gt=0, description="how often an open dashboard and feedback queue refresh")
    queue_limit: int = Field(40, ge=1, le=500, description="experiences shown in the feedback queue at once")
    cache_s: float = Field(2.0, ge=0, description="dashboard queries answered from a cache this young (many "
                           "open pages cost one set of queries)")
    lag_timeout_s: float = Field(0.8, gt=0, description="how long the dashboard waits for Kafka's consumer lags "
                                 "(asked beside the analytics queries; a broker that is down does not hold the page)")
    metrics: bool = Field(True, description="Prometheus /metrics (latency by route, grades by kind; no content)")
