"""A step whose loss is not finite (trainer/step.py raises NonFiniteLoss): the samples to blame are found by
bisecting the batch and rejected `non_finite_loss`, and the rest trains; when no rank can isolate the cause, the
whole batch is rejected and skipped, on every rank alike. Functions of the trainer (loop.py) they serve."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rftbus.trainer.checks import Reject
from rftbus.trainer.dist import all_gather

if TYPE_CHECKING:
    from rftbus.trainer.batch_source import BatchSource
    from rftbus.trainer.loop import Trainer
    from rftbus.trainer.selection import Take


def bisect_take(tr: Trainer, take: Take, detail: str) -> Take | None:
    """The samples that made the loss non-finite, rejected; the take without them, or None when every
    rank cannot isolate its cause (then the whole batch is skipped, on every rank alike)."""
    from rftbus.trainer.batch import rows_of
    from rftbus.trainer.bisect import culprits, split_take, units_of
    from rftbus.trainer.step import loss_is_finite

    def finite(units) -> bool:
        rows = [row for pos, idx in units for row in rows_of(take[pos][0].group, take[pos][0].lane == "expert", idx)]
        return loss_is_finite(tr.c.engine, tr.loss, tr._batch(rows), tr.c.ref_model,
                              tr.tc.micro_batch_tokens)

    found = culprits(units_of(take, [r.group for r, _ in take]), finite)
    kept, gone = split_take(take, found.culprits)
    left = all_gather(sum(len(idx) for _, idx in kept), tr.world)
    if not all(all_gather(found.isolated, tr.world)) or (0 in left and any(left)):
        return None  # (a rank with nothing left could not join the others' step)
    for pos, idx in gone.items():
        tr._reject(take[pos][0], [Reject("non_finite_loss", f"this sample made the step's loss non-finite "
                                           f"(found by bisecting the batch, {found.probes} probes): {detail}", idx)])
    tr.summary.bisected_steps += 1
    if tr.rank == 0:
        tr.c.status.update(bisected_steps=tr.summary.bisected_steps)
    tr.log(f"step {tr.step + 1}: loss not finite; {sum(map(len, gone.values()))} experiences to blame "
             f"({found.probes} probes) rejected as non_finite_loss, the rest trains")
    return kept


def skip_step(tr: Trainer, bc: BatchSource, take: Take, detail: str) -> None:
    """A batch whose loss is not finite: no update; its records are rejected (`non_finite_loss`, with
    their bytes, since one of them is the cause) and done, so the same batch is never tried again."""
    for r, idx in take:
        if idx:
            tr._reject(r, [Reject("non_finite_loss", f"the step's batch had a non-finite loss: {detail}", idx)])
    tr._finish(bc, [r for r, _ in take])
    tr.summary.skipped_steps += 1
    if tr.rank == 0:
        tr.c.status.update(skipped_steps=tr.summary.skipped_steps, last_skip=detail[:300])
    tr.log(f"step {tr.step + 1} skipped: {detail[:300]}; {sum(len(i) for _, i in take)} experiences "
             "rejected as non_finite_loss")
