"""best@k: the expected score of the best of k programs, estimated from n samples.

The RL-for-MLE paper reports the best of 128 samples; work on RL with verifiable rewards
(Yue et al. 2025) compares policies by pass@k over many k, because a policy that only
sharpens wins at small k and loses at large k. For scores the analogue of pass@k is the
expected best of k draws. From n i.i.d. samples with values sorted ascending
``v_(1) <= ... <= v_(n)``, the unbiased estimator of the best of k draws *without
replacement* averages the best over every k-subset::

    best@k = sum_i C(i - 1, k - 1) / C(n, k) * v_(i)          (1 <= k <= n)

(`v_(i)` is the best of a subset with probability C(i-1, k-1) / C(n, k)). Values are
signed so that higher is better; the caller flips lower-is-better metrics back.

An invalid program must rank below every valid one ("invalid = worst") and still give a
number: it counts as the task's *floor*, the score of its sample submission (what a
competitor submits when the program fails), and a valid score worse than the floor counts
as the floor too (the sample submission was always there to submit). Without a sample
submission, the floor is the worst valid score among the values given (pass all the pools
to be compared at once, so they share it).
"""

from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

import numpy as np


def powers_of_two(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n] if n >= 1 else []


def floor_of(scores: Iterable[Optional[float]], baseline: Optional[float],
             is_lower_better: bool) -> Optional[float]:
    """The signed floor: the sample submission's score, else the worst valid score."""
    if baseline is not None and math.isfinite(baseline):
        return -baseline if is_lower_better else baseline
    valid = [(-s if is_lower_better else s) for s in scores
             if s is not None and math.isfinite(s)]
    return min(valid) if valid else None


def signed_values(scores: Sequence[Optional[float]], floor: float,
                  is_lower_better: bool) -> np.ndarray:
    """Raw scores (None = invalid) -> signed values, higher is better, floored."""
    out = np.full(len(scores), floor, np.float64)
    for i, s in enumerate(scores):
        if s is not None and math.isfinite(s):
            out[i] = max(-s if is_lower_better else s, floor)
    return out


def expected_best(values: Sequence[float], k: int) -> float:
    """Unbiased estimate of E[max of k draws without replacement] from `values` (n >= k)."""
    v = np.sort(np.asarray(values, np.float64))
    n = len(v)
    if not 1 <= k <= n:
        raise ValueError(f"best@k needs 1 <= k <= n; got k={k}, n={n}.")
    i = np.arange(1, n + 1)
    # log C(i-1, k-1) - log C(n, k), zero weight where i - 1 < k - 1.
    lg = lambda x: np.vectorize(math.lgamma)(x)    # noqa: E731
    ok = i >= k
    logw = np.full(n, -np.inf)
    a = (i[ok] - 1).astype(np.float64)
    logw[ok] = (lg(a + 1) - lg(np.float64(k)) - lg(a - k + 2)
                - (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)))
    w = np.exp(logw)
    return float(np.sum(w * v) / np.sum(w))      # sum(w) = 1 up to rounding


def best_at_k(scores: Sequence[Optional[float]], ks: Iterable[int], *, is_lower_better: bool,
              floor: Optional[float] = None, baseline: Optional[float] = None) -> dict:
    """{k: best@k in the metric's own direction} for each k <= len(scores). `floor`
    (signed) overrides the one from `baseline` / the scores (see the module docstring).
    Empty when there is no floor (no baseline and nothing valid)."""
    if floor is None:
        floor = floor_of(scores, baseline, is_lower_better)
    if floor is None or not scores:
        return {}
    v = signed_values(scores, floor, is_lower_better)
    out = {}
    for k in ks:
        if 1 <= k <= len(v):
            b = expected_best(v, k)
            out[int(k)] = -b if is_lower_better else b
    return out
