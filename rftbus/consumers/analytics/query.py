"""`rftbus analytics query`: read-only SQL with {name:Type} parameters, printed as a table, JSON or CSV."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from rich.table import Table

from rftbus.ground.config import Config

from .backends import QueryError, Result

FORMATS = ("table", "json", "csv")


def parse_params(items: list[str]) -> dict[str, str]:
    """["name=value", ...] -> {name: value}; the value is text, ClickHouse parses it as the placeholder's type."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise QueryError(f"--param {item!r}: expected name=value")
        out[name.strip()] = value
    return out


def run_query(cfg: Config, sql: str, params: dict[str, str] | None = None) -> Result:
    """A user's SQL (the CLI, the studio): one SELECT over the analytics tables (statement.py), run by the
    sandboxed reader (jail.py) within read_limits."""
    from .reader import open_reader
    from .statement import check

    check(sql, cfg.analytics.database, cfg.analytics.query_max_chars)
    with open_reader(cfg) as b:
        return b.query(sql, params)


def _cell(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)


def as_table(res: Result, max_rows: int | None = None) -> Table:
    t = Table(*res.columns, show_lines=False, header_style="bold")
    for row in res.rows[:max_rows]:
        t.add_row(*(_cell(v) for v in row))
    if max_rows is not None and len(res.rows) > max_rows:
        t.caption = f"{max_rows} of {len(res.rows)} rows shown (--max-rows)"
    return t


def as_json(res: Result) -> str:
    return json.dumps(res.dicts(), indent=1, default=str)


def as_csv(res: Result) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(res.columns)
    for row in res.rows:
        w.writerow(["" if v is None else json.dumps(v) if isinstance(v, (dict, list)) else v for v in row])
    return buf.getvalue()
