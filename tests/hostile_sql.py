"""The hostile SQL catalogue (issue #42): what a read token might send, with the words its refusal names.
Used by the grammar's unit test and by the studio's test through the sandboxed reader."""

from __future__ import annotations

from rftbus.consumers.analytics.statement import MAX_DEPTH


def hostile(target: str) -> list[tuple[str, str]]:
    """Every write, file, URL, process, kill and schema-inference form we know of, with the words its refusal names."""
    return [
        (f"SELECT 1 INTO OUTFILE '{target}' TRUNCATE FORMAT RawBLOB", "INTO is refused"),
        (f"SELECT * FROM rftbus.tasks INTO OUTFILE '{target}' FORMAT CSV", "INTO is refused"),
        (f"with a AS (SELECT 1) select * from a into outfile '{target}'", "INTO is refused"),
        (f"INSERT INTO FUNCTION file('{target}', 'RawBLOB') SELECT 'x'", "INSERT statements are refused"),
        (f"SELECT * FROM file('{target}', 'LineAsString')", "function file()"),
        ("SELECT file('/etc/hostname')", "function file()"),
        ("SELECT length(FILE('/etc/shadow')) > 0", "function FILE()"),
        ("SELECT `file`('/etc/passwd')", "function file()"),
        ("SELECT file /* a comment */ ('/etc/passwd')", "function file()"),
        ("SELECT * FROM url('http://127.0.0.1:9/', 'CSV', 'a String')", "function url()"),
        ("SELECT * FROM s3('http://127.0.0.1:9/b/k', 'CSV')", "function s3()"),
        ("SELECT * FROM executable('id', 'TSV', 'a String')", "function executable()"),
        ("SELECT * FROM remote('127.0.0.1', system.one)", "function remote()"),
        ("SELECT * FROM mysql('127.0.0.1:3306', 'db', 't', 'u', 'p')", "function mysql()"),
        ("SELECT * FROM numbers(10)", "function numbers()"),
        ("SELECT dictGet('d', 'a', 1)", "function dictGet()"),
        ("SELECT 1 WHERE 1 IN (SELECT * FROM url('http://127.0.0.1:9/', 'CSV', 'a UInt8'))", "function url()"),
        ("SELECT * FROM experiences e JOIN url('http://x/', 'CSV') u ON 1", "function url()"),
        # What the last sweep got through: SHOW's WHERE, DESCRIBE of a table function (schema inference reads it).
        ("SHOW TABLES FROM system WHERE name='one' AND toUInt8(substring(file('/etc/passwd'),1,200))=1",
         "SHOW statements are refused"),
        ("DESCRIBE file('/etc/passwd','TSVWithNames')", "DESCRIBE statements are refused"),
        ("DESCRIBE url('http://127.0.0.1:1/x','CSVWithNames')", "DESCRIBE statements are refused"),
        ("DESC TABLE rftbus.tasks", "DESC statements are refused"),
        ("EXISTS TABLE rftbus.tasks", "EXISTS statements are refused"),
        ("SELECT * FROM system.one", "table system.one is refused"),
        ("SELECT * FROM INFORMATION_SCHEMA.TABLES", "is refused"),
        ("SELECT * FROM other.tasks", "table other.tasks is refused"),
        ("SELECT * FROM secrets", "table secrets is refused"),
        ("KILL QUERY WHERE 1", "KILL statements are refused"),
        ("SYSTEM SHUTDOWN", "SYSTEM statements are refused"),
        ("DROP TABLE rftbus.tasks", "DROP statements are refused"),
        ("ALTER TABLE rftbus.tasks DELETE WHERE 1", "ALTER statements are refused"),
        ("CREATE TABLE x (a Int8) ENGINE = File(RawBLOB)", "CREATE statements are refused"),
        ("SET max_execution_time = 0", "SET statements are refused"),
        ("EXPLAIN SELECT 1", "EXPLAIN statements are refused"),
        ("SELECT 1; DROP TABLE rftbus.tasks", "one statement at a time"),
        ("SELECT count() FROM experiences SETTINGS max_execution_time = 0", "SETTINGS clause is refused"),
        ("SELECT * FROM (SELECT 1 SETTINGS readonly = 0)", "SETTINGS clause is refused"),
        ("SELECT 1 FORMAT RawBLOB", "FORMAT clause is refused"),
        ("(" * (MAX_DEPTH + 1) + "SELECT 1" + ")" * (MAX_DEPTH + 1), "nests brackets deeper"),
        ("SELECT hostName()", "function hostName()"),
        # ClickHouse's identifier parameters name a table only at run time (#63): refused whatever their value
        ("SELECT * FROM {tasks:Identifier}", "query parameter {tasks:Identifier} is refused"),
        ("SELECT name FROM {db:Identifier}.settings", "is refused: a parameter is a value"),
        ("SELECT * FROM rftbus.{ t : identifier }", "is refused: a parameter is a value"),
        ("SELECT {c:Identifier} FROM tasks", "is refused: a parameter is a value"),
    ]
