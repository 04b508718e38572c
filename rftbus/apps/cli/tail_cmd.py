"""`rftbus tail TOPIC`: decode and print the records of any rftbus topic, like kcat for our Avro.

Bytes that do not decode are printed as such (reason + hex preview); they never stop the tail.
"""

from __future__ import annotations

import base64
import json
import time

import typer
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, TopicPartition
from rich.markup import escape

from rftbus.apps.cli.context import state
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.clients import check_reachable, make_consumer
from rftbus.ground.schemas import DecodeError, make_codec

MAX_LIST = 8


def _short(value):
    if isinstance(value, list):  # a group's samples are dicts with long arrays of their own
        head = [_short(v) for v in value[:MAX_LIST]]
        return head + [f"... {len(value)} items"] if len(value) > MAX_LIST else head
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items()}
    return value


def _jsonable(value):
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if hasattr(value, "value"):  # enums
        return value.value
    return value


def render(msg, deserializer, as_json: bool) -> str:
    """One line for one Kafka message; undecodable bytes are described, not raised."""
    key = msg.key().decode(errors="replace") if msg.key() is not None else None
    head = {"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(), "key": key,
            "timestamp_ms": msg.timestamp()[1]}
    raw = msg.value() or b""
    try:
        record = deserializer(raw, None)
    except DecodeError as e:
        if as_json:
            return json.dumps({**head, "undecodable": True, "reason": e.reason, "detail": e.detail,
                               "bytes": len(raw), "hex": raw[:64].hex()})
        return (f"{msg.topic()}[{msg.partition()}]@{msg.offset()} [red]UNDECODABLE[/] ({escape(e.reason)}: "
                f"{escape(e.detail)}) {len(raw)} bytes: {raw[:32].hex()}{'…' if len(raw) > 32 else ''}")
    fields = record.to_avro()
    if as_json:
        return json.dumps({**head, "type": record.SCHEMA_NAME, "value": _jsonable(fields)})
    shown = json.dumps(_jsonable(_short(fields)), ensure_ascii=False)
    return f"{msg.topic()}[{msg.partition()}]@{msg.offset()} key={key} [cyan]{record.SCHEMA_NAME}[/] {escape(shown)}"


def render_spans(msg, as_json: bool) -> str:
    """One line for an OTLP trace export (topics.spans): its spans, with the GenAI operation where there is one."""
    from rftbus.ground.otel.otlp import OtlpError, parse, spans

    key = msg.key().decode(errors="replace") if msg.key() is not None else None
    where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
    raw = msg.value() or b""
    try:
        found = [{"trace_id": x.trace_id, "span_id": x.span_id, "name": x.name,
                  "gen_ai.operation.name": x.attributes.get("gen_ai.operation.name")} for x in spans(parse(raw))]
    except OtlpError as e:
        if as_json:
            return json.dumps({"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
                               "key": key, "undecodable": True, "detail": str(e), "bytes": len(raw)})
        return f"{where} [red]UNDECODABLE[/] ({escape(str(e))}) {len(raw)} bytes"
    if as_json:
        return json.dumps({"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(), "key": key,
                           "type": "otlp.ExportTraceServiceRequest", "spans": found})
    return f"{where} key={key} [cyan]OTLP[/] {escape(json.dumps(found, ensure_ascii=False))}"


def tail(
    ctx: typer.Context,
    topic: str = typer.Argument(..., help="Topic name, or a config key such as `raw` or `weights`."),
    from_beginning: bool = typer.Option(False, "--from-beginning", help="Start at the oldest record and stop at the end (unless --follow)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep waiting for new records."),
    limit: int = typer.Option(None, "--limit", "-n", min=1, help="Stop after N records."),
    idle_timeout: float = typer.Option(None, "--idle-timeout", help="In follow mode, stop after this many idle seconds."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line, arrays in full."),
) -> None:
    """Print decoded records of a topic; undecodable bytes are shown as such."""
    st = state(ctx)
    cfg = st.config()
    found = cfg.topics.all().get(topic)
    name = found.name if found else topic
    admin = check_reachable(cfg)
    md = admin.list_topics(topic=name, timeout=10)
    tmeta = md.topics.get(name)
    if tmeta is None or tmeta.error is not None or not tmeta.partitions:
        raise RftbusError(f"topic {name!r} does not exist at {cfg.bootstrap_servers}")
    follow = follow or not from_beginning
    start = OFFSET_BEGINNING if from_beginning else OFFSET_END
    consumer = make_consumer(cfg, "rftbus-tail", **{"enable.partition.eof": True})
    consumer.assign([TopicPartition(name, p, start) for p in tmeta.partitions])
    deserializer = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer()
    from rftbus.ground.kafka.registry import BY_KEY

    otlp = any(BY_KEY[k].encoding == "otlp_proto" for k, spec in cfg.topics.all().items() if spec.name == name)
    at_end: set[int] = set()
    printed = 0
    last_seen = time.monotonic()
    try:
        while limit is None or printed < limit:
            msg = consumer.poll(0.5)
            if msg is None:
                if follow and idle_timeout is not None and time.monotonic() - last_seen > idle_timeout:
                    break
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition() or 0)
                    if not follow and len(at_end) == len(tmeta.partitions):
                        break
                    continue
                raise RftbusError(f"reading {name}: {err.str()}")
            at_end.discard(msg.partition())
            last_seen = time.monotonic()
            line = render_spans(msg, as_json) if otlp else render(msg, deserializer, as_json)
            if as_json:
                st.console.out(line, highlight=False)
            else:
                st.console.print(line, soft_wrap=True)
            printed += 1
    finally:
        consumer.close()


def register(app: typer.Typer) -> None:
    app.command()(tail)
