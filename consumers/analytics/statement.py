"""What a user's SQL may be: one read-only statement, parsed (sqlglot's ClickHouse dialect), not pattern-matched.

Why a parser on top of ClickHouse's `readonly`: an embedded engine (chDB, clickhouse-local) runs `INTO OUTFILE`
itself and `readonly=1` does not stop it, nor the scalar `file()` function, nor `KILL QUERY` (an independent sweep
wrote and appended files as root and killed the sink's inserts with a read token; issue #36). So the studio's
and the CLI's query path accept a statement only when it is a SELECT / WITH / SHOW / DESCRIBE with no
INTO OUTFILE, no FORMAT or SETTINGS clause, and no function that reaches outside the database (files, URLs,
object stores, other servers, processes). The connection's own limits (backends/base.py `read_settings`)
bound its time, rows, bytes and memory.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.clickhouse import ClickHouse
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from .backends.base import QueryError

ALLOWED = ("SELECT", "WITH", "SHOW", "DESCRIBE", "DESC")

# Table functions that only compute (no file, network, process or other server): everything else is refused.
TABLE_FUNCTIONS = frozenset({"numbers", "numbers_mt", "zeros", "zeros_mt", "generate_series", "generateseries",
                             "values", "view", "merge", "null"})

# Functions (scalar or table) that read or write outside the database. `file` is a scalar function too, and
# readonly=1 lets it read any file the process can.
OUTSIDE = frozenset({
    "file", "filecluster", "url", "urlcluster", "s3", "s3cluster", "gcs", "oss", "cosn", "azureblobstorage",
    "azureblobstoragecluster", "hdfs", "hdfscluster", "executable", "remote", "remotesecure", "cluster",
    "clusterallreplicas", "mysql", "postgresql", "sqlite", "jdbc", "odbc", "mongodb", "redis", "input",
    "deltalake", "deltalakecluster", "deltalakes3", "deltalakeazure", "deltalakelocal", "iceberg", "icebergs3",
    "icebergazure", "iceberghdfs", "iceberglocal", "icebergcluster", "icebergs3cluster", "hudi", "hudicluster",
    "hive", "paimon", "arrowflight", "ytsaurus", "fuzzjson", "fuzzquery", "dictionary", "mergetreeindex",
    "mergetreeprojection",
})


class RefusedStatement(QueryError):
    """A statement the read-only query path does not run (a write, a file, a kill, ...)."""


def _tokens(sql: str) -> list[Token]:
    try:
        toks = ClickHouse().tokenize(sql)
    except TokenError as e:
        raise QueryError(f"Syntax error: {e}") from None
    while toks and toks[-1].token_type == TokenType.SEMICOLON:
        toks.pop()
    return toks


def _func_name(node: exp.Func) -> str:
    name = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
    return name.lower()


def check(sql: str) -> str:
    """The statement's kind (SELECT, WITH, SHOW, DESCRIBE) when `sql` may run on the read-only path;
    else RefusedStatement naming what was refused, or QueryError for SQL that does not parse."""
    words = _tokens(sql)
    if not words:
        raise QueryError("empty query")
    if any(t.token_type == TokenType.SEMICOLON for t in words):
        raise RefusedStatement("one statement at a time: a `;` may only end the query")
    first = next((t for t in words if t.token_type != TokenType.L_PAREN), words[0])
    kind = first.text.upper()
    if kind not in ALLOWED:
        raise RefusedStatement(f"{kind} statements are refused: the query path is read-only "
                               f"(one {', '.join(ALLOWED[:-1])} statement)")
    flat = list(words)
    if kind == "SHOW" and len(words) > 1:  # sqlglot keeps a SHOW's words as one opaque string: look inside
        flat = words[:1] + _tokens(words[1].text) + words[2:]
    for t in flat:  # strings and comments are their own tokens, so text inside them never matches
        if t.token_type == TokenType.INTO or t.text.upper() == "OUTFILE":
            raise RefusedStatement(f"INTO is refused in a {kind} (INTO OUTFILE writes a file on the host)")
        if kind == "SHOW" and t.text.upper() in ("FORMAT", "SETTINGS"):
            raise RefusedStatement(f"a {t.text.upper()} clause is refused: the query path sets the output "
                                   "format and its limits itself")
    if kind == "SHOW":
        return kind
    try:
        tree = ClickHouse().parser().parse(words, sql)
    except ParseError as e:
        first_error = e.errors[0] if e.errors else {}
        where = f" (line {first_error.get('line')}, col {first_error.get('col')})" if first_error else ""
        raise QueryError(f"Syntax error: {first_error.get('description', str(e))[:300]}{where}") from None
    stmts = [s for s in tree if s is not None]
    if len(stmts) != 1:
        raise RefusedStatement("one statement at a time")
    root = stmts[0]
    if not isinstance(root, (exp.Query, exp.Describe)):
        raise RefusedStatement(f"{kind} parsed as {type(root).__name__.upper()}, which the read-only path does not run")
    for node in root.walk():
        if isinstance(node, exp.Query):
            for clause in ("settings", "format"):
                if node.args.get(clause):
                    raise RefusedStatement(f"a {clause.upper()} clause is refused: the query path sets the output "
                                           "format and its limits itself")
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Func):
            name = _func_name(node.this)
            if name not in TABLE_FUNCTIONS:
                raise RefusedStatement(f"table function {name}() is refused (only {', '.join(sorted(TABLE_FUNCTIONS))})")
        elif isinstance(node, exp.Func) and _func_name(node) in OUTSIDE:
            raise RefusedStatement(f"function {_func_name(node)}() is refused: it reaches outside the database")
    return kind
