"""A taskset from a team's own data (`taskset.path`), and `open_taskset`: the one way every part of rftbus gets
the configured taskset, a built-in or data, with the same interface (`tasks(split, n, seed)`, `expert(task)`).

The eval split is a file (`taskset.eval.path`), a named split of a dataset (`taskset.eval.split`), or else a
seeded share of the source itself (`taskset.eval.fraction`, by a hash of each task's id): never a task the
trainer trains on. A separate eval file or split is checked against the train rows, and one that shares a
prompt with them is refused. Scoring is not the taskset's: every taskset is scored by the configured rewards.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Protocol

from rftbus.ground.config.explorer import TasksetConfig
from rftbus.ground.schemas import Task
from rftbus.ground.tasksets.files import Mapping, Row, SourceError, compile_template, mapped, records

MAX_ERRORS_SHOWN = 10


class Taskset(Protocol):
    name: str

    def tasks(self, split: str, n: int, seed: int = 0) -> Iterator[Task]: ...

    def expert(self, task: Task) -> str: ...


def held_out(task_id: str, fraction: float, seed: int) -> bool:
    """Whether a task of the source is in its eval share: a seeded hash, so the same task always lands on
    the same side and no task is on both."""
    h = int(hashlib.sha256(f"{seed}\x00{task_id}".encode()).hexdigest()[:12], 16)
    return h < fraction * 16 ** 12


def _key(t: Task) -> str:
    return json.dumps(t.messages, sort_keys=True) if t.messages else t.prompt


class DataTaskset:
    def __init__(self, tc: TasksetConfig):
        self.tc = tc
        self.source = tc.path or tc.name
        self.name = tc.name if tc.path else Path(tc.name).stem
        self.template = compile_template(tc.template) if tc.template else None
        ev = tc.eval
        self.eval_elsewhere = ev.path is not None or ev.split is not None

    def _rows_of(self, source: str, split: str, label: str) -> Iterator[Row]:
        m = Mapping(self.tc.fields, self.name, label, self.template, self.tc.system_prompt)
        return mapped(records(source, self.tc.format, split, self.tc.subset), m)

    def rows(self, split: str) -> Iterator[Row]:
        """Every row of `split` ("train" or "eval"), each a Task or the reason it is not one."""
        tc, ev = self.tc, self.tc.eval
        if split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval', not {split!r}")
        if split == "eval" and self.eval_elsewhere:
            source, fmt_split = (ev.path, tc.split) if ev.path is not None else (self.source, ev.split)
            assert source is not None and fmt_split is not None
            yield from self._rows_of(source, fmt_split, "eval")
            return
        for row in self._rows_of(self.source, tc.split, split):
            if row.task is None or self.eval_elsewhere:
                if row.task is not None or split == "train":  # (a bad row is reported once, with train)
                    yield row
                continue
            if held_out(row.task.task_id, ev.fraction, ev.seed) == (split == "eval"):
                yield row

    def tasks(self, split: str, n: int, seed: int = 0) -> Iterator[Task]:
        """The first `n` good tasks of `split` (in file order: the same for every seed)."""
        return islice((r.task for r in self.rows(split) if r.task is not None), n)

    def expert(self, task: Task) -> str:
        return task.answer or ""

    def check(self) -> dict[str, int]:
        """Read both splits whole; SourceError listing `file:line: what is wrong` for bad rows, or an eval
        split that shares prompts with train or is empty. The counts per split otherwise."""
        seen: dict[str, str] = {}
        errors: list[str] = []
        counts = {"train": 0, "eval": 0}
        for split in ("train", "eval"):
            for row in self.rows(split):
                if row.task is None:
                    errors.append(f"{row.where}: {row.error}")
                    continue
                counts[split] += 1
                key = _key(row.task)
                if split == "train":
                    seen.setdefault(key, row.where)
                elif key in seen:
                    errors.append(f"{row.where}: this eval task is also a train task ({seen[key]}); eval must be "
                                  "held out")
        if errors:
            shown = "\n  ".join(errors[:MAX_ERRORS_SHOWN])
            more = f"\n  ... and {len(errors) - MAX_ERRORS_SHOWN} more" if len(errors) > MAX_ERRORS_SHOWN else ""
            raise SourceError(f"taskset {self.name}: {len(errors)} bad rows\n  {shown}{more}")
        for split, n in counts.items():
            if not n:
                why = "" if self.eval_elsewhere or split == "train" else \
                    f" (taskset.eval.fraction {self.tc.eval.fraction:g} of {counts['train']} tasks held none out)"
                raise SourceError(f"taskset {self.name}: no {split} tasks{why}")
        return counts


def open_taskset(tc: TasksetConfig) -> Taskset:
    """The configured taskset: a built-in by name, else data (`path`, or a `name` that is a path)."""
    from rftbus.ground.tasksets.base import get_taskset, taskset_names

    if tc.path is None and tc.name in taskset_names() and not Path(tc.name).exists():
        return get_taskset(tc.name, **tc.params)
    if tc.path is None and not Path(tc.name).exists():
        raise SourceError(f"taskset {tc.name!r} is neither a built-in ({', '.join(taskset_names())}) nor a path; "
                          "set taskset.path to your data")
    return DataTaskset(tc)
