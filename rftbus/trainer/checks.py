"""What the trainer checks in every group it reads, whatever wrote it: which samples it may train.

The streams verify raw records, but anything can write to a curated lane, so the trainer decides for
itself: a record that is not a usable group is rejected whole, a sample it cannot train costs only
itself, and samples over the staleness bound are rejected as `stale` when a batch is taken (the bound
moves with every published version). A value that would poison a step (a NaN advantage, a token id
past the embedding table, a sequence past the model's context) is caught here, by name, before any
tensor is built: one bad record costs one rejection, never the run. Pure logic, unit-tested.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from rftbus.trainer.batch_source import Polled
from rftbus.ground.schemas import Experience, ExperienceGroup
from rftbus.ground.weights.staleness import is_stale, stale_detail


@dataclass(frozen=True, slots=True)
class Limits:
    """What the model can take: token ids in [0, vocab), prompt + response at most `context` tokens; and what a
    sample may carry into the loss: |advantage| and |reward| bounded, logprobs at most 0 (plus a tolerance)."""

    vocab: int
    context: int
    max_abs_advantage: float = 100.0
    max_abs_reward: float = 1e4
    logprob_tolerance: float = 1e-3
    # a group's images against its prompt ids -> (reason, detail) or None (a VLM's Vision.problem); None: the model
    # reads text only, and a group that shows images is rejected images_unsupported
    images: Callable[[list, list[int]], tuple[str, str] | None] | None = None
    image_token: int | None = None  # a VLM's image token: never in a response (its forward would miscount images)


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


def _oov(ids: list[int], vocab: int) -> int | None:
    """The first token id outside [0, vocab), if any."""
    return next((t for t in ids if not 0 <= t < vocab), None)


def _sample_problem(g: ExperienceGroup, s: Experience, rl: bool, limits: Limits | None) -> tuple[str, str] | None:
    k = len(s.response_ids)
    if not k or len(s.logprobs) != k or len(s.loss_mask) != k:
        return "length_mismatch", (f"response_ids {k}, logprobs {len(s.logprobs)}, loss_mask {len(s.loss_mask)} "
                                   "(must be equal and non-zero)")
    if rl and s.advantage is None:
        return "schema", "a survivor on a curated lane without an advantage"
    if s.advantage is not None and not math.isfinite(s.advantage):
        return "non_finite_advantage", f"advantage {s.advantage}"
    if s.reward is not None and not math.isfinite(s.reward):
        return "non_finite_reward", f"reward {s.reward}"
    bad = next((j for j, x in enumerate(s.logprobs) if not math.isfinite(x)), None)
    if bad is not None:
        return "non_finite_logprobs", f"logprobs[{bad}] = {s.logprobs[bad]}"
    if limits is not None:
        # Finite but extreme values poison a step all the same (1e308 made the loss inf and cost 151 valid
        # experiences their batch, #36): bounded per sample, before any tensor.
        if s.advantage is not None and abs(s.advantage) > limits.max_abs_advantage:
            return "advantage_out_of_bounds", f"advantage {s.advantage:g}: |A| > {limits.max_abs_advantage:g}"
        if s.reward is not None and abs(s.reward) > limits.max_abs_reward:
            return "reward_out_of_bounds", f"reward {s.reward:g}: |r| > {limits.max_abs_reward:g}"
        pos = next((j for j, x in enumerate(s.logprobs) if x > limits.logprob_tolerance), None)
        if pos is not None:
            return "logprob_out_of_bounds", (f"logprobs[{pos}] = {s.logprobs[pos]:g} > 0 (a log-probability; "
                                             f"tolerance {limits.logprob_tolerance:g})")
        if limits.image_token is not None and limits.image_token in s.response_ids:
            return "image_token_in_response", (f"response token {s.response_ids.index(limits.image_token)} is the "
                                               f"image token {limits.image_token}: only an image's features go there")
        t = _oov(s.response_ids, limits.vocab)
        if t is not None:
            return "token_out_of_vocab", f"response token id {t} outside the model's vocabulary [0, {limits.vocab})"
        n = len(g.prompt_ids) + k
        if n > limits.context:
            return "over_context", (f"prompt {len(g.prompt_ids)} + response {k} = {n} tokens > the model's "
                                    f"context {limits.context}")
    return None


def check_record(r: Polled, limits: Limits | None = None) -> Verdict:
    """The samples of record `r` the trainer can use at all (staleness aside). `limits`: the model's
    vocabulary and context (None: shape and numbers only)."""
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
    if limits is not None:
        t = _oov(g.prompt_ids, limits.vocab)
        if t is not None:
            return Verdict(rejects=[Reject("token_out_of_vocab", f"group {g.group_id}: prompt token id {t} outside "
                                                                 f"the model's vocabulary [0, {limits.vocab})", chosen)])
        if len(g.prompt_ids) >= limits.context:
            return Verdict(rejects=[Reject("over_context", f"group {g.group_id}: prompt of {len(g.prompt_ids)} tokens "
                                                           f"leaves no room in the model's context {limits.context}",
                                           chosen)])
        if g.images:
            bad = (limits.images(g.images, g.prompt_ids) if limits.images is not None else
                   ("images_unsupported", f"{len(g.images)} image(s): the model reads text only"))
            if bad is not None:
                return Verdict(rejects=[Reject(bad[0], f"group {g.group_id}: {bad[1]}", chosen)])
    out = Verdict()
    failed: dict[tuple[str, str], list[int]] = {}
    for i in chosen:
        problem = _sample_problem(g, g.samples[i], rl, limits)
        if problem is None:
            out.train.append(i)
        else:
            failed.setdefault(problem, []).append(i)
    by_reason: dict[str, Reject] = {}
    for (reason, detail), idx in failed.items():  # one rejection per reason, naming the first detail
        if reason in by_reason:
            by_reason[reason].indices.extend(idx)
        else:
            by_reason[reason] = Reject(reason, detail, list(idx))
    out.rejects.extend(by_reason.values())
    return out


def by_version(g: ExperienceGroup, indices: list[int], version: int, eta: int) -> tuple[list[int], list[Reject]]:
    """(fresh, the rejections of the rest): `unknown_version` for a version past the newest published, `stale`
    for one past the bound."""
    fresh, stale, future = split_stale(g, indices, version, eta)
    rejects = []
    if future:
        v1 = max(g.samples[i].model_version for i in future)
        rejects.append(Reject("unknown_version", f"model_version {v1} is past the newest published version "
                                                 f"{version}", future))
    if stale:
        v0 = min(g.samples[i].model_version for i in stale)
        rejects.append(Reject("stale", stale_detail(v0, version, eta), stale, evidence=False))
    return fresh, rejects


def split_stale(g: ExperienceGroup, indices: list[int], version: int,
                eta: int) -> tuple[list[int], list[int], list[int]]:
    """(fresh, stale, future) among `indices`, for the step that will publish version+1. A version past the
    newest published one was never served (a trainer publishes only after a checkpoint): `unknown_version`."""
    fresh: list[int] = []
    stale: list[int] = []
    future: list[int] = []
    for i in indices:
        v = g.samples[i].model_version
        (future if v > version else stale if is_stale(v, version, eta) else fresh).append(i)
    return fresh, stale, future
