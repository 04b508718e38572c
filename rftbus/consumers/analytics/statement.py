"""What a user's SQL may be: an allow-list, not a deny-list. One SELECT (or WITH ... SELECT) over the analytics
tables, calling only functions that compute.

Why an allow-list: a deny-list in front of ClickHouse missed `SHOW ... WHERE file(...)`, `DESCRIBE file(...)`
and `url()` schema inference (issue #42), because the engine keeps growing ways to reach outside. Here every
name followed by `(` in the token stream (what ClickHouse calls, whatever sqlglot makes of it) must be a known
pure function, a type or a keyword; every table must be an analytics table (or a CTE); no SETTINGS, FORMAT or
INTO; no query parameter of ClickHouse's `Identifier` type (`FROM {t:Identifier}` with t=system.settings named
the table only after this check, and reached system tables: #63): a parameter is a value, never a name. Text over
`analytics.query_max_chars`, or nested deeper than MAX_DEPTH, is refused before it is parsed.
The statement then runs in the sandboxed reader (jail.py), which can reach nothing else even if a function
here could. Schema questions (SHOW, DESCRIBE) have their own answer built from the table definitions
(`schema.describe`), not an engine statement.
"""

from __future__ import annotations

import re

from sqlglot import exp
from sqlglot.dialects.clickhouse import ClickHouse
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from .backends.base import QueryError
from .schema import TABLES

ALLOWED = ("SELECT", "WITH")
MAX_DEPTH = 128  # brackets nested deeper are refused before parsing (the parser recurses per level)
MAX_CHARS = 64 * 1024
# {name:Identifier}: ClickHouse substitutes a table, database or column name at run time (any spacing, any case)
_IDENTIFIER_PARAM = re.compile(r"\{\s*[A-Za-z_][A-Za-z0-9_]*\s*:\s*Identifier\s*\}", re.IGNORECASE)

# Aggregates; each also with ClickHouse's combinators (countIf, uniqExactIf, avgOrNull, sumArray, ...).
_AGGREGATES = """count sum avg min max any anylast anyheavy argmin argmax uniq uniqexact uniqcombined uniqcombined64
uniqhll12 uniqtheta median medianexact quantile quantiles quantileexact quantilesexact quantiletdigest quantilestdigest
quantiletiming stddevpop stddevsamp varpop varsamp covarpop covarsamp corr grouparray groupuniqarray grouparraysorted
grouparraylast groupbitand groupbitor topk topkweighted summap minmap maxmap avgweighted histogram skewpop skewsamp
kurtpop kurtsamp simplelinearregression entropy sumwithoverflow sumkahan stddevpopstable stddevsampstable
count_distinct any_value first_value last_value""".split()
_COMBINATORS = ("if", "array", "distinct", "ornull", "ordefault", "foreach", "map")
_SCALARS = """
abs round roundbankers floor ceil ceiling trunc truncate sqrt cbrt exp exp2 exp10 log ln log2 log10 log1p pow power
sign greatest least intdiv intdivorzero modulo moduloorzero negate plus minus multiply divide isnan isinf isfinite
ifnotfinite e pi sin cos tan tanh sigmoid
if multiif coalesce ifnull nullif isnull isnotnull assumenotnull tonullable isnullable
equals notequals less greater lessorequals greaterorequals and or not xor in notin like notlike ilike notilike match
cast accuratecast accuratecastornull totypename
tostring tofixedstring todate todate32 todatetime todatetime64 todecimal32 todecimal64 todecimal128 tobool
toint8 toint16 toint32 toint64 toint128 touint8 touint16 touint32 touint64 tofloat32 tofloat64
now now64 today yesterday toyear toquarter tomonth todayofmonth todayofweek todayofyear tohour tominute tosecond
tostartofday tostartofhour tostartofminute tostartoffiveminutes tostartoffiveminute tostartoftenminutes
tostartoffifteenminutes tostartofinterval tostartofweek tostartofmonth tostartofquarter tostartofyear tomonday
tounixtimestamp tounixtimestamp64milli tounixtimestamp64micro tounixtimestamp64nano fromunixtimestamp
fromunixtimestamp64milli fromunixtimestamp64micro datediff date_diff dateadd date_add datesub date_sub date_trunc
datetrunc timestampdiff age formatdatetime adddays addhours addminutes addseconds addmilliseconds addweeks
addmonths subtractdays subtracthours subtractminutes subtractseconds subtractmilliseconds tointervalsecond
tointervalminute tointervalhour tointervalday tointervalweek tointervalmonth totimezone torelativesecondnum
torelativeminutenum torelativehournum
length lengthutf8 empty notempty lower upper lowerutf8 upperutf8 substring substr substringutf8 mid left right
concat concatwithseparator position positioncaseinsensitive locate startswith endswith replace replaceall
replaceone replaceregexpall replaceregexpone trim trimboth trimleft trimright ltrim rtrim splitbychar
splitbystring splitbyregexp arraystringconcat format reverse repeat leftpad rightpad lpad rpad extract extractall
extractallgroups countsubstrings countmatches multisearchany hex unhex base64encode base64decode tryBase64Decode
cityhash64 siphash64 xxhash64 murmurhash3_64 md5 sha256 lcase ucase char ascii
jsonhas jsonlength jsontype jsonextract jsonextractstring jsonextractint jsonextractuint jsonextractfloat
jsonextractbool jsonextractraw jsonextractarrayraw jsonextractkeys visitparamextractstring visitparamextractfloat
visitparamextractint visitparamextractbool visitparamextractraw tojsonstring
array arrayjoin has hasany hasall indexof arraymap arrayfilter arraysum arrayavg arraymin arraymax arraycount
arrayexists arrayall arraysort arrayreversesort arraydistinct arrayslice arrayelement arrayconcat arrayzip
arrayenumerate arrayenumerateuniq arrayuniq arrayfirst arraylast arrayfirstindex arraycumsum arraydifference
arrayflatten flatten arraycompact arrayreverse arraypushback arraypushfront arrayresize arrayintersect
arrayreduce arraystringconcat range emptyarraystring emptyarrayuint64 tuple tupleelement map mapkeys mapvalues
mapcontains mapfromarrays
row_number rownumber rank dense_rank denserank percent_rank laginframe leadinframe ntile
rand rand64 bar formatreadablesize formatreadablequantity formatreadabletimespan
"""
# Types (a CAST's target), and the keywords that may stand before `(` (a subquery, a list, a window).
_TYPES = """nullable array map tuple lowcardinality datetime datetime64 decimal decimal32 decimal64 decimal128
fixedstring nested""".split()
_STRUCTURE = """select from join in exists as using over filter and or not where on by then else when distinct
interval limit having between like ilike is with union all intersect except case values array partition rows range
preceding following any""".split()


def _with_variants() -> frozenset[str]:
    names = set(_SCALARS.split()) | set(_TYPES) | set(_STRUCTURE)
    for agg in _AGGREGATES:
        names.add(agg)
        names.update(agg + c for c in _COMBINATORS)
        names.update(agg + c1 + c2 for c1 in _COMBINATORS for c2 in _COMBINATORS if c1 != c2)
    for conv in [n for n in _SCALARS.split() if n.startswith("to") and n[2:3] in "dfiub"]:
        names.update(conv + s for s in ("ornull", "orzero", "ordefault"))
    return frozenset(n.lower() for n in names)


CALLABLE = _with_variants()


class RefusedStatement(QueryError):
    """A statement the read-only query path does not run (a write, a file, a function it does not know, ...)."""


def _depth(sql: str) -> int:
    depth = top = 0
    for ch in sql:
        if ch in "([":
            depth += 1
            top = max(top, depth)
        elif ch in ")]":
            depth -= 1
    return top


def _tokens(sql: str) -> list[Token]:
    try:
        toks = ClickHouse().tokenize(sql)
    except TokenError as e:
        raise QueryError(f"Syntax error: {str(e)[:300]}") from None
    while toks and toks[-1].token_type == TokenType.SEMICOLON:
        toks.pop()
    return toks


def _calls(words: list[Token]) -> None:
    """Every name called (followed by `(`) is a known function, type or keyword."""
    for t, nxt in zip(words, words[1:]):
        if nxt.token_type != TokenType.L_PAREN or t.token_type in (TokenType.L_PAREN, TokenType.R_PAREN,
                                                                      TokenType.COMMA, TokenType.STRING):
            continue
        if t.token_type in (TokenType.NUMBER, TokenType.PARAMETER) or t.text in ("+", "-", "*", "/", "%", "=", "<",
                                                                                "[", "]", ">", "!", "?", ":"):
            continue
        if t.text.lower() not in CALLABLE:
            raise RefusedStatement(f"function {t.text}() is not on the query path's list of functions that compute "
                                   "(`rftbus analytics schema` lists them)")


def check(sql: str, database: str = "rftbus", max_chars: int = MAX_CHARS) -> str:
    """The statement's kind (SELECT or WITH) when `sql` may run on the read-only path; else RefusedStatement
    naming what was refused, or QueryError for SQL that does not parse."""
    if len(sql) > max_chars:
        raise RefusedStatement(f"the query is {len(sql)} characters: analytics.query_max_chars is {max_chars}")
    if _depth(sql) > MAX_DEPTH:
        raise RefusedStatement(f"the query nests brackets deeper than {MAX_DEPTH}")
    found = _IDENTIFIER_PARAM.search(sql)
    if found:
        raise RefusedStatement(f"query parameter {found.group(0)} is refused: a parameter is a value; write table "
                               "and column names in the query itself")
    words = _tokens(sql)
    if not words:
        raise QueryError("empty query")
    if any(t.token_type == TokenType.SEMICOLON for t in words):
        raise RefusedStatement("one statement at a time: a `;` may only end the query")
    first = next((t for t in words if t.token_type != TokenType.L_PAREN), words[0])
    kind = first.text.upper()
    if kind in ("SHOW", "DESCRIBE", "DESC", "EXISTS"):
        raise RefusedStatement(f"{kind} statements are refused: ask for the tables and columns with "
                               "`rftbus analytics schema` or the studio's GET api/schema")
    if kind not in ALLOWED:
        raise RefusedStatement(f"{kind} statements are refused: the query path is read-only (one SELECT or WITH)")
    for t in words:  # strings and comments are their own tokens, so text inside them never matches
        if t.token_type == TokenType.INTO or t.text.upper() == "OUTFILE":
            raise RefusedStatement(f"INTO is refused in a {kind} (INTO OUTFILE writes a file on the host)")
    _calls(words)
    try:
        tree = ClickHouse().parser().parse(words, sql)
    except ParseError as e:
        first_error = e.errors[0] if e.errors else {}
        where = f" (line {first_error.get('line')}, col {first_error.get('col')})" if first_error else ""
        raise QueryError(f"Syntax error: {str(first_error.get('description', str(e)))[:300]}{where}") from None
    except RecursionError:
        raise RefusedStatement("the query nests too deeply to read") from None
    stmts = [s for s in tree if s is not None]
    if len(stmts) != 1:
        raise RefusedStatement("one statement at a time")
    root = stmts[0]
    if not isinstance(root, exp.Query):
        raise RefusedStatement(f"{kind} parsed as {type(root).__name__.upper()}, which the read-only path does not run")
    _tables(root, database)
    return kind


def _tables(root: exp.Query, database: str) -> None:
    ctes = {c.alias_or_name.lower() for c in root.find_all(exp.CTE)}
    for node in root.walk():
        if isinstance(node, exp.Query):
            for clause in ("settings", "format"):
                if node.args.get(clause):
                    raise RefusedStatement(f"a {clause.upper()} clause is refused: the query path sets the output "
                                           "format and its limits itself")
        if not isinstance(node, exp.Table):
            continue
        if isinstance(node.this, exp.Func):
            raise RefusedStatement(f"table function {node.this.sql_name().lower()}() is refused: read the analytics "
                                   f"tables ({', '.join(sorted(TABLES))})")
        name, db = node.name, node.db
        if not name:
            continue  # a subquery or an ARRAY JOIN's array, not a table
        if not db and name.lower() in ctes:
            continue
        if db and db != database:
            raise RefusedStatement(f"table {db}.{name} is refused: only the analytics tables of database {database}")
        if name not in TABLES:
            raise RefusedStatement(f"table {name} is refused: the analytics tables are {', '.join(sorted(TABLES))}")
