"""KL to the reference policy: per-token estimators and the adaptive KL controller.

Pure JAX, one function per concept. The KL enters training in one of two places (or both):
  * as a reward penalty, ``r_bt -= beta * kl_bt`` (``advantages.token_rewards``; verl
    ``use_kl_in_reward`` with ``kl_penalty``), where ``beta`` is fixed or follows
    ``adaptive_kl_coef`` (verl ``kl_ctrl.type=adaptive``);
  * as a loss term, ``loss += coef * reduce(kl(pi_theta, pi_ref))`` on the current policy's
    log-probs (verl ``use_kl_loss`` with ``kl_loss_type``, e.g. ``low_var_kl`` = k3, as GRPO
    recipes do).
"""

from __future__ import annotations

from typing import Optional, Union

import chex
import jax
import jax.numpy as jnp

Numeric = Union[float, chex.Array]
KL_KINDS = ("k1", "k2", "k3")
K3_LOG_RATIO_CLAMP = 20.0    # verl clamps log(pi_ref / pi) to [-20, 20] before exp in k3 ...
K3_CLAMP = 10.0              # ... and the k3 estimate itself to [-10, 10]


def kl_penalty(logprobs: chex.Array,
               ref_logprobs: chex.Array,
               kind: str = "k1",
               mask: Optional[chex.Array] = None,
               clamp: bool = True) -> chex.Array:
  """Per-token estimate of ``KL(pi || pi_ref)`` from the sampled tokens (Schulman's k1/k2/k3).

  With ``x = logp - logp_ref`` for a token sampled from ``pi``:
    * ``k1 = x`` (unbiased, high variance, can be negative; verl ``kl``);
    * ``k2 = x^2 / 2`` (biased, low variance, >= 0; verl ``mse``);
    * ``k3 = exp(-x') - 1 + x'`` with ``x' = clip(x, -20, 20)``, then clipped to
      ``[-10, 10]`` (unbiased before the clamps, low variance, >= 0; verl ``low_var_kl``,
      whose clamps keep one far-off token from putting ``inf`` into the reward or loss).
  As a loss term the gradient of k1/k3 is not that of the KL (k2's is); verl's GRPO
  recipes use k3 (``low_var_kl``) nonetheless.

  Args:
    logprobs: ``[B, T]`` float, current (or sampling) policy.
    ref_logprobs: ``[B, T]`` float, frozen reference policy (data: ``stop_gradient``).
    kind: ``"k1"``, ``"k2"`` or ``"k3"``.
    mask: optional ``[B, T]``; zeros the result at masked positions.
    clamp: apply verl's two k3 clamps (default); False gives the plain, unbiased k3.

  Returns:
    ``[B, T]`` float32.
  """
  chex.assert_rank([logprobs, ref_logprobs], 2)
  chex.assert_equal_shape([logprobs, ref_logprobs])
  x = logprobs.astype(jnp.float32) - jax.lax.stop_gradient(ref_logprobs.astype(jnp.float32))
  if kind == "k1":
    kl = x
  elif kind == "k2":
    kl = 0.5 * jnp.square(x)
  elif kind == "k3":
    if clamp:
      xc = jnp.clip(x, -K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP)
      kl = jnp.clip(jnp.expm1(-xc) + xc, -K3_CLAMP, K3_CLAMP)
    else:
      kl = jnp.expm1(-x) + x
  else:
    raise ValueError(f"kl_penalty kind must be one of {KL_KINDS}; got {kind!r}.")
  if mask is not None:
    chex.assert_equal_shape([kl, mask])
    kl = jnp.where(mask != 0, kl, 0.0)
  return kl


def sequence_mean_kl(kl: chex.Array, mask: chex.Array) -> chex.Array:
  """The batch KL the controller sees (verl): ``mean_b (sum_t m_bt kl_bt / n_b)``, over all
  ``B`` rows, with ``n_b = max(sum_t m_bt, 1)``.

  Args:
    kl: ``[B, T]`` float per-token KL; mask: ``[B, T]``.

  Returns:
    scalar float32.
  """
  chex.assert_rank([kl, mask], 2)
  chex.assert_equal_shape([kl, mask])
  m = (mask != 0).astype(jnp.float32)
  per_seq = jnp.sum(kl.astype(jnp.float32) * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)
  return jnp.mean(per_seq)


def adaptive_kl_coef(coef: Numeric,
                     current_kl: Numeric,
                     target_kl: float,
                     horizon: float,
                     n_steps: Numeric) -> chex.Array:
  """One step of the adaptive KL controller (Ziegler et al. 2019; verl ``AdaptiveKLController``).

  ``e = clip(KL / KL_target - 1, -0.2, 0.2)``;  ``beta' = beta * (1 + e * n_steps / horizon)``.
  So ``beta`` grows while the KL is above target and shrinks while below, by at most 20%
  per ``horizon`` samples. A non-finite ``KL`` leaves ``beta`` unchanged.

  Args:
    coef: scalar ``beta``, the current coefficient (> 0).
    current_kl: scalar, the batch's KL (``sequence_mean_kl`` of the reward penalty).
    target_kl: ``KL_target`` (> 0).
    horizon: samples over which a full correction applies (> 0).
    n_steps: samples in this batch (verl: the batch size).

  Returns:
    scalar float32, the new ``beta``.
  """
  if isinstance(target_kl, (int, float)) and not target_kl > 0:
    raise ValueError(f"adaptive KL: target_kl must be > 0, got {target_kl}.")
  if isinstance(horizon, (int, float)) and not horizon > 0:
    raise ValueError(f"adaptive KL: horizon must be > 0, got {horizon}.")
  coef = jnp.asarray(coef, jnp.float32)
  chex.assert_rank(coef, 0)
  kl = jax.lax.stop_gradient(jnp.asarray(current_kl, jnp.float32))
  err = jnp.clip(kl / target_kl - 1.0, -0.2, 0.2)
  new = coef * (1.0 + err * jnp.asarray(n_steps, jnp.float32) / horizon)
  return jnp.where(jnp.isfinite(kl), new, coef)
