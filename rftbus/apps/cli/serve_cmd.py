"""`rftbus serve` (the recording OpenAI-compatible proxy) and `rftbus feedback post`."""

from __future__ import annotations

import json
import os

import typer
from rich.markup import escape

from rftbus.apps.cli.context import state
from rftbus.apps.cli.preflight import serve_checks
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.clients import check_reachable
from rftbus.ground.kafka.topics import create_topics

feedback_app = typer.Typer(help="Grade recorded experiences (reward, rating, thumbs, preference, correction).",
                           no_args_is_help=True)
TOKEN_ENV = "RFTBUS_FEEDBACK_TOKEN"


def serve(
    ctx: typer.Context,
    host: str = typer.Option(None, "--host", help="Listen address (default serve.host)."),
    port: int = typer.Option(None, "--port", min=1, max=65535, help="Listen port (default serve.port)."),
    upstream: str = typer.Option(None, "--upstream", help="Forward to this OpenAI-compatible /v1 URL (it must "
                                 "return logprobs) instead of running the model here."),
    record_ack: str = typer.Option(None, "--record-ack", help="kafka (answer after Kafka has the record) | buffered."),
    log_level: str = typer.Option("info", "--log-level", help="uvicorn log level."),
) -> None:
    """Serve /v1/chat/completions, /v1/completions, /v1/models and /v1/feedback; every completion is
    recorded on topics.raw as a live Experience awaiting feedback. SIGTERM: finish requests, flush, exit."""
    st = state(ctx)
    more = {"serve.host": host, "serve.port": port, "serve.record_ack": record_ack}
    cfg = st.config(**more)
    if upstream:
        engine = cfg.explorer.engine.model_copy(update={"kind": "openai", "base_url": upstream})
        cfg = cfg.model_copy(update={"serve": cfg.serve.model_copy(update={"engine": engine})})
    serve_checks(cfg)
    create_topics(cfg, check_reachable(cfg))
    from rftbus.producers.serve.server import serve as run_server  # heavy (torch): only for this command
    from rftbus.producers.serve.service import LiveService

    svc = LiveService(cfg, report=lambda line: st.err.print(f"[dim]serve:[/] {escape(line)}", soft_wrap=True))
    open_scopes = ", ".join(s.value for s in svc.auth.open_scopes()) or "none"
    st.err.print(f"serving {svc.model_name} ({svc.engine.name}, v{svc.engine.version}) on "
                 f"http://{cfg.serve.host}:{cfg.serve.port}/v1 -> {cfg.topics.raw.name}, feedback -> "
                 f"{cfg.topics.feedback.name}; scopes without tokens: {open_scopes}; status in {svc.status.path}",
                 soft_wrap=True)
    run_server(cfg, svc, log_level=log_level)


@feedback_app.command("post")
def post(
    ctx: typer.Context,
    experience_id: str = typer.Argument(None, help="The graded experience (from the completion's "
                                        "X-Rftbus-Experience-Id header or `experience_id` field)."),
    reward: float = typer.Option(None, "--reward", help="Scalar reward, used as given."),
    rating: float = typer.Option(None, "--rating", help="Rating on streams.rating_scale."),
    thumbs: str = typer.Option(None, "--thumbs", help="up | down."),
    preferred: str = typer.Option(None, "--preferred", help="Preference: the better experience id."),
    rejected: str = typer.Option(None, "--rejected", help="Preference: the worse experience id."),
    correction: str = typer.Option(None, "--correction", help="The response it should have given."),
    prompt: str = typer.Option(None, "--prompt", help="Correction: the prompt (needed without --url)."),
    annotator: str = typer.Option(None, "--annotator", help="Who graded it."),
    feedback_id: str = typer.Option(None, "--feedback-id", help="Stable id (a retry is one feedback downstream)."),
    url: str = typer.Option(None, "--url", help="Post through a running `rftbus serve` (its base URL) instead "
                            "of straight to Kafka."),
    token_env: str = typer.Option(TOKEN_ENV, "--token-env", help="With --url: environment variable holding "
                                  "the feedback bearer token (never a flag: flags show up in `ps`)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object."),
) -> None:
    """Publish one feedback to topics.feedback; returns once Kafka acknowledged it (exit 1 otherwise)."""
    st = state(ctx)
    fields = {"experience_id": experience_id, "reward": reward, "rating": rating, "thumbs": thumbs,
              "preferred_id": preferred, "rejected_id": rejected, "correction": correction, "prompt": prompt,
              "annotator": annotator, "feedback_id": feedback_id}
    fields = {k: v for k, v in fields.items() if v is not None}
    if url:
        result = _post_http(url, fields, token_env)
    else:
        from rftbus.producers.feedback import FeedbackClient

        cfg = st.config()
        with FeedbackClient(cfg) as client:
            pub = client.post(**fields)
        result = {"status": "accepted", "feedback_id": pub.feedback.feedback_id,
                  "experience_id": pub.feedback.experience_id, "kind": pub.feedback.kind.value,
                  "topic": cfg.topics.feedback.name}
        if pub.expert is not None:
            result["expert_experience_id"] = pub.expert.samples[0].experience_id
    if as_json:
        st.console.out(json.dumps(result), highlight=False)
    else:
        extra = f"; expert experience {result['expert_experience_id']}" if "expert_experience_id" in result else ""
        st.console.print(f"accepted: {result['kind']} feedback {result['feedback_id']} for "
                         f"{result['experience_id']} on {result['topic']}{extra}", soft_wrap=True)


def _post_http(url: str, fields: dict, token_env: str) -> dict:
    import httpx

    token = os.environ.get(token_env)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    endpoint = url.rstrip("/").removesuffix("/v1") + "/v1/feedback"
    try:
        resp = httpx.post(endpoint, json=fields, headers=headers, timeout=60)
    except httpx.HTTPError as e:
        raise RftbusError(f"{endpoint}: {e}") from None
    if resp.status_code != 202:
        try:
            msg = resp.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            msg = resp.text[:200]
        hint = f" (is {token_env} set?)" if resp.status_code == 401 else ""
        raise RftbusError(f"{endpoint} answered {resp.status_code}: {msg}{hint}")
    return resp.json()


def register(app: typer.Typer) -> None:
    app.command()(serve)
    app.add_typer(feedback_app, name="feedback")
