"""Byte-identical shortcut for records with large float/double/boolean arrays (Experience).

Why: fastavro handles arrays one item at a time (~80-170 ns per item). Avro's binary form of a
record is just its fields' encodings back to back, and arrays of float/double/boolean are
fixed-width after the block count, so those fields can be packed with ``array``/``bytes`` in one
C call while the other fields go through fastavro as sub-records ("segments") of consecutive
fields. The result is exactly what fastavro writes (tests compare bytes), and the reader accepts
any valid Avro block layout (several blocks, negative counts with byte sizes), as other writers
may produce. Used only when the writer schema is the current one; resolution goes via fastavro.
"""

from __future__ import annotations

import sys
from array import array
from typing import Any, Callable

from fastavro import schemaless_reader, schemaless_writer
from fastavro.schema import expand_schema, parse_schema

_SWAP = sys.byteorder != "little"  # Avro floats are little-endian; array() uses native order
_PACKED = {"float": ("f", 4), "double": ("d", 8)}


def zigzag_varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_long(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint at ``pos``; IndexError when the buffer ends inside it."""
    b = buf[pos]
    pos += 1
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if shift > 70:
            raise ValueError("varint longer than 10 bytes")
    return (n >> 1) ^ -(n & 1), pos


def _writer_packed(name: str, typecode: str) -> Callable[[Any, dict], None]:
    def write(fo: Any, d: dict) -> None:
        values = d[name]
        n = len(values)  # TypeError for None, like fastavro
        if n:
            fo.write(zigzag_varint(n))
            a = array(typecode, values)
            if _SWAP:
                a.byteswap()
            fo.write(a)
        fo.write(b"\x00")
    return write


def _write_bools_factory(name: str) -> Callable[[Any, dict], None]:
    def write(fo: Any, d: dict) -> None:
        values = d[name]
        n = len(values)
        if n:
            fo.write(zigzag_varint(n))
            try:
                raw = bytes(values) if values.__class__ is list else None
            except (TypeError, ValueError):
                raw = None
            if raw is None or raw.translate(None, b"\x00\x01"):
                raw = bytes([1 if v else 0 for v in values])  # truthiness, as fastavro
            fo.write(raw)
        fo.write(b"\x00")
    return write


def _blocks(buf: bytes, pos: int, width: int) -> tuple[list[bytes], int]:
    """Raw item bytes of an array of fixed ``width`` items starting at ``pos``."""
    chunks: list[bytes] = []
    while True:
        count, pos = _read_long(buf, pos)
        if count == 0:
            return chunks, pos
        if count < 0:
            count = -count
            _, pos = _read_long(buf, pos)  # block size in bytes; redundant for fixed width
        end = pos + count * width
        if end > len(buf):
            raise EOFError(f"array block of {count} items runs past the end")
        chunks.append(buf[pos:end])
        pos = end


def _reader_packed(typecode: str, width: int) -> Callable[[bytes, int], tuple[list, int]]:
    def read(buf: bytes, pos: int) -> tuple[list, int]:
        chunks, pos = _blocks(buf, pos, width)
        a = array(typecode)
        for c in chunks:
            a.frombytes(c)
        if _SWAP:
            a.byteswap()
        return a.tolist(), pos
    return read


def _read_bools(buf: bytes, pos: int) -> tuple[list, int]:
    chunks, pos = _blocks(buf, pos, 1)
    out: list[bool] = []
    for c in chunks:
        out.extend(map(bool, c))
    return out, pos


def _writer_records(name: str, plan: "FastPlan") -> Callable[[Any, dict], None]:
    def write(fo: Any, d: dict) -> None:
        items = d[name]
        n = len(items)
        if n:
            fo.write(zigzag_varint(n))
            for item in items:
                plan.write(fo, item if item.__class__ is dict else item.to_avro())
        fo.write(b"\x00")
    return write


def _reader_records(plan: "FastPlan") -> Callable[[bytes, int], tuple[list, int]]:
    def read(buf: bytes, pos: int) -> tuple[list, int]:
        from io import BytesIO

        fo = BytesIO(buf)
        out: list[dict] = []
        while True:
            count, pos = _read_long(buf, pos)
            if count == 0:
                return out, pos
            if count < 0:
                count = -count
                _, pos = _read_long(buf, pos)  # block size in bytes: not needed to read the items
            for _ in range(count):
                item, pos = plan.read(fo, buf, pos)
                out.append(item)
    return read


class FastPlan:
    """Encoder/decoder for one record schema, split into fastavro segments and packed arrays."""

    __slots__ = ("_writers", "_readers")

    def __init__(self, writers: list, readers: list):
        self._writers = writers
        self._readers = readers

    @classmethod
    def build(cls, raw_schema: dict) -> "FastPlan | None":
        """A plan for ``raw_schema`` (logical types already stripped), or None if nothing to gain."""
        return cls._build(expand_schema(parse_schema(raw_schema)))  # type: ignore[arg-type]  # a record: a dict

    @classmethod
    def _build(cls, expanded: dict) -> "FastPlan | None":
        writers: list = []
        readers: list = []
        pending: list[dict] = []

        def flush() -> None:
            if pending:
                seg = parse_schema({"type": "record", "name": f"fastpath_segment_{len(writers)}",
                                    "fields": list(pending)})
                writers.append(lambda fo, d, s=seg: schemaless_writer(fo, s, d))
                readers.append((None, seg))
                pending.clear()

        packed = False
        for f in expanded["fields"]:
            t = f["type"]
            items = t.get("items") if isinstance(t, dict) and t.get("type") == "array" else None
            nested = cls._build(items) if isinstance(items, dict) and items.get("type") == "record" else None
            if isinstance(items, str) and items in _PACKED:
                flush()
                code, width = _PACKED[items]
                writers.append(_writer_packed(f["name"], code))
                readers.append((f["name"], _reader_packed(code, width)))
                packed = True
            elif items == "boolean":
                flush()
                writers.append(_write_bools_factory(f["name"]))
                readers.append((f["name"], _read_bools))
                packed = True
            elif nested is not None:  # an array of records that themselves have packed arrays
                flush()
                writers.append(_writer_records(f["name"], nested))
                readers.append((f["name"], _reader_records(nested)))
                packed = True
            else:
                pending.append({"name": f["name"], "type": t})
        flush()
        return cls(writers, readers) if packed else None

    def write(self, fo: Any, d: dict) -> None:
        """Append the Avro body of ``d`` to ``fo``."""
        for w in self._writers:
            w(fo, d)

    def read(self, fo: Any, buf: bytes, pos: int) -> tuple[dict, int]:
        """Decode the body starting at ``pos``; ``fo`` is a BytesIO over ``buf``. Returns (dict, end)."""
        d: dict = {}
        for name, r in self._readers:
            if name is None:
                fo.seek(pos)
                d.update(schemaless_reader(fo, r, None))  # type: ignore[arg-type]  # a segment record: a dict
                pos = fo.tell()
            else:
                d[name], pos = r(buf, pos)
        return d, pos
