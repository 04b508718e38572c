"""Read a record's small fields without materialising its big arrays, and write changes back by splicing.

Why: a stream processor that only checks an Experience's scalar fields and array *lengths*, then sets
``advantage``/``priority``/``metadata``, pays ~0.3 ms to decode ~1k-token arrays into Python lists and
as much again to encode them back. Avro's binary form is the fields back to back, so the skim walks the
body once, decodes every non-array field, counts array items (int arrays with numpy: the n-th byte
< 0x80 ends the n-th varint; float arrays are checked for NaN/inf with numpy) and remembers where each
field starts. The output is then ``framing + body[..] + new field encodings + body[..]``.

Exactness: a skim is only returned when the body is *canonical*, i.e. exactly what fastavro writes for
the values it holds (one block per array/map, minimal varints, booleans 0/1, union index 0/1, no
duplicate map keys, valid UTF-8, nothing trailing). Then the splice equals a full re-encode of the
changed record, byte for byte. Anything else -- an older writer schema, another writer's block layout,
garbage -- gives None, and the caller takes the full decode path, which also decides how bad bytes
are reported. Only the current schema of a record is skimmed (its writer schema is the reader schema).
Rare valid cases are left to the full decode too (declining is always safe): a float32 NaN (its bits
may change through decode + encode) and array varints over 9 bytes (|value| >= 2^62).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any, Callable

import numpy as np
from fastavro import schemaless_writer
from fastavro.schema import expand_schema, parse_schema

from .codec import Codec, DecodeError
from .records import AvroRecord
from .store import strip_logical_types

_DOUBLE = struct.Struct("<d").unpack_from
_WIDTH = {"float": "<f4", "double": "<f8"}


class _NotCanonical(Exception):
    """The body is not what fastavro would write (or not valid at all): use the full decode path."""


@dataclass(slots=True)
class Skim:
    """One skimmed record: its bytes, where each field starts, and everything but the arrays' items."""

    data: bytes  # the framed bytes as read
    start: int  # where the Avro body starts (after the framing)
    offsets: list[int] = field(default_factory=list)  # start of field i; the last entry is len(data)
    values: dict[str, Any] = field(default_factory=dict)  # every non-array field, as fastavro decodes it
    lengths: dict[str, int] = field(default_factory=dict)  # every array field's item count
    nonfinite: set[str] = field(default_factory=set)  # float/double arrays holding +-inf (or NaN: doubles)
    items: dict[str, list["Skim"]] = field(default_factory=dict)  # arrays of records: one skim per item


class Encoded(bytes):
    """A value for ``splice`` that is already the field's Avro encoding (written as is)."""


Step = Callable[[bytes, int, Skim], int]  # reads one field at pos into the Skim, returns the next pos


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A canonical zigzag varint (minimal, at most 64 bits) at ``pos``."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    start = pos
    n = 0
    shift = 0
    while b & 0x80:
        n |= (b & 0x7F) << shift
        shift += 7
        pos += 1
        b = buf[pos]
    n |= b << shift
    pos += 1
    if b == 0 or pos - start > 10 or (pos - start == 10 and b != 1):
        raise _NotCanonical("varint not minimal or over 64 bits")
    return (n >> 1) ^ -(n & 1), pos


def _string(buf: bytes, pos: int) -> tuple[str, int]:
    n = buf[pos]
    if n < 0x80:  # lengths < 64: one byte (inlined, the common case)
        n, pos = (n >> 1) ^ -(n & 1), pos + 1
    else:
        n, pos = _varint(buf, pos)
    end = pos + n
    if n < 0 or end > len(buf):
        raise _NotCanonical("string length")
    return buf[pos:end].decode(), end  # strict UTF-8, as fastavro reads it


def _bytes(buf: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = _varint(buf, pos)
    end = pos + n
    if n < 0 or end > len(buf):
        raise _NotCanonical("bytes length")
    return buf[pos:end], end


def _double(buf: bytes, pos: int) -> tuple[float, int]:
    return _DOUBLE(buf, pos)[0], pos + 8


def _boolean(buf: bytes, pos: int) -> tuple[bool, int]:
    b = buf[pos]
    if b > 1:
        raise _NotCanonical("boolean byte")
    return b == 1, pos + 1


_SCALARS: dict[str, Callable[[bytes, int], tuple[Any, int]]] = {
    "string": _string, "bytes": _bytes, "int": _varint, "long": _varint, "double": _double, "boolean": _boolean}


def _block_count(buf: bytes, pos: int) -> tuple[int, int]:
    """The item count of a single-block array/map (0 = empty); other block layouts are not canonical."""
    n, pos = _varint(buf, pos)
    if n < 0:
        raise _NotCanonical("negative block count (sized blocks)")
    return n, pos


def _block_end(buf: bytes, pos: int) -> int:
    if buf[pos] != 0:
        raise _NotCanonical("more than one block")
    return pos + 1


def _varints_end(buf: bytes, pos: int, n: int) -> int:
    """Where ``n`` canonical varints starting at ``pos`` end, found with numpy instead of a Python loop."""
    avail = len(buf) - pos
    for width in (3, 9):  # token ids below 2^20 take at most 3 bytes; look further only when needed
        window = np.frombuffer(buf, np.uint8, min(avail, width * n), pos)
        ends = np.flatnonzero(window < 0x80)  # the byte that ends each varint
        if len(ends) >= n or len(window) == avail:
            break
    if len(ends) < n:
        raise _NotCanonical("array runs past the end")
    end = int(ends[n - 1]) + 1
    if end != n:  # some multi-byte varints: each must be minimal (not end in 0x00) and at most 9 bytes
        w = window[:end]
        if ((w[1:] == 0) & (w[:-1] >= 0x80)).any():
            raise _NotCanonical("varint not minimal")
        if ends[0] > 8 or (n > 1 and (ends[1:n] - ends[:n - 1]).max() > 9):
            raise _NotCanonical("varint over 9 bytes (fine, but left to the full decode)")
    return pos + end


def _primitive(t: Any, known: Any = _SCALARS) -> str | None:
    """"long" for "long" or {"type": "long"} (a logical type already stripped) if in ``known``; else None."""
    if isinstance(t, dict) and "logicalType" not in t:
        t = t.get("type")
    return t if isinstance(t, str) and t in known else None


def _step(name: str, t: Any) -> Step | None:
    """The reader of one field of type ``t`` (expanded schema), or None for a type the skim does not know."""
    prim = _primitive(t)
    if prim:
        read = _SCALARS[prim]

        def scalar(buf: bytes, pos: int, out: Skim) -> int:
            out.values[name], pos = read(buf, pos)
            return pos
        return scalar
    if isinstance(t, list):  # only ["null", T] / [T, "null"] unions: fastavro's branch choice is then unambiguous
        kinds = [_primitive(b) for b in t if b != "null"]
        if len(t) != 2 or len(kinds) != 1 or kinds[0] is None:
            return None
        read, null_byte, value_byte = _SCALARS[kinds[0]], (0 if t[0] == "null" else 2), (2 if t[0] == "null" else 0)

        def union(buf: bytes, pos: int, out: Skim) -> int:
            b = buf[pos]
            if b == null_byte:
                out.values[name] = None
                return pos + 1
            if b != value_byte:
                raise _NotCanonical("union index")
            out.values[name], pos = read(buf, pos + 1)
            return pos
        return union
    if not isinstance(t, dict):
        return None
    kind = t.get("type")
    if kind == "enum":
        symbols = t["symbols"]

        def enum(buf: bytes, pos: int, out: Skim) -> int:
            i, pos = _varint(buf, pos)
            if not 0 <= i < len(symbols):
                raise _NotCanonical("enum index")
            out.values[name] = symbols[i]
            return pos
        return enum
    value_prim = _primitive(t["values"]) if kind == "map" else None
    if value_prim:
        read_value = _SCALARS[value_prim]

        def map_(buf: bytes, pos: int, out: Skim) -> int:
            n, pos = _block_count(buf, pos)
            d: dict[str, Any] = {}
            if n:
                for _ in range(n):
                    k, pos = _string(buf, pos)
                    d[k], pos = read_value(buf, pos)
                if len(d) != n:
                    raise _NotCanonical("duplicate map key")
                pos = _block_end(buf, pos)
            out.values[name] = d
            return pos
        return map_
    items = _primitive(t.get("items"), ("int", "long", "float", "double", "boolean"))
    if kind == "array" and items:

        def array(buf: bytes, pos: int, out: Skim) -> int:
            n, pos = _block_count(buf, pos)
            out.lengths[name] = n
            if not n:
                return pos
            if n > len(buf) - pos:
                raise _NotCanonical("array runs past the end")
            if items in ("int", "long"):
                pos = _varints_end(buf, pos, n)
            elif items == "boolean":
                if buf[pos:pos + n].translate(None, b"\x00\x01"):
                    raise _NotCanonical("boolean byte")
                pos += n
            else:
                a = np.frombuffer(buf, _WIDTH[items], n, pos)  # ValueError when it runs past the end
                if not np.isfinite(a).all():
                    if items == "float" and np.isnan(a).any():  # a float32 NaN may not survive decode + encode
                        raise _NotCanonical("NaN in a float array")
                    out.nonfinite.add(name)
                pos += a.nbytes
            return _block_end(buf, pos)
        return array
    return None


def _field_writer(name: str, t: Any) -> Callable[[Any], bytes]:
    """The Avro encoding of one field's value, by fastavro itself (a one-field record encodes as the field)."""
    schema = parse_schema({"type": "record", "name": f"skim_field_{name}", "fields": [{"name": name, "type": t}]})

    def write(value: Any) -> bytes:
        fo = BytesIO()
        schemaless_writer(fo, schema, {name: value})
        return fo.getvalue()
    return write


def _record_items(name: str, plan: "SkimPlan") -> Step:
    """The reader of an array of records: every item skimmed with ``plan``, offsets absolute."""

    def records(buf: bytes, pos: int, out: Skim) -> int:
        n, pos = _block_count(buf, pos)
        items = []
        if n:
            for _ in range(n):
                item = Skim(buf, pos)
                pos = plan.walk(buf, pos, item)
                items.append(item)
            pos = _block_end(buf, pos)
        out.items[name] = items
        out.lengths[name] = n
        return pos
    return records


def _is_record_array(t: Any) -> bool:
    return (isinstance(t, dict) and t.get("type") == "array" and isinstance(t.get("items"), dict)
            and t["items"].get("type") == "record")


class SkimPlan:
    """Skim reader and splicer for one record schema (logical types stripped). Arrays of records are
    skimmed item by item with a nested plan, so a change to one item's field is spliced in place."""

    __slots__ = ("index", "nested", "_steps", "_writers")

    def __init__(self, names: list[str], steps: list[Step], writers: list[Callable[[Any], bytes]],
                 nested: dict[str, "SkimPlan"]):
        self.index = {n: i for i, n in enumerate(names)}
        self.nested = nested
        self._steps = steps
        self._writers = writers

    @classmethod
    def build(cls, raw_schema: dict) -> "SkimPlan | None":
        """A plan, or None when a field has a type the skim does not read (arrays of strings, ...)."""
        return cls._build(expand_schema(parse_schema(raw_schema)))  # type: ignore[arg-type]  # a record: a dict

    @classmethod
    def _build(cls, expanded: dict) -> "SkimPlan | None":
        fields = expanded["fields"]
        steps: list[Step | None] = []
        nested: dict[str, SkimPlan] = {}
        for f in fields:
            if _is_record_array(f["type"]):
                sub = cls._build(f["type"]["items"])
                if sub is None:
                    return None
                nested[f["name"]] = sub
                steps.append(_record_items(f["name"], sub))
            else:
                steps.append(_step(f["name"], f["type"]))
        if any(s is None for s in steps):
            return None
        return cls([f["name"] for f in fields], steps,  # type: ignore[arg-type]
                   [_field_writer(f["name"], f["type"]) for f in fields], nested)

    def walk(self, data: bytes, pos: int, out: Skim) -> int:
        """Read every field at ``pos`` into ``out`` (offsets included); returns where the record ends."""
        offsets = out.offsets
        for step in self._steps:
            offsets.append(pos)
            pos = step(data, pos, out)
        offsets.append(pos)
        return pos

    def skim(self, data: bytes, start: int) -> Skim | None:
        """The skim of the body at ``data[start:]``, or None when it is not canonical (see the module doc)."""
        out = Skim(data, start)
        try:
            pos = self.walk(data, start, out)
        except (_NotCanonical, IndexError, ValueError, UnicodeDecodeError, struct.error):
            return None
        return out if pos == len(data) else None

    def encode_field(self, name: str, value: Any) -> bytes:
        return value if value.__class__ is Encoded else self._writers[self.index[name]](value)

    def item_bytes(self, skim: Skim, name: str, i: int, changes: dict[str, Any]) -> bytes:
        """Item ``i`` of record array ``name``, with ``changes`` to its fields, as Avro bytes."""
        item = skim.items[name][i]
        return self.nested[name]._replace(item, item.offsets[0], item.offsets[-1], self._ranges(item, changes, name))

    def _ranges(self, skim: Skim, changes: dict[str, Any], nested: str | None = None) -> list[tuple[int, int, bytes]]:
        plan = self.nested[nested] if nested else self
        out = []
        for name, value in changes.items():
            i = plan.index[name]  # KeyError for a field not in the schema
            out.append((skim.offsets[i], skim.offsets[i + 1], plan.encode_field(name, value)))
        return out

    @staticmethod
    def _replace(skim: Skim, start: int, end: int, ranges: list[tuple[int, int, bytes]]) -> bytes:
        data, parts, pos = skim.data, [], start
        for a, b, value in sorted(ranges, key=lambda r: r[0]):
            if a < pos:
                raise ValueError("overlapping splice changes (a record array and one of its items)")
            parts.append(data[pos:a])
            parts.append(value)
            pos = b
        parts.append(data[pos:end])
        return b"".join(parts)

    def splice(self, skim: Skim, header: bytes, changes: dict[str, Any],
               item_changes: dict[str, dict[int, dict[str, Any]]] | None = None) -> bytes:
        """``header`` + the body with the fields in ``changes`` re-encoded (an ``Encoded`` value is taken
        as is) and, per record array, item index -> field changes; the rest is copied as read."""
        ranges = self._ranges(skim, changes)
        for name, per_item in (item_changes or {}).items():
            for i, ch in per_item.items():
                ranges += self._ranges(skim.items[name][i], ch, name)
        return header + self._replace(skim, skim.start, len(skim.data), ranges)


class Skimmer:
    """Skim and splice one record type's bytes through a Codec's framing and schemas.

    ``skim`` answers None whenever only a full decode can be trusted (older writer schema, another
    record type, non-canonical or bad bytes); the caller then decodes, which reports bad bytes.
    ``splice`` writes the serializer's own framing, so its output is what ``codec.encode`` gives.
    """

    def __init__(self, codec: Codec, record_cls: type[AvroRecord]):
        self.record_cls = record_cls
        self._de = codec.deserializer()  # any record type: the framing decides, as decoding does
        self._ser = codec.serializer(record_cls)
        self.plan = SkimPlan.build(strip_logical_types(codec.store.current(record_cls.SCHEMA_NAME).raw))

    def skim(self, data: Any) -> Skim | None:
        if self.plan is None or data.__class__ is not bytes:
            return None
        try:
            found = self._de.current_body(data)
        except DecodeError:
            return None
        if found is None or found[0] is not self.record_cls:
            return None
        return self.plan.skim(data, found[1])

    def splice(self, skim: Skim, changes: dict[str, Any],
               item_changes: dict[str, dict[int, dict[str, Any]]] | None = None, ctx: Any = None) -> bytes | None:
        """The record with ``changes`` applied, framed as the serializer frames it for ``ctx``; None
        while that framing is unknown (a registry subject not yet seen)."""
        header = self._ser.prefix(ctx)
        return None if header is None or self.plan is None else self.plan.splice(skim, header, changes, item_changes)
