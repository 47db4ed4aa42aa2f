"""Tests of mle_rl.rl.losses against NumPy references (chex variants: jit / no jit)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from mle_rl.rl import losses


def _reduce_ref(x, m, reduction):
  if reduction == "token_mean":
    return (x * m).sum() / max(m.sum(), 1.0)
  n = m.sum(1)
  per = (x * m).sum(1) / np.maximum(n, 1.0)
  return per[n > 0].mean()


def _batch(seed=0, b=4, t=6):
  rng = np.random.default_rng(seed)
  lp = rng.normal(-1.0, 0.3, size=(b, t)).astype(np.float32)
  old = (lp + rng.normal(0.0, 0.3, size=(b, t))).astype(np.float32)
  adv = rng.normal(size=(b, t)).astype(np.float32)
  m = np.ones((b, t), np.float32)
  m[0, 4:] = 0
  m[2, :1] = 0
  m[3, 2:] = 0
  return lp, old, adv, m


class DurationWeightsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_matches_reference_and_mean_one(self):
    dt = np.array([0.0, 0.3, 2.0, 10.0, 50.0], np.float32)  # a zero-duration failure first
    w = self.variant(lambda d: losses.duration_weights(d, floor=1.0, cap=20.0))(dt)
    d = np.clip(dt, 1.0, 20.0)
    np.testing.assert_allclose(w, d / d.mean(), rtol=1e-6)
    self.assertAlmostEqual(float(np.mean(w)), 1.0, places=6)
    self.assertGreater(float(w[0]), 0.0)  # the instant failure keeps a nonzero weight

  @chex.variants(with_jit=True, without_jit=True)
  def test_mask_excludes_entries(self):
    dt = np.array([1.0, 3.0, 100.0, 2.0], np.float32)
    mask = np.array([1, 1, 0, 1], np.float32)
    w = self.variant(lambda d, m: losses.duration_weights(d, floor=0.5, mask=m))(dt, mask)
    np.testing.assert_allclose(w, [0.5, 1.5, 0.0, 1.0], rtol=1e-6)

  def test_bad_floor_and_cap_are_explained(self):
    with self.assertRaisesRegex(ValueError, "floor must be > 0"):
      losses.duration_weights(jnp.ones(3), floor=0.0)
    with self.assertRaisesRegex(ValueError, "cap .* must be >= floor"):
      losses.duration_weights(jnp.ones(3), floor=2.0, cap=1.0)


def _policy_loss_ref(lp, old, adv, m, w, eps, reduction):
  ratio = np.exp(lp - old)
  per = np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - eps, 1 + eps))
  if w is not None:
    per = per * w[:, None]
  return _reduce_ref(per, m, reduction), ratio


def _policy_grad_ref(lp, old, adv, m, w, eps, reduction):
  """d loss / d logprobs by hand: the unclipped branch is active unless clipping binds."""
  ratio = np.exp(lp - old)
  clipped_active = ((adv > 0) & (ratio > 1 + eps)) | ((adv < 0) & (ratio < 1 - eps))
  g = np.where(clipped_active, 0.0, -adv * ratio)
  if w is not None:
    g = g * w[:, None]
  if reduction == "token_mean":
    return g * m / m.sum()
  n = m.sum(1, keepdims=True)
  return g * m / np.maximum(n, 1.0) / (m.sum(1) > 0).sum()


class PolicyLossTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(reduction=("token_mean", "sequence_mean"), weighted=(True, False))
  def test_value_and_grad_match_reference(self, reduction, weighted):
    lp, old, adv, m = _batch()
    w = np.array([0.5, 2.0, 1.0, 0.5], np.float32) if weighted else None

    def f(lp, old, adv, m, w):
      return losses.policy_loss(lp, old, adv, m, weights=w, clip_eps=0.2, reduction=reduction)

    (loss, aux), grad = self.variant(jax.value_and_grad(f, has_aux=True))(lp, old, adv, m, w)
    ref, ratio = _policy_loss_ref(lp, old, adv, m, w, 0.2, reduction)
    np.testing.assert_allclose(loss, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        grad, _policy_grad_ref(lp, old, adv, m, w, 0.2, reduction), rtol=1e-5, atol=1e-6)
    valid = m > 0
    np.testing.assert_allclose(aux["ratio_mean"], ratio[valid].mean(), rtol=1e-5)
    np.testing.assert_allclose(aux["ratio_max"], ratio[valid].max(), rtol=1e-5)
    np.testing.assert_allclose(aux["ratio_min"], ratio[valid].min(), rtol=1e-5)
    clip_active = np.maximum(-adv * ratio, -adv * np.clip(ratio, 0.8, 1.2)) > -adv * ratio
    np.testing.assert_allclose(aux["clip_frac"], clip_active[valid].mean(), rtol=1e-5)
    log_r = lp - old
    np.testing.assert_allclose(aux["approx_kl"], (np.exp(log_r) - 1 - log_r)[valid].mean(),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(aux["approx_kl_k1"], (-log_r)[valid].mean(), rtol=1e-4,
                               atol=1e-6)

  def test_on_policy_gradient_is_minus_advantage(self):
    lp, _, adv, m = _batch(seed=1)
    grad = jax.grad(lambda x: losses.policy_loss(x, x, adv, m)[0])(lp)
    np.testing.assert_allclose(grad, -adv * m / m.sum(), rtol=1e-5, atol=1e-7)

  def test_bad_reduction_is_explained(self):
    lp, old, adv, m = _batch()
    with self.assertRaisesRegex(ValueError, "reduction must be one of"):
      losses.policy_loss(lp, old, adv, m, reduction="sum")


class ValueLossTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters("token_mean", "sequence_mean")
  def test_matches_reference(self, reduction):
    rng = np.random.default_rng(0)
    _, _, _, m = _batch()
    v = rng.normal(size=m.shape).astype(np.float32)
    old = (v + rng.normal(0, 0.5, size=m.shape)).astype(np.float32)
    ret = rng.normal(size=m.shape).astype(np.float32)
    fn = self.variant(lambda *a: losses.value_loss(*a, clip_eps=0.2, reduction=reduction))
    loss, aux = fn(v, old, ret, m)
    vc = old + np.clip(v - old, -0.2, 0.2)
    per = 0.5 * np.maximum((v - ret) ** 2, (vc - ret) ** 2)
    np.testing.assert_allclose(loss, _reduce_ref(per, m, reduction), rtol=1e-5)
    valid = m > 0
    np.testing.assert_allclose(aux["vf_clip_frac"],
                               ((vc - ret) ** 2 > (v - ret) ** 2)[valid].mean(), rtol=1e-5)
    ev = 1 - np.var((ret - v)[valid]) / np.var(ret[valid])
    np.testing.assert_allclose(aux["explained_variance"], ev, rtol=1e-4)

  def test_unclipped(self):
    v = jnp.array([[1.0, 2.0]])
    loss, _ = losses.value_loss(v, v + 5.0, jnp.zeros_like(v), jnp.ones_like(v), clip_eps=None)
    np.testing.assert_allclose(loss, 0.5 * (1 + 4) / 2, rtol=1e-6)


class KlAndEntropyTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters("k1", "k2", "k3")
  def test_kl_matches_reference(self, kind):
    lp, ref, _, m = _batch(seed=2)
    out = self.variant(lambda a, b, mm: losses.kl_penalty(a, b, kind=kind, mask=mm))(lp, ref, m)
    x = lp - ref
    expect = {"k1": x, "k2": 0.5 * x * x, "k3": np.exp(-x) - 1 + x}[kind]
    np.testing.assert_allclose(out, expect * m, rtol=1e-5, atol=1e-6)

  @parameterized.parameters("k1", "k3")
  def test_unbiased_estimators_average_to_exact_kl(self, kind):
    # E_{x~p}[k(x)] over a whole categorical distribution equals KL(p || q) exactly.
    rng = np.random.default_rng(0)
    logp = np.log(rng.dirichlet(np.ones(7))).astype(np.float32)[None, :]
    logq = np.log(rng.dirichlet(np.ones(7))).astype(np.float32)[None, :]
    # Without verl's k3 clamps (they bind here: a tiny q gives k3 > 10), as they bias it.
    kl_tokens = losses.kl_penalty(jnp.asarray(logp), jnp.asarray(logq), kind=kind, clamp=False)
    expected = float(np.sum(np.exp(logp) * np.asarray(kl_tokens)))
    exact = float(np.sum(np.exp(logp) * (logp - logq)))
    self.assertAlmostEqual(expected, exact, places=5)

  def test_bad_kind_is_explained(self):
    with self.assertRaisesRegex(ValueError, "kind must be one of"):
      losses.kl_penalty(jnp.zeros((1, 2)), jnp.zeros((1, 2)), kind="k4")

  @chex.variants(with_jit=True, without_jit=True)
  def test_entropy_from_logits(self):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 11)).astype(np.float32)
    m = np.array([[1, 1, 0], [1, 0, 0]], np.float32)
    out = self.variant(losses.entropy_from_logits)(logits, m)
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(out, -(p * np.log(p)).sum(-1) * m, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- chunked log-probs


def _naive_logprobs(h, w, y, temperature=1.0):
  logp = jax.nn.log_softmax(jnp.einsum("btd,dv->btv", h, w) / temperature, axis=-1)
  tok = jnp.take_along_axis(logp, y[..., None], axis=-1)[..., 0]
  return tok, -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def _all_shapes(closed_jaxpr):
  """Shapes of every intermediate in a jaxpr, recursing into scan/remat/pjit bodies."""
  shapes = []

  def walk(jaxpr):
    for eqn in jaxpr.eqns:
      shapes.extend(tuple(getattr(v.aval, "shape", ())) for v in eqn.outvars)
      for param in eqn.params.values():
        for sub in param if isinstance(param, (list, tuple)) else (param,):
          if hasattr(sub, "eqns"):
            walk(sub)
          elif hasattr(getattr(sub, "jaxpr", None), "eqns"):
            walk(sub.jaxpr)

  walk(closed_jaxpr.jaxpr)
  return shapes


B, T, D, V, C = 2, 16, 8, 64, 4


def _inputs(seed=0):
  rng = np.random.default_rng(seed)
  h = rng.normal(size=(B, T, D)).astype(np.float32)
  w = (rng.normal(size=(D, V)) / np.sqrt(D)).astype(np.float32)
  y = rng.integers(0, V, size=(B, T)).astype(np.int32)
  return h, w, y


class ChunkedLogprobsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters((4, 1.0), (5, 0.7), (64, 1.0))  # 5 does not divide T: padding
  def test_values_match_naive(self, chunk, temperature):
    h, w, y = _inputs()
    fn = self.variant(lambda h, w, y: losses.chunked_token_logprobs(
        h, w, y, chunk_size=chunk, temperature=temperature, return_entropy=True))
    tok, ent = fn(h, w, y)
    ref_tok, ref_ent = _naive_logprobs(h, w, y, temperature)
    np.testing.assert_allclose(tok, ref_tok, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ent, ref_ent, rtol=1e-5, atol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(C, 4 * T)  # several chunks (recomputed); one chunk (kept)
  def test_gradients_match_naive(self, chunk):
    h, w, y = _inputs(1)
    coef = np.random.default_rng(2).normal(size=(B, T)).astype(np.float32)

    def loss(fn):
      def f(h, w):
        tok, ent = fn(h, w)
        return jnp.sum(coef * tok) + 0.1 * jnp.sum(ent)
      return f

    chunked = loss(lambda h, w: losses.chunked_token_logprobs(
        h, w, y, chunk_size=chunk, return_entropy=True))
    naive = loss(lambda h, w: _naive_logprobs(h, w, y))
    gh, gw = self.variant(jax.grad(chunked, argnums=(0, 1)))(h, w)
    rh, rw = jax.grad(naive, argnums=(0, 1))(h, w)
    np.testing.assert_allclose(gh, rh, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gw, rw, rtol=1e-4, atol=1e-5)

  def test_no_full_logits_in_forward_or_backward_jaxpr(self):
    h, w, y = _inputs()
    full = B * T * V

    def largest(fn):
      jaxpr = jax.make_jaxpr(jax.value_and_grad(
          lambda h, w: jnp.sum(fn(h, w)), argnums=(0, 1)))(h, w)
      return max(int(np.prod(s)) for s in _all_shapes(jaxpr))

    # Positive control: the naive computation does form [B, T, V].
    self.assertGreaterEqual(largest(lambda h, w: _naive_logprobs(h, w, y)[0]), full)
    chunked_max = largest(lambda h, w: losses.chunked_token_logprobs(h, w, y, chunk_size=C))
    self.assertLess(chunked_max, full)
    self.assertLessEqual(chunked_max, max(B * C * V, D * V, B * T * D))

  def test_compiled_temp_memory_is_below_full_logits(self):
    b, t, d, v = 2, 256, 16, 4096
    h = jnp.zeros((b, t, d), jnp.float32)
    w = jnp.zeros((d, v), jnp.float32)
    y = jnp.zeros((b, t), jnp.int32)
    f = jax.jit(jax.grad(lambda h, w: jnp.sum(
        losses.chunked_token_logprobs(h, w, y, chunk_size=16)), argnums=(0, 1)))
    stats = f.lower(h, w).compile().memory_analysis()
    if stats is None:
      pytest.skip("this backend gives no compiled memory analysis (the jaxpr test still ran)")
    full_logits_bytes = b * t * v * 4
    self.assertLess(stats.temp_size_in_bytes, full_logits_bytes / 2)
    # Positive control: one chunk spanning the sequence does hold the full logits.
    g = jax.jit(jax.grad(lambda h, w: jnp.sum(
        losses.chunked_token_logprobs(h, w, y, chunk_size=t)), argnums=(0, 1)))
    self.assertGreaterEqual(g.lower(h, w).compile().memory_analysis().temp_size_in_bytes,
                            full_logits_bytes)

  def test_mismatched_kernel_is_explained(self):
    h, w, y = _inputs()
    with self.assertRaisesRegex(ValueError, "pass the kernel as"):
      losses.chunked_token_logprobs(h, w.T, y)


def _verl_pg_ref(lp, old, adv, m, w, eps_lo, eps_hi, c, reduction, scale=None):
  """verl 0.8 `compute_policy_loss_vanilla` (+ per-sequence weights) and verl 0.9's `agg_loss`,
  in NumPy:
  per-token loss, its gradient by hand, clip fractions."""
  x = np.clip(lp - old, -20.0, 20.0)
  inside = np.abs(lp - old) <= 20.0
  ratio = np.exp(x)
  l1, l2 = -adv * ratio, -adv * np.clip(ratio, 1 - eps_lo, 1 + eps_hi)
  clip1 = np.maximum(l1, l2)
  l3 = -adv * c
  per = np.where(adv < 0, np.minimum(l3, clip1), clip1)
  clipped = ((adv > 0) & (ratio > 1 + eps_hi)) | ((adv < 0) & (ratio < 1 - eps_lo))
  dual = (adv < 0) & (clip1 > l3)
  g = np.where(clipped | dual | ~inside, 0.0, -adv * ratio)
  if w is not None:
    per, g = per * w[:, None], g * w[:, None]
  n = m.sum(1)
  if reduction == "token_mean":
    loss, dg = (per * m).sum() / m.sum(), m / m.sum()
  elif reduction == "sequence_mean":
    loss = ((per * m).sum(1) / np.maximum(n, 1))[n > 0].mean()
    dg = m / np.maximum(n, 1)[:, None] / (n > 0).sum()
  elif reduction == "seq_mean_token_sum":
    loss, dg = (per * m).sum(1)[n > 0].mean(), m / (n > 0).sum()
  elif reduction == "seq_mean_token_sum_norm":     # verl 0.9: seq-mean of token sums / scale
    s = m.shape[1] if scale is None else scale
    loss, dg = (per * m).sum(1)[n > 0].mean() / s, m / (n > 0).sum() / s
  else:
    loss, dg = (per * m).sum(), m
  frac = lambda b: b[m > 0].mean()
  return loss, g * dg, frac(l2 > l1), frac(dual)


class DualClipPolicyLossTest(chex.TestCase):

  def _wide_batch(self, seed=4):
    """Ratios spread far from 1, so the dual clip and both PPO clips bind somewhere."""
    lp, _, adv, m = _batch(seed=seed, b=5, t=7)
    rng = np.random.default_rng(seed)
    old = (lp + rng.normal(0.0, 1.5, size=lp.shape)).astype(np.float32)
    m[4] = 0                                                  # an empty sequence
    return lp, old, adv, m

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(reduction=losses.REDUCTIONS, weighted=(True, False))
  def test_value_grad_and_fractions_match_verl(self, reduction, weighted):
    lp, old, adv, m = self._wide_batch()
    w = np.array([0.5, 2.0, 1.0, 0.5, 1.0], np.float32) if weighted else None

    def f(lp):
      return losses.policy_loss(lp, old, adv, m, weights=w, clip_eps=0.2, clip_eps_high=0.28,
                                clip_ratio_c=3.0, reduction=reduction, scale=16.0)

    (loss, aux), grad = self.variant(jax.value_and_grad(f, has_aux=True))(lp)
    ref, gref, frac, frac_lower = _verl_pg_ref(lp, old, adv, m, w, 0.2, 0.28, 3.0, reduction,
                                               scale=16.0)
    self.assertGreater(frac_lower, 0.0)                       # the dual clip does bind
    np.testing.assert_allclose(loss, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, gref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(aux["clip_frac"], frac, rtol=1e-6)
    np.testing.assert_allclose(aux["clip_frac_lower"], frac_lower, rtol=1e-6)

  def test_dual_clip_off_is_plain_ppo(self):
    lp, old, adv, m = self._wide_batch()
    a, _ = losses.policy_loss(lp, old, adv, m, clip_ratio_c=None)
    b, _ = losses.policy_loss(lp, old, adv, m, clip_ratio_c=1e9)
    ref, _ = _policy_loss_ref(lp, old, adv, m, None, 0.2, "token_mean")
    np.testing.assert_allclose([a, b], [ref, ref], rtol=1e-5)

  def test_log_ratio_clamp_keeps_a_stale_sample_finite(self):
    lp, old, adv, m = _batch(seed=5)
    old = old.copy()
    old[0, 0] = -np.inf                                       # a stale / broken sample
    old[1, 1] = -300.0
    adv[0, 0], adv[1, 1] = -1.0, -2.0
    for c in (3.0, None):
      f = lambda x: losses.policy_loss(x, old, adv, m, clip_ratio_c=c)
      (loss, aux), g = jax.value_and_grad(f, has_aux=True)(lp)
      self.assertTrue(np.isfinite(float(loss)) and np.isfinite(np.asarray(g)).all())
      self.assertEqual(float(g[0, 0]), 0.0)                   # clamped: no gradient there
      np.testing.assert_allclose(aux["ratio_max"], np.exp(20.0), rtol=1e-5)
    unclamped, _ = losses.policy_loss(lp, old, adv, m, clip_ratio_c=None, log_ratio_clamp=None)
    self.assertFalse(np.isfinite(float(unclamped)))           # what the clamp prevents

  def test_bad_clip_ratio_c_is_explained(self):
    lp, old, adv, m = _batch()
    with self.assertRaisesRegex(ValueError, "clip_ratio_c must be > 1"):
      losses.policy_loss(lp, old, adv, m, clip_ratio_c=1.0)


class ReductionTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(*losses.REDUCTIONS)
  def test_reductions_match_verl_agg_loss(self, reduction):
    rng = np.random.default_rng(6)
    x = rng.normal(size=(4, 5)).astype(np.float32)
    m = (rng.uniform(size=x.shape) > 0.4).astype(np.float32)
    m[2] = 0
    out = self.variant(lambda x, m: losses.reduce_tokens(x, m, reduction))(x, m)
    xm, n = x * m, m.sum(1)
    ref = {"token_mean": xm.sum() / m.sum(),
           "sequence_mean": (xm.sum(1) / np.maximum(n, 1))[n > 0].mean(),
           "seq_mean_token_sum": xm.sum(1)[n > 0].mean(),
           "seq_mean_token_sum_norm": xm.sum(1)[n > 0].mean() / x.shape[1],
           "token_sum": xm.sum()}[reduction]
    np.testing.assert_allclose(out, ref, rtol=1e-5)

  def test_seq_mean_token_sum_norm_is_verl_09(self):
    """verl 0.9.1 `agg_loss(seq-mean-token-sum-norm)`: masked_sum(seq_losses, seq_mask) /
    global_batch_size (the non-empty sequences) / loss_scale_factor; verl 0.8 divided the
    plain sum by the factor, |S| times more."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    m = np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], np.float32)
    seq = (x * m).sum(1)                                  # [1, 0, 38]
    out = losses.reduce_tokens(x, m, "seq_mean_token_sum_norm", scale=8.0)
    np.testing.assert_allclose(out, (seq[0] + seq[2]) / 2 / 8.0, rtol=1e-6)
