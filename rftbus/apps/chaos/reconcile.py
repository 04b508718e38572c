"""The chaos tally: the run's own (rftbus.apps.run.tally) plus the fate of every poison record and the
ClickHouse counts. Pure logic over a Ledger (no Kafka here)."""

from __future__ import annotations

from collections import defaultdict

from rftbus.apps.chaos.poison import ANY, NONE, Poison
from rftbus.apps.run.ledger import Ledger, Pos, RejRecord
from rftbus.apps.run.tally import Tally, src_of, tally

def _poison(led: Ledger, poisons: list[Poison], lane_outcome: dict[tuple[Pos, str | None], str], tally: Tally) -> None:
    """Each poison record's fate. Losses are counted here only for tasks and feedback: poison on raw
    and on the trainer's lanes is already a unit of the streams / trainer accounting."""
    by_source: dict[Pos, list[RejRecord]] = defaultdict(list)
    for r in led.rejections:
        if r.source is not None:
            by_source[r.source].append(r)
    for p in poisons:
        row = {**p.to_json(), "outcome": "", "ok": True}
        if p.where is None:
            row.update(outcome="not delivered by the chaos producer", ok=False)
            tally.notes.append(f"poison '{p.label}' on {p.topic_key} was not delivered")
        elif p.expect == NONE:
            row["outcome"] = "no rejection path: readers skip it (liveness is the check)"
        elif p.expect == ANY:
            rejs = by_source.get(p.where, [])
            curated = [(r.pos, e) for r in led.lanes if r.src == src_of(p.where) for e in r.experience_ids or []]
            row["outcome"] = (f"rejected: {', '.join(sorted({r.reason for r in rejs}))}" if rejs and not curated
                              else "curated -> " + ", ".join(sorted({lane_outcome[k] for k in curated}))
                              if curated else "in flight")
        else:
            rejs = by_source.get(p.where, [])
            reasons = sorted({r.reason for r in rejs})
            if rejs:
                row["outcome"] = "rejected: " + ", ".join(reasons)
                row["ok"] = any(r in p.expect for r in reasons)
                if not row["ok"]:
                    tally.notes.append(f"poison '{p.label}' on {p.topic_key} rejected as {reasons}, "
                                       f"expected {sorted(p.expect)}")
            elif p.topic_key in ("tasks", "feedback", "raw"):
                committed = led.committed.get((p.where[0], p.where[1]))
                if committed is not None and p.where[2] < committed:
                    row.update(outcome="read and committed without a rejection", ok=False)
                    if p.topic_key != "raw":
                        tally._lose("poison", f"{p.topic_key} '{p.label}' at {src_of(p.where)} vanished without a rejection")
                else:
                    row["outcome"] = "not read yet (in flight)"
            else:
                outs = sorted({o for (pos, _), o in lane_outcome.items() if pos == p.where})
                row["outcome"] = ", ".join(outs) or "?"
                row["ok"] = outs == ["pending"]
        tally.poison.append(row)


def _clickhouse(led: Ledger, ch: dict[str, int] | None, tally: Tally) -> None:
    if ch is None:
        return
    rows = {}
    for key, kafka_n in sorted(led.topic_counts.items()):
        got = ch.get(key)
        rows[key] = {"kafka": kafka_n, "clickhouse": got}
        if got is None:
            tally.notes.append(f"ClickHouse reports no count for {key}")
        elif got < kafka_n:
            tally._lose("clickhouse", f"{key}: Kafka {kafka_n}, ClickHouse {got}", kafka_n - got)
        elif got > kafka_n:
            tally._dup("clickhouse", f"{key}: Kafka {kafka_n}, ClickHouse {got}", got - kafka_n)
    tally.clickhouse = rows


def reconcile(led: Ledger, poisons: list[Poison], clickhouse: dict[str, int] | None = None) -> Tally:
    t = tally(led)
    _poison(led, poisons, t.lane_outcome, t)
    _clickhouse(led, clickhouse, t)
    return t
