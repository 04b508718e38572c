"""The Avro schemas of this package: current files plus every published version.

Why a store: single-object encoding names the writer schema only by its CRC-64-AVRO fingerprint,
so a reader has to find *any* schema ever published (``history/<Name>/vN.avsc``) by fingerprint
and resolve it against the current schema. Evolution rule: schemas change only in
backward-compatible ways, every field added after v1 has a default, and each published version is
copied to ``history/<Name>/v<N+1>.avsc`` (tests check the newest history file equals the current one).

Each schema is parsed twice: ``parsed`` keeps logical types (for tools that want datetimes) and
``fast`` drops them. The codec uses ``fast`` so timestamp-millis fields stay plain ``int``
milliseconds in Python and fastavro skips its per-field datetime conversion; the bytes on the wire
and the fingerprint (Parsing Canonical Form ignores logicalType) are identical either way.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from fastavro.schema import fingerprint as _fastavro_fingerprint
from fastavro.schema import parse_schema, to_parsing_canonical_form

SCHEMA_DIR = Path(__file__).resolve().parent
NAMESPACE = "rftbus"
_VERSION_FILE = re.compile(r"^v(\d+)\.avsc$")


def full_name(name: str) -> str:
    """``"Experience"`` or ``"rftbus.Experience"`` -> ``"rftbus.Experience"``."""
    return name if "." in name else f"{NAMESPACE}.{name}"


def strip_logical_types(schema: Any) -> Any:
    """A deep copy of a raw (JSON) schema without ``logicalType`` keys (decimal kept: it changes meaning)."""
    if isinstance(schema, dict):
        drop = "logicalType" in schema and schema["logicalType"] != "decimal"
        return {k: strip_logical_types(v) for k, v in schema.items() if not (drop and k == "logicalType")}
    if isinstance(schema, list):
        return [strip_logical_types(s) for s in schema]
    return copy.copy(schema)


def canonical_form(schema: Any) -> str:
    """Avro Parsing Canonical Form of a raw or parsed schema."""
    return to_parsing_canonical_form(parse_schema(schema) if not _is_parsed(schema) else schema)


def fingerprint64(schema: Any) -> bytes:
    """CRC-64-AVRO fingerprint as the 8 bytes single-object encoding puts on the wire.

    The Avro spec says "8-byte little-endian CRC-64-AVRO fingerprint"; fastavro's hex string is
    already those bytes in little-endian order (as Java's SchemaNormalization.parsingFingerprint).
    """
    return bytes.fromhex(_fastavro_fingerprint(canonical_form(schema), "CRC-64-AVRO"))


def _is_parsed(schema: Any) -> bool:
    return isinstance(schema, dict) and "__fastavro_parsed" in schema


@dataclass(frozen=True, slots=True)
class SchemaEntry:
    """One schema version. ``version`` is None for the current file, N for history/<Name>/vN.avsc."""

    name: str  # full name, e.g. "rftbus.Experience"
    version: int | None
    path: Path | None
    schema_str: str  # the text, as registered with a Schema Registry
    raw: dict
    parsed: dict  # fastavro-parsed, logical types kept
    fast: dict  # fastavro-parsed, logical types dropped (what the codec reads and writes with)
    canonical: str
    fingerprint: bytes  # 8 bytes, wire order

    @property
    def fingerprint_hex(self) -> str:
        return self.fingerprint.hex()

    @classmethod
    def from_text(cls, text: str, version: int | None = None, path: Path | None = None) -> "SchemaEntry":
        raw = json.loads(text)
        if not isinstance(raw, dict) or raw.get("type") != "record":
            raise ValueError(f"{path or 'schema'}: top-level schema must be a record")
        parsed: dict = parse_schema(raw)  # type: ignore[assignment]  # a record schema parses to a dict
        name = parsed["name"]  # fastavro gives the full name (namespace applied)
        canonical = to_parsing_canonical_form(parsed)
        fp = bytes.fromhex(_fastavro_fingerprint(canonical, "CRC-64-AVRO"))
        fast: dict = parse_schema(strip_logical_types(raw))  # type: ignore[assignment]
        return cls(name, version, path, text, raw, parsed, fast, canonical, fp)


class SchemaStore:
    """Loads ``<root>/*.avsc`` (current) and ``<root>/history/<Name>/vN.avsc`` (published) once."""

    def __init__(self, root: Path | str = SCHEMA_DIR):
        self.root = Path(root)
        self._current: dict[str, SchemaEntry] = {}
        self._history: dict[str, list[SchemaEntry]] = {}
        self._by_fp: dict[bytes, SchemaEntry] = {}
        for path in sorted(self.root.glob("*.avsc")):
            entry = SchemaEntry.from_text(path.read_text(), None, path)
            if entry.name != full_name(path.stem):
                raise ValueError(f"{path}: declares {entry.name}, file name says {full_name(path.stem)}")
            self._current[entry.name] = entry
            self._by_fp[entry.fingerprint] = entry
        for name in self._current:
            versions = []
            hdir = self.root / "history" / name.rsplit(".", 1)[-1]
            for path in hdir.glob("v*.avsc") if hdir.is_dir() else ():
                m = _VERSION_FILE.match(path.name)
                if m:
                    versions.append(SchemaEntry.from_text(path.read_text(), int(m.group(1)), path))
            versions.sort(key=lambda e: e.version or 0)  # (history entries always have one)
            for entry in versions:
                if entry.name != name:
                    raise ValueError(f"{entry.path}: declares {entry.name}, expected {name}")
                # Current wins on a fingerprint tie: same canonical form means identical encoding.
                self._by_fp.setdefault(entry.fingerprint, entry)
            self._history[name] = versions

    def names(self) -> list[str]:
        return sorted(self._current)

    def current(self, name: str) -> SchemaEntry:
        try:
            return self._current[full_name(name)]
        except KeyError:
            raise KeyError(f"no schema named {full_name(name)} in {self.root}") from None

    def history(self, name: str) -> list[SchemaEntry]:
        """Published versions of ``name``, oldest first."""
        return list(self._history.get(full_name(name), ()))

    def by_fingerprint(self, fp: bytes) -> SchemaEntry | None:
        """Writer schema for an 8-byte wire fingerprint (current or any history version)."""
        return self._by_fp.get(bytes(fp))

    def fingerprints(self) -> dict[bytes, SchemaEntry]:
        return dict(self._by_fp)

    def __iter__(self) -> Iterator[SchemaEntry]:
        """Every loaded entry: current files, then all history versions."""
        yield from self._current.values()
        for versions in self._history.values():
            yield from versions


@functools.lru_cache(maxsize=None)
def get_store(root: str | None = None) -> SchemaStore:
    """The process-wide store for this package's schemas (parsed once)."""
    return SchemaStore(root or SCHEMA_DIR)


def load_schema(name: str) -> dict:
    """The current fastavro-parsed schema for ``name`` (logical types kept)."""
    return get_store().current(name).parsed


def load_schema_str(name: str) -> str:
    """The current schema text for ``name`` (what gets registered with a Schema Registry)."""
    return get_store().current(name).schema_str
