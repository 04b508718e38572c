"""docs/ holds results, not diaries (#60): the run artifacts kept beside them (the runs' JSON, the plots) stay at
most 512 KiB, and every one of them is cited by a document (what is not cited lives in git's history). The studio's
screenshots illustrate its pages (docs/STUDIO.md) and are not run artifacts."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
LIMIT = 512 * 1024


def _artifacts() -> list[Path]:
    return [p for d in ("runs", "img", "bench") for p in (DOCS / d).glob("*")
            if p.is_file() and not p.name.startswith("studio-")]


def test_run_artifacts_stay_under_half_a_megabyte():
    total = sum(p.stat().st_size for p in _artifacts())
    assert total <= LIMIT, f"docs/ run artifacts are {total // 1024} KiB (at most {LIMIT // 1024}): trim or drop"


def test_every_artifact_is_cited_by_a_document():
    repo = DOCS.parent
    text = "\n".join(p.read_text() for p in [*DOCS.glob("*.md"), *repo.glob("*.md"), *repo.glob("*/README.md"), *repo.glob("rftbus/**/README.md")])
    # a brace pattern cites several: 19-mix-Y{1,2,3}.json, 46-chaos-ci-nodes3-{p,q,r}-*.json
    for m in re.finditer(r"([\w./-]*)\{([^}]+)\}([\w.*-]*)", text):
        text += "\n" + "\n".join(f"{m[1]}{alt}{m[3]}" for alt in m[2].split(","))
    uncited = []
    for p in _artifacts():
        if p.name in text:
            continue
        if not any(re.fullmatch(re.escape(c).replace(r"\*", ".*"), p.name)
                   for c in re.findall(r"[\w.*-]+\.(?:json|png|jsonl)", text) if "*" in c):
            uncited.append(p.name)
    assert uncited == [], f"not cited by any document: {uncited}"
