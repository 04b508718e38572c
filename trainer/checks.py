"""What the trainer checks in every group it reads, whatever wrote it: which samples it may train.

The streams verify raw records, but anything can write to a curated lane, so the trainer decides for
itself: a record that is not a usable group is rejected whole, a sample it cannot train costs only
itself, and samples over the staleness bound are rejected as `stale` when a batch is taken (the bound
moves with every published version). Pure logic, unit-tested.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rftbus.consumers.batch_consumer import Polled
from rftbus.schemas import ExperienceGroup
from rftbus.weights.staleness import is_stale


@dataclass(slots=True)
class Reject:
    reason: str
    detail: str
    indices: list[int]  # samples it covers (empty: the record did not decode)
    evidence: bool = True  # copy the record's bytes (it is wrong, not just unwanted)


@dataclass(slots=True)
class Verdict:
    train: list[int] = field(default_factory=list)  # sample indices that may be trained
    rejects: list[Reject] = field(default_factory=list)


def check_record(r: Polled) -> Verdict:
    """The samples of record `r` the trainer can use at all (staleness aside)."""
    g = r.group
    if r.problem is not None or g is None:
        reason, detail = r.problem or ("malformed", "no record")
        return Verdict(rejects=[Reject(reason, detail, [])])
    n = len(g.samples)
    everyone = list(range(n))
    if not g.prompt_ids or not n:
        return Verdict(rejects=[Reject("schema", f"group {g.group_id}: empty prompt or no samples", everyone)])
    rl = r.lane != "expert"
    if rl and not g.survivors:
        return Verdict(rejects=[Reject("schema", f"group {g.group_id} on a curated lane without survivors "
                                                 "(the streams set them)", everyone)])
    chosen = list(g.survivors) if rl else everyone
    if any(not 0 <= i < n for i in chosen) or len(set(chosen)) != len(chosen):
        return Verdict(rejects=[Reject("schema", f"group {g.group_id}: survivors {chosen} do not index its "
                                                 f"{n} samples", everyone)])
    out = Verdict()
    mismatched, no_advantage = [], []
    for i in chosen:
        s = g.samples[i]
        k = len(s.response_ids)
        if not k or len(s.logprobs) != k or len(s.loss_mask) != k:
            mismatched.append(i)
        elif rl and s.advantage is None:
            no_advantage.append(i)
        else:
            out.train.append(i)
    if mismatched:
        out.rejects.append(Reject("length_mismatch", "empty response, or response_ids, logprobs and loss_mask of "
                                  "different lengths", mismatched))
    if no_advantage:
        out.rejects.append(Reject("schema", "a survivor on a curated lane without an advantage", no_advantage))
    return out


def split_stale(g: ExperienceGroup, indices: list[int], version: int, eta: int) -> tuple[list[int], list[int]]:
    """(fresh, stale) among `indices`, for the step that will publish version+1."""
    fresh: list[int] = []
    stale: list[int] = []
    for i in indices:
        (stale if is_stale(g.samples[i].model_version, version, eta) else fresh).append(i)
    return fresh, stale
