"""Config keys by path: what a section knows (for "did you mean" on a typo) and whether a key holds a list or a map
(an `RFTBUS_*` variable for one is read as JSON)."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Optional, unions, lists and maps)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _section(root: type[BaseModel], path: list[str]) -> type[BaseModel] | None:
    """The model at `path` (list indices and map keys skipped), None where the path leaves the models."""
    model: type[BaseModel] | None = root
    for part in path:
        if model is None:
            return None
        if part not in model.model_fields:
            continue  # a list index or a map's key: the same model goes on
        found = _models_in(model.model_fields[part].annotation)
        model = found[0] if found else None
    return model


def did_you_mean(root: type[BaseModel], loc: list[str]) -> str:
    """' (did you mean x?)' for an unknown key at `loc`, or '' when nothing known is close."""
    model = _section(root, loc[:-1])
    if model is None:
        return ""
    close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def takes_json(root: type[BaseModel], path: list[str]) -> bool:
    """Whether the key at `path` holds a list or a map (not a section of its own): set from a variable as JSON."""
    model = _section(root, path[:-1])
    if model is None or path[-1] not in model.model_fields:
        return False
    ann = model.model_fields[path[-1]].annotation
    kinds = [ann, *typing.get_args(ann)] if isinstance(ann, types.UnionType) or typing.get_origin(ann) is typing.Union \
        else [ann]
    return any(typing.get_origin(k) in (list, dict, tuple) or k in (list, dict) for k in kinds)


def section_doc(model: type[BaseModel]) -> str:
    """A section's own description: the first line of its class's docstring."""
    return (model.__doc__ or "").strip().split("\n")[0]


def undescribed(root: type[BaseModel], prefix: str = "") -> list[str]:
    """Every key under `root` with no description (a section may have its class's docstring instead)."""
    out = []
    for name, f in root.model_fields.items():
        sub = _models_in(f.annotation)
        if sub:
            if not f.description and not section_doc(sub[0]):
                out.append(f"{prefix}{name}")
            out += undescribed(sub[0], f"{prefix}{name}.")
        elif not f.description:
            out.append(f"{prefix}{name}")
    return out
