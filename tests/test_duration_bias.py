"""The duration bias of asynchronous collection, and its correction through `policy_loss`.

Window model of the paper: in a window T an action a is completed ~ pi(a) T / dt_a times, so
a completed sample is action a with probability q(a) = (pi(a)/dt_a) / sum_b pi(b)/dt_b.
Claims checked here, on a softmax bandit whose update goes through `losses.policy_loss`:
  * weighting by dt (duration_weights) gives, in expectation, the synchronous gradient
    grad E_pi[r] -- exactly with the normalizer E_q[dt], to Monte-Carlo accuracy with the
    batch-mean normalizer;
  * the unweighted update is the gradient of the reward rate E_pi[r / dt].
And: per-sequence gradients of the weighted loss are in the ratio of the durations.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mle_rl.rl import losses

REWARD = np.array([-1.0, 0.4, 1.0], np.float32)   # fail-fast, fast-mediocre, slow-best
DURATION = np.array([0.2, 1.0, 8.0], np.float32)
THETA = jnp.array([-1.5, 0.0, 0.0], jnp.float32)  # pi ~ (0.10, 0.45, 0.45)


def _cos(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _update(theta, actions, adv, weights):
  """-d/dtheta policy_loss for a batch of one-token sequences (on-policy, ratio = 1)."""

  def loss(th):
    lp = jax.nn.log_softmax(th)[actions][:, None]
    mask = jnp.ones_like(lp)
    return losses.policy_loss(lp, jax.lax.stop_gradient(lp), adv[:, None], mask,
                              weights=weights)[0]

  return -jax.grad(loss)(theta)


def _targets():
  pi = np.asarray(jax.nn.softmax(THETA), np.float64)
  sync = pi * (REWARD - pi @ REWARD)                      # grad_theta E_pi[r]
  rate = pi * (REWARD / DURATION - pi @ (REWARD / DURATION))  # grad_theta E_pi[r/dt]
  q = pi / DURATION / np.sum(pi / DURATION)
  return pi, q, sync, rate


def test_window_model_exact_expectation():
  _, q, sync, rate = _targets()
  arms = jnp.arange(3)
  # Per-arm update of a one-sample batch, with the weight w_a = dt_a / E_q[dt].
  norm = float(q @ DURATION)
  single = jax.vmap(lambda a, w: _update(THETA, a[None], jnp.asarray(REWARD)[a][None], w))
  weighted = np.asarray(single(arms, jnp.asarray(DURATION / norm)[:, None])).T @ q
  unweighted = np.asarray(single(arms, jnp.ones((3, 1)))).T @ q
  np.testing.assert_allclose(weighted, sync, rtol=1e-5, atol=1e-7)
  # E_q[grad log pi * r] = grad E_pi[r/dt] / Z with Z = sum_a pi_a/dt_a = 1 / E_q[dt].
  np.testing.assert_allclose(unweighted / norm, rate, rtol=1e-5, atol=1e-7)
  # The bias is real here: the synchronous gradient moves mass from fast-mediocre to
  # slow-best, the unweighted window update moves it the other way.
  assert sync[1] < 0 < unweighted[1] and unweighted[1] > unweighted[2]
  assert _cos(unweighted, sync) < 0.9


def test_window_model_monte_carlo_with_batch_mean_weights():
  _, q, sync, rate = _targets()
  n = 400_000
  rng = np.random.default_rng(0)
  actions = rng.choice(3, size=n, p=q)
  sigma = 0.5  # random durations, lognormal with mean DURATION[a]
  dt = DURATION[actions] * np.exp(sigma * rng.normal(size=n) - sigma**2 / 2)
  r = REWARD[actions]
  w = losses.duration_weights(jnp.asarray(dt, jnp.float32), floor=1e-3)
  weighted = _update(THETA, jnp.asarray(actions), jnp.asarray(r - r.mean()), w)
  unweighted = _update(THETA, jnp.asarray(actions), jnp.asarray(r), None)
  assert _cos(weighted, sync) > 0.999
  assert _cos(unweighted, rate) > 0.999
  assert _cos(unweighted, sync) < 0.9


@pytest.mark.parametrize("reduction", ["token_mean", "sequence_mean"])
@pytest.mark.parametrize("log_ratio", [0.0, 0.1])  # on-policy, and off-policy inside the clip
def test_gradient_ratio_equals_duration_ratio(reduction, log_ratio):
  t = 5
  rng = np.random.default_rng(0)
  row_lp = rng.normal(-1.0, 0.2, size=t).astype(np.float32)
  row_adv = rng.normal(size=t).astype(np.float32)
  lp = jnp.asarray(np.stack([row_lp, row_lp]))
  old = lp - log_ratio
  adv = jnp.asarray(np.stack([row_adv, row_adv]))
  mask = jnp.ones((2, t))
  dt1, dt2 = 3.0, 1.5
  w = losses.duration_weights(jnp.array([dt1, dt2]), floor=1.0)
  grad = jax.grad(lambda x: losses.policy_loss(
      x, old, adv, mask, weights=w, clip_eps=0.2, reduction=reduction)[0])(lp)
  grad = np.asarray(grad)
  assert np.all(np.abs(grad[1]) > 1e-4)
  np.testing.assert_allclose(grad[0] / grad[1], dt1 / dt2, rtol=1e-5)


def test_floor_sets_the_ratio_for_an_instant_failure():
  lp = jnp.full((2, 3), -1.0)
  adv = jnp.ones((2, 3))
  w = losses.duration_weights(jnp.array([4.0, 0.0]), floor=0.5)
  grad = np.asarray(jax.grad(
      lambda x: losses.policy_loss(x, x, adv, jnp.ones((2, 3)), weights=w)[0])(lp))
  np.testing.assert_allclose(grad[0] / grad[1], 4.0 / 0.5, rtol=1e-5)


def _load_bandit():
  import importlib.util  # pylint: disable=g-import-not-at-top
  import pathlib  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  path = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "duration_bandit.py"
  spec = importlib.util.spec_from_file_location("duration_bandit_under_test", path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # dataclasses look their module up here
  spec.loader.exec_module(module)
  return module


def test_bandit_collection_models():
  """The experiment's collectors: window ~ pi/dt; a stationary event pool ~ pi (renewal)."""
  db = _load_bandit()
  pi = np.array([0.1, 0.6, 0.3])
  rng = np.random.default_rng(0)
  window = db.window_batches(rng, pi, 2000, 16)["actions"].ravel()
  q = pi / db.DURATION / np.sum(pi / db.DURATION)
  np.testing.assert_allclose(np.bincount(window, minlength=3) / window.size, q, atol=0.01)
  pool = db.Pool(rng, actors=16, staleness=None)
  batches = [pool.next_batch(pi, 16)["actions"] for _ in range(1500)][100:]
  freq = np.bincount(np.concatenate(batches), minlength=3) / (1400 * 16)
  np.testing.assert_allclose(freq, pi, atol=0.015)
  # A staleness limit drops results, and the slow arm most.
  strict = db.Pool(rng, actors=16, staleness=1)
  used = np.concatenate([strict.next_batch(pi, 16)["actions"] for _ in range(500)][50:])
  assert strict.dropped > 0
  assert np.mean(used == 2) < pi[2] - 0.05
