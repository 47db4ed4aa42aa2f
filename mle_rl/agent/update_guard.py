"""Updates that never corrupt the policy, seen from the loop: count skipped updates, stop
after too many in a row.

The learner skips any optimizer step whose loss or gradient is not finite, keeping the
parameters and optimizer state bit for bit (`rl/ppo_update.py`), and reports
`nonfinite_skips` (steps skipped in this update). `SkipGuard.after_update` counts updates
with a skipped step, logs each, and once `limit` have come in a row returns the reason to
stop: the trainer then saves a checkpoint (of the last good parameters), finishes, and
raises `TrainingDiverged` with that sentence.
"""

from __future__ import annotations

from typing import Optional


class TrainingDiverged(RuntimeError):
    """Too many consecutive updates had a non-finite loss or gradient; one sentence for a person."""


class SkipGuard:
    """`counters` (the trainer's, saved in checkpoints) holds `skipped_updates` (all of the
    run) and `consecutive_skipped_updates`."""

    def __init__(self, limit: int, counters, log=print):
        self.limit, self.counters, self.log = int(limit), counters, log
        self.message: Optional[str] = None

    def after_update(self, step: int, metrics: dict, checkpoint_dir) -> Optional[str]:
        """Updates the counts from this update's metrics (adding `skipped_updates` to them);
        returns the stop message when the limit is reached, else None."""
        skipped = metrics.get("nonfinite_skips", 0.0)
        skipped = int(skipped) if skipped == skipped else 1      # NaN counts as skipped
        c = self.counters
        if skipped:
            c["skipped_updates"] += 1
            c["consecutive_skipped_updates"] += 1
            self.log(f"[update {step}] skipped {skipped} optimizer step(s): the loss or a "
                     f"gradient was not finite; parameters unchanged "
                     f"({c['consecutive_skipped_updates']} of --max_skipped_updates="
                     f"{self.limit} in a row)")
        else:
            c["consecutive_skipped_updates"] = 0
        metrics["skipped_updates"] = c["skipped_updates"]
        if c["consecutive_skipped_updates"] < self.limit:
            return None
        n = c["consecutive_skipped_updates"]
        self.message = (
            f"stopped after {n} consecutive updates (up to update {step}) whose loss or "
            f"gradient was not finite; every one was skipped, so the checkpoint in "
            f"{checkpoint_dir} holds the parameters of update {step - n}: check recent "
            f"rewards and log-probs (metrics.jsonl: reward_mean, ratio_max), or lower "
            f"--actor_lr, then resume with --resume.")
        return self.message
