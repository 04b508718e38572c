"""`rftbus run` with `otel.collector: true` (#59): the run starts the OpenTelemetry Collector (built from its Go
modules, cached) as one of its stages; a span a plain opentelemetry-sdk client sends to its OTLP/HTTP port during the
run appears on the experience topic as an experience group, decodable with the project's .avsc files, and the run's
books still reconcile with it in them. Skipped, with the reason, where there is no Go toolchain."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from rftbus.apps.bench.processes import read_all
from rftbus.ground.otel.build import ensure_collector
from rftbus.ground.schemas import ExperienceGroup, Source, make_codec
from serve_helpers import free_port
from tests.conftest import REPO, stop_run
from tests.system.test_run import _env

pytestmark = pytest.mark.skipif(shutil.which("go") is None, reason="no Go toolchain here to build the Collector "
                                "(make install-otelcol builds it; https://go.dev/dl/)")


def _listening(port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/traces", timeout=1)
    except urllib.error.HTTPError:
        return True  # (a GET is refused: the receiver is there)
    except OSError:
        return False
    return True


def _why(tmp_path: Path) -> str:
    """The run log's tail and, when the run wrote one, its summary's named losses and duplicates."""
    summary = tmp_path / "s.json"
    named = json.loads(summary.read_text()).get("lost_or_duplicated_examples") if summary.exists() else None
    warned = [f"{log.name}: {line}" for log in sorted((tmp_path / "state" / "logs").glob("*.log"))
              for line in log.read_text(errors="replace").splitlines() if "WARNING" in line or "ERROR" in line]
    return (f"{(tmp_path / 'run.log').read_text()[-3000:]}\nlost or duplicated: {named}\n"
            + "\n".join(warned[-40:]))


def test_a_span_sent_during_rftbus_run_lands_on_the_experience_topic(broker, tmp_path):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    cache = REPO / ".rftbus" / "otelcol"
    ensure_collector(cache)  # (built once for the session: the run then finds it)
    tag = uuid.uuid4().hex[:6]
    port = free_port()
    env = {**os.environ, **_env(broker, tag), "RFTBUS_OTEL__COLLECTOR": "true", "RFTBUS_OTEL__HTTP_PORT": str(port),
           "RFTBUS_OTEL__GRPC_PORT": str(free_port()), "RFTBUS_OTEL__CACHE_DIR": str(cache)}
    state = tmp_path / "state"
    cmd = [str(Path(sys.executable).parent / "rftbus"), "--state-dir", str(state), "run",
           str(REPO / "configs" / "toy.yaml"), "--max-steps", "30", "--minutes", "4", "--summary-json",
           str(tmp_path / "s.json")]
    log = open(tmp_path / "run.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 180
        while not _listening(port):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "run.log").read_text()[-3000:]
            time.sleep(0.5)
        provider = TracerProvider(resource=Resource.create({"service.name": "plain-sdk"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")))
        with provider.get_tracer("agent").start_as_current_span("chat tiny") as span:
            span.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": "tiny",
                                 "gen_ai.response.model": "tiny-v0",
                                 "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
                                     {"type": "text", "content": "12+30="}]}]),
                                 "gen_ai.output.messages": json.dumps([{"role": "assistant", "finish_reason": "stop",
                                                                        "parts": [{"type": "text", "content": "42"}]}]),
                                 "user.feedback": 1.0})
            trace_id = f"{span.get_span_context().trace_id:032x}"
        provider.shutdown()
        raw = f"e2e{tag}.{broker.topics.raw.name}"
        decode = make_codec(None).deserializer()
        found: list = []
        while not found and time.monotonic() < deadline + 60:
            found = [g for g in read_all(broker, raw, decode=decode, idle_s=0.3)
                     if isinstance(g, ExperienceGroup) and g.metadata.get("trace_id") == trace_id]
            time.sleep(0.5)
        assert found, (tmp_path / "run.log").read_text()[-3000:]
        [g] = found
        assert g.source is Source.trace and g.samples[0].response_text == "42" and g.samples[0].reward == 1.0
        assert g.prompt_text is not None and "12+30=" in g.prompt_text
        code = proc.wait(timeout=300)
        assert code == 0, _why(tmp_path)
    finally:
        if proc.poll() is None:
            stop_run(proc, state)
        log.close()
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["counts_reconcile"] is True and s["experiences_lost"] == 0 and s["duplicated"] == 0, _why(tmp_path)
    assert "otelcol" in s["exit_codes"], s["exit_codes"]
