"""Token-level rewards, GAE with a critic, whitening, and the bridge to the group estimators.

Pure JAX, one function per concept (rlax style). Conventions shared by every function:

* ``B`` sequences of ``T`` token positions; ``mask[b, t] = 1`` where position ``t`` of
  sequence ``b`` is a generated (trainable) token, ``0`` for prompt, padding, or tokens
  inserted by the environment. Masks may have holes: GAE skips masked positions, so an
  environment observation in the middle of a response neither earns nor discounts.
* ``values[b, t] = V(s_t)`` is the critic's estimate *before* emitting token ``t``.
* ``gamma`` and ``lam`` are a Python/JAX scalar or a ``[B, T]`` array (per-step discount
  ``discount_t`` in rlax), so a time-dependent discount drops in.
* Outputs are zero at masked positions.
* The critic-free estimators (GRPO, RLOO, max@k: ``group_advantages.py``) work on one scalar
  score per sequence; ``sequence_scores`` makes it from the token rewards, and
  ``broadcast_sequence_advantage`` spreads their result back over the tokens.
"""

from __future__ import annotations

from typing import Optional, Union

import chex
import jax
import jax.numpy as jnp

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
