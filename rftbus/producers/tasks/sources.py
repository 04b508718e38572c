"""Task sources for `rftbus tasks publish` and a curriculum's stages: a built-in taskset by name, or every row
of a JSONL, Parquet, CSV file or HF dataset folder (rftbus/ground/tasksets/files.py reads them; a run's own
taskset comes from rftbus/ground/tasksets/data.py, which also holds its eval split out).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from rftbus.ground.config.explorer import FieldMap
from rftbus.ground.tasksets import get_taskset, taskset_names
from rftbus.ground.tasksets.files import FORMATS, Mapping, Row, SourceError, mapped, records

__all__ = ["FORMATS", "Row", "SourceError", "read_source"]


def read_source(source: str, *, fields: FieldMap, split: str, n: int | None, seed: int = 0,
                fmt: str = "auto", taskset: str | None = None, params: dict | None = None) -> Iterator[Row]:
    """Rows of `source`: a built-in taskset name or a file/folder path, every row (at most `n`)."""
    if source in taskset_names() and not Path(source).exists():
        ts = get_taskset(source, **(params or {}))
        try:  # drawn up front: a taskset too small for `n` fails before anything is published
            tasks = list(ts.tasks(split, n or 64, seed))
        except ValueError as e:
            raise SourceError(f"{e}; ask for fewer (run.tasks, or --n), or use more passes (run.task_passes)") from e
        return (Row(f"task {i}", task=t) for i, t in enumerate(tasks, 1))
    if not Path(source).exists() and fmt != "hub":
        raise SourceError(f"task source {source!r} is neither a file/folder nor a built-in taskset "
                          f"({', '.join(taskset_names())})")
    rows = mapped(records(source, fmt, split), Mapping(fields, taskset or Path(source).stem, split))
    return islice(rows, n) if n else rows
