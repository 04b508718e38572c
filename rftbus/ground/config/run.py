"""The `run:` config section: what the main job starts, for how long, and how it evaluates."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rftbus.ground.models.devices import check_spec


class CurriculumStage(BaseModel):
    """Easier tasks of the same taskset before the configured ones (`run.curriculum`)."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    source: str | None = Field(None, description="a task source of its own (built-in taskset name or file); "
                               "default: the configured taskset")
    params: dict[str, Any] = Field(default_factory=dict, description="taskset params of this stage, e.g. "
                                   "{length: 2} for `reverse`")
    tasks: int = Field(..., ge=1, description="distinct train tasks of the stage; published again (new ids) as "
                       "often as the explorers need them until the stage ends")
    until_step: int = Field(..., ge=1, description="the stage ends once the trainer reached this step")


Tracker = Literal["tensorboard", "wandb", "mlflow"]


class TrackingConfig(BaseModel):
    """Where `run.report_to`'s trackers write (rftbus/consumers/trackers/)."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    project: str = Field("rftbus", description="the W&B project and the MLflow experiment")
    run_name: str | None = Field(None, description="the tracker run's name; default: the state folder's name")
    wandb_mode: Literal["offline", "online"] = Field(
        "offline", description="offline: files under <state_dir>/wandb (`wandb sync` uploads them); online needs "
        "WANDB_API_KEY")
    mlflow_uri: str | None = Field(None, description="an MLflow tracking URI (http://..., databricks, sqlite:///...); "
                                   "default: a SQLite store, <state_dir>/mlflow.db")


class RunConfig(BaseModel):
    """`rftbus run`: which processes it starts, how long, and the held-out evals it makes."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    report_to: list[Tracker] = Field(
        default_factory=lambda: list[Tracker](["tensorboard"]), description="experiment trackers fed from the metrics topic "
        "(trainer steps, held-out eval, streams counters) by `rftbus run` or `rftbus track`: tensorboard "
        "(<state_dir>/tensorboard/loop), wandb (pip install wandb), mlflow (pip install mlflow-skinny); [] = none")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    explorers: int = Field(1, ge=0, description="explorer processes (one consumer group); 0 = none: live "
                           "traffic through `serve` is the only source of experiences (with `simulate`)")
    streams_workers: int = Field(1, ge=1, description="Faust workers (one consumer group: partitions are shared among "
                                 "them)")
    tasks: int = Field(2000, ge=1, description="train tasks of the built-in taskset published at start")
    expert: bool = Field(True, description="also publish expert demonstrations (needed by the mix/sft losses)")
    expert_epochs: int = Field(1, ge=1, description="passes of demonstrations (each pass new ids): the trainer "
                               "reads each record once, so more passes mean more SFT steps; later passes are "
                               "published in the background while the loop runs")
    task_passes: int = Field(1, ge=1, description="passes over the tasks (later passes published in the "
                             "background, each task with a new id so it is rolled out again)")
    max_minutes: float = Field(15.0, gt=0, description="wall-clock budget; the job stops cleanly after it")
    max_steps: int | None = Field(None, ge=1, description="stop once the trainer reached this step")
    target_eval_reward: float | None = Field(None, description="stop early once eval reaches this")
    eval_n: int = Field(64, ge=1, description="held-out eval tasks scored per evaluation")
    eval_device: str = Field("auto", description="where the run's held-out eval generates (in the run's process): "
                             "auto (a GPU when there is one, else the CPU), cpu, mps, cuda or cuda:N")
    trainers: list[dict[str, Any]] = Field(
        default_factory=list, description="more trainers on the same stream, each its own consumer group and weight "
        "lineage, gated with the first by the promotion gate (gate.enabled): each entry names its `lineage` and "
        "the trainer: fields it changes, e.g. [{lineage: lr-high, lr: 0.025}]")
    eval_engine: Literal["policy", "explorer"] = Field(
        "policy", description="policy: greedy transformers generate on eval_device; explorer: the explorers' engine "
        "kind (explorer.engine, e.g. vllm) built on eval_device, greedy (top_k 1)")
    progress_every_s: float = Field(30.0, gt=0, description="with output to a file (no terminal), one progress "
                                    "line this often: step, version, eval, explorers, lags, stages not running")
    eval_nice: int = Field(10, ge=0, le=19, description="niceness of the held-out eval's thread (in the run's "
                           "process): it scores on CPU the explorers and the trainer leave, so it never slows a step "
                           "(0: an equal share; each point also records when its version was published)")
    eval_every_versions: int = Field(1, ge=1, description="evaluate the newest version each time it passes a "
                                     "multiple of k (the evaluator jumps to the newest: a mark passed between two "
                                     "looks is scored at the next version, not skipped)")
    max_restarts: int = Field(3, ge=0, description="restarts of each crashed child within restart_window_minutes "
                              "before giving up on it (a crash loop); deaths further apart refill the budget")
    max_node_restarts: int = Field(3, ge=0, description="restarts of each node of the embedded broker within "
                                   "restart_window_minutes; a node past its budget waits for the window while the "
                                   "others serve, and the run stops only when no quorum of nodes is left")
    restart_window_minutes: float = Field(10.0, gt=0, description="the sliding window of both restart budgets "
                                          "(systemd's StartLimitIntervalSec)")
    on_give_up: Literal["stop", "continue"] = Field(
        "stop", description="a child given up on stops the run, loudly with its last crash's cause (exit 1); "
        "`continue` keeps the other stages running (the summary still reports the dead stage and fails)")
    metrics_host: str = Field("127.0.0.1", description="where `rftbus run` serves Prometheus /metrics")
    metrics_port: int | None = Field(9464, ge=0, le=65535, description="its port (0: any free one, None: off); "
                                     "a port already taken is reported and the run goes on without it")
    acls: bool = Field(True, description="the embedded broker this run starts takes a SASL user per role and the ACL "
                       "table (only the gate writes decisions, only the trainer weights: rftbus/apps/run/secure.py); "
                       "false: any client may write any topic")
    analytics: bool = Field(True, description="run the analytics sink too, when it is installed")
    serve: bool = Field(False, description="also run `rftbus serve` (the live-traffic proxy, on serve.host:"
                        "serve.port) as a supervised child")
    simulate: bool = Field(False, description="also run `rftbus simulate` (agents and graders against serve, "
                           "the `simulate:` section) as a supervised child; needs serve: true")
    studio: bool = Field(False, description="also run `rftbus studio` (the browser console on studio.host:"
                         "studio.port) as a supervised child")
    curriculum: list[CurriculumStage] = Field(default_factory=list, description="stages of easier tasks (RL "
                                              "tasks only, no demonstrations), each published just in time until "
                                              "its until_step; then the configured taskset; eval stays on the "
                                              "configured taskset")

    @model_validator(mode="after")
    def _sources(self) -> RunConfig:
        if self.simulate and not self.serve:
            raise ValueError("run.simulate needs run.serve: true (the agents talk to the proxy)")
        if self.explorers == 0 and not self.serve:
            raise ValueError("run.explorers: 0 leaves no source of experiences; set run.serve: true")
        return self

    @field_validator("eval_device")
    @classmethod
    def _device(cls, v: str) -> str:
        return check_spec(v)

    @field_validator("curriculum")
    @classmethod
    def _steps_increase(cls, stages: list[CurriculumStage]) -> list[CurriculumStage]:
        steps = [s.until_step for s in stages]
        if any(b <= a for a, b in zip(steps, steps[1:])):
            raise ValueError(f"until_step must increase from stage to stage, got {steps}")
        return stages
