"""PPO losses with duration weights, KL estimators, entropy and chunked token log-probs.

Pure JAX, one function per concept (rlax style); each docstring states its equation and
shapes. ``B`` sequences, ``T`` positions, ``V`` vocabulary, ``D`` hidden size;
``mask[b, t] != 0`` marks generated (trainable) tokens.

Reductions over tokens (``reduction=``; verl's ``loss_agg_mode`` in brackets), with
``m`` the mask, ``n_b = sum_t m_bt`` and ``S = {b : n_b > 0}`` the non-empty sequences:
  * ``"token_mean"`` [token-mean]: ``sum_{b,t} m_bt x_bt / sum_{b,t} m_bt``;
  * ``"sequence_mean"`` [seq-mean-token-mean]: ``mean_{b in S} (sum_t m_bt x_bt / n_b)``;
  * ``"seq_mean_token_sum"`` [seq-mean-token-sum]: ``mean_{b in S} sum_t m_bt x_bt``;
  * ``"seq_mean_token_sum_norm"`` [seq-mean-token-sum-norm, Dr. GRPO]:
    ``mean_{b in S} (sum_t m_bt x_bt) / scale`` with a constant ``scale`` (default ``T``;
    keep it fixed over a run, e.g. the response budget): verl 0.9's form, the
    ``seq-mean-token-sum`` divided by the constant (verl 0.8 divided the *sum* over
    sequences, a factor of ``|S|`` larger);
  * ``"token_sum"``: ``sum_{b,t} m_bt x_bt``.
"""

from __future__ import annotations

import functools
from typing import Optional, Union

import chex
import jax
import jax.numpy as jnp

from mle_rl.models.linear import dense
from mle_rl.rl.kl import KL_KINDS, kl_penalty  # noqa: F401  (re-exported: losses.kl_penalty)

Numeric = Union[float, chex.Array]
REDUCTIONS = ("token_mean", "sequence_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm",
              "token_sum")
LOG_RATIO_CLAMP = 20.0       # verl clamps log(pi / pi_old) to [-20, 20] before exp


def reduce_tokens(x: chex.Array, mask: chex.Array, reduction: str = "token_mean",
                  scale: Optional[Numeric] = None) -> chex.Array:
  """Reduces per-token values ``[B, T]`` to a scalar (see the module docstring).

  Args:
    x: ``[B, T]`` float.
    mask: ``[B, T]``, nonzero = valid.
    reduction: one of ``REDUCTIONS``.
    scale: the constant divisor of ``"seq_mean_token_sum_norm"`` (default ``T``); ignored
      by the other reductions.

  Returns:
    scalar float32; 0 when no token is valid.
  """
  chex.assert_rank([x, mask], 2)
  chex.assert_equal_shape([x, mask])
  m = (mask != 0).astype(jnp.float32)
  xm = x.astype(jnp.float32) * m
  if reduction == "token_mean":
    return jnp.sum(xm) / jnp.maximum(jnp.sum(m), 1.0)
  if reduction == "token_sum":
    return jnp.sum(xm)
  n = jnp.sum(m, axis=1)
  has = (n > 0).astype(jnp.float32)
  if reduction == "sequence_mean":
    per_seq = jnp.sum(xm, axis=1) / jnp.maximum(n, 1.0)
  elif reduction == "seq_mean_token_sum":
    per_seq = jnp.sum(xm, axis=1)
  elif reduction == "seq_mean_token_sum_norm":
    per_seq = jnp.sum(xm, axis=1) / (x.shape[1] if scale is None else scale)
  else:
    raise ValueError(f"reduction must be one of {REDUCTIONS}; got {reduction!r}.")
  return jnp.sum(per_seq * has) / jnp.maximum(jnp.sum(has), 1.0)


def duration_weights(durations: chex.Array,
                     floor: Numeric = 1.0,
                     cap: Optional[Numeric] = None,
                     mask: Optional[chex.Array] = None) -> chex.Array:
  """Duration-aware gradient weights (RL for MLE agents): execution time over its batch mean.

  ``d_i = min(max(dt_i, floor), cap)``;  ``w_i = d_i / ((1/|M|) sum_{j in M} d_j)`` for
  ``i`` in the valid set ``M`` (all of the batch when ``mask`` is None), ``w_i = 0``
  outside it. So ``mean_M(w) = 1``, and a failed or instant program (``dt ~ 0``) still
  gets weight ``floor / mean`` > 0 instead of ~0. The weights are data
  (``stop_gradient``).

  Args:
    durations: ``[B]`` float, wall-clock execution time of each action (seconds).
    floor: positive lower clamp on durations (same units).
    cap: optional upper clamp (``>= floor``).
    mask: optional ``[B]``, nonzero = sequence in the batch.

  Returns:
    ``[B]`` float32 weights with mean 1 over the valid entries.
  """
  chex.assert_rank(durations, 1)
  if isinstance(floor, (int, float)) and not floor > 0:
    raise ValueError(f"duration_weights floor must be > 0 (got {floor}); a zero floor gives "
                     "instant failures zero weight.")
  if cap is not None and isinstance(cap, (int, float)) and isinstance(floor, (int, float)):
    if cap < floor:
      raise ValueError(f"duration_weights cap ({cap}) must be >= floor ({floor}).")
  d = jnp.maximum(durations.astype(jnp.float32), floor)
  if cap is not None:
    d = jnp.minimum(d, cap)
  if mask is None:
    valid = jnp.ones_like(d)
  else:
    chex.assert_equal_shape([durations, mask])
    valid = (mask != 0).astype(jnp.float32)
  mean = jnp.sum(d * valid) / jnp.maximum(jnp.sum(valid), 1.0)
  return jax.lax.stop_gradient(d * valid / mean)


def policy_loss(logprobs: chex.Array,
                old_logprobs: chex.Array,
                advantages: chex.Array,
                mask: chex.Array,
                weights: Optional[chex.Array] = None,
                clip_eps: float = 0.2,
                clip_eps_high: Optional[float] = None,
                reduction: str = "token_mean",
                clip_ratio_c: Optional[float] = 3.0,
                log_ratio_clamp: Optional[float] = LOG_RATIO_CLAMP,
                scale: Optional[Numeric] = None) -> tuple[chex.Array, dict]:
  """Dual-clip PPO surrogate (verl's ``vanilla`` policy loss), scaled per sequence by its
  duration weight.

  ``x = clip(logp - logp_old, -K, K)`` (``K = log_ratio_clamp``: one stale sample cannot
  put ``inf`` into the loss), ``rho = exp(x)``;
  ``l1 = max(-A rho, -A clip(rho, 1 - eps, 1 + eps_high))`` (clipped PPO);
  dual clip (Ye et al. 2020) for ``A < 0``: ``l = min(l1, -A c)`` with ``c = clip_ratio_c``
  (> 1), so a token whose ratio ran far above 1 no longer pushes without bound; ``l = l1``
  for ``A >= 0`` or ``clip_ratio_c=None``. Then ``l_bt <- w_b l_bt`` and
  loss = ``reduce(l, mask)``. With ``w = duration_weights(dt)`` this is the duration-aware
  gradient ``E[sum_k dt_k grad log pi(a_k|s_k) A_k]`` of the paper (rescaled by the
  batch-mean ``dt``). ``old_logprobs``, ``advantages`` and ``weights`` are data.

  Args:
    logprobs: ``[B, T]`` float, log-probs of the taken tokens under the current policy.
    old_logprobs: ``[B, T]`` float, under the behaviour (sampling) policy.
    advantages: ``[B, T]`` float.
    mask: ``[B, T]``, nonzero = generated token.
    weights: optional ``[B]`` per-sequence weights (e.g. ``duration_weights``).
    clip_eps: lower clip ``eps`` (and upper, unless ``clip_eps_high`` is given).
    clip_eps_high: optional upper clip (decoupled clipping); defaults to ``clip_eps``.
    reduction: one of ``REDUCTIONS``.
    clip_ratio_c: dual-clip bound ``c > 1`` (verl default 3), or None for plain PPO.
    log_ratio_clamp: ``K`` (verl: 20), or None for no clamp.
    scale: divisor of ``"seq_mean_token_sum_norm"``.

  Returns:
    ``(loss, aux)``: scalar float32 loss and a dict of scalar metrics over valid tokens:
    ``pg_loss`` (unweighted surrogate), ``clip_frac`` (fraction of tokens where the
    clipped term is the active one; verl ``pg_clipfrac``), ``clip_frac_lower`` (fraction
    where the dual clip binds; verl ``pg_clipfrac_lower``), ``approx_kl`` (k3 estimate of
    KL(old || new)), ``approx_kl_k1`` (verl ``ppo_kl``), ``ratio_mean``, ``ratio_min``,
    ``ratio_max`` (of the clamped ratio).
  """
  chex.assert_rank([logprobs, old_logprobs, advantages, mask], 2)
  chex.assert_equal_shape([logprobs, old_logprobs, advantages, mask])
  chex.assert_type([logprobs, old_logprobs, advantages], float)
  if clip_ratio_c is not None and isinstance(clip_ratio_c, (int, float)) and clip_ratio_c <= 1:
    raise ValueError(f"clip_ratio_c must be > 1 for dual-clip PPO (verl's default is 3), or "
                     f"None to turn it off; got {clip_ratio_c}.")
  eps_high = clip_eps if clip_eps_high is None else clip_eps_high
  old = jax.lax.stop_gradient(old_logprobs.astype(jnp.float32))
  adv = jax.lax.stop_gradient(advantages.astype(jnp.float32))
  valid = mask != 0
  log_ratio = jnp.where(valid, logprobs.astype(jnp.float32) - old, 0.0)
  if log_ratio_clamp is not None:
    log_ratio = jnp.clip(log_ratio, -log_ratio_clamp, log_ratio_clamp)
  ratio = jnp.exp(log_ratio)
  unclipped = -adv * ratio
  clipped = -adv * jnp.clip(ratio, 1.0 - clip_eps, 1.0 + eps_high)
  per_token = jnp.maximum(unclipped, clipped)
  sg = jax.lax.stop_gradient
  dual_frac = jnp.zeros((), jnp.float32)
  if clip_ratio_c is not None:
    bound = -adv * clip_ratio_c
    dual_frac = reduce_tokens(((sg(per_token) > sg(bound)) & (adv < 0)).astype(jnp.float32),
                              mask)
    per_token = jnp.where(adv < 0, jnp.minimum(per_token, bound), per_token)
  weighted = per_token
  if weights is not None:
    chex.assert_rank(weights, 1)
    chex.assert_equal_shape_prefix([weights, logprobs], 1)
    weighted = per_token * jax.lax.stop_gradient(weights.astype(jnp.float32))[:, None]
  loss = reduce_tokens(weighted, mask, reduction, scale)

  lr, r = sg(log_ratio), sg(ratio)
  big = jnp.finfo(jnp.float32).max
  aux = {
      "pg_loss": reduce_tokens(sg(per_token), mask, reduction, scale),
      "clip_frac": reduce_tokens((sg(clipped) > sg(unclipped)).astype(jnp.float32), mask),
      "clip_frac_lower": dual_frac,
      "approx_kl": reduce_tokens(r - 1.0 - lr, mask),
      "approx_kl_k1": reduce_tokens(-lr, mask),
      "ratio_mean": reduce_tokens(r, mask),
      "ratio_min": jnp.min(jnp.where(valid, r, big)),
      "ratio_max": jnp.max(jnp.where(valid, r, -big)),
  }
  return loss, aux


def value_loss(values: chex.Array,
               old_values: chex.Array,
               returns: chex.Array,
               mask: chex.Array,
               clip_eps: Optional[float] = 0.2,
               reduction: str = "token_mean",
               scale: Optional[Numeric] = None) -> tuple[chex.Array, dict]:
  """Clipped value loss of PPO.

  ``v_clip = v_old + clip(v - v_old, -eps, eps)``;
  ``l_bt = 0.5 * max((v - R)^2, (v_clip - R)^2)`` (``0.5 (v - R)^2`` when ``clip_eps`` is
  None); loss = ``reduce(l, mask)``. ``old_values`` and ``returns`` are data.

  Args:
    values: ``[B, T]`` float, current critic.
    old_values: ``[B, T]`` float, critic at collection time.
    returns: ``[B, T]`` float, targets (e.g. GAE returns).
    mask: ``[B, T]``.
    clip_eps: clip range, or None for the plain squared error.
    reduction: one of ``REDUCTIONS``.
    scale: divisor of ``"seq_mean_token_sum_norm"``.

  Returns:
    ``(loss, aux)``: scalar loss; aux has ``vf_clip_frac`` and ``explained_variance``
    (``1 - Var_M(R - v) / Var_M(R)``).
  """
  chex.assert_rank([values, old_values, returns, mask], 2)
  chex.assert_equal_shape([values, old_values, returns, mask])
  chex.assert_type([values, old_values, returns], float)
  v = values.astype(jnp.float32)
  old = jax.lax.stop_gradient(old_values.astype(jnp.float32))
  ret = jax.lax.stop_gradient(returns.astype(jnp.float32))
  err = jnp.square(v - ret)
  if clip_eps is None:
    per_token = 0.5 * err
    clip_frac = jnp.zeros((), jnp.float32)
  else:
    v_clip = old + jnp.clip(v - old, -clip_eps, clip_eps)
    err_clip = jnp.square(v_clip - ret)
    per_token = 0.5 * jnp.maximum(err, err_clip)
    clip_frac = reduce_tokens(jax.lax.stop_gradient(err_clip > err).astype(jnp.float32), mask)
  loss = reduce_tokens(per_token, mask, reduction, scale)
  resid = jax.lax.stop_gradient(ret - v)
  var = lambda x: reduce_tokens(jnp.square(x - reduce_tokens(x, mask)), mask)
  explained = 1.0 - var(resid) / jnp.maximum(var(ret), 1e-8)
  return loss, {"vf_clip_frac": clip_frac, "explained_variance": explained}


def entropy_from_logits(logits: chex.Array, mask: Optional[chex.Array] = None) -> chex.Array:
  """Per-token entropy ``H_bt = -sum_v p_btv log p_btv`` of ``softmax(logits)``.

  Materializes ``[B, T, V]``; for a large vocabulary use
  ``chunked_token_logprobs(..., return_entropy=True)``.

  Args:
    logits: ``[B, T, V]`` float.
    mask: optional ``[B, T]``; zeros the result at masked positions.

  Returns:
    ``[B, T]`` float32.
  """
  chex.assert_rank(logits, 3)
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  ent = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
  if mask is not None:
    chex.assert_shape(mask, logits.shape[:2])
    ent = jnp.where(mask != 0, ent, 0.0)
  return ent


def _chunk_logprobs(hidden: chex.Array, kernel: chex.Array, targets: chex.Array,
                    temperature: Numeric) -> tuple[chex.Array, chex.Array]:
  """``[B, C, D], [D, V], [B, C] -> ([B, C], [B, C])``: target log-prob and entropy."""
  z = dense(hidden, kernel, f32_out=True)   # [B, C, V] float32; see models/linear.py
  z = z / temperature
  # log p(y) = z_y - logsumexp(z) and H = logsumexp(z) - sum_v p_v z_v: no [B, C, V]
  # log-softmax buffer (one pass fewer over the logits, forward and backward).
  lse = jax.nn.logsumexp(z, axis=-1)
  tok = jnp.take_along_axis(z, targets[..., None], axis=-1, mode="clip")[..., 0] - lse
  ent = lse - jnp.sum(jnp.exp(z - lse[..., None]) * z, axis=-1)
  return tok, ent


def chunked_token_logprobs(hidden: chex.Array,
                           lm_head_kernel: chex.Array,
                           targets: chex.Array,
                           chunk_size: int = 128,
                           temperature: Numeric = 1.0,
                           return_entropy: bool = False):
  """Log-probs of the target tokens from hidden states, never forming ``[B, T, V]`` logits.

  ``logp_bt = log softmax(h_bt W / tau)[y_bt]`` and, optionally,
  ``H_bt = -sum_v p_btv log p_btv``. The sequence is cut into chunks of ``chunk_size``
  positions (padded at the end); ``jax.lax.map`` runs one chunk at a time and
  ``jax.checkpoint`` makes the backward pass recompute each chunk's logits, so the
  largest logits buffer, forward and backward, is ``[B, chunk_size, V]`` (float32).

  Args:
    hidden: ``[B, T, D]`` float, final hidden states (after the last norm).
    lm_head_kernel: ``[D, V]`` float (for tied embeddings pass ``embedding.T``).
    targets: ``[B, T]`` int32 token ids (out-of-range ids are clipped).
    chunk_size: positions per chunk (``>= 1``).
    temperature: the sampling temperature ``tau`` (> 0).
    return_entropy: also return the per-token entropy.

  Returns:
    ``[B, T]`` float32 log-probs, or ``([B, T], [B, T])`` with the entropy.
  """
  chex.assert_rank([hidden, lm_head_kernel, targets], [3, 2, 2])
  chex.assert_type(targets, int)
  chex.assert_equal_shape_prefix([hidden, targets], 2)
  if hidden.shape[-1] != lm_head_kernel.shape[0]:
    raise ValueError(f"hidden size {hidden.shape[-1]} does not match lm_head_kernel rows "
                     f"{lm_head_kernel.shape[0]}; pass the kernel as [D, V].")
  if not (isinstance(chunk_size, int) and chunk_size >= 1):
    raise ValueError(f"chunk_size must be a positive int; got {chunk_size!r}.")
  b, t, d = hidden.shape
  c = min(chunk_size, t)
  n = -(-t // c)
  pad = n * c - t
  h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
  y = jnp.pad(targets.astype(jnp.int32), ((0, 0), (0, pad)))
  body = functools.partial(_chunk_logprobs, kernel=lm_head_kernel, temperature=temperature)
  if n == 1:
    # One chunk holds the whole sequence (c == t, no padding): its logits are the largest
    # buffer either way, so keep them for the backward pass instead of recomputing them.
    tok, ent = body(h, targets=y)
  else:
    h = h.reshape(b, n, c, d).transpose(1, 0, 2, 3)  # [n, B, C, D]
    y = y.reshape(b, n, c).transpose(1, 0, 2)  # [n, B, C]
    body = jax.checkpoint(body)
    tok, ent = jax.lax.map(lambda xs: body(xs[0], targets=xs[1]), (h, y))  # [n, B, C] each
    tok, ent = (x.transpose(1, 0, 2).reshape(b, n * c)[:, :t] for x in (tok, ent))
  if return_entropy:
    return tok, ent
  return tok
