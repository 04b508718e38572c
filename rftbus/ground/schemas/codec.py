"""Avro serializer/deserializer for rftbus records, in confluent-kafka's callable contract.

Two framings, one decoder:
  * Confluent (magic 0x00 + 4-byte big-endian schema id) when a Schema Registry is configured;
    encoding is delegated to confluent-kafka's AvroSerializer so ids and subjects match the rest of
    the Confluent ecosystem.
  * Avro single-object encoding (C3 01 + 8-byte little-endian CRC-64-AVRO fingerprint) when none is;
    the writer schema is found by fingerprint among this package's current and historical schemas.
Every decode resolves the writer schema to the *current* reader schema, so old data keeps decoding.
Bad bytes only ever raise ``DecodeError(reason, detail)`` so consumers can route them to the
rejected topic without guessing at fastavro's exception zoo.

Hot path: schemas are parsed once; encode is one BytesIO + fastavro (plus ``fastpath`` packing
float/boolean arrays in one C call each, byte-identical), decode is a dict lookup + the same in
reverse + ``cls(**d)``. Timestamps stay int milliseconds (see store.py: logical types are dropped
from the Python-side parsed schemas, which is faster than converting datetimes back). Readers that
need only a record's small fields (the streams) skim the body instead and splice their changes into
it (``skim.py``, through ``AvroDeserializer.current_body`` and ``AvroSerializer.prefix``).
"""

from __future__ import annotations

import functools
import re
import json
import threading
from io import BytesIO
from typing import Any, Generic, TypeVar, overload

from fastavro import schemaless_reader, schemaless_writer
from fastavro.schema import parse_schema

from .fastpath import FastPlan
from rftbus.ground.errors import RftbusError

from .records import RECORD_TYPES, AvroRecord
from .store import SchemaEntry, SchemaStore, fingerprint64, get_store, strip_logical_types

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
CONFLUENT_MAGIC = 0
_SO_HEADER = 10  # C3 01 + 8-byte fingerprint
_CF_HEADER = 5  # 00 + 4-byte schema id

# Plan for one writer schema: (record class, writer schema, reader schema or None when identical,
# FastPlan or None). The FastPlan is only used when writer == current reader schema.
_Plan = tuple[type[AvroRecord], dict, "dict | None", "FastPlan | None"]
R = TypeVar("R", bound=AvroRecord)
_FAST_PLANS: dict[bytes, "FastPlan | None"] = {}


def _fast_plan(entry: SchemaEntry) -> FastPlan | None:
    if entry.fingerprint not in _FAST_PLANS:
        _FAST_PLANS[entry.fingerprint] = FastPlan.build(strip_logical_types(entry.raw))
    return _FAST_PLANS[entry.fingerprint]


class DecodeError(RftbusError, ValueError):
    """Bytes that are not a decodable rftbus record.

    ``reason`` is short and machine-readable (empty, truncated, unknown_magic, unknown_schema,
    no_registry, wrong_record_type, malformed_body, not_bytes); ``detail`` is for humans.
    Registry outages are not bad bytes and surface as the registry client's own errors.
    """

    def __init__(self, reason: str, detail: str):
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


class EncodeError(RftbusError, ValueError):
    """A record that does not fit its schema (a bug in the producer, not bad bytes)."""


def _to_avro(obj: Any, record_cls: type[AvroRecord]) -> dict:
    if obj.__class__ is record_cls:
        return obj.to_avro()
    if isinstance(obj, dict):
        return obj
    raise EncodeError(f"serializer for {record_cls.SCHEMA_NAME} got {type(obj).__name__}")


class AvroSerializer:
    """``(record, ctx) -> bytes`` for one record class.

    ``registry`` (a SchemaRegistryClient) or ``registry_conf`` (its config, e.g. {"url": ...})
    selects Confluent framing; ``serializer_conf`` goes to confluent's AvroSerializer
    (auto.register.schemas, subject.name.strategy, ...). Without a registry: single-object encoding.
    With a registry, pass ``topic_context(topic)`` as ``ctx`` (subject "<topic>-value", confluent's
    TopicNameStrategy); ``ctx=None`` registers under "<SCHEMA_NAME>-value" (tools with no topic).
    """

    __slots__ = ("record_cls", "_schema", "_fast", "_header", "_confluent", "_default_ctx",
                 "_cf_prefix", "_cf_cacheable")

    def __init__(self, record_cls: type[AvroRecord], registry: Any = None,
                 registry_conf: dict | None = None, *, serializer_conf: dict | None = None,
                 store: SchemaStore | None = None):
        entry = (store or get_store()).current(record_cls.SCHEMA_NAME)
        self.record_cls = record_cls
        self._schema = entry.fast
        self._fast = _fast_plan(entry)
        self._header = SINGLE_OBJECT_MAGIC + entry.fingerprint
        self._confluent = None
        if registry is None and registry_conf:
            registry = registry_client(registry_conf)
        if registry is not None:
            from confluent_kafka.schema_registry.avro import AvroSerializer as _CfSerializer
            from confluent_kafka.serialization import MessageField, SerializationContext

            self._confluent = _CfSerializer(registry, entry.schema_str,
                                            to_dict=lambda obj, _ctx: _to_avro(obj, record_cls),
                                            conf=serializer_conf)
            self._default_ctx = SerializationContext(record_cls.SCHEMA_NAME, MessageField.VALUE)
            # After confluent's serializer has resolved the schema id for a (topic, field), its
            # per-record work is just "prefix + fastavro body" unless a conf makes it per-record
            # (latest-version lookups, rules, custom id placement); then we always delegate.
            conf = serializer_conf or {}
            self._cf_cacheable = not any(conf.get(k) for k in _PER_RECORD_CONF)
            self._cf_prefix: dict[tuple, bytes] = {}

    @property
    def framing(self) -> str:
        return "single-object" if self._confluent is None else "confluent"

    def __call__(self, obj: Any, ctx: Any) -> bytes | None:
        if obj is None:
            return None  # tombstone
        header = self._header
        if self._confluent is not None:
            if ctx is None:
                ctx = self._default_ctx
            cached = self._cf_prefix.get((ctx.topic, ctx.field))
            if cached is None:
                return self._delegate(obj, ctx)
            header = cached
        fo = BytesIO()
        fo.write(header)
        try:
            if self._fast is not None:
                self._fast.write(fo, _to_avro(obj, self.record_cls))
            else:
                schemaless_writer(fo, self._schema, _to_avro(obj, self.record_cls))
        except EncodeError:
            raise
        except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as e:
            raise EncodeError(f"cannot encode {self.record_cls.SCHEMA_NAME}: {e!r}") from e
        return fo.getvalue()

    def prefix(self, ctx: Any = None) -> bytes | None:
        """The framing this serializer writes before the Avro body for ``ctx`` (None: as ``ctx=None``
        encodes); None while it is not known: with a registry, until a first record for that subject
        went through confluent's serializer, and always when a conf makes the framing per-record."""
        if self._confluent is None:
            return self._header
        if ctx is None:
            ctx = self._default_ctx
        return self._cf_prefix.get((ctx.topic, ctx.field))

    def _delegate(self, obj: Any, ctx: Any) -> bytes:
        assert self._confluent is not None  # (only called with a registry)
        try:
            out = self._confluent(obj, ctx)
        except (ValueError, TypeError) as e:
            raise EncodeError(f"cannot encode {self.record_cls.SCHEMA_NAME}: {e}") from e
        if self._cf_cacheable and len(out) > _CF_HEADER and out[0] == CONFLUENT_MAGIC:
            self._cf_prefix[(ctx.topic, ctx.field)] = out[:_CF_HEADER]
        return out


_PER_RECORD_CONF = ("use.latest.version", "use.latest.with.metadata", "schema.id.serializer")


class AvroDeserializer(Generic[R]):
    """``(bytes, ctx) -> record``; accepts both framings.

    With ``record_cls`` it only accepts that record (else ``wrong_record_type``); with None it
    returns whichever rftbus record the writer schema names (for tools that print any topic).
    """

    def __init__(self, record_cls: type[R] | None = None, registry: Any = None,
                 *, store: SchemaStore | None = None):
        self.record_cls = record_cls
        self.registry = registry
        self._store = store or get_store()
        self._by_fp: dict[bytes, _Plan] = {}
        self._by_id: dict[int, _Plan] = {}
        for fp, entry in self._store.fingerprints().items():
            if entry.name in RECORD_TYPES and (record_cls is None or entry.name == record_cls.SCHEMA_NAME):
                self._by_fp[fp] = self._plan(entry.name, entry.fast, fp)

    def _plan(self, name: str, writer: dict, fp: bytes) -> _Plan:
        current = self._store.current(name)
        if fp == current.fingerprint:  # same canonical form: read as current, no resolution
            return RECORD_TYPES[name], current.fast, None, _fast_plan(current)
        return RECORD_TYPES[name], writer, current.fast, None

    def __call__(self, data: bytes | None, ctx: Any = None) -> R | None:
        if data is None:
            return None  # tombstone
        if data.__class__ is not bytes:
            try:
                data = bytes(memoryview(data))
            except TypeError:
                raise DecodeError("not_bytes", f"expected bytes, got {type(data).__name__}") from None
        n = len(data)
        plan, start = self._locate(data)
        cls, writer, reader, fast = plan
        fo = BytesIO(data)
        d: Any
        try:
            if fast is not None:
                d, end = fast.read(fo, data, start)
            else:
                fo.seek(start)
                d = schemaless_reader(fo, writer, reader)
                end = fo.tell()
        except (EOFError, IndexError) as e:
            raise DecodeError("truncated", f"{cls.SCHEMA_NAME} body ends early ({n} bytes): {_plain(str(e))}") from None
        except Exception as e:  # fastavro raises many types for garbage; all mean the same here
            raise DecodeError("malformed_body", f"{cls.SCHEMA_NAME} body does not decode: {_plain(repr(e))}") from None
        if end != n:
            raise DecodeError("malformed_body", f"{n - end} trailing bytes after {cls.SCHEMA_NAME}")
        try:
            return cls(**d)  # type: ignore[return-value]  # (the plan's class is R, or any record when R is unset)
        except Exception as e:
            raise DecodeError("malformed_body", f"{cls.SCHEMA_NAME} fields invalid: {e!r}") from None

    def current_body(self, data: bytes) -> tuple[type[AvroRecord], int] | None:
        """(record class, where the Avro body starts) when ``data`` was written with its record's *current*
        schema, so the body can be read (and spliced, see skim.py) as that schema; None for an older
        writer schema. Bad framing raises DecodeError exactly as decoding would."""
        plan, start = self._locate(data)
        return (plan[0], start) if plan[2] is None else None

    def _locate(self, data: bytes) -> tuple[_Plan, int]:
        """The plan for ``data``'s writer schema and where its body starts (after the framing)."""
        n = len(data)
        if n >= _SO_HEADER and data[0] == 0xC3 and data[1] == 0x01:
            plan = self._by_fp.get(data[2:_SO_HEADER])
            if plan is None:
                raise self._unknown_fingerprint(data[2:_SO_HEADER])
            return plan, _SO_HEADER
        if n > _CF_HEADER and data[0] == CONFLUENT_MAGIC:
            return self._confluent_plan(int.from_bytes(data[1:_CF_HEADER], "big")), _CF_HEADER
        raise self._bad_header(data)

    @staticmethod
    def _bad_header(data: bytes) -> DecodeError:
        n = len(data)
        if n == 0:
            return DecodeError("empty", "zero-length value")
        if data[0] == 0xC3 and (n == 1 or data[1] == 0x01):
            return DecodeError("truncated", f"single-object header needs {_SO_HEADER} bytes, got {n}")
        if data[0] == CONFLUENT_MAGIC:
            return DecodeError("truncated", f"Confluent header needs more than {_CF_HEADER} bytes, got {n}")
        return DecodeError("unknown_magic", f"starts with {data[:2].hex()}; expected 00 (Confluent) or c301")

    def _unknown_fingerprint(self, fp: bytes) -> DecodeError:
        entry = self._store.by_fingerprint(fp)
        if entry is not None and entry.name in RECORD_TYPES:
            expected = self.record_cls.SCHEMA_NAME if self.record_cls else "an rftbus record"
            return DecodeError("wrong_record_type", f"got {entry.name}, expected {expected}")
        return DecodeError("unknown_schema", f"no local schema has fingerprint {fp.hex()}")

    def _confluent_plan(self, schema_id: int) -> _Plan:
        plan = self._by_id.get(schema_id)
        if plan is not None:
            return plan
        if self.registry is None:
            raise DecodeError("no_registry", f"Confluent-framed record (schema id {schema_id}) "
                              "but no schema registry is configured")
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            schema = self.registry.get_schema(schema_id)
        except SchemaRegistryError as e:
            if e.http_status_code == 404:
                raise DecodeError("unknown_schema", f"schema id {schema_id} is not in the registry") from None
            raise  # registry trouble is not bad data: let it surface
        try:
            if schema.schema_type not in (None, "AVRO"):
                raise ValueError(f"schema type {schema.schema_type}")
            raw = json.loads(schema.schema_str)
            writer = parse_schema(strip_logical_types(raw))
        except Exception as e:
            raise DecodeError("unknown_schema", f"schema id {schema_id} is not a usable Avro record: {e}") from None
        name = writer.get("name") if isinstance(writer, dict) else None
        if name not in RECORD_TYPES:
            raise DecodeError("unknown_schema", f"schema id {schema_id} is {name}, not an rftbus record")
        if self.record_cls is not None and name != self.record_cls.SCHEMA_NAME:
            raise DecodeError("wrong_record_type", f"schema id {schema_id} is {name}, "
                              f"expected {self.record_cls.SCHEMA_NAME}")
        plan = self._by_id[schema_id] = self._plan(name, writer, fingerprint64(writer))  # type: ignore[arg-type]
        return plan


@functools.lru_cache(maxsize=1024)
def topic_context(topic: str) -> Any:
    """The serialization context of a record value on `topic`: what producers pass as ``ctx`` so that,
    with a Schema Registry, subjects follow the standard TopicNameStrategy (``<topic>-value``)."""
    from confluent_kafka.serialization import MessageField, SerializationContext

    return SerializationContext(topic, MessageField.VALUE)


_MOCK_CLIENTS: dict[str, Any] = {}
_CLIENT_LOCK = threading.Lock()


def registry_client(conf: dict) -> Any:
    """A SchemaRegistryClient for ``conf``; "mock://<name>" URLs share one in-memory mock per name."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    url = conf.get("url", "")
    if isinstance(url, str) and url.startswith("mock://"):
        with _CLIENT_LOCK:
            if url not in _MOCK_CLIENTS:
                _MOCK_CLIENTS[url] = SchemaRegistryClient.new_client(dict(conf))
            return _MOCK_CLIENTS[url]
    return SchemaRegistryClient.new_client(dict(conf))


class Codec:
    """Serializers and deserializers sharing one registry client (or none), cached per class."""

    def __init__(self, registry: Any = None, *, serializer_conf: dict | None = None,
                 store: SchemaStore | None = None):
        self.registry = registry
        self.serializer_conf = serializer_conf
        self.store = store or get_store()
        self._ser: dict[type, AvroSerializer] = {}
        self._de: dict[Any, AvroDeserializer] = {}
        self._lock = threading.Lock()

    def serializer(self, record_cls: type[AvroRecord]) -> AvroSerializer:
        ser = self._ser.get(record_cls)
        if ser is None:
            with self._lock:
                ser = self._ser.get(record_cls) or AvroSerializer(
                    record_cls, self.registry, serializer_conf=self.serializer_conf, store=self.store)
                self._ser[record_cls] = ser
        return ser

    @overload
    def deserializer(self, record_cls: type[R]) -> AvroDeserializer[R]: ...

    @overload
    def deserializer(self, record_cls: None = None) -> AvroDeserializer[AvroRecord]: ...

    def deserializer(self, record_cls: type[AvroRecord] | None = None) -> AvroDeserializer:
        de = self._de.get(record_cls)
        if de is None:
            with self._lock:
                de = self._de.get(record_cls) or AvroDeserializer(record_cls, self.registry, store=self.store)
                self._de[record_cls] = de
        return de

    def encode(self, record: AvroRecord, ctx: Any) -> bytes:
        """`record`'s bytes; `ctx` always given (confluent-kafka's rule): `topic_context(topic)` where the record is
        bound for a topic (with a registry its subject is `<topic>-value`), None only for bytes no topic receives."""
        out = self.serializer(type(record))(record, ctx)
        assert out is not None  # (only None is encoded as None: a tombstone)
        return out

    def decode(self, data: bytes, ctx: Any = None) -> AvroRecord | None:
        return self.deserializer(None)(data, ctx)


def make_codec(schema_registry_url: str | None, registry_conf: dict | None = None,
               serializer_conf: dict | None = None) -> Codec:
    """Codec for a registry URL (None/"" = single-object encoding, "mock://x" = in-memory registry).

    ``registry_conf`` is extra SchemaRegistryClient config (auth, TLS); ``serializer_conf`` is
    passed to confluent's AvroSerializer.
    """
    registry = None
    if schema_registry_url:
        registry = registry_client({**(registry_conf or {}), "url": schema_registry_url})
    return Codec(registry, serializer_conf=serializer_conf)


_ADDRESS = re.compile(r" (?:from )?<[^<>]* object at 0x[0-9a-f]+>")


def _plain(message: str) -> str:
    """A decoder's message without object reprs (`from <_io.BytesIO object at 0x7f...>`): the same bytes get the
    same detail in every process (the skim and the full decode are compared; rejections are grouped by detail)."""
    return _ADDRESS.sub("", message)

