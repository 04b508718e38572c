"""Task sources: the built-in tasksets by name, JSONL, Parquet, CSV, or a local HF dataset folder.

Every source yields `Row`s numbered as a user would look them up (file line for JSONL/CSV, 1-based
row for Parquet and datasets), each holding a Task or the reason it is not one, so a bad row is
reported with its number and skipped without stopping the rest.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from rftbus.errors import RftbusError
from rftbus.config.explorer import FieldMap
from rftbus.schemas import Task
from rftbus.tasksets import get_taskset, stable_task_id, taskset_names

FORMATS = ("auto", "jsonl", "parquet", "csv", "hf")


class SourceError(RftbusError):
    """A task source that cannot be read at all (missing, unknown format)."""


@dataclass
class Row:
    where: str  # "line 7" / "row 3"
    task: Task | None = None
    error: str | None = None


def row_to_task(row: Any, fields: FieldMap, taskset: str, split: str) -> Task:
    """Map one record to a Task; ValueError names the field that is wrong."""
    if not isinstance(row, dict):
        raise ValueError(f"expected an object with fields, got {type(row).__name__}")
    prompt = row.get(fields.prompt)
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"field {fields.prompt!r} (prompt) is missing or not a non-empty string")

    def opt(name: str | None):
        value = row.get(name) if name else None
        return None if value is None or value == "" else value

    answer = opt(fields.answer)
    n_samples = opt(fields.n_samples)
    if n_samples is not None:
        try:
            n_samples = int(n_samples)
        except (TypeError, ValueError):
            raise ValueError(f"field {fields.n_samples!r} (n_samples) is not an integer: {n_samples!r}") from None
        if n_samples < 1:
            raise ValueError(f"field {fields.n_samples!r} (n_samples) must be >= 1, got {n_samples}")
    priority = opt(fields.priority)
    try:
        priority = float(priority) if priority is not None else 0.0
    except (TypeError, ValueError):
        raise ValueError(f"field {fields.priority!r} (priority) is not a number: {priority!r}") from None
    task_id = opt(fields.task_id)
    return Task(
        task_id=str(task_id) if task_id is not None else stable_task_id(taskset, prompt),
        taskset=taskset, split=split, prompt=prompt, answer=None if answer is None else str(answer),
        workflow=opt(fields.workflow), n_samples=n_samples, priority=priority,
        metadata={k: (v if isinstance(v, str) else json.dumps(v)) for k in fields.metadata
                  if (v := row.get(k)) is not None},
    )


def _mapped(records: Iterator[tuple[str, Any]], fields: FieldMap, taskset: str, split: str) -> Iterator[Row]:
    for where, rec in records:
        if isinstance(rec, Exception):
            yield Row(where, error=str(rec))
            continue
        try:
            yield Row(where, task=row_to_task(rec, fields, taskset, split))
        except ValueError as e:
            yield Row(where, error=str(e))


def _jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    with open(path, encoding="utf-8", errors="strict") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield f"line {i}", json.loads(line)
            except json.JSONDecodeError as e:
                yield f"line {i}", ValueError(f"not valid JSON ({e.msg} at column {e.colno})")


def _csv(path: Path) -> Iterator[tuple[str, Any]]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        for rec in reader:
            if None in rec:
                yield f"line {reader.line_num}", ValueError("more values than header columns")
                continue
            yield f"line {reader.line_num}", rec


def _parquet(path: Path) -> Iterator[tuple[str, Any]]:
    import pyarrow.parquet as pq
    i = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
        for rec in batch.to_pylist():
            i += 1
            yield f"row {i}", rec


def _hf(path: Path, split: str) -> Iterator[tuple[str, Any]]:
    from datasets import DatasetDict, load_from_disk
    ds = load_from_disk(str(path))
    if isinstance(ds, DatasetDict):
        if split not in ds:
            raise SourceError(f"dataset {path} has splits {sorted(ds)}, not {split!r}")
        ds = ds[split]
    for i, rec in enumerate(ds, 1):
        yield f"row {i}", rec


def _detect(path: Path) -> str:
    if path.is_dir():
        return "hf"
    suffix = path.suffix.lower()
    return {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".csv": "csv"}.get(suffix, "")


def read_source(source: str, *, fields: FieldMap, split: str, n: int | None, seed: int = 0,
                fmt: str = "auto", taskset: str | None = None, params: dict | None = None) -> Iterator[Row]:
    """Rows of `source`: a built-in taskset name or a file/folder path (at most `n` rows)."""
    if source in taskset_names() and not Path(source).exists():
        ts = get_taskset(source, **(params or {}))
        try:  # drawn up front: a taskset too small for `n` fails before anything is published
            tasks = list(ts.tasks(split, n or 64, seed))
        except ValueError as e:
            raise SourceError(f"{e}; ask for fewer (run.tasks, or --n), or use more passes (run.task_passes)") from e
        return (Row(f"task {i}", task=t) for i, t in enumerate(tasks, 1))
    path = Path(source)
    if not path.exists():
        raise SourceError(f"task source {source!r} is neither a file/folder nor a built-in taskset "
                          f"({', '.join(taskset_names())})")
    kind = _detect(path) if fmt == "auto" else fmt
    if kind not in FORMATS[1:]:
        raise SourceError(f"cannot tell the format of {source!r}; pass --format ({', '.join(FORMATS[1:])})")
    name = taskset or path.stem
    records = {"jsonl": lambda: _jsonl(path), "csv": lambda: _csv(path), "parquet": lambda: _parquet(path),
               "hf": lambda: _hf(path, split)}[kind]()
    rows = _mapped(records, fields, name, split)
    return islice(rows, n) if n else rows
