"""The `gate:` config section: how a new weight version earns the users' traffic (rftbus/consumers/gate/).

The defaults are sized for rewards in 0..1 and a model trained continuously: at α 0.1 over 5 looks (z 2.05 a look)
and margin 0.1, a candidate as good as the serving version is promoted at about 200 graded answers an arm (p 0.5),
one better by 0.1 at about 60, and one worse by 0.5 is rolled back at the first look (30 an arm). A tighter margin
costs answers quadratically: 0.05 needs four times as many.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GateConfig(BaseModel):
    """The promotion gate: which weight version serve gives users, and on what evidence."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    enabled: bool = Field(False, description="serve follows the gate's decisions (topics.decisions) instead of the "
                          "newest version: a new version is a candidate on canary_share of new sessions until the gate "
                          "promotes or rolls it back; explorers keep the newest either way")
    id: str = Field("gate", description="who decides: the gate process's name on each decision it writes")
    canary_share: float = Field(0.3, gt=0, lt=1, description="share of new sessions (and calls outside a session) a "
                                "candidate serves; a session keeps the version it started with")
    min_answers: int = Field(30, ge=2, description="graded answers each of candidate and serving needs since the "
                             "canary began before the gate promotes or rolls back on live evidence")
    margin: float = Field(0.1, ge=0, description="δ: the candidate may be this much worse (mean live reward) and "
                          "still promote (non-inferiority); rolled back when worse than this with confidence")
    alpha: float = Field(0.1, gt=0, lt=0.5, description="the one-sided error of a decision, split over max_looks "
                         "(Bonferroni)")
    max_looks: int = Field(5, ge=1, description="looks: the test is taken when both arms reach k × min_answers graded "
                           "answers, k = 1..max_looks; past them the candidate holds until a newer one replaces it")
    eval_margin: float = Field(0.1, ge=0, description="a candidate whose held-out eval is this much below the serving "
                               "version's is rolled back whatever the live evidence (when both are scored)")
    eval_candidates: bool = Field(True, description="rftbus run scores each version the gate puts on canary (any "
                                  "trainer's) on the held-out split as soon as it is on canary, so the eval_margin "
                                  "rule has the candidate's eval (the run's eval otherwise scores every "
                                  "run.eval_every_versions-th version of the first trainer only)")
    hold_every_s: float = Field(30.0, gt=0, description="a candidate with no look yet this long after its canary began "
                                "(little or no traffic) gets one hold on the record, with the evidence so far")
    replace_after_s: float = Field(300.0, gt=0, description="a candidate still held this long after its canary began is "
                                   "replaced by the newest published version (its canary starts afresh)")
