"""mle_rl.rl.kl against NumPy references: clamped k3, the batch KL, the adaptive controller."""

import chex
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized

from mle_rl.rl import kl as rl_kl
from mle_rl.rl import losses


class K3ClampTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_k3_is_clamped_like_verl_low_var_kl(self):
    lp = np.array([[-1.0, -50.0, -0.2, 0.0]], np.float32)
    ref = np.array([[-1.3, -0.1, -40.0, -np.inf]], np.float32)
    out = self.variant(lambda a, b: rl_kl.kl_penalty(a, b, kind="k3"))(lp, ref)
    d = np.clip(ref - lp, -20.0, 20.0)                        # verl: kl = ref - logp, clamped
    expect = np.clip(np.exp(d) - d - 1.0, -10.0, 10.0)
    np.testing.assert_allclose(out, expect, rtol=1e-5)
    self.assertTrue(np.isfinite(np.asarray(out)).all())
    self.assertEqual(float(out[0, 1]), 10.0)                  # a far-off token is capped

  def test_losses_reexports_kl_penalty(self):
    self.assertIs(losses.kl_penalty, rl_kl.kl_penalty)


def _adaptive_ref(coef, kls, target, horizon, n):
  """verl's AdaptiveKLController, step by step."""
  out = []
  for kl in kls:
    err = np.clip(kl / target - 1, -0.2, 0.2)
    coef *= 1 + err * n / horizon
    out.append(coef)
  return np.array(out)


class AdaptiveKlTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_matches_verl_controller_over_steps(self):
    kls = [0.5, 0.12, 0.1, 0.01, 0.0, 3.0]
    f = self.variant(lambda c, k: rl_kl.adaptive_kl_coef(c, k, 0.1, 1000.0, 128))
    coef, got = jnp.float32(0.05), []
    for k in kls:
      coef = f(coef, jnp.float32(k))
      got.append(float(coef))
    np.testing.assert_allclose(got, _adaptive_ref(0.05, kls, 0.1, 1000.0, 128), rtol=1e-5)
    self.assertGreater(got[0], 0.05)                          # above target: β grows

  def test_non_finite_kl_keeps_the_coefficient(self):
    for bad in (np.nan, np.inf):
      self.assertEqual(float(rl_kl.adaptive_kl_coef(0.2, bad, 0.1, 100.0, 8)), np.float32(0.2))

  def test_bad_settings_are_explained(self):
    with self.assertRaisesRegex(ValueError, "target_kl must be > 0"):
      rl_kl.adaptive_kl_coef(0.1, 0.1, 0.0, 10.0, 1)
    with self.assertRaisesRegex(ValueError, "horizon must be > 0"):
      rl_kl.adaptive_kl_coef(0.1, 0.1, 0.1, 0.0, 1)

  @parameterized.parameters(0, 1)
  def test_sequence_mean_kl(self, seed):
    rng = np.random.default_rng(seed)
    kl = rng.normal(size=(3, 4)).astype(np.float32)
    m = np.array([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], np.float32)
    per = (kl * m).sum(1) / np.maximum(m.sum(1), 1)           # verl: masked_mean(axis=-1)
    np.testing.assert_allclose(rl_kl.sequence_mean_kl(kl, m), per.mean(), rtol=1e-5)
