"""Are slow tasks starved? The explorers' groups in quartiles of how long they took to answer, with the share of
each quartile that trained and the share rejected `stale`: discarding stale rollouts biases training toward what is
fast to answer (a slow generation is the one that comes back past η), which these shares show or rule out."""

from __future__ import annotations

from statistics import quantiles

from rftbus.apps.run.ledger import Ledger


def by_generation_time(led: Ledger) -> list[dict]:
    """One row per quartile of the explorer groups' generation time (ms, the slowest sample of each): how many
    groups, the slowest time in it, the share with a trained experience and the share with a stale one."""
    groups = [r for r in led.raw.values() if r.experience_ids and r.source == "explorer"]
    if len(groups) < 4:
        return []
    trained = {eid for seg in led.lineage for eid in seg["experience_ids"]}
    stale = {eid for r in led.rejections if r.reason == "stale" for eid in r.experience_ids}
    cuts = quantiles([g.generation_ms for g in groups], n=4)
    rows: list[dict] = [{"quartile": q + 1, "groups": 0, "ms_max": 0.0, "trained": 0, "stale": 0} for q in range(4)]
    for g in groups:
        row = rows[sum(g.generation_ms > c for c in cuts)]
        row["groups"] += 1
        row["ms_max"] = max(row["ms_max"], g.generation_ms)
        ids = g.experience_ids or []
        row["trained"] += any(e in trained for e in ids)
        row["stale"] += any(e in stale for e in ids)
    return [{"quartile": r["quartile"], "groups": r["groups"], "ms_max": round(r["ms_max"], 1),
             "trained_share": round(r["trained"] / r["groups"], 4) if r["groups"] else None,
             "stale_share": round(r["stale"] / r["groups"], 4) if r["groups"] else None} for r in rows]
