"""What the studio's pages show, read from analytics (chDB through the sandboxed reader, or a ClickHouse server).

Each page opens one reader for its queries and closes it (for chDB, one sandboxed process that sees the parts
written when it opened: rftbus/consumers/analytics/jail.py).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from rftbus.ground.config import Config
from rftbus.consumers.analytics import report_sql as R
from rftbus.consumers.analytics.rows import CURATED
from rftbus.consumers.analytics.backends import Backend
from rftbus.consumers.analytics.backends.base import _PLACEHOLDER

from . import sql as S

MS = "toUnixTimestamp64Milli"


def render(template: str, db: str, **literals: str) -> str:
    """{db}, {MS} and the given literals filled in; {name:Type} placeholders stay for ClickHouse."""
    text = template.replace("{db}", db).replace("{MS}", MS)
    for k, v in literals.items():
        text = text.replace("{" + k + "}", v)
    return text


def array(values: list[str]) -> str:
    """A ClickHouse Array(String) parameter's text."""
    return "[" + ",".join("'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'" for v in values) + "]"


class Reader:
    """Queries for one page, through one reader; parameters not used by a query are left out."""

    def __init__(self, backend: Backend):
        self.b = backend

    def rows(self, template: str, params: dict[str, Any] | None = None, **literals: str) -> list[dict[str, Any]]:
        return self._run(render(template, self.b.database, **literals), params or {})

    def report_rows(self, template: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """A query of the analytics report (report_sql's own formatting)."""
        return self._run(R.sql(template, self.b.database), params)

    def _run(self, text: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        used = set(_PLACEHOLDER.findall(text))
        return self.b.query(text, {k: str(v) for k, v in params.items() if k in used}).dicts()


@contextmanager
def reading(cfg: Config) -> Iterator[Reader]:
    from rftbus.consumers.analytics.reader import open_reader

    backend = open_reader(cfg)
    try:
        yield Reader(backend)
    finally:
        backend.close()


# -- the feedback queue ------------------------------------------------------------------------------
@dataclass
class QueueGroup:
    group_id: str
    task_id: str
    version: int
    created_ms: int
    prompt: str
    samples: list[dict[str, Any]] = field(default_factory=list)  # experience_id, sample_index, response
    images: int = 0  # pictures the prompt shows (served by api.image)


def queue(r: Reader, ttl_s: float, limit: int, oldest_first: bool, task: str = "",
          now_ms: int | None = None) -> list[QueueGroup]:
    """Groups of live answers waiting for a grade, whole (a group of two is graded as a pair)."""
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    rows = r.rows(S.QUEUE, {"since_ms": now_ms - int(ttl_s * 1000), "task": task, "limit": limit * 4},
                  order="ASC" if oldest_first else "DESC")
    groups: dict[str, QueueGroup] = {}
    for row in rows:
        g = groups.get(row["group_id"])
        if g is None:
            if len(groups) >= limit:
                continue
            g = groups[row["group_id"]] = QueueGroup(row["group_id"], row["task_id"], int(row["version"]),
                                                     int(row["created_ms"]), row["prompt"] or "",
                                                     images=int(row.get("images") or 0))
        g.samples.append({"experience_id": row["experience_id"], "sample_index": int(row["sample_index"]),
                          "response": row["response"] or ""})
    return list(groups.values())


def image(cfg: Config, r: Reader, group_id: str, k: int) -> Any:
    """Image `k` of a group's prompt: its record found through analytics (which holds hashes, not bytes), read from
    Kafka at that offset, the image admitted and hash-checked (rftbus/ground/images/) and the same hash the sink
    saw; None when there is none."""
    from rftbus.ground.images import image_bytes
    from rftbus.ground.kafka.read import read_to_end
    from rftbus.ground.schemas import ExperienceGroup, make_codec

    rows = r.rows(S.IMAGES_AT, {"id": group_id})
    if not rows or not 0 <= k < len(rows[0]["image_sha256"]):
        return None
    at = rows[0]
    p, off = int(at["partition"]), int(at["offset"])
    decode = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer()
    for msg in read_to_end(cfg, at["kafka_topic"], partitions=[p], start={p: off}, until={p: off + 1}, timeout_s=10,
                           strict=False):
        g = decode(msg.value(), None)
        if isinstance(g, ExperienceGroup) and g.group_id == group_id and k < len(g.images) \
                and g.images[k].sha256 == at["image_sha256"][k]:
            return g.images[k].media_type, image_bytes(g.images[k], cfg)
    return None


def queue_tasks(r: Reader, ttl_s: float) -> list[dict[str, Any]]:
    return r.rows(S.QUEUE_TASKS, {"since_ms": int(time.time() * 1000) - int(ttl_s * 1000)})


def mine(r: Reader, annotator: str, limit: int = 50) -> list[dict[str, Any]]:
    return r.rows(S.MINE, {"me": annotator, "limit": limit})


# -- the path of an experience, a group or a task --------------------------------------------------------
@dataclass
class Path:
    query: str
    records: list[dict[str, Any]]  # every experiences row (raw, curated lanes, expert) found
    rejections: list[dict[str, Any]]
    trained: list[dict[str, Any]]
    feedback: list[dict[str, Any]]
    weights: list[dict[str, Any]]
    task: dict[str, Any] | None
    family: Family | None = None

    @property
    def found(self) -> bool:
        return bool(self.records or self.rejections or self.task)

    def experiences(self) -> list[dict[str, Any]]:
        """One entry per experience: its first record and where it went."""
        out: dict[str, dict[str, Any]] = {}
        for rec in self.records:
            e = out.setdefault(rec["experience_id"], {**rec, "lanes": [], "rejections": [], "trained": [],
                                                     "feedback": [], "served_in": None})
            if rec["topic"] in CURATED:
                e["lanes"].append(rec)
            if rec["topic"] == "raw" and e["topic"] != "raw":  # show the raw record first
                e.update({k: v for k, v in rec.items()})
        for rej in self.rejections:
            for eid in rej["experience_ids"] or [rej["experience_id"]]:
                if eid in out:
                    out[eid]["rejections"].append(rej)
            if not rej["experience_ids"] and not rej["experience_id"]:
                for e in out.values():
                    if e["group_id"] == rej["group_id"]:
                        e["rejections"].append(rej)
        for t in self.trained:
            if t["experience_id"] in out:
                e = out[t["experience_id"]]
                e["trained"].append(t)
                served = first_version_after(self.weights, int(t["step"]))
                if served is not None and (e["served_in"] is None or served["version"] < e["served_in"]["version"]):
                    e["served_in"] = served
        for f in self.feedback:
            for eid in {f["experience_id"], f["preferred_id"], f["rejected_id"]} - {None}:
                if eid in out:
                    out[eid]["feedback"].append(f)
        return list(out.values())


def first_version_after(weights: list[dict[str, Any]], step: int) -> dict[str, Any] | None:
    """The first weight version that includes a step's update (published at that step or later)."""
    for w in weights:
        if int(w["step"]) >= step:
            return w
    return None


def path(r: Reader, query: str, limit: int = 200) -> Path:
    q = query.strip()
    records = r.rows(S.FIND, {"id": q, "limit": limit})
    ids = sorted({x["experience_id"] for x in records} | {q})
    groups = sorted({x["group_id"] for x in records} | {q})
    rejections = r.rows(S.REJECTED, {"ids": array(ids), "groups": array(groups)})
    for rej in rejections:
        if isinstance(rej["experience_ids"], str):  # some servers answer arrays as text
            rej["experience_ids"] = json.loads(rej["experience_ids"])
    trained = r.rows(S.TRAINED, {"ids": array(ids)})
    feedback = r.rows(S.FEEDBACK_OF, {"ids": array(ids)})
    weights = r.rows(S.WEIGHTS) if trained else []
    tasks = {x["task_id"] for x in records} | {q}
    task = None
    for t in sorted(tasks):
        got = r.rows(S.TASK, {"id": t})
        if got:
            task = got[0]
            break
    return Path(q, records, rejections, trained, feedback, weights, task, family(r, task) if task else None)


@dataclass
class Family:
    """A task's lineage: its ancestors (parent first), the tasks written from it, and how the policy did on each
    (answers and mean reward of its explorer groups)."""

    ancestors: list[dict[str, Any]]
    children: list[dict[str, Any]]
    outcomes: dict[str, dict[str, Any]]


def family(r: Reader, task: dict[str, Any], depth: int = 8) -> Family:
    ancestors: list[dict[str, Any]] = []
    parent = task.get("parent_task_id")
    while parent and len(ancestors) < depth:
        got = r.rows(S.TASK, {"id": parent})
        if not got:
            ancestors.append({"task_id": parent, "missing": True})
            break
        ancestors.append(got[0])
        parent = got[0].get("parent_task_id")
    children = r.rows(S.CHILDREN, {"id": task["task_id"]})
    ids = [task["task_id"], *(a["task_id"] for a in ancestors), *(c["task_id"] for c in children)]
    outcomes = {o["task"]: o for o in r.rows(S.OUTCOMES, {"ids": array(ids)})}
    return Family(ancestors, children, outcomes)


# -- a small cache: many open dashboards cost one set of queries ----------------------------------------
class Cache:
    def __init__(self, ttl_s: float):
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._at: dict[str, tuple[float, Any]] = {}

    def get(self, key: str, make: Callable[[], Any]) -> Any:
        with self._lock:  # one maker at a time: a burst of refreshes waits for the first one's answer
            hit = self._at.get(key)
            if hit is not None and time.monotonic() - hit[0] < self.ttl_s:
                return hit[1]
            value = make()
            self._at[key] = (time.monotonic(), value)
            return value
