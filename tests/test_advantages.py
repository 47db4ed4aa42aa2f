"""Tests of mle_rl.rl.advantages against plain NumPy loops (chex variants: jit / no jit)."""

import chex
import numpy as np
from absl.testing import parameterized

from mle_rl.rl import advantages


def _gae_reference(r, v, m, gamma, lam, bootstrap=None):
  """Loop over each row's valid positions, latest first."""
  b, t = r.shape
  gamma = np.broadcast_to(gamma, (b, t))
  lam = np.broadcast_to(lam, (b, t))
  adv = np.zeros((b, t))
  for i in range(b):
    next_v = 0.0 if bootstrap is None else bootstrap[i]
    next_a = 0.0
    for j in reversed(range(t)):
      if not m[i, j]:
        continue
      delta = r[i, j] + gamma[i, j] * next_v - v[i, j]
      adv[i, j] = delta + gamma[i, j] * lam[i, j] * next_a
      next_v, next_a = v[i, j], adv[i, j]
  ret = np.where(m, adv + v, 0.0)
  return adv, ret


def _batch(seed=0, b=3, t=7):
  rng = np.random.default_rng(seed)
  r = rng.normal(size=(b, t)).astype(np.float32)
  v = rng.normal(size=(b, t)).astype(np.float32)
  m = np.ones((b, t), np.float32)
  m[0, 5:] = 0          # right padding
  m[1, :2] = 0          # left padding (prompt)
  m[2, 3] = 0           # a hole (environment observation)
  return r, v, m


class GaeTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters((1.0, 0.95), (0.9, 1.0), (0.99, 0.0))
  def test_matches_reference_scalar_discounts(self, gamma, lam):
    r, v, m = _batch()
    fn = self.variant(lambda r, v, m: advantages.gae(r, v, m, gamma, lam))
    adv, ret = fn(r, v, m)
    ref_adv, ref_ret = _gae_reference(r, v, m, gamma, lam)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-5, atol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  def test_matches_reference_per_step_discounts_and_bootstrap(self):
    r, v, m = _batch(seed=1)
    rng = np.random.default_rng(2)
    gamma = rng.uniform(0.5, 1.0, size=r.shape).astype(np.float32)
    lam = rng.uniform(0.0, 1.0, size=r.shape).astype(np.float32)
    boot = rng.normal(size=(r.shape[0],)).astype(np.float32)
    adv, ret = self.variant(advantages.gae)(r, v, m, gamma, lam, bootstrap_value=boot)
    ref_adv, ref_ret = _gae_reference(r, v, m, gamma, lam, boot)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-5, atol=1e-5)

  def test_lambda_one_gamma_one_gives_monte_carlo_return(self):
    r, v, m = _batch(seed=3)
    adv, ret = advantages.gae(r, v, m, 1.0, 1.0)
    # Return-to-go over valid tokens only.
    rm = r * m
    rtg = np.cumsum(rm[:, ::-1], axis=1)[:, ::-1]
    np.testing.assert_allclose(ret, np.where(m > 0, rtg, 0.0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(adv, np.where(m > 0, rtg - v, 0.0), rtol=1e-5, atol=1e-5)

  def test_bad_gamma_shape_is_explained(self):
    r, v, m = _batch()
    with self.assertRaisesRegex(ValueError, "gamma must be a scalar"):
      advantages.gae(r, v, m, np.ones((2, 2)), 0.9)


class RewardPlacementTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_place_sequence_reward(self):
    m = np.array([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 0, 1, 0, 0], [0, 0, 0, 0, 0]],
                 np.float32)
    seq = np.array([1.0, -2.0, 3.0, 4.0], np.float32)
    out = self.variant(advantages.place_sequence_reward)(seq, m)
    ref = np.zeros_like(m)
    ref[0, 2], ref[1, 4], ref[2, 2] = 1.0, -2.0, 3.0  # row 3 has no token: reward dropped
    np.testing.assert_array_equal(out, ref)

  @chex.variants(with_jit=True, without_jit=True)
  def test_token_rewards_with_kl(self):
    rng = np.random.default_rng(0)
    m = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], np.float32)
    seq = np.array([0.5, -1.0], np.float32)
    kl = rng.normal(size=m.shape).astype(np.float32)
    out = self.variant(
        lambda s, mm, k: advantages.token_rewards(s, mm, kl=k, kl_coef=0.1))(seq, m, kl)
    ref = -0.1 * kl * m
    ref[0, 2] += 0.5
    ref[1, 3] += -1.0
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)

  def test_last_token_index(self):
    m = np.array([[1, 1, 0], [0, 0, 0], [0, 1, 1]])
    np.testing.assert_array_equal(advantages.last_token_index(m), [1, -1, 2])

  def test_sequence_scores_and_broadcast(self):
    r = np.array([[0.0, 1.0, 5.0], [2.0, -1.0, 0.0]], np.float32)
    m = np.array([[1, 1, 0], [1, 1, 1]], np.float32)
    np.testing.assert_allclose(advantages.sequence_scores(r, m), [1.0, 1.0])
    out = advantages.broadcast_sequence_advantage(np.array([2.0, -3.0], np.float32), m)
    np.testing.assert_allclose(out, [[2.0, 2.0, 0.0], [-3.0, -3.0, -3.0]])


class WhitenTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(shift_mean=(True, False), unbiased=(True, False))
  def test_matches_reference(self, shift_mean, unbiased):
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, size=(4, 6)).astype(np.float32)
    m = (rng.uniform(size=x.shape) > 0.3).astype(np.float32)
    out = self.variant(lambda x, m: advantages.whiten(x, m, shift_mean=shift_mean,
                                                      unbiased=unbiased))(x, m)
    vals = x[m > 0]
    ddof = 1 if unbiased else 0            # verl's masked_whiten: unbiased (ddof=1)
    ref = (x - vals.mean()) / np.sqrt(vals.var(ddof=ddof) + 1e-8)
    if not shift_mean:
      ref = ref + vals.mean()
    np.testing.assert_allclose(out, np.where(m > 0, ref, 0.0), rtol=1e-5, atol=1e-5)
    if shift_mean:
      sel = np.asarray(out)[m > 0]
      self.assertAlmostEqual(float(sel.mean()), 0.0, places=5)
      self.assertAlmostEqual(float(sel.std(ddof=ddof)), 1.0, places=4)

  def test_default_is_unbiased_like_verl(self):
    x = np.array([[1.0, 2.0, 1e6]], np.float32)
    m = np.array([[1, 1, 0]], np.float32)
    # mean 1.5, unbiased variance 0.5: (x - 1.5) / sqrt(0.5); masked entries stay out.
    np.testing.assert_allclose(advantages.whiten(x, m), [[-0.70710677, 0.70710677, 0.0]],
                               atol=1e-4)
    np.testing.assert_allclose(advantages.whiten(x, m, unbiased=False), [[-1.0, 1.0, 0.0]],
                               atol=1e-4)

  def test_single_valid_entry_is_finite(self):
    out = advantages.whiten(np.array([[3.0, 0.0]], np.float32), np.array([[1, 0]], np.float32))
    self.assertTrue(np.isfinite(np.asarray(out)).all())
