"""`rftbus export OUT`: a run's weight version as a Hugging Face folder (`model.path` accepts it).

Use it to start one run from where another stopped, e.g. pure GRPO from a short SFT/MIX warm start:

    rftbus --config warm.yaml export .rftbus/warm-start            # newest version in the store
    rftbus --config warm.yaml export .rftbus/warm-start --version 120
    rftbus --config warm.yaml export .rftbus/best --best      # the run's best-scoring eval version
    # then in the next config:  model: {path: .rftbus/warm-start}
"""

from __future__ import annotations

from pathlib import Path

import typer

from rftbus.apps.cli.context import state


def export(
    ctx: typer.Context,
    out: Path = typer.Argument(..., help="Folder to write (config.json, model.safetensors, tokenizer, rftbus-export.json)."),
    version: int = typer.Option(None, "--version", "-v", help="Weight version to export (default: the newest in the store)."),
    weights: Path = typer.Option(None, "--weights", help="Export this safetensors state dict instead of a stored version."),
    best: bool = typer.Option(False, "--best", help="Export the version the run's held-out eval scored best "
                              "(kept by `rftbus run` in <state_dir>/run/best.safetensors)."),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it exists."),
) -> None:
    """Write a weight version of the configured model as a Hugging Face folder for `model.path`."""
    from rftbus.ground.weights.export import ExportError, export_weights
    from rftbus.apps.run.pace import BEST_WEIGHTS, read_best
    from rftbus.ground.weights import sha256_hex

    st = state(ctx)
    cfg = st.config()
    note = ""
    if best:
        if version is not None or weights is not None:
            raise ExportError("--best picks the weights itself: give it without --version or --weights")
        run_dir = cfg.state_dir / "run"
        b = read_best(run_dir)
        if b is None:
            raise ExportError(f"no best eval kept in {run_dir} (it is written by `rftbus run` with this state dir)")
        if b.get("path") is None:  # scored on an engine that holds no torch weights (run.eval_engine: explorer)
            raise ExportError(f"the best eval of the run was v{b['version']}, the seed (reward {b['reward']:.3f}): no "
                              f"trained version beat it, and the seed is the base model itself")
        weights, note = run_dir / BEST_WEIGHTS, f" (best eval: v{b['version']}, reward {b['reward']:.3f})"
        if not weights.is_file() or sha256_hex(weights.read_bytes()) != b["sha256"]:
            raise ExportError(f"{weights} is missing or is not the file best.json recorded (sha256 {b['sha256'][:12]}…)")
    with st.err.status("exporting ..."):
        r = export_weights(cfg, out, version=version, weights_file=weights, force=force)
    what = (f"v{r.version} of {r.model}" if r.version is not None else r.source) + note
    st.console.print(f"exported {what} ({r.parameters:,} parameters, sha256 {r.sha256[:12]}…) to {r.out} "
                     f"in {r.seconds:.1f} s; {r.verified}")
    st.console.print(f"start a run from it with  model: {{path: {r.out}}}")


def register(app: typer.Typer) -> None:
    app.command()(export)
