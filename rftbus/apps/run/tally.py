"""The tally: was any experience lost or duplicated? Pure logic over a Ledger (no Kafka here).

Used by `rftbus run`'s summary and by `rftbus chaos` (which adds its poison and ClickHouse checks).

Units and what "lost" / "duplicated" mean (docs/RELIABILITY.md says the same in prose):
- every experience of a raw group (by raw topic/partition/offset and experience id) must get exactly one
  streams outcome: a survivor of a curated-lane record whose `rftbus-src` header names the raw record,
  or a streams rejection whose source names it and whose experience ids include it. None, although the
  streams group committed past the record: lost. More than one: duplicated. Not yet read: in flight. A
  raw record that is no group at all must get exactly one rejection naming it.
- every experience the trainer may learn from on a trainer lane (a curated record's survivors, every
  sample of a demonstration) must be trained (its id is in the lineage) or rejected by the trainer
  (distinct rejection ids naming the record: a trainer rejection is idempotent by id) at most once in
  all. Neither, though the final checkpoint's position has passed the record: lost. Neither and not
  passed: pending (Kafka holds it; the checkpoint resumes before it). Trained while the checkpoint
  would read the record again: duplicated. A lane record that is no group must be rejected once.
- an experience id trained twice anywhere in the lineage: duplicated.
- weight versions on rft.weights must be 0..V, each exactly once (a gap: lost; a repeat: duplicated);
  lineage steps 1..S per rank, likewise.
(The chaos driver adds: poison on tasks and feedback must come back as a rejection naming its offset
once read; ClickHouse must hold as many records per topic as Kafka.)
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from rftbus.apps.run.ledger import Ledger, LaneRecord, Pos, RejRecord
from rftbus.ground.schemas.bounds import MAX_IDS, bound_id

MAX_EXAMPLES = 25


@dataclass
class Tally:
    produced: int = 0  # experiences in decodable groups on raw (explorers, serve, burst, valid poison)
    trained: int = 0
    rejected: int = 0
    pending: int = 0  # curated, waiting for the trainer at a checkpointed position
    in_flight: int = 0  # in raw records streams never read, or in live groups it holds for feedback
    lost_experiences: int = 0  # produced = trained + rejected + pending + in_flight + lost_experiences
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    demonstrations: dict[str, int] = field(default_factory=dict)  # expert lane: trained / rejected / pending
    lost: Counter = field(default_factory=Counter)  # category -> count
    duplicated: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    versions: dict = field(default_factory=dict)
    lineage: dict = field(default_factory=dict)
    poison: list[dict] = field(default_factory=list)
    clickhouse: dict | None = None
    notes: list[str] = field(default_factory=list)
    lane_outcome: dict = field(default_factory=dict, repr=False)  # (lane position, experience id) -> outcome

    @property
    def lost_total(self) -> int:
        return sum(self.lost.values())

    @property
    def duplicated_total(self) -> int:
        return sum(self.duplicated.values())

    def _lose(self, category: str, example: str, n: int = 1) -> None:
        self.lost[category] += n
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(f"LOST {category}: {example}")

    def _dup(self, category: str, example: str, n: int = 1) -> None:
        self.duplicated[category] += n
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(f"DUPLICATED {category}: {example}")

    def to_json(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "lane_outcome"}
        d["lost"], d["duplicated"] = dict(self.lost), dict(self.duplicated)
        d["lost_total"], d["duplicated_total"] = self.lost_total, self.duplicated_total
        return d


def src_of(pos: Pos) -> str:
    return f"{pos[0]}/{pos[1]}/{pos[2]}"


class _Index:
    def __init__(self, led: Ledger):
        self.curated_by_src: dict[str, list[LaneRecord]] = defaultdict(list)
        for rec in led.lanes:
            if rec.lane != "expert" and rec.src:
                self.curated_by_src[rec.src].append(rec)
        self.rej_by_source: dict[Pos, list[RejRecord]] = defaultdict(list)  # every stage but the trainer
        self.trainer_rej: dict[Pos, dict[str, RejRecord]] = defaultdict(dict)  # pos -> rejection id -> rejection
        for r in led.rejections:
            if r.source is None:
                continue
            if r.stage == "trainer":
                self.trainer_rej[r.source][r.rejection_id] = r
            else:
                self.rej_by_source[r.source].append(r)
        self.trained_ids: Counter = Counter()
        for line in led.lineage:
            self.trained_ids.update(line.get("experience_ids", []))


def _trainer_outcome(led: Ledger, ix: _Index, rec: LaneRecord, eid: str | None, tally: Tally) -> str:
    """trained | rejected:<reason> | pending | lost | duplicated, for experience `eid` of lane record
    `rec` (None: the record is no group, and only a rejection of it counts)."""
    rejections = [r for r in ix.trainer_rej.get(rec.pos, {}).values() if eid is None or eid in r.experience_ids]
    n_trained = ix.trained_ids[eid] if eid is not None else 0
    if n_trained <= 1 and len(rejections) == 1 and rejections[0].reason == "duplicate":
        return "rejected:duplicate"  # a copy of an experience trained from another record: rightly refused (#42)
    n = n_trained + len(rejections)
    done = led.checkpoint is not None and led.checkpoint.done(rec.pos)
    where = f"{rec.lane} {src_of(rec.pos)} (experience {eid or 'poison'})"
    if n > 1:
        tally._dup("trainer", f"{where}: trained {n_trained}x, rejected {len(rejections)}x")
        return "duplicated"
    if n == 1:
        if n_trained and not done:
            tally._dup("trainer", f"{where}: in the lineage, but the final checkpoint would read it again")
            return "duplicated"
        return "trained" if n_trained else f"rejected:{rejections[0].reason}"
    if done:
        tally._lose("trainer", f"{where}: the checkpoint moved past it, neither trained nor rejected")
        return "lost"
    return "pending"


def _lanes(led: Ledger, ix: _Index, tally: Tally) -> dict[tuple[Pos, str | None], str]:
    """(lane record position, experience id) -> outcome; the id is None for a lane record that is no group."""
    outcome: dict[tuple[Pos, str | None], str] = {}
    demos: Counter = Counter()
    for rec in led.lanes:
        for eid in (rec.experience_ids if rec.experience_ids is not None else [None]):
            o = outcome[(rec.pos, eid)] = _trainer_outcome(led, ix, rec, eid, tally)
            if rec.lane == "expert":
                demos[o.split(":")[0]] += 1
    tally.demonstrations = dict(demos)
    for eid, n in ix.trained_ids.items():
        if n > 1:
            tally._dup("lineage_id", f"experience {eid} trained {n} times")
    return outcome


def _raw(led: Ledger, ix: _Index, lane_outcome: dict[tuple[Pos, str | None], str], tally: Tally) -> None:
    reasons: Counter = Counter()
    for pos, raw in led.raw.items():
        src = src_of(pos)
        outs = ix.curated_by_src.get(src, [])
        rejs = ix.rej_by_source.get(pos, [])
        committed = led.committed.get((pos[0], pos[1]))
        read = committed is not None and pos[2] < committed
        if raw.experience_ids is None:  # poison: one rejection of the whole record
            if len(rejs) > 1:
                tally._dup("streams", f"raw {src} (poison): {len(rejs)} rejections")
            elif not rejs and not outs:
                if read:
                    tally._lose("streams", f"raw {src} (poison): read and committed by streams, no rejection")
                else:
                    tally.in_flight += 1
            continue
        # A rejection lists at most MAX_IDS ids, the record's first ones (rftbus/ground/schemas/bounds.py): one that lists exactly
        # those rejected the whole record, the ids past them included (a 10,000-sample group, #42).
        whole = [r for r in rejs if len(r.experience_ids) >= MAX_IDS
                 and list(r.experience_ids[:MAX_IDS]) == [bound_id(i) for i in raw.experience_ids[:MAX_IDS]]]
        named = [(r, set(r.experience_ids)) for r in rejs]
        for eid in raw.experience_ids:
            tally.produced += 1
            cur = [o for o in outs if o.experience_ids and eid in o.experience_ids]
            kept = [o for o in cur if lane_outcome.get((o.pos, eid)) != "rejected:duplicate"]
            if kept and len(kept) < len(cur):  # copies the trainer refused as duplicates: its dedupe held (#42)
                if len(tally.notes) < MAX_EXAMPLES:
                    tally.notes.append(f"raw {src} experience {eid}: {len(cur) - len(kept)} copies on the trainer's "
                                       "lanes, refused by the trainer as duplicates")
                cur = kept
            rj = [r for r, ids in named if eid in ids or r in whole]
            n = len(cur) + len(rj)
            if n == 0 and not outs and not rejs and (not read or src in led.held):
                tally.in_flight += 1  # not read yet, or held by streams for its feedback
                continue
            if n == 0:
                tally.lost_experiences += 1
                tally._lose("streams", f"raw {src} experience {eid}: no curated record and no rejection"
                            + (" although streams committed past it" if read else " (others of its group had one)"))
                continue
            if n > 1:
                tally._dup("streams", f"raw {src} experience {eid}: {len(cur)} curated + {len(rj)} rejections "
                                      f"({', '.join(r.reason for r in rj)})")
            final = f"rejected:{rj[0].reason}" if rj else lane_outcome.get((cur[0].pos, eid), "pending")
            if final == "trained":
                tally.trained += 1
            elif final.startswith("rejected:"):
                tally.rejected += 1
                reasons[final.split(":", 1)[1]] += 1
            elif final == "pending":
                tally.pending += 1
            elif final == "lost":
                tally.lost_experiences += 1
            elif final == "duplicated":  # trained (more than once: counted under duplicated)
                tally.trained += 1
    tally.rejected_by_reason = dict(reasons.most_common())


def _versions(led: Ledger, tally: Tally) -> None:
    """Versions 0..V each once, V the final checkpoint's (the trainer publishes after it checkpoints). Records above
    it are not the trainer's (a forged or foreign record, refused by every follower): counted, never listed as
    the gap they would open. Bounded whatever the topic holds: gaps are counted, the first few named."""
    seen = Counter(led.versions)
    ck = led.checkpoint.version if led.checkpoint else None
    top = ck if ck is not None else max(seen, default=-1)
    ours = {v: n for v, n in seen.items() if 0 <= v <= top}
    foreign = sorted(v for v in seen if v < 0 or v > top)
    n_skipped = (top + 1) - len(ours)
    skipped: list[int] = []
    for v in range(0, top + 1):  # only the first MAX_EXAMPLES gaps are named
        if len(skipped) >= MAX_EXAMPLES or len(skipped) >= n_skipped:
            break
        if v not in ours:
            skipped.append(v)
    for v in skipped:
        tally._lose("versions", f"weight version {v} was never published")
    if n_skipped > len(skipped):
        tally._lose("versions", f"{n_skipped - len(skipped)} more versions never published", n_skipped - len(skipped))
    twice = sorted(v for v, n in ours.items() if n > 1)
    for v in twice[:MAX_EXAMPLES]:
        tally._dup("versions", f"weight version {v} published {seen[v]} times")
    if len(twice) > MAX_EXAMPLES:
        tally._dup("versions", f"{len(twice) - MAX_EXAMPLES} more versions published twice", len(twice) - MAX_EXAMPLES)
    tally.versions = {"published": len(led.versions), "newest": top, "skipped": skipped, "skipped_count": n_skipped,
                      "twice": twice[:MAX_EXAMPLES], "foreign": foreign[:MAX_EXAMPLES], "foreign_count": len(foreign),
                      "undecodable_records": led.weights_undecodable, "checkpoint_version": ck}
    if foreign:
        tally.notes.append(f"{len(foreign)} weight records name versions the trainer never published "
                           f"(e.g. v{foreign[0]}): refused by every follower, not counted as the trainer's")
    if ck is not None and ck != max(ours, default=-1):
        tally.notes.append(f"the final checkpoint holds version {ck}, rft.weights' newest is {max(ours, default=-1)}")


def _lineage(led: Ledger, tally: Tally) -> None:
    by_rank: dict[int, Counter] = defaultdict(Counter)
    for line in led.lineage:
        by_rank[int(line.get("rank", 0))][int(line["step"])] += 1
    steps = max((max(c) for c in by_rank.values() if c), default=0)
    for rank, c in sorted(by_rank.items()):
        for s in range(1, max(c) + 1):
            if s not in c:
                tally._lose("lineage", f"rank {rank} has no lineage line for step {s}")
            elif c[s] > 1:
                tally._dup("lineage", f"rank {rank} has {c[s]} lineage lines for step {s}")
    ck = led.checkpoint.step if led.checkpoint else 0
    if ck > steps:
        tally._lose("lineage", f"the final checkpoint is step {ck} but the lineage ends at step {steps}", ck - steps)
    tally.lineage = {"steps": steps, "lines": len(led.lineage), "checkpoint_step": ck}


def tally(led: Ledger) -> Tally:
    """Every experience's fate, weight versions and lineage steps, from the ledger."""
    t = Tally()
    t.lane_outcome = _lanes(led, _Index(led), t)
    _raw(led, _Index(led), t.lane_outcome, t)
    _versions(led, t)
    _lineage(led, t)
    if led.undecodable_rejections:
        t.notes.append(f"{led.undecodable_rejections} records on the rejected topic do not decode")
    return t
