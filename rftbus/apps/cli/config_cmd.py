"""`rftbus config [SECTION]`: the resolved configuration as YAML, every key with its description.

The knob reference comes from the pydantic models themselves (their Field descriptions), so it can
not drift from what the loader accepts. Secrets print masked.
"""

from __future__ import annotations

import json

import typer
from pydantic import BaseModel, SecretStr

from rftbus.apps.cli.context import state
from rftbus.ground.config.keys import section_doc
from rftbus.ground.config.redact import redact
from rftbus.ground.errors import RftbusError


def _scalar(v, key: str = "") -> str:
    if isinstance(v, dict):
        v = redact(v, f"{key}.")  # free-form client settings: sasl.password, basic.auth.user.info, ...
    if isinstance(v, SecretStr):
        return '"**********"' if v.get_secret_value() else '""'
    if isinstance(v, list) and any(isinstance(x, SecretStr) for x in v):
        return "[" + ", ".join('"**********"' for _ in v) + "]"
    if hasattr(v, "value") and not isinstance(v, (int, float, str)):
        v = v.value  # enums
    if isinstance(v, tuple):
        v = list(v)
    return json.dumps(v, default=str, ensure_ascii=False)  # JSON scalars and flow lists are valid YAML


def _lines(model: BaseModel, indent: int) -> list[str]:
    out, pad = [], "  " * indent
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        one = value if isinstance(value, BaseModel) else value[0] if isinstance(value, list) and value else None
        about = field.description or (section_doc(type(one)) if isinstance(one, BaseModel) else "")
        note = f"  # {about}" if about else ""
        if isinstance(value, BaseModel):
            out.append(f"{pad}{name}:{note}")
            out += _lines(value, indent + 1)
        elif isinstance(value, dict) and value and all(isinstance(v, BaseModel) for v in value.values()):
            out.append(f"{pad}{name}:{note}")
            for key, sub in value.items():
                out.append(f"{pad}  {key}:")
                out += _lines(sub, indent + 2)
        elif isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
            out.append(f"{pad}{name}:{note}")
            for sub in value:
                out.append(f"{pad}  - " + _scalar(sub.model_dump(mode="json")))
        else:
            out.append(f"{pad}{name}: {_scalar(value, name)}{note}")
    return out


def config(
    ctx: typer.Context,
    section: str = typer.Argument(None, help="Only this section (dotted: rl, trainer, streams, topics.raw ...)."),
) -> None:
    """Print the resolved configuration (defaults < YAML < RFTBUS_* < flags) with every key documented."""
    cfg = state(ctx).config()
    node, path = cfg, []
    for part in (section.split(".") if section else []):
        path.append(part)
        if not isinstance(node, BaseModel) or part not in type(node).model_fields:
            known = ", ".join(type(node).model_fields) if isinstance(node, BaseModel) else "(a value)"
            raise RftbusError(f"no config section {'.'.join(path)!r}; known here: {known}")
        node = getattr(node, part)
    if isinstance(node, BaseModel):
        text = "\n".join(_lines(node, 0))
        if section:
            text = f"{section}:\n" + "\n".join("  " + line for line in text.splitlines())
    else:
        text = f"{section}: {_scalar(node, section or '')}"
    print(text)


def register(app: typer.Typer) -> None:
    app.command("config")(config)
