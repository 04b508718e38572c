"""The synthesize stage's part of a run's summary (synthesis.enabled): what it published and refused (its status
files), and the synthesized tasks on the tasks topic by generation and by their parents' outcome."""

from __future__ import annotations

from collections import Counter

from rftbus.ground.config import Config
from rftbus.ground.kafka.read import read_to_end
from rftbus.ground.schemas import DecodeError, Task, make_codec
from rftbus.ground.status import read_statuses


def synthesis_summary(cfg: Config) -> dict:
    if not cfg.synthesis.enabled:
        return {}
    counts: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    for s in read_statuses(cfg.state_dir):
        if s.get("role") == "synthesize":
            counts.update({k: int(v) for k, v in (s.get("counts") or {}).items()})
            refused.update({k: int(v) for k, v in (s.get("refused") or {}).items()})
    decode = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer(Task)
    generations: Counter[int] = Counter()
    outcomes: Counter[str] = Counter()
    tasks = 0
    for msg in read_to_end(cfg, cfg.topics.tasks.name, timeout_s=60, strict=False):
        try:
            t = decode(msg.value(), None)
        except DecodeError:
            continue
        tasks += 1
        if isinstance(t, Task) and t.parent_task_id is not None:
            generations[t.generation] += 1
            outcomes[t.parent_outcome or "?"] += 1
    return {"synthesis": {
        "synthesizer": cfg.synthesis.synthesizer.name, "parents_seen": counts["parents"],
        "published": counts["published"], "tasks_on_topic": tasks,
        "synthesized_on_topic": sum(generations.values()),
        "by_generation": {str(g): n for g, n in sorted(generations.items())},
        "by_parent_outcome": dict(outcomes), "refused": dict(refused),
        "synthesizer_errors": counts["synthesizer_errors"], "synthesizer_timeouts": counts["synthesizer_timeouts"],
    }}
