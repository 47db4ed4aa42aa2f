"""Token-level rewards, advantage estimators (GAE; critic-free GRPO and RLOO) and whitening.

Pure JAX, one function per concept (rlax style). Conventions shared by every function:

* ``B`` sequences of ``T`` token positions; ``mask[b, t] = 1`` where position ``t`` of
  sequence ``b`` is a generated (trainable) token, ``0`` for prompt, padding, or tokens
  inserted by the environment. Masks may have holes: GAE skips masked positions, so an
  environment observation in the middle of a response neither earns nor discounts.
* ``values[b, t] = V(s_t)`` is the critic's estimate *before* emitting token ``t``.
* ``gamma`` and ``lam`` are a Python/JAX scalar or a ``[B, T]`` array (per-step discount
  ``discount_t`` in rlax), so a time-dependent discount drops in.
* Outputs are zero at masked positions.
* The critic-free estimators (``grpo``, ``rloo``, ``max_at_k``) work on one scalar score per sequence
  (``sequence_scores``) and a ``[B]`` int ``group_ids``: rows with the same id are the
  samples of one prompt. ``broadcast_sequence_advantage`` spreads the result over tokens.
"""

from __future__ import annotations

from typing import Optional, Union

import chex
import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln

Numeric = Union[float, chex.Array]


def _as_bt(x: Numeric, shape: tuple[int, int], name: str) -> chex.Array:
  """Broadcasts a scalar or ``[B, T]`` array to ``[B, T]`` float32."""
  x = jnp.asarray(x, dtype=jnp.float32)
  if x.ndim not in (0, 2) or (x.ndim == 2 and x.shape != shape):
    raise ValueError(
        f"{name} must be a scalar or an array of shape {shape} (the rewards' shape); "
        f"got shape {x.shape}.")
  return jnp.broadcast_to(x, shape)


def last_token_index(mask: chex.Array) -> chex.Array:
  """Index of the last valid position of each row.

  Args:
    mask: ``[B, T]`` (bool, int or float; nonzero = valid).

  Returns:
    ``[B]`` int32: ``max{t : mask[b, t] != 0}``, or ``-1`` for a row with no valid token.
  """
  chex.assert_rank(mask, 2)
  t = mask.shape[1]
  valid = mask != 0
  idx = jnp.where(valid, jnp.arange(t, dtype=jnp.int32)[None, :], -1)
  return jnp.max(idx, axis=1)


def place_sequence_reward(seq_reward: chex.Array, mask: chex.Array) -> chex.Array:
  """Puts each sequence's scalar reward on its last generated token.

  ``r[b, t] = seq_reward[b]`` if ``t`` is the last ``t`` with ``mask[b, t] = 1``, else 0.
  A row with no valid token gets no reward (all zeros).

  Args:
    seq_reward: ``[B]`` float, one reward per sequence.
    mask: ``[B, T]`` (nonzero = generated token).

  Returns:
    ``[B, T]`` float32.
  """
  chex.assert_rank([seq_reward, mask], [1, 2])
  chex.assert_equal_shape_prefix([seq_reward, mask], 1)
  last = last_token_index(mask)
  positions = jnp.arange(mask.shape[1], dtype=jnp.int32)[None, :]
  at_last = positions == last[:, None]  # never true for last == -1
  return jnp.where(at_last, seq_reward.astype(jnp.float32)[:, None], 0.0)


def token_rewards(seq_reward: chex.Array,
                  mask: chex.Array,
                  kl: Optional[chex.Array] = None,
                  kl_coef: Numeric = 0.0) -> chex.Array:
  """Per-token rewards as in RLHF-style PPO: sequence reward at the end, KL penalty per token.

  ``r[b, t] = seq_reward[b] * 1[t = last(b)] - kl_coef * kl[b, t]``, masked to valid tokens.
  ``kl`` is a per-token estimate of ``KL(pi || pi_ref)`` (see ``losses.kl_penalty``); it is
  treated as data (``stop_gradient``).

  Args:
    seq_reward: ``[B]`` float.
    mask: ``[B, T]``.
    kl: optional ``[B, T]`` float, per-token KL estimate.
    kl_coef: scalar coefficient of the KL penalty.

  Returns:
    ``[B, T]`` float32, zero at masked positions.
  """
  chex.assert_rank([seq_reward, mask], [1, 2])
  r = place_sequence_reward(seq_reward, mask)
  if kl is not None:
    chex.assert_equal_shape([kl, mask])
    r = r - kl_coef * jax.lax.stop_gradient(kl.astype(jnp.float32))
  return jnp.where(mask != 0, r, 0.0)


def gae(rewards: chex.Array,
        values: chex.Array,
        mask: chex.Array,
        gamma: Numeric = 1.0,
        lam: Numeric = 0.95,
        bootstrap_value: Optional[chex.Array] = None) -> tuple[chex.Array, chex.Array]:
  """Generalized advantage estimation over the valid tokens of each sequence.

  Let ``t' = next(t)`` be the next valid position after ``t`` (none after the last one).
  With ``V(next) = bootstrap_value`` (default 0: the episode ends) past the last token::

      delta_t = r_t + gamma_t * V_{t'} - V_t
      A_t     = delta_t + gamma_t * lam_t * A_{t'}        (A = 0 past the last token)
      R_t     = A_t + V_t                                   (the lambda-return)

  Masked positions are skipped (they carry nothing) and get ``A = R = 0``. Values and
  rewards are treated as data (``stop_gradient``).

  Args:
    rewards: ``[B, T]`` float, per-token rewards (e.g. from ``token_rewards``).
    values: ``[B, T]`` float, ``V(s_t)``.
    mask: ``[B, T]``, nonzero = generated token.
    gamma: scalar or ``[B, T]`` discount applied between ``t`` and ``next(t)``.
    lam: scalar or ``[B, T]`` GAE lambda.
    bootstrap_value: optional ``[B]`` value after the last token (truncated episodes).

  Returns:
    ``(advantages, returns)``, each ``[B, T]`` float32.
  """
  chex.assert_rank([rewards, values, mask], 2)
  chex.assert_equal_shape([rewards, values, mask])
  shape = rewards.shape
  gamma = _as_bt(gamma, shape, "gamma")
  lam = _as_bt(lam, shape, "lam")
  rewards = jax.lax.stop_gradient(rewards.astype(jnp.float32))
  values = jax.lax.stop_gradient(values.astype(jnp.float32))
  valid = mask != 0
  if bootstrap_value is None:
    next_value = jnp.zeros(shape[:1], jnp.float32)
  else:
    chex.assert_shape(bootstrap_value, shape[:1])
    next_value = jax.lax.stop_gradient(bootstrap_value.astype(jnp.float32))

  def step(carry, xs):
    next_v, next_a = carry
    r, v, g, l, m = xs
    delta = r + g * next_v - v
    a = delta + g * l * next_a
    new_carry = (jnp.where(m, v, next_v), jnp.where(m, a, next_a))
    return new_carry, jnp.where(m, a, 0.0)

  xs = tuple(x.T for x in (rewards, values, gamma, lam, valid))  # time-major [T, B]
  init = (next_value, jnp.zeros(shape[:1], jnp.float32))
  _, adv_tb = jax.lax.scan(step, init, xs, reverse=True)
  adv = adv_tb.T
  ret = jnp.where(valid, adv + values, 0.0)
  return adv, ret


def masked_mean(x: chex.Array, mask: chex.Array) -> chex.Array:
  """Mean of ``x`` over the entries where ``mask != 0``; 0 if there are none.

  Args:
    x: any shape; mask: same shape.

  Returns:
    scalar float32.
  """
  chex.assert_equal_shape([x, mask])
  m = (mask != 0).astype(jnp.float32)
  return jnp.sum(x.astype(jnp.float32) * m) / jnp.maximum(jnp.sum(m), 1.0)


def whiten(x: chex.Array,
           mask: chex.Array,
           shift_mean: bool = True,
           eps: float = 1e-8,
           unbiased: bool = True) -> chex.Array:
  """Normalizes ``x`` with the mean and variance of its valid entries (verl's ``masked_whiten``).

  Over the set ``M`` of valid entries of the whole batch, ``n = |M|``:
  ``mu = mean_M(x)``, ``var = sum_M (x - mu)^2 / (n - 1)`` (the unbiased variance, as verl;
  ``unbiased=False``: ``/ n``, the population variance, a relative difference of about
  ``1/(2n)`` in the scale); then ``y = (x - mu) / sqrt(var + eps)``, plus ``mu`` back if
  ``shift_mean`` is False (only rescale). Masked entries are 0. With ``n = 1`` the variance
  is 0 (verl raises there).

  Args:
    x: ``[B, T]`` float (any shape works; the statistics are over all valid entries).
    mask: same shape as ``x``.
    shift_mean: subtract the mean (True) or keep it (False).
    eps: added to the variance.
    unbiased: Bessel's correction ``n / (n - 1)`` on the variance (default, as verl).

  Returns:
    float32 array shaped like ``x``.
  """
  chex.assert_equal_shape([x, mask])
  x = x.astype(jnp.float32)
  mu = masked_mean(x, mask)
  var = masked_mean(jnp.square(x - mu), mask)
  if unbiased:
    n = jnp.sum((mask != 0).astype(jnp.float32))
    var = var * n / jnp.maximum(n - 1.0, 1.0)
  y = (x - mu) * jax.lax.rsqrt(var + eps)
  if not shift_mean:
    y = y + mu
  return jnp.where(mask != 0, y, 0.0)


def sequence_scores(token_r: chex.Array, mask: chex.Array) -> chex.Array:
  """One score per sequence for the critic-free estimators: ``s_b = sum_t m_bt r_bt``.

  With ``token_rewards`` this is the sequence reward minus ``kl_coef`` times the summed
  KL penalty (verl's ``token_level_rewards.sum(-1)``).

  Args:
    token_r: ``[B, T]`` float per-token rewards.
    mask: ``[B, T]``.

  Returns:
    ``[B]`` float32.
  """
  chex.assert_rank([token_r, mask], 2)
  chex.assert_equal_shape([token_r, mask])
  return jnp.sum(jnp.where(mask != 0, token_r.astype(jnp.float32), 0.0), axis=1)


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
    scores: ``[B]`` float, one score per sequence (``sequence_scores``).
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
             valid_coef: float = 0.0) -> chex.Array:
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

  ``valid_coef`` (``μ``, with ``valid``: 1 = a graded submission): failures counted
  separately, ``(1 - μ) Â_k + μ Â_v`` with ``Â_v`` RLOO's advantage of ``valid``, each term
  divided by its own group std first. A failure pays ``μ`` of a unit-scale penalty, and the
  valid programs keep ``1 - μ`` of their ranking. Under the ``λ`` mix a failure's -10 sets
  its group's std, which shrinks the valid programs' differences (AUC steps of 0.01) to
  nothing; "valid or not" is left, every valid program is reinforced alike, and the policy
  sharpens onto its commonest reliable family (linear models on Pima at λ = 0.1 and 0.02,
  session 49).

  ``normalize_std``: divide by the standard deviation of the group's advantages (as GRPO
  divides by the scores' std), so each group weighs alike whatever its scores' scale. A
  group whose scores are all equal gets ``A = 0``; a group of one keeps its score (as
  ``rloo``).

  ``signal``: what decides whether a group carries a signal at all. The trainer's scores
  are the rewards less the KL penalty; when the rewards of a group are all equal (eight
  programs with the same validation score), their scores still differ by the KL terms,
  and dividing by the group's std would blow that noise up to advantages of unit scale.
  With ``signal`` (``[B]``, the rewards alone) a group whose signals are all equal gets
  ``A = 0`` whatever its scores.

  Args:
    scores: ``[B]`` float, one score per sequence (``sequence_scores``).
    group_ids: ``[B]`` int; equal ids = samples of the same prompt.
    k: the ``k`` of best-of-``k`` (>= 1; a static Python int).
    normalize_std: divide by the group's std of the advantages.
    eps: added to that std.
    signal: optional ``[B]`` float; groups whose ``signal`` is constant get ``A = 0``
      (default: the scores themselves).
    mean_coef: the share of the mean-score objective ``J_1`` (0: ``J_k`` alone).
    valid: ``[B]`` (bool or 0/1) whether each program was valid; needed when
      ``valid_coef > 0``.
    valid_coef: the share of the validity term ``Â_v`` (0: none).

  Returns:
    ``[B]`` float32 advantages (data: ``stop_gradient``).
  """
  if int(k) < 1:
    raise ValueError(f"max_at_k: k must be >= 1, got {k}.")
  if not 0.0 <= float(mean_coef) <= 1.0:
    raise ValueError(f"max_at_k: mean_coef must be in [0, 1], got {mean_coef}.")
  if not 0.0 <= float(valid_coef) <= 1.0:
    raise ValueError(f"max_at_k: valid_coef must be in [0, 1], got {valid_coef}.")
  if float(valid_coef) > 0.0 and valid is None:
    raise ValueError("max_at_k: valid_coef > 0 needs `valid` (1 = a graded submission).")
  s, n, _, same = _group_stats(scores, group_ids)
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
  big = jnp.float32(jnp.finfo(jnp.float32).max)
  sig = s if signal is None else jax.lax.stop_gradient(signal.astype(jnp.float32))
  chex.assert_equal_shape([sig, s])
  spread = (jnp.max(jnp.where(same > 0, sig[None, :], -big), axis=1)
            - jnp.min(jnp.where(same > 0, sig[None, :], big), axis=1))
  adv = jnp.where(spread > 0, raw, 0.0)                # equal signals: exactly no signal
  adv = jnp.where(n < 2, s, adv)
  if normalize_std:
    adv = jnp.where(n < 2, adv, adv / (_group_std(adv, same, n) + eps))
  if float(valid_coef) > 0.0:   # failures counted separately, on their own scale
    v = jax.lax.stop_gradient(jnp.asarray(valid).astype(jnp.float32))
    chex.assert_equal_shape([v, s])
    adv_v = rloo(v, group_ids)                           # all valid or none: 0
    if normalize_std:
      adv_v = adv_v / (_group_std(adv_v, same, n) + eps)
    adv = jnp.where(n < 2, adv, (1.0 - valid_coef) * adv + valid_coef * adv_v)
  return jax.lax.stop_gradient(adv)


def _group_std(x: chex.Array, same: chex.Array, n: chex.Array) -> chex.Array:
  """``[B]``: the (population) std of ``x`` over each row's group."""
  mean = same @ x / n
  var = same @ jnp.square(x) / n - jnp.square(mean)
  return jnp.sqrt(jnp.maximum(var, 0.0))


def broadcast_sequence_advantage(adv: chex.Array, mask: chex.Array) -> chex.Array:
  """``A_bt = A_b`` on every valid token of sequence ``b``, 0 elsewhere.

  Args:
    adv: ``[B]`` float; mask: ``[B, T]``.

  Returns:
    ``[B, T]`` float32.
  """
  chex.assert_rank([adv, mask], [1, 2])
  chex.assert_equal_shape_prefix([adv, mask], 1)
  return jnp.where(mask != 0, adv.astype(jnp.float32)[:, None], 0.0)
