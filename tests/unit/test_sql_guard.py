"""The query path's grammar (issue #42): an allow-list, so a `read` token gets one SELECT over the analytics tables
calling functions that compute, and nothing else. Pure logic (sqlglot); the sandboxed reader that runs what passes,
and the studio in front of it, are tested through the real parts in tests/integration/test_sql_reader.py.
"""

from __future__ import annotations

import pytest

from rftbus.ground.config import load_config
from rftbus.consumers.analytics import report_sql as R
from rftbus.consumers.analytics.backends import QueryError
from rftbus.consumers.analytics.backends.base import read_limits
from rftbus.consumers.analytics.statement import RefusedStatement, check
from rftbus.consumers.analytics.tally import counts_sql
from rftbus.consumers.studio import sql as S
from rftbus.consumers.studio.data import render

from hostile_sql import hostile


def test_every_hostile_form_is_refused_naming_what(tmp_path):
    for sql, words in hostile(str(tmp_path / "pwned")):
        with pytest.raises(RefusedStatement) as e:
            check(sql)
        assert words in str(e.value), (sql, str(e.value))


def test_a_long_query_is_refused_before_it_is_parsed():
    import time

    sql = "SELECT " + " + ".join(["1"] * 400_000)  # 1.6 MB: parsing it took the last tree tens of seconds
    t0 = time.monotonic()
    with pytest.raises(RefusedStatement, match="query_max_chars"):
        check(sql, max_chars=64 * 1024)
    assert time.monotonic() - t0 < 0.5


def test_read_only_statements_pass_and_quoted_words_do_not_trip_the_check():
    ok = [("SELECT 1", "SELECT"), ("select * from rftbus.experiences FINAL where id = {id:String} limit 3;", "SELECT"),
          ("WITH a AS (SELECT 1 AS x) SELECT x FROM a", "WITH"), ("(SELECT 1) UNION ALL (SELECT 2)", "SELECT"),
          ("SELECT 'INTO OUTFILE /tmp/x, file(1)' AS s -- into outfile", "SELECT"),
          ("SELECT a FROM experiences ARRAY JOIN mapKeys(reward_components) AS a", "SELECT"),
          ("SELECT values['reward'] FROM metrics", "SELECT"), ("SELECT format('{} {}', 'a', 'b')", "SELECT"),
          ("SELECT quantile(0.9)(reward), uniqExactIf(experience_id, reward > 0), CAST(reward AS Nullable(Float64)), "
           "arrayMap(x -> x + 1, [1, 2]), countIf(reward > 0), avgOrNull(reward) FROM experiences FINAL", "SELECT")]
    for sql, kind in ok:
        assert check(sql) == kind, sql
    with pytest.raises(QueryError, match="Syntax error"):
        check("SELECT (1")
    with pytest.raises(QueryError, match="empty query"):
        check(" ; ")


def test_the_projects_own_queries_pass_the_allow_list():
    """The report's, the studio's and the counts' SQL: the grammar is usable, not only strict."""
    n = 0
    for mod, fmt in ((R, lambda t: R.sql(t, "rftbus")), (S, lambda t: render(t, "rftbus", order="ASC"))):
        for name in dir(mod):
            text = getattr(mod, name)
            if name.isupper() and isinstance(text, str) and "SELECT" in text:
                check(fmt(text))
                n += 1
    check(counts_sql("rftbus"))
    assert n >= 15


def test_read_limits_come_from_the_config():
    cfg = load_config(overrides={"analytics": {"query_timeout_s": 3, "query_max_rows": 10}}, environ={})
    lim = read_limits(cfg.analytics)
    assert lim["max_execution_time"] == 3 and lim["max_result_rows"] == 10 and lim["result_overflow_mode"] == "throw"
    assert cfg.analytics.query_max_bytes <= 64 * 2**20  # a read token cannot pull the whole database in one answer
