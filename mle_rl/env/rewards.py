"""Reward schemes: pure functions of an action's result.

`rl4mle` (RL for MLE agents): a program that does not produce a valid, graded submission
gets `failure` (-10) plus `per_hit` (0.1) for each instrumented print it reached, so among
failures the ones that got further score higher (-10 ... -9.3 with all 7 prints). This
covers errors, time-outs, out-of-memory AND a program that exited cleanly but wrote no
valid `submission.csv` ("invalid_submission"): the paper gives -10 to any program that
fails to produce a submission, and an unusable file earns nothing more than a missing
one. A valid submission gets the grader's score, sign-flipped when lower is better, and
no print bonus: every valid run reached the steps, so the bonus would only shift all
valid runs by the same ~0.7 and could be farmed by printing, not by a better model.
Any valid submission (score about -1..1) therefore beats any failure. Metrics without a
fixed scale (RMSE, MAE, MCRMSE: a house price's RMSE is in the thousands) would break
that, so their score is divided by `scale`, the sample submission's own score
(`action.score_scale`): a valid submission then earns about -1 (no better than the
sample) .. 0 (perfect), whatever the units. The paper's tasks are unaffected (scale 1).

`mlagent` (ML-Agent's agentic-ML reward module): error or bad format -> 0; a corner case
(time limit, out of memory, or a valid action that changes nothing) -> 0.5; a successful
edit -> sigmoid(alpha * (m_new - m_prev)), sign-flipped for lower-is-better, with the
per-task scale alpha (`Task.reward_scale`). With no previous score (first step), the
improvement is measured from 0 after the sign flip, i.e. sigmoid(alpha * signed score).
An invalid submission counts as an error (0).
"""

from __future__ import annotations

import math
from typing import Optional

FAILURE_REWARD = -10.0
PER_HIT = 0.1
CORNER_STATUSES = ("timeout", "oom")


def _signed(score: float, is_lower_better: bool) -> float:
    return -float(score) if is_lower_better else float(score)


def graded(status: str, score: Optional[float]) -> bool:
    """Whether a program earned a graded submission: status ``ok`` and a finite score (what
    ``rl4mle`` rewards with its score, and the learner's ``valid`` column)."""
    return status == "ok" and score is not None and math.isfinite(score)


def rl4mle(status: str, score: Optional[float], is_lower_better: bool, n_hits: int, *,
           failure: float = FAILURE_REWARD, per_hit: float = PER_HIT,
           scale: float = 1.0) -> float:
    """Reward of RL for MLE agents: signed score / scale if graded, else failure +
    per_hit*hits."""
    if graded(status, score):
        return _signed(score, is_lower_better) / float(scale)
    return float(failure) + float(per_hit) * int(n_hits)


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def mlagent(status: str, score: Optional[float], prev_score: Optional[float],
            is_lower_better: bool, alpha: float, *, changed: bool = True) -> float:
    """ML-Agent's reward: 0 error/format, 0.5 corner case or no change, else
    sigmoid(alpha * (m_new - m_prev)) on sign-flipped metrics."""
    if status in CORNER_STATUSES:
        return 0.5
    if not graded(status, score):
        return 0.0
    if not changed:
        return 0.5
    prev = 0.0 if prev_score is None else _signed(prev_score, is_lower_better)
    return _sigmoid(float(alpha) * (_signed(score, is_lower_better) - prev))


REWARDS = {"rl4mle": rl4mle, "mlagent": mlagent}


def compute_reward(scheme: str, *, status: str, score: Optional[float], is_lower_better: bool,
                   n_hits: int = 0, prev_score: Optional[float] = None, alpha: float = 1.0,
                   changed: bool = True, score_scale: float = 1.0) -> float:
    """Dispatches to `REWARDS[scheme]` with the arguments that scheme uses."""
    if scheme == "rl4mle":
        return rl4mle(status, score, is_lower_better, n_hits, scale=score_scale)
    if scheme == "mlagent":
        return mlagent(status, score, prev_score, is_lower_better, alpha, changed=changed)
    raise ValueError(f"Unknown reward scheme {scheme!r}; use one of {sorted(REWARDS)}.")
