"""Runs inside the SQL reader's bubblewrap sandbox (`python -I -S /jail/launcher.py`): stdlib and chDB only.

bwrap made the namespaces (no network, private PIDs, IPC, UTS) and the view: the system read-only, this
Python, the chDB package, the analytics folder read-only at /data (with a private `status` file and tmp), no
/etc, no state folder, no environment. This applies the rlimits, drops root to `nobody`, opens the folder with
`readonly=1` and the read limits, then answers one request per stdin line: {"sql", "params"} -> a header line
{"ok": true, "bytes": N} and N bytes of JSONCompact, or {"ok": false, "category", "message"}. An engine error
is passed on as its category and ClickHouse's error name, with quoted text masked: whatever the engine put in
a message stays here.
"""

import json
import os
import re
import resource
import sys
from urllib.parse import urlencode

NOBODY = 65534
CATEGORIES = {
    "SYNTAX_ERROR": "syntax", "UNKNOWN_TABLE": "unknown_name", "UNKNOWN_DATABASE": "unknown_name",
    "UNKNOWN_IDENTIFIER": "unknown_name", "UNKNOWN_FUNCTION": "unknown_name", "NO_SUCH_COLUMN_IN_TABLE": "unknown_name",
    "TIMEOUT_EXCEEDED": "timeout", "TOO_MANY_ROWS_OR_BYTES": "result_too_large", "TOO_MANY_ROWS": "result_too_large",
    "TOO_MANY_BYTES": "result_too_large", "MEMORY_LIMIT_EXCEEDED": "memory", "TYPE_MISMATCH": "type",
    "ILLEGAL_TYPE_OF_ARGUMENT": "type", "NUMBER_OF_ARGUMENTS_DOESNT_MATCH": "type", "BAD_ARGUMENTS": "type",
    "UNKNOWN_QUERY_PARAMETER": "parameter", "BAD_QUERY_PARAMETER": "parameter", "READONLY": "refused",
    "ACCESS_DENIED": "refused", "ILLEGAL_AGGREGATION": "type", "NOT_AN_AGGREGATE": "type",
}
_NAME = re.compile(r"\(([A-Z_]{3,})\)\s*(?:\(version|$)")
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def classify(text: str) -> tuple[str, str]:
    """(category, a message with every quoted literal masked and no stack trace)."""
    text = text.split("Stack trace", 1)[0]
    m = _NAME.search(text.strip())
    name = m.group(1) if m else "UNKNOWN"
    first = text.strip().splitlines()[0] if text.strip() else ""
    first = re.sub(r"^.*?DB::(?:Errno)?Exception:\s*", "", first)
    first = _QUOTED.sub("'…'", first)[:300]
    return CATEGORIES.get(name, "engine"), f"{name}: {first}" if first else name


def _limits(lim: dict) -> None:
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (lim["cpu_s"], lim["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim["max_file_mb"] * mb, lim["max_file_mb"] * mb))
    resource.setrlimit(resource.RLIMIT_NOFILE, (lim["max_open_files"], lim["max_open_files"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if lim.get("memory_mb"):
        resource.setrlimit(resource.RLIMIT_AS, (lim["memory_mb"] * mb, lim["memory_mb"] * mb))
    if os.geteuid() == 0:  # no capabilities left after this, and root-only files of the view stay unreadable
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)


def _answer(out, header: dict, body: bytes = b"") -> None:
    out.write(json.dumps(header).encode() + b"\n" + body)
    out.flush()


def main() -> None:
    conf = json.loads(open("/jail/config.json").read())
    _limits(conf["limits"])
    sys.path.insert(0, "/py")
    out = sys.stdout.buffer
    try:
        import chdb.session

        session = chdb.session.Session("file:/data?" + urlencode({"readonly": 1, **conf["settings"]}))
        session.query(f"USE {conf['database']}")
    except Exception as e:  # noqa: BLE001 - said to the parent, which refuses the query
        _, msg = classify(str(e))
        _answer(out, {"ok": False, "category": "unavailable", "message": f"the analytics data cannot be opened ({msg})"})
        return
    _answer(out, {"ok": True, "ready": True})
    for line in sys.stdin.buffer:
        req = json.loads(line)
        try:
            res = session.query(req["sql"], "JSONCompact", params=req.get("params") or None)
            body = res.bytes()
        except Exception as e:  # noqa: BLE001 - one query's error, answered; the next one runs
            cat, msg = classify(str(e))
            _answer(out, {"ok": False, "category": cat, "message": msg})
            try:  # chDB 4.4 hands a failed query's partial output to the next one (see backends/chdb.py _drain)
                session.query("SELECT 1", "JSONCompact")
            except Exception:  # noqa: BLE001
                pass
            continue
        if len(body) > conf["max_bytes"]:
            _answer(out, {"ok": False, "category": "result_too_large",
                          "message": f"the result is {len(body)} bytes, over analytics.query_max_bytes"})
            continue
        _answer(out, {"ok": True, "bytes": len(body)}, body)


if __name__ == "__main__":
    main()
