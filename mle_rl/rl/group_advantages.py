"""Critic-free advantages over the samples of one prompt: GRPO, RLOO and max@k.

Pure JAX. Each function takes one score per sequence (``advantages.sequence_scores``) and a
``[B]`` int ``group_ids``: rows with the same id are the samples of one prompt. It returns
one ``[B]`` advantage per sequence (data: ``stop_gradient``), which
``advantages.broadcast_sequence_advantage`` spreads over the tokens. A group of one keeps its
score, as verl does; a group whose scores are all equal carries no signal (``A = 0``).
``B`` is a batch of sequences, so the ``[B, B]`` same-group matrices below are small.
"""

from __future__ import annotations

from typing import Optional

import chex
import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln


def _group_stats(scores: chex.Array, group_ids: chex.Array):
  """``(n_b, mean_b, same)``: size and mean of row ``b``'s group, and the ``[B, B]`` 0/1
  same-group matrix (``B`` is a batch of sequences, so ``B^2`` is small)."""
  chex.assert_rank([scores, group_ids], 1)
  chex.assert_equal_shape([scores, group_ids])
  chex.assert_type(group_ids, int)
  s = jax.lax.stop_gradient(scores.astype(jnp.float32))
  same = (group_ids[:, None] == group_ids[None, :]).astype(jnp.float32)
  n = jnp.sum(same, axis=1)
  mean = same @ s / n
  return s, n, mean, same


def grpo(scores: chex.Array,
         group_ids: chex.Array,
         normalize_std: bool = True,
         eps: float = 1e-6) -> chex.Array:
  """GRPO's group-relative advantage (verl ``adv_estimator=grpo``).

  For row ``b`` in group ``G`` (``n = |G| >= 2``): ``mu_G = mean_{j in G} s_j``,
  ``sigma_G = sqrt(sum_{j in G} (s_j - mu_G)^2 / (n - 1))`` (unbiased, as ``torch.std``);
  ``A_b = (s_b - mu_G) / (sigma_G + eps)``, or ``A_b = s_b - mu_G`` without
  ``normalize_std`` (Dr. GRPO). A group of one keeps its score: ``A_b = s_b`` (verl: mean 0,
  std 1). A group whose scores are all equal gets ``A = 0``: it carries no signal.

  Args:
    scores: ``[B]`` float, one score per sequence (``advantages.sequence_scores``).
    group_ids: ``[B]`` int; equal ids = samples of the same prompt.
    normalize_std: divide by the group's std (verl ``norm_adv_by_std_in_grpo``).
    eps: added to the std.

  Returns:
    ``[B]`` float32 advantages (data: ``stop_gradient``).
  """
  s, n, mean, same = _group_stats(scores, group_ids)
  single = n < 2
  mean = jnp.where(single, 0.0, mean)
  var = jnp.sum(same * jnp.square(s[None, :] - mean[:, None]), axis=1) / jnp.maximum(n - 1.0, 1.0)
  std = jnp.where(single, 1.0, jnp.sqrt(var))
  centred = s - mean
  return centred / (std + eps) if normalize_std else centred


def rloo(scores: chex.Array, group_ids: chex.Array) -> chex.Array:
  """REINFORCE leave-one-out (verl ``adv_estimator=rloo``): each sample's baseline is the
  mean score of the *other* samples of its prompt.

  For row ``b`` in group ``G`` with ``n = |G| >= 2``:
  ``A_b = s_b - (1/(n-1)) sum_{j in G, j != b} s_j = n/(n-1) (s_b - mu_G)``;
  a group of one keeps its score (``A_b = s_b``, as verl).

  Args:
    scores: ``[B]`` float, one score per sequence.
    group_ids: ``[B]`` int; equal ids = samples of the same prompt.

  Returns:
    ``[B]`` float32 advantages (data: ``stop_gradient``).
  """
  s, n, mean, _ = _group_stats(scores, group_ids)
  return jnp.where(n < 2, s, (s - mean) * n / jnp.maximum(n - 1.0, 1.0))


def _log_binom(a: chex.Array, j: chex.Array) -> chex.Array:
  """``log C(a, j)`` for ``0 <= j <= a`` (float; callers mask the rest)."""
  a, j = jnp.asarray(a, jnp.float32), jnp.asarray(j, jnp.float32)
  return gammaln(a + 1.0) - gammaln(j + 1.0) - gammaln(jnp.maximum(a - j, 0.0) + 1.0)


def max_at_k(scores: chex.Array,
             group_ids: chex.Array,
             k: int,
             normalize_std: bool = True,
             eps: float = 1e-6,
             signal: Optional[chex.Array] = None,
             mean_coef: float = 0.0,
             valid: Optional[chex.Array] = None,
             valid_coef: float = 0.0,
             scale: str = "group") -> chex.Array:
  r"""Leave-one-out advantage of the expected best of ``k`` draws (pass@k / max@k objective).

  The objective is ``J_k = E[max(s_1, ..., s_k)]`` over ``k`` independent samples of a
  prompt: the score of the best of ``k`` programs, which is what best-of-N evaluation
  measures. Its policy gradient is ``E[sum_j grad log pi(a_j) * max_i s_i]``; from a group
  ``G`` of ``n`` samples of one prompt, row ``b`` (``m = n - 1`` others,
  ``k' = min(k, m)``) gets::

      A_b = E_{T ⊂ G\{b}, |T| = k'-1} [max(s_b, max T)]  -  E_{U ⊂ G\{b}, |U| = k'} [max U]

  over uniformly drawn subsets of the *other* samples: the first term averages the best of
  ``k'`` draws over the subsets that contain ``b``; the baseline, the leave-one-out
  estimate of ``J_k'``, does not depend on ``b``'s action, so the gradient stays unbiased
  (Walder & Karkhanis 2025, PKPO). With ``s_(1) <= ... <= s_(m)`` the others sorted, the
  best of a uniform ``j``-subset is ``s_(i)`` with probability ``C(i-1, j-1) / C(m, j)``.

  * ``k = 1`` is RLOO: ``A_b = s_b - mean_{others}``.
  * ``k' = m``: the baseline is the best of the others, so only the group's best sample
    gets a positive advantage (``A_b <= 0`` for every other one).
  * A failed program's advantage is ``-(E[best of k'] - E[best of k'-1])`` of the others:
    small unless the group holds few valid programs, however low its reward (-10) is. So
    failures do not drown the differences between valid programs, and a sample that
    raises the group's best is credited even when the mean does not move.

  ``mean_coef`` (``λ`` in ``[0, 1]``): the gradient of ``(1 - λ) J_k + λ J_1``, i.e.
  ``(1 - λ) A_b + λ (s_b - mean_{others})`` before the std division. With ``k'`` as large as
  the group, ``J_k`` is indifferent to every sample but the best: a failure and a valid
  program below the best get the same advantage, so nothing keeps the policy valid but the
  KL to the reference (on glass, session 48, the valid fraction per update fell from 0.93
  to 0.49 in an hour). The ``J_1`` share makes a failure cost its reward again, ``λ`` of it.

  ``valid_coef`` (``μ >= 0``, with ``valid``: 1 = a graded submission): failures counted
  separately, ``Â_k + μ Â_v`` with ``Â_v`` RLOO's advantage of ``valid``, each term divided
  by its own group std first. A failure pays ``μ`` of a unit-scale penalty; the valid
  programs keep their ranking whole, and a group with no failure keeps ``Â_k`` exactly (a
  convex mix would scale those groups by ``1 - μ``, which under Adam only moves weight onto
  the KL loss). With ``k`` the group size, a valid program below the best gets ``Â_k``
  about ``-0.38`` in a group of 8; one failure gives it ``Â_v = +0.38``, so at ``μ >= 1``
  the valid programs of a group with failures are no longer pushed down with them
  (pushing a program down spreads its probability: on glass the format eroded so, session
  48, and ``μ = 0.1`` of the convex mix did not hold it, session 50). Under the ``λ`` mix a failure's -10 sets
  its group's std, which shrinks the valid programs' differences (AUC steps of 0.01) to
  nothing; "valid or not" is left, every valid program is reinforced alike, and the policy
  sharpens onto its commonest reliable family (linear models on Pima at λ = 0.1 and 0.02,
  session 49).

  ``normalize_std``: divide by the standard deviation of the group's advantages (as GRPO
  divides by the scores' std), so each group weighs alike whatever its scores' scale. A
  group whose scores are all equal gets ``A = 0``, and so does one whose advantages are
  zero in theory (two tied best programs at ``k'`` = the others: no sample changes the best)
  or below float32's resolution of its score range; a group of one keeps its score (as
  ``rloo``). The estimate is computed on scores relative to the group's best, so those
  zeros are exact (until session 54 they were a residue that the division made a constant
  advantage of order one for the whole group).

  ``scale`` (with ``normalize_std``): what the best-of-k term is divided by. ``"group"``:
  each group's std of its advantages, as above: a group's win is a unit of credit however
  small its margin, so a family whose programs cluster (logistic regression on Pima: many
  wins by 0.001 over each other) gains more than its margins are worth. ``"scores"``: one
  scale for the whole batch, the std of its valid programs' scores (``valid``, at least 2;
  else the term is 0): a win counts by its margin relative to the spread of the update's
  programs, so a near-tie is worth little and a clear win much
  (``experiments/family_tails.py --credit`` measures the difference on stored samples).

  ``signal``: what decides whether a group carries a signal at all. The trainer's scores
  are the rewards less the KL penalty; when the rewards of a group are all equal (eight
  programs with the same validation score), their scores still differ by the KL terms,
  and dividing by the group's std would blow that noise up to advantages of unit scale.
  With ``signal`` (``[B]``, the rewards alone) a group whose signals are all equal gets
  ``A = 0`` whatever its scores.

  Args:
    scores: ``[B]`` float, one score per sequence (``advantages.sequence_scores``).
    group_ids: ``[B]`` int; equal ids = samples of the same prompt.
    k: the ``k`` of best-of-``k`` (>= 1; a static Python int).
    normalize_std: divide by the group's std of the advantages.
    eps: added to that std.
    signal: optional ``[B]`` float; groups whose ``signal`` is constant get ``A = 0``
      (default: the scores themselves).
    mean_coef: the share of the mean-score objective ``J_1`` (0: ``J_k`` alone).
    valid: ``[B]`` (bool or 0/1) whether each program was valid; needed when
      ``valid_coef > 0``.
    valid_coef: the weight ``μ >= 0`` of the validity term ``Â_v`` (0: none).
    scale: ``"group"`` or ``"scores"`` (needs ``valid``): the divisor of the best-of-k term.

  Returns:
    ``[B]`` float32 advantages (data: ``stop_gradient``).
  """
  if int(k) < 1:
    raise ValueError(f"max_at_k: k must be >= 1, got {k}.")
  if not 0.0 <= float(mean_coef) <= 1.0:
    raise ValueError(f"max_at_k: mean_coef must be in [0, 1], got {mean_coef}.")
  if not 0.0 <= float(valid_coef) < float("inf"):
    raise ValueError(f"max_at_k: valid_coef must be finite and >= 0, got {valid_coef}.")
  if float(valid_coef) > 0.0 and valid is None:
    raise ValueError("max_at_k: valid_coef > 0 needs `valid` (1 = a graded submission).")
  if scale not in SCALES:
    raise ValueError(f"max_at_k: scale must be one of {SCALES}, got {scale!r}.")
  if scale == "scores" and valid is None:
    raise ValueError("max_at_k: scale='scores' needs `valid` (1 = a graded submission).")
  s, n, _, same = _group_stats(scores, group_ids)
  absolute = s
  # Scores relative to their group's best: J_k's estimate is unchanged (the probabilities of
  # both terms sum to one), and a term that is exactly zero in theory is zero in float32. On
  # the absolute scale two tied best programs left every member of the group a rounding
  # residue of ~1e-7 |s|, which the std division below blew up to one constant advantage of
  # order one (Pima, AUC 0.87: +0.48 for all eight).
  top, bottom = _group_extremes(s, same)
  s, s_range = s - top, top - bottom
  b = s.shape[0]
  idx = jnp.arange(b)
  # A total order (score, then row index): ties are broken consistently.
  before = (s[:, None] < s[None, :]) | ((s[:, None] == s[None, :]) & (idx[:, None] < idx[None, :]))
  before = before.astype(jnp.float32)                   # before[d, c]: d sorts before c
  rank_in_group = jnp.sum(same * before, axis=0)        # [B] 0-based rank of c in its group
  # rank (1-based) of c among the others of b: c's group rank, less one if b sorts before c.
  rank = rank_in_group[None, :] - before + 1.0           # [b, c]
  other = same * (1.0 - jnp.eye(b, dtype=jnp.float32))
  m = n - 1.0                                            # [B]
  kk = jnp.clip(jnp.float32(k), 1.0, jnp.maximum(m, 1.0))[:, None]   # [B, 1]
  m_ = m[:, None]

  def p_best(j):   # P(the best of a uniform j-subset of b's others is c), [b, c]
    ok = (other > 0) & (rank - 1.0 >= j - 1.0) & (j >= 1.0)
    logp = _log_binom(rank - 1.0, jnp.maximum(j - 1.0, 0.0)) - _log_binom(m_, j)
    return jnp.where(ok, jnp.exp(jnp.where(ok, logp, 0.0)), 0.0)

  baseline = jnp.sum(p_best(kk) * s[None, :], axis=1)
  with_b = jnp.sum(p_best(kk - 1.0) * jnp.maximum(s[:, None], s[None, :]), axis=1)
  first = jnp.where(kk[:, 0] > 1.0, with_b, s)            # k' = 1: the sample alone
  raw = first - baseline
  if float(mean_coef) > 0.0:   # J_1's leave-one-out term (RLOO) for its share λ
    raw = (1.0 - mean_coef) * raw + mean_coef * rloo(scores, group_ids)
  sig = s if signal is None else jax.lax.stop_gradient(signal.astype(jnp.float32))
  chex.assert_equal_shape([sig, s])
  sig_top, sig_bottom = _group_extremes(sig, same)
  adv = jnp.where(sig_top > sig_bottom, raw, 0.0)      # equal signals: exactly no signal
  if normalize_std and scale == "scores":
    # One divisor for the batch: the spread of its valid programs' scores.
    v = jax.lax.stop_gradient(jnp.asarray(valid).astype(jnp.float32))
    chex.assert_equal_shape([v, s])
    n_valid = jnp.sum(v)
    mean_v = jnp.sum(v * absolute) / jnp.maximum(n_valid, 1.0)
    spread = jnp.sqrt(jnp.sum(v * jnp.square(absolute - mean_v)) / jnp.maximum(n_valid - 1.0, 1.0))
    usable = (n_valid >= 2.0) & (spread > _ROUNDING * jnp.max(jnp.abs(v * absolute)))
    adv = jnp.where(usable, adv / (spread + eps), 0.0)
  elif normalize_std:
    # Advantages that are zero but for rounding (spread over the group's score range below
    # float32's resolution) are zero: the division would give them unit scale.
    std = _group_std(adv, same, n)
    adv = jnp.where(std <= _ROUNDING * s_range, 0.0, adv / (std + eps))
  adv = jnp.where(n < 2, scores.astype(jnp.float32), adv)   # a group of one keeps its score
  if float(valid_coef) > 0.0:   # failures counted separately, on their own scale
    v = jax.lax.stop_gradient(jnp.asarray(valid).astype(jnp.float32))
    chex.assert_equal_shape([v, s])
    adv_v = rloo(v, group_ids)                           # all valid or none: 0
    if normalize_std:
      adv_v = adv_v / (_group_std(adv_v, same, n) + eps)
    adv = jnp.where(n < 2, adv, adv + valid_coef * adv_v)
  return jax.lax.stop_gradient(adv)


# The divisors of max_at_k's best-of-k term (its ``scale``).
SCALES = ("group", "scores")

# Relative size below which a group's advantages are rounding residue (float32's epsilon is
# 1.2e-7; a real max@k signal is at least a score step over k, orders of magnitude above).
_ROUNDING = 1e-6


def _group_extremes(x: chex.Array, same: chex.Array) -> tuple[chex.Array, chex.Array]:
  """``[B]`` each: the max and the min of ``x`` over each row's group."""
  big = jnp.float32(jnp.finfo(jnp.float32).max)
  return (jnp.max(jnp.where(same > 0, x[None, :], -big), axis=1),
          jnp.min(jnp.where(same > 0, x[None, :], big), axis=1))


def _group_std(x: chex.Array, same: chex.Array, n: chex.Array) -> chex.Array:
  """``[B]``: the (population) std of ``x`` over each row's group (two passes: the mean
  first, so equal values give exactly zero)."""
  mean = same @ x / n
  var = jnp.sum(same * jnp.square(x[None, :] - mean[:, None]), axis=1) / n
  return jnp.sqrt(jnp.maximum(var, 0.0))
