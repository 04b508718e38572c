"""Every topic rftbus uses, described once: what a record is, its key, its value schema, who may write it.

Names, partitions, retention and cleanup are the config's (`TopicsConfig`, so a deployment can rename them); what
each topic *is* lives here, and the tables that used to keep their own view read it: the ACLs (who writes), the
streams' outputs, the analytics sink's record types and Kafka-engine sources, the run's books (the lanes). The
streams' internal topics are here too, named from `streams.app_id`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rftbus.ground.config import Config, TopicSpec
from rftbus.ground.schemas import (
    AvroRecord, ExperienceGroup, Feedback, GateDecision, Rejection, Task, TrainerMetric, WeightVersion,
)


@dataclass(frozen=True)
class Topic:
    key: str  # the TopicsConfig field (and the `topic` column of the analytics tables)
    holds: str  # what one record is
    record_key: str  # what its Kafka key is (and so what orders it)
    value: type[AvroRecord] | None  # the Avro record every message holds (None: not Avro, `encoding` says what)
    writers: tuple[str, ...]  # the roles the broker lets write it (rftbus/ground/kafka/acls.py); every role may read
    lane: bool = False  # an experience lane the trainer reads
    curated: bool = False  # a lane of decided groups: only `survivors` may be learnt from
    streams_output: bool = False  # the streams' ingest writes it for the input it decides (its recovery scans it)
    encoding: str = "avro"  # what a value is: an Avro record (`value`), or otlp_proto (OTLP's protobuf export)

    def spec(self, cfg: Config) -> TopicSpec:
        """Its name, partitions, retention and cleanup as this deployment declares them."""
        return cfg.declared_topics()[self.key]


TOPICS: tuple[Topic, ...] = (
    Topic("tasks", "a task to roll out (a taskset's, or one the synthesize stage wrote)", "task id", Task,
          ("tasks", "synthesize")),
    Topic("raw", "a whole experience group, as generated or served (or read from an agent's trace)", "group id",
          ExperienceGroup, ("explorer", "serve", "streams")),
    Topic("curated", "a decided group with advantages: the normal lane", "group id", ExperienceGroup,
          ("streams",), lane=True, curated=True, streams_output=True),
    Topic("curated_priority", "a decided group worth learning from first: the trainer drains it before curated",
          "group id", ExperienceGroup, ("streams",), lane=True, curated=True, streams_output=True),
    Topic("expert", "demonstrations and corrections (learnt from as they are)", "group id", ExperienceGroup,
          ("tasks", "explorer", "serve", "studio", "streams", "synthesize"), lane=True, streams_output=True),
    Topic("rejected", "what a stage refused, with the reason and the original's bytes",
          "the refused record's own key (bounded)", Rejection,
          ("explorer", "streams", "trainer"), streams_output=True),
    Topic("feedback", "a grade of a served answer (reward, thumbs, preference, correction)", "experience id",
          Feedback, ("serve", "studio", "streams")),
    Topic("weights", "a published weight version: where its files are and their digest", "model", WeightVersion,
          ("trainer",)),
    Topic("metrics", "a figure of a stage (a step, an eval, a lineage of trained ids)", "model", TrainerMetric,
          ("streams", "trainer", "evaluator")),
    Topic("decisions", "the gate's promotion or rollback, with its evidence", "model", GateDecision, ("gate",)),
    Topic("spans", "an agent's OpenTelemetry spans (an OTLP trace export)", "trace id (hex)", None, ("otel", "serve"),
          encoding="otlp_proto"),
)
BY_KEY: dict[str, Topic] = {t.key: t for t in TOPICS}


def keys(**flags: bool) -> tuple[str, ...]:
    """The topic keys with these flags, in the registry's order: `keys(lane=True)`, `keys(streams_output=True)`."""
    return tuple(t.key for t in TOPICS if all(getattr(t, f) == v for f, v in flags.items()))


def record_of(key: str) -> type[AvroRecord]:
    value = BY_KEY[key].value
    if value is None:
        raise KeyError(f"topic {key!r} holds {BY_KEY[key].encoding}, not an Avro record")
    return value


def avro_topics() -> tuple[Topic, ...]:
    """The topics whose values are Avro records (the analytics sink's, `rftbus tail`'s)."""
    return tuple(t for t in TOPICS if t.value is not None)


# The streams app's own topics, named from its app id and created by it (rftbus/streams/topology.py), with as many
# partitions as raw: co-partitioned with it. Their values are the streams' own encodings, not Avro records.
@dataclass(frozen=True)
class InternalTopic:
    suffix: str
    holds: str
    cleanup_policy: str

    def name(self, cfg: Config) -> str:
        return f"{cfg.streams.app_id}-{self.suffix}"


JOIN = InternalTopic("join", "feedback and index records, keyed by experience id", "delete")
JOINED = InternalTopic("joined", "grades on their way back to the held groups, co-partitioned with raw", "delete")
PENDING_CHANGELOG = InternalTopic("pending-changelog", "the join table: experience id -> what waits for it",
                                  "compact")
LIVE_CHANGELOG = InternalTopic("live-changelog", "the live table: group id -> a group held for its grades",
                               "compact")
RATES_CHANGELOG = InternalTopic("rates-changelog", "the pass-rate table: (raw partition, task or prompt class) -> "
                                "the EMA of its groups' mean reward", "compact")
TRACES_CHANGELOG = InternalTopic("traces-changelog", "the traces table: trace id -> its calls waiting for a grade and "
                                 "its grade (otel.enabled)", "compact")
# A table change is compacted under a later one only after this long: a record whose input was not yet committed at a
# kill must still be there, to be skipped, when the worker recovers (rftbus/streams/state.py). An hour is far above a commit
# interval and a restart.
CHANGELOG_MIN_COMPACTION_LAG_MS = 3600 * 1000
INTERNAL: tuple[InternalTopic, ...] = (JOIN, JOINED, PENDING_CHANGELOG, LIVE_CHANGELOG, RATES_CHANGELOG,
                                       TRACES_CHANGELOG)
