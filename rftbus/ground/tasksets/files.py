"""Rows of task data: JSONL, Parquet, CSV, a Hugging Face `save_to_disk` folder or a hub dataset, each row
mapped to a Task (a column mapping, a Jinja prompt template, chat messages, a system prompt).

Every row is numbered as a user would look it up (`file:line` for JSONL and CSV, `file:row N` for Parquet
and datasets) and holds a Task or the reason it is not one, so a bad row is reported by its place.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rftbus.ground.config.explorer import FieldMap
from rftbus.ground.errors import RftbusError
from rftbus.ground.schemas import Task

FORMATS = ("auto", "jsonl", "parquet", "csv", "hf", "hub")
ROLES = ("system", "user", "assistant")


class SourceError(RftbusError):
    """Task data that cannot be read at all (missing, unknown format, a bad template)."""


@dataclass
class Row:
    where: str  # "data/train.jsonl:7" / "data/train.parquet:row 3"
    task: Task | None = None
    error: str | None = None


@dataclass(frozen=True)
class Mapping:
    """How a row becomes a Task."""

    fields: FieldMap
    taskset: str
    split: str
    template: Any = None  # a compiled Jinja template over the row's columns, or None
    system_prompt: str | None = None


def compile_template(source: str):
    """A sandboxed Jinja template that fails on a column the row lacks (StrictUndefined)."""
    from jinja2 import StrictUndefined, TemplateSyntaxError
    from jinja2.sandbox import SandboxedEnvironment

    try:
        return SandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True).from_string(source)
    except TemplateSyntaxError as e:
        raise SourceError(f"taskset.template: {e.message} (line {e.lineno})") from None


def _messages(value: Any, column: str) -> list[dict[str, str]]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"column {column!r} (messages) is a string that is not JSON") from None
    if not isinstance(value, list) or not value:
        raise ValueError(f"column {column!r} (messages) must be a non-empty list of {{role, content}}")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ValueError(f"column {column!r} (messages) item {i} is not {{role: {'|'.join(ROLES)}, content: str}}")
        out.append({"role": m["role"], "content": m["content"]})
    if out[-1]["role"] != "user":
        raise ValueError(f"column {column!r} (messages) must end with a user turn, not {out[-1]['role']}")
    return out


def row_to_task(row: Any, m: Mapping) -> Task:
    """Map one record to a Task; ValueError names the column (or template field) that is wrong."""
    from jinja2 import TemplateError, UndefinedError

    if not isinstance(row, dict):
        raise ValueError(f"expected an object with fields, got {type(row).__name__}")
    f = m.fields
    messages = _messages(row.get(f.messages), f.messages) if f.messages else None
    if messages is not None:
        prompt = messages[-1]["content"]
    elif m.template is not None:
        try:
            # a dict, not **row: a column may be named `self` (#42); `row` also names the whole row, for a column
            # whose name Jinja keeps for itself ({{ row['self'] }})
            prompt = m.template.render({**row, "row": row} if "row" not in row else row)
        except UndefinedError as e:
            raise ValueError(f"taskset.template: {e.message} in this row (columns: {', '.join(map(str, row))[:500]})") from None
        except (TemplateError, TypeError, ValueError, ArithmeticError) as e:
            raise ValueError(f"taskset.template failed on this row: {type(e).__name__}: {str(e)[:300]}") from None
    else:
        value = row.get(f.prompt)
        if not isinstance(value, str):
            got = "missing" if f.prompt not in row else f"a {type(value).__name__}"
            raise ValueError(f"column {f.prompt!r} (prompt) is {got}, not a string")
        prompt = value
    if not prompt.strip():
        raise ValueError(f"the prompt is empty (column {f.prompt!r}{' through taskset.template' if m.template else ''})")
    if m.system_prompt is not None:
        turns = messages or [{"role": "user", "content": prompt}]
        if turns[0]["role"] != "system":
            messages = [{"role": "system", "content": m.system_prompt}, *turns]

    def opt(name: str | None):
        value = row.get(name) if name else None
        return None if value is None or value == "" else value

    answer = opt(f.answer)
    if answer is not None and (isinstance(answer, bool) or not isinstance(answer, (str, int, float))):
        raise ValueError(f"column {f.answer!r} (answer) is a {type(answer).__name__}, not a string or a number")
    n_samples = opt(f.n_samples)
    if n_samples is not None:
        try:
            n_samples = int(n_samples)
        except (TypeError, ValueError):
            raise ValueError(f"column {f.n_samples!r} (n_samples) is not an integer: {n_samples!r}") from None
        if n_samples < 1:
            raise ValueError(f"column {f.n_samples!r} (n_samples) must be >= 1, got {n_samples}")
    priority = opt(f.priority)
    try:
        priority = float(priority) if priority is not None else 0.0
    except (TypeError, ValueError):
        raise ValueError(f"column {f.priority!r} (priority) is not a number: {priority!r}") from None
    task_id = opt(f.task_id)
    from rftbus.ground.tasksets.base import stable_task_id

    key = prompt if messages is None else json.dumps(messages, sort_keys=True)
    return Task(
        task_id=str(task_id) if task_id is not None else stable_task_id(m.taskset, key),
        taskset=m.taskset, split=m.split, prompt=prompt, answer=None if answer is None else str(answer),
        workflow=opt(f.workflow), n_samples=n_samples, priority=priority, messages=messages,
        metadata=column_metadata(row, f),
    )


def column_metadata(row: dict, f: Any) -> dict[str, str]:
    """The row's other columns as Task.metadata (a map of strings on the wire): a string as it is, any other value
    as JSON, named under JSON_COLUMNS so `Task.columns()` gives it back with its type."""
    from rftbus.ground.schemas.records import JSON_COLUMNS

    mapped = {f.prompt, f.messages, f.answer, f.task_id, f.workflow, f.n_samples, f.priority}
    names = f.metadata if f.metadata is not None else [k for k in row if k not in mapped and k != JSON_COLUMNS]
    out = {str(k): v if isinstance(v, str) else json.dumps(v) for k in names if (v := row.get(k)) is not None}
    coded = sorted(str(k) for k in names if row.get(k) is not None and not isinstance(row[k], str))
    if coded:
        out[JSON_COLUMNS] = json.dumps(coded)
    return out


def mapped(records: Iterator[tuple[str, Any]], m: Mapping) -> Iterator[Row]:
    for where, rec in records:
        if isinstance(rec, Exception):
            yield Row(where, error=str(rec))
            continue
        try:
            yield Row(where, task=row_to_task(rec, m))
        except ValueError as e:
            yield Row(where, error=str(e))
        except RecursionError:
            yield Row(where, error="a value is nested too deeply to read")


MAX_LINE_CHARS = 8 * 1024 * 1024  # a longer JSONL line is named and skipped, never read whole


def _lines(f, limit: int) -> Iterator[tuple[int, str | None]]:
    """(line number, text) of a text file, or (line number, None) for a line over `limit` characters, which is
    read past in pieces (a 100 MB line never sits in memory)."""
    i = 0
    while True:
        line = f.readline(limit + 1)
        if not line:
            return
        i += 1
        if len(line) > limit and not line.endswith("\n"):
            while (more := f.readline(1 << 20)) and not more.endswith("\n"):
                pass
            yield i, None
            continue
        yield i, line


def _jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    with open(path, encoding="utf-8", errors="strict") as f:
        try:
            for i, line in _lines(f, MAX_LINE_CHARS):
                if line is None:
                    yield f"{path}:{i}", ValueError(f"a line of over {MAX_LINE_CHARS} characters (skipped)")
                    continue
                if not line.strip():
                    continue
                try:
                    yield f"{path}:{i}", json.loads(line)
                except json.JSONDecodeError as e:
                    yield f"{path}:{i}", ValueError(f"not valid JSON ({e.msg} at column {e.colno})")
                except RecursionError:
                    yield f"{path}:{i}", ValueError("JSON nested too deeply to read")
        except UnicodeDecodeError as e:
            raise SourceError(f"{path}: not UTF-8 text (byte {e.start}): is it really JSONL?") from None


def _csv(path: Path) -> Iterator[tuple[str, Any]]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        try:
            for rec in reader:
                if None in rec:
                    yield f"{path}:{reader.line_num}", ValueError("more values than header columns")
                    continue
                yield f"{path}:{reader.line_num}", rec
        except (UnicodeDecodeError, csv.Error) as e:
            raise SourceError(f"{path}:{reader.line_num}: not CSV text ({e})") from None


def _parquet(path: Path) -> Iterator[tuple[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise SourceError(f"{path}: not a Parquet file ({e})") from None
    i = 0
    for batch in pf.iter_batches(batch_size=1024):
        for rec in batch.to_pylist():
            i += 1
            yield f"{path}:row {i}", rec


def _dataset(ds: Any, label: str, split: str) -> Iterator[tuple[str, Any]]:
    from datasets import DatasetDict
    if isinstance(ds, DatasetDict):
        if split not in ds:
            raise SourceError(f"dataset {label} has splits {sorted(ds)}, not {split!r}")
        ds = ds[split]
    for i, rec in enumerate(ds, 1):
        yield f"{label}:row {i}", rec


def _hf(path: Path, split: str) -> Iterator[tuple[str, Any]]:
    from datasets import load_from_disk
    try:
        ds = load_from_disk(str(path))
    except FileNotFoundError as e:
        raise SourceError(f"{path}: not a Hugging Face dataset folder (save_to_disk): {e}") from None
    return _dataset(ds, str(path), split)


def _hub(name: str, split: str, subset: str | None) -> Iterator[tuple[str, Any]]:
    from datasets import load_dataset
    try:
        ds = load_dataset(name, subset, split=split)
    except Exception as e:  # noqa: BLE001  # the hub's errors are many (offline, gated, no such split): named here
        raise SourceError(f"hub dataset {name!r} (split {split!r}) could not be loaded: {type(e).__name__}: {e}") from None
    return _dataset(ds, name, split)


def detect(path: Path) -> str:
    if path.is_dir():
        return "hf"
    suffix = path.suffix.lower()
    return {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".csv": "csv"}.get(suffix, "")


def records(source: str, fmt: str = "auto", split: str = "train", subset: str | None = None) -> Iterator[tuple[str, Any]]:
    """(where, record or the Exception that says why it is not one) of a file, folder or hub dataset."""
    path = Path(source)
    if fmt == "hub":
        return _hub(source, split, subset)
    if not path.exists():
        raise SourceError(f"task data {source!r} does not exist (for a hub dataset id, set taskset.format: hub)")
    if not path.is_dir() and not path.is_file():  # a FIFO blocks `check` for ever, /dev/zero never ends (#63)
        raise SourceError(f"task data {source!r} is not a regular file or a dataset folder")
    kind = detect(path) if fmt == "auto" else fmt
    if kind not in FORMATS[1:]:
        raise SourceError(f"cannot tell the format of {source!r}; set it ({', '.join(FORMATS[1:])})")
    return {"jsonl": lambda: _jsonl(path), "csv": lambda: _csv(path), "parquet": lambda: _parquet(path),
            "hf": lambda: _hf(path, split)}[kind]()
