"""Installed size of each role's install (the core plus one extra), from the distributions installed in this
environment: each requirement followed through its own requirements, each distribution's files summed once.

usage: python scripts/extra_sizes.py   (in the project's venv, after `make install`)
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re

from packaging.requirements import Requirement

ROLES = ["explorer", "streams", "trainer", "serve", "analytics", "studio", "all"]


def size(dist: md.Distribution) -> int:
    total = 0
    for f in dist.files or []:
        p = dist.locate_file(f)
        try:
            total += os.path.getsize(p)
        except OSError:
            pass
    return total


def closure(reqs: list[str], extras: set[str], seen: dict[str, md.Distribution]) -> None:
    for text in reqs:
        req = Requirement(text)
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in extras | {""}):
            continue
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        if name == "rftbus":
            closure(md.requires("rftbus") or [], set(req.extras), seen)
            continue
        if name in seen:
            continue
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            continue
        seen[name] = dist
        closure(dist.requires or [], set(req.extras), seen)


def role_size(extras: set[str]) -> int:
    seen: dict[str, md.Distribution] = {}
    closure(md.requires("rftbus") or [], extras, seen)
    return sum(size(d) for d in seen.values())


if __name__ == "__main__":
    print(f"core: {role_size(set()) / 2**20:,.0f} MiB")
    for role in ROLES:
        print(f"core + {role}: {role_size({role}) / 2**20:,.0f} MiB")
