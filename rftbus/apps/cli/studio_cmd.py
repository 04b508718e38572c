"""`rftbus studio`: the browser console (feedback queue, run dashboard, experience browser)."""

from __future__ import annotations

from typing import Optional

import typer

from rftbus.apps.cli.context import state


def studio(
    ctx: typer.Context,
    host: Optional[str] = typer.Option(None, "--host", help="listen address (default studio.host)"),
    port: Optional[int] = typer.Option(None, "--port", min=1, max=65535, help="listen port (default studio.port)"),
    log_level: str = typer.Option("warning", "--log-level", help="uvicorn log level"),
) -> None:
    """Serve the studio on http://HOST:PORT/studio: graders grade live answers (serve.feedback_tokens), people
    who run training watch the run and follow experiences (serve.read_tokens). Reads analytics; grades go to
    Kafka as `POST /v1/feedback` sends them."""
    import uvicorn

    from rftbus.consumers.studio.app import standalone
    from rftbus.ground.web.auth import Scope, TokenAuth
    from rftbus.producers.serve.foreground import run_foreground

    st = state(ctx)
    cfg = st.config(**{"studio.host": host, "studio.port": port})
    auth = TokenAuth.from_config(cfg.serve)
    auth.check_exposure(cfg.studio.host, cfg.serve.allow_open, {Scope.feedback, Scope.read})
    open_scopes = ", ".join(s.value for s in auth.open_scopes() if s.value != "inference") or "none"
    st.err.print(f"studio on http://{cfg.studio.host}:{cfg.studio.port}/studio (scopes without tokens: "
                 f"{open_scopes})", soft_wrap=True)
    server = uvicorn.Server(uvicorn.Config(standalone(cfg), host=cfg.studio.host, port=cfg.studio.port,
                                           log_level=log_level, server_header=False))
    run_foreground(server, f"rftbus studio could not start on {cfg.studio.host}:{cfg.studio.port} (see above)")


def register(app: typer.Typer) -> None:
    app.command("studio")(studio)
