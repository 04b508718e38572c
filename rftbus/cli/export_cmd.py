"""`rftbus export OUT`: a run's weight version as a Hugging Face folder (`model.path` accepts it).

Use it to start one run from where another stopped, e.g. pure GRPO from a short SFT/MIX warm start:

    rftbus --config warm.yaml export .rftbus/warm-start            # newest version in the store
    rftbus --config warm.yaml export .rftbus/warm-start --version 120
    # then in the next config:  model: {path: .rftbus/warm-start}
"""

from __future__ import annotations

from pathlib import Path

import typer

from rftbus.cli.context import state


def export(
    ctx: typer.Context,
    out: Path = typer.Argument(..., help="Folder to write (config.json, model.safetensors, tokenizer, rftbus-export.json)."),
    version: int = typer.Option(None, "--version", "-v", help="Weight version to export (default: the newest in the store)."),
    weights: Path = typer.Option(None, "--weights", help="Export this safetensors state dict instead of a stored version."),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it exists."),
) -> None:
    """Write a weight version of the configured model as a Hugging Face folder for `model.path`."""
    from rftbus.models.export import export_weights

    st = state(ctx)
    cfg = st.config()
    with st.err.status("exporting ..."):
        r = export_weights(cfg, out, version=version, weights_file=weights, force=force)
    what = f"v{r.version} of {r.model}" if r.version is not None else r.source
    st.console.print(f"exported {what} ({r.parameters:,} parameters, sha256 {r.sha256[:12]}…) to {r.out} "
                     f"in {r.seconds:.1f} s; {r.verified}")
    st.console.print(f"start a run from it with  model: {{path: {r.out}}}")


def register(app: typer.Typer) -> None:
    app.command()(export)
