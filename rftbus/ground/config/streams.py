"""The `streams:` config section (pydantic only: no heavy imports here).

Every limit the stream processors apply is here, so a rejection reason can always be traced to
one setting. Times are seconds, sizes bytes/tokens.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class StreamsConfig(BaseModel):
    """The Faust stream processors: verify, join feedback, compute advantages, filter and prioritise."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    app_id: str = Field("rftbus-streams", description="Faust app id = Kafka consumer group; prefixes internal topics")
    worker_id: str | None = Field(None, description="status file name part; default <hostname>-<pid>")
    log_level: str = Field("WARNING", description="the Faust worker's log level")
    processing_guarantee: Literal["at_least_once", "exactly_once"] = Field(
        "at_least_once", description="at_least_once + output dedupe (measured to hold); exactly_once = "
        "Faust's Kafka transactions, which do not hold in faust-streaming 0.15 (see docs/BENCHMARKS.md)")
    commit_interval_s: float = Field(0.5, gt=0, description="Faust broker_commit_interval")
    session_timeout_s: float = Field(10.0, gt=0, description="consumer group session: how soon a killed "
                                     "worker's partitions move to the others")
    linger_ms: int = Field(5, ge=0, description="aiokafka producer linger")
    fetch_min_bytes: int = Field(128 * 1024, ge=1, description="the broker answers the worker's fetch once "
                                 "this many bytes are there (or after fetch_max_wait_ms): ~20 experiences per "
                                 "fetch round instead of one round per producer request (measured: about a third "
                                 "less worker CPU at 1,000/s); 1 = answer at once")
    fetch_max_wait_ms: int = Field(50, ge=0, description="longest a fetch waits for fetch_min_bytes. Also bounds a "
                                   "stall of aiokafka's fetcher: a fetch sent while some partitions still hold "
                                   "unconsumed records leaves them out and waits on the others (Faust's 1500 ms "
                                   "default: raw stalled ~0.5-1.5 s at 1,000/s). An idle worker fetches this often")
    partitions: int | None = Field(None, ge=1, description="internal topics' partitions; default = raw's")
    table_store: Literal["rocksdb", "memory"] = Field(
        "rocksdb", description="where the tables (live groups waiting for feedback, the join index) are kept "
        "besides their changelog topics: rocksdb = on disk under the worker's state folder (hours of feedback "
        "TTL do not grow the worker's memory with traffic); memory = in RAM, rebuilt from the changelog on start")
    internal_retention_ms: int = Field(24 * 3600 * 1000, ge=-1, description="retention of the internal topics")

    # verify
    max_message_bytes: int = Field(8 * 1024 * 1024, ge=1, description="larger raw or feedback records: too_large")
    max_n_samples: int = Field(1024, ge=1, le=4096, description="a raw group with more samples is rejected whole, "
                               "group_too_large (explorers cap theirs at explorer.max_n_samples; at most 4096, the ids "
                               "one rejection lists)")
    write_retries: int = Field(5, ge=0, description="an output Kafka refused (after its own retries) is written "
                               "again this many times, backoff doubling, then quarantined by input offset "
                               "(<state_dir>/streams/quarantine.jsonl)")
    write_retry_backoff_s: float = Field(1.0, gt=0, description="the first retry's wait; it doubles each time")
    rejection_original_max_bytes: int = Field(
        512 * 1024, ge=0, description="a rejection copies the original record only up to this size (it must fit "
        "the rejected topic's message limit); a larger one is referenced by topic, partition and offset")
    version_wait_s: float = Field(2.0, ge=0, description="how long a newer-than-known model_version waits "
                                  "for its WeightVersion before unknown_version")
    # join feedback
    feedback_ttl_s: float = Field(7 * 24 * 3600.0, gt=0, description="a live group is released this long after it arrived "
                                  "with the grades it has (samples without one: no_feedback); unmatched feedback: "
                                  "orphan_feedback. A week by default: the group waits on disk (rocksdb and its "
                                  "changelog), not in memory, so days cost nothing but disk (1e9: forever)")
    rating_scale: tuple[float, float] = Field((1.0, 5.0), description="rating min, max -> reward 0..1")
    # group advantages
    advantage: Literal["grpo", "drgrpo"] = Field(
        "grpo", description="estimator for groups of n >= 2: grpo (r - mean) / (std + eps); drgrpo r - mean "
        "(no std division: nearly-deterministic groups weigh less; rftbus/streams/advantages/drgrpo.py)")
    advantage_eps: float = Field(1e-6, gt=0, description="eps in (r - mean) / (std + eps)")
    singleton_baseline: Literal["task_or_class", "task", "class"] = Field(
        "task_or_class", description="baseline of a lone graded answer (advantage = r - baseline): its task's "
        "pass rate, its prompt class's running mean (request metadata task_class, else all live traffic), or "
        "the task's when it was seen before and the class's otherwise")
    class_baseline_alpha: float = Field(0.02, gt=0, le=1, description="EMA weight of a graded group's mean "
                                        "reward in its class's baseline (~ the last 1/alpha answers)")
    # filters
    max_tokens: int = Field(8192, ge=1, description="prompt + response tokens over this: over_length")
    reward_min: float = Field(-10.0, description="a reward below this is rejected reward_out_of_range")
    reward_max: float = Field(10.0, description="a reward above this is rejected reward_out_of_range")
    zero_variance_eps: float = Field(1e-6, ge=0, description="group reward std <= this: zero_variance")
    drop_zero_variance: bool = Field(True, description="reject zero-variance groups (their GRPO advantages "
                                     "are all 0); false passes them on (e.g. `bench async`: a fixed B per step)")
    # prioritize
    priority_threshold: float = Field(0.9, ge=0, description="group priority >= this: curated_priority lane")
    difficulty_weight: float = Field(0.5, ge=0, description="bonus weight of 4p(1-p) for task pass rate p")
    recency_decay: float = Field(0.8, gt=0, le=1, description="priority factor per version behind latest")
    pass_rate_alpha: float = Field(0.2, gt=0, le=1, description="EMA weight of a new group's mean reward")
    # synthesize
    promote_expert: bool = Field(True, description="copy a group's best experience to topics.expert")
    expert_min_reward: float = Field(1.0, description="promote only at or above this reward")
    # housekeeping
    tick_interval_s: float = Field(1.0, gt=0, description="feedback timeouts are checked this often (tick records)")
    status_interval_s: float = Field(1.0, gt=0, description="seconds between status-file writes")
    metrics_interval_s: float = Field(5.0, gt=0, description="TrainerMetric kind=streams / task_pass_rate")
    dedupe_window_s: float = Field(900.0, gt=0, description="group ids remembered per partition: a second record "
                                   "of a group within this window is rejected as duplicate")
    recovery_margin_s: float = Field(300.0, ge=0, description="output scan starts this much before the "
                                     "first replayed record's timestamp (clock skew allowance)")
    recovery_fence: bool | None = Field(None, description="before the output scan, fence each output partition "
                                        "(rftbus/ground/kafka/fence.py) so a dead worker's writes not yet replicated are "
                                        "seen; None: on wherever partitions are replicated or the cluster is "
                                        "external, off on one embedded node (where it only costs start-up time)")
    redelivery_quiet_s: float = Field(10.0, gt=0, description="a partition fetched past what reached the "
                                      "ingest agent, with nothing delivered for this long, is fetched again "
                                      "from the first missing offset (rftbus/streams/checkpoint/holes.py)")
