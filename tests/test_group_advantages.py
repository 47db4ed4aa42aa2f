"""Tests of mle_rl.rl.group_advantages (GRPO, RLOO, max@k) against plain NumPy loops and a
brute-force enumeration of subsets (chex variants: jit / no jit)."""

import itertools

import chex
import numpy as np
from absl.testing import parameterized

from mle_rl.rl import group_advantages


def _grpo_ref(scores, groups, normalize_std=True, eps=1e-6):
  """verl's compute_grpo_outcome_advantage, over a plain loop of groups."""
  out = np.zeros_like(scores)
  for g in np.unique(groups):
    idx = np.flatnonzero(groups == g)
    s = scores[idx]
    mean, std = (0.0, 1.0) if len(s) == 1 else (s.mean(), s.std(ddof=1))
    out[idx] = (s - mean) / (std + eps) if normalize_std else s - mean
  return out


def _rloo_ref(scores, groups):
  """verl's compute_rloo_outcome_advantage: baseline = mean of the others."""
  out = scores.copy()
  for i, g in enumerate(groups):
    others = scores[(groups == g) & (np.arange(len(scores)) != i)]
    if len(others):
      out[i] = scores[i] - others.mean()
  return out


def _max_at_k_ref(scores, groups, k, normalize_std):
  """Brute force over subsets: E[best of k' draws containing i] - E[best of k' others]."""
  out = np.zeros(len(scores))
  for i in range(len(scores)):
    others = [j for j in range(len(scores)) if groups[j] == groups[i] and j != i]
    if not others:
      out[i] = scores[i]
      continue
    kk = min(k, len(others))
    base = np.mean([scores[list(u)].max() for u in itertools.combinations(others, kk)])
    first = scores[i] if kk == 1 else np.mean(
        [max(scores[i], scores[list(t)].max()) for t in itertools.combinations(others, kk - 1)])
    out[i] = first - base
  return _group_normalized(out, groups) if normalize_std else out


def _group_normalized(x, groups):
  """``x`` divided by its (population) std over each group of two or more."""
  x = x.copy()
  for g in set(groups.tolist()):
    ix = groups == g
    if ix.sum() > 1:
      x[ix] = x[ix] / (x[ix].std() + 1e-6)
  return x


class GroupAdvantageTest(chex.TestCase):

  def _data(self):
    rng = np.random.default_rng(3)
    scores = rng.normal(size=11).astype(np.float32)
    groups = np.array([5, 5, 5, 5, 2, 2, 9, 7, 7, 7, 2], np.int32)  # interleaved, a singleton
    scores[7:10] = 0.25                                               # a group of equal scores
    return scores, groups

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(True, False)
  def test_grpo_matches_reference(self, normalize_std):
    scores, groups = self._data()
    out = self.variant(lambda s, g: group_advantages.grpo(s, g, normalize_std=normalize_std))(
        scores, groups)
    np.testing.assert_allclose(out, _grpo_ref(scores, groups, normalize_std), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(np.asarray(out)[7:10], 0.0, atol=1e-6)  # no signal
    self.assertAlmostEqual(float(out[6]), float(scores[6]), places=5)  # singleton keeps it

  @chex.variants(with_jit=True, without_jit=True)
  def test_rloo_matches_reference(self):
    scores, groups = self._data()
    out = self.variant(group_advantages.rloo)(scores, groups)
    np.testing.assert_allclose(out, _rloo_ref(scores, groups), rtol=1e-5, atol=1e-6)

  def test_float_group_ids_are_refused(self):
    with self.assertRaises(AssertionError):
      group_advantages.grpo(np.ones(3, np.float32), np.ones(3, np.float32))

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters((1, False), (2, False), (3, True), (4, False), (4, True), (9, False))
  def test_max_at_k_matches_brute_force(self, k, normalize_std):
    scores, groups = self._data()
    scores = np.concatenate([scores, np.array([0.9, -10.0, 0.3, 0.9], np.float32)])
    groups = np.concatenate([groups, np.full(4, 5, np.int32)])   # a tie and a failure
    out = self.variant(lambda s, g: group_advantages.max_at_k(s, g, k, normalize_std=normalize_std))(
        scores, groups)
    np.testing.assert_allclose(out, _max_at_k_ref(scores, groups, k, normalize_std),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out)[7:10], 0.0, atol=1e-6)  # equal scores: none
    self.assertAlmostEqual(float(out[6]), float(scores[6]), places=5)  # singleton keeps it

  def test_max_at_k_one_is_rloo_and_largest_k_credits_only_the_best(self):
    scores = np.array([0.2, 0.8, -10.0, 0.5, 0.79], np.float32)
    groups = np.zeros(5, np.int32)
    np.testing.assert_allclose(group_advantages.max_at_k(scores, groups, 1, normalize_std=False),
                               group_advantages.rloo(scores, groups), rtol=1e-5, atol=1e-6)
    top = np.asarray(group_advantages.max_at_k(scores, groups, 4, normalize_std=False))
    self.assertAlmostEqual(float(top[1]), 0.8 - 0.79, places=5)   # best: over the next best
    self.assertTrue(np.all(np.delete(top, 1) <= 0.0))

  def test_max_at_k_failure_does_not_drown_the_valid_ones(self):
    """One -10 in a group moves the valid samples' advantages little at k = 4, where it
    shifts every RLOO advantage by about 10 / (n - 1)."""
    valid = np.array([0.80, 0.82, 0.85, 0.86, 0.83, 0.81, 0.84], np.float32)
    groups = np.zeros(8, np.int32)
    with_fail = np.concatenate([valid, [-10.0]]).astype(np.float32)
    with_ok = np.concatenate([valid, [0.80]]).astype(np.float32)
    a_fail = np.asarray(group_advantages.max_at_k(with_fail, groups, 4, normalize_std=False))[:7]
    a_ok = np.asarray(group_advantages.max_at_k(with_ok, groups, 4, normalize_std=False))[:7]
    r_fail = np.asarray(group_advantages.rloo(with_fail, groups))[:7]
    r_ok = np.asarray(group_advantages.rloo(with_ok, groups))[:7]
    self.assertLess(np.abs(a_fail - a_ok).max(), 0.01)
    self.assertGreater(np.abs(r_fail - r_ok).min(), 1.0)
    self.assertEqual(int(np.argmax(a_fail)), 3)            # the best valid one is credited most

  def test_max_at_k_signal_silences_groups_whose_rewards_are_equal(self):
    """Equal rewards, scores apart only by tiny KL terms: without ``signal`` the std division
    makes unit-scale advantages of that noise; with the rewards as ``signal`` they are 0,
    and a group whose rewards differ keeps exactly its advantages."""
    rewards = np.array([0.8] * 4 + [0.1, 0.9, 0.5, 0.3], np.float32)
    kl_noise = np.array([1e-4, -2e-4, 3e-4, 0.0, 1e-4, -1e-4, 2e-4, 0.0], np.float32)
    scores = rewards + kl_noise
    groups = np.array([0] * 4 + [1] * 4, np.int32)
    noisy = np.asarray(group_advantages.max_at_k(scores, groups, 2))
    self.assertGreater(np.abs(noisy[:4]).max(), 0.5)
    quiet = np.asarray(group_advantages.max_at_k(scores, groups, 2, signal=rewards))
    np.testing.assert_array_equal(quiet[:4], 0.0)
    np.testing.assert_allclose(quiet[4:], noisy[4:], rtol=1e-6)

  @parameterized.parameters((0.25, False), (0.5, True), (1.0, False))
  def test_max_at_k_mean_coef_mixes_in_rloo(self, lam, normalize_std):
    """λ: (1 - λ) of the best-of-k advantage plus λ of RLOO's, then the std division; at
    k = n - 1 a failure then costs more than a valid program below the best."""
    scores, groups = self._data()
    scores = np.concatenate([scores, np.array([0.9, -10.0, 0.3, 0.9], np.float32)])
    groups = np.concatenate([groups, np.full(4, 5, np.int32)])
    out = np.asarray(group_advantages.max_at_k(scores, groups, 3, normalize_std=normalize_std,
                                         mean_coef=lam))
    want = ((1 - lam) * _max_at_k_ref(scores, groups, 3, False)
            + lam * _rloo_ref(scores, groups))
    want[6] = scores[6]                                               # singleton keeps it
    want[7:10] = 0.0                                                  # equal scores: none
    if normalize_std:
      want = _group_normalized(want, groups)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    group = np.array([0.80, 0.85, 0.82, -10.0], np.float32)
    g0 = np.zeros(4, np.int32)
    alone = np.asarray(group_advantages.max_at_k(group, g0, 3, normalize_std=False))
    mixed = np.asarray(group_advantages.max_at_k(group, g0, 3, normalize_std=False, mean_coef=0.25))
    self.assertAlmostEqual(float(alone[3]), float(alone[0]), places=5)   # k = n - 1: alike
    self.assertLess(float(mixed[3]), float(mixed[0]) - 2.0)              # λ: the failure pays
    with self.assertRaises(ValueError):
      group_advantages.max_at_k(group, g0, 3, mean_coef=1.5)

  @parameterized.parameters((0.2, True), (1.5, False))
  def test_max_at_k_valid_coef_counts_failures_on_their_own_scale(self, mu, normalize_std):
    """μ: the best-of-k advantage plus μ of RLOO's advantage of the validity indicator,
    each divided by its own group std; a group with no failure keeps Â_k exactly."""
    scores, groups = self._data()
    valid = np.ones(len(scores), np.float32)
    scores[1], valid[1] = -10.0, 0.0                                  # a failure in group 5
    out = np.asarray(group_advantages.max_at_k(scores, groups, 2, normalize_std=normalize_std,
                                         valid=valid, valid_coef=mu))
    adv_k = _max_at_k_ref(scores, groups, 2, False)
    adv_v = _rloo_ref(valid, groups)
    adv_k[7:10] = 0.0                                                 # equal scores: none
    if normalize_std:
      adv_k, adv_v = _group_normalized(adv_k, groups), _group_normalized(adv_v, groups)
    want = adv_k + mu * adv_v
    want[6] = scores[6]                                               # singleton keeps it
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    alone = np.asarray(group_advantages.max_at_k(scores, groups, 2, normalize_std=normalize_std))
    no_failure = (groups != 5) & (groups != 9)                       # 9: the singleton
    np.testing.assert_allclose(out[no_failure], alone[no_failure], rtol=1e-4, atol=1e-5)
    ix = groups == 5
    # Within the failure's group the valid programs keep their order and their spread
    # relative to each other; the failure falls below all of them.
    np.testing.assert_allclose(np.diff(out[ix][[0, 2, 3]]),
                               np.diff(alone[ix][[0, 2, 3]]), rtol=1e-4, atol=1e-5)
    self.assertLess(float(out[1]), float(out[ix].min()) + 1e-6)
    with self.assertRaises(ValueError):
      group_advantages.max_at_k(scores, groups, 2, valid_coef=0.5)         # needs `valid`
    with self.assertRaises(ValueError):
      group_advantages.max_at_k(scores, groups, 2, valid=valid, valid_coef=-0.5)
    with self.assertRaises(ValueError):
      group_advantages.max_at_k(scores, groups, 2, valid=valid, valid_coef=float("inf"))

  @parameterized.parameters(0.8724, -0.557, 9.17)
  def test_max_at_k_tied_best_programs_leave_no_rounding_push(self, top):
    """Groups of 8 at k = 8 (the flagfile's) whose best score is shared: no member can
    change the best of the others, so every advantage is zero, on any score scale. (On the
    absolute scale the float32 residue of the two expectations, ~1e-7 |s|, divided by a
    group std of ~0, gave all eight one constant advantage of order one.)"""
    groups = np.repeat([0, 1, 2], 8).astype(np.int32)
    tied = [top] * 3 + [top - 0.02, top - 0.03, top - 0.05, top - 0.1, top - 0.2]
    rng = np.random.default_rng(0)
    distinct = top - np.abs(rng.normal(0.05, 0.03, 8))
    with_failure = [top, top] + [top - 0.01 * i for i in range(1, 6)] + [-10.0]
    scores = np.array(tied + list(distinct) + with_failure, np.float32)
    valid = (scores > -5).astype(np.float32)
    for kw in ({}, {"valid": valid, "valid_coef": 1.0}):
      out = np.asarray(group_advantages.max_at_k(scores, groups, 8, **kw))
      np.testing.assert_array_equal(out[:8], 0.0)                     # tied best: nothing
      ref = _max_at_k_ref(scores.astype(np.float64), groups, 8, True)
      np.testing.assert_allclose(out[8:16], ref[8:16], rtol=1e-4, atol=1e-5)
      for g in range(3):                                              # each group sums to 0
        self.assertLess(abs(float(out[groups == g].sum())), 1e-4)
    # a failure beside two tied best programs: only "valid or not" is left to learn
    out = np.asarray(group_advantages.max_at_k(scores, groups, 8, valid=valid, valid_coef=1.0))
    v = _group_normalized(_rloo_ref(valid[16:], groups[16:]), groups[16:])
    np.testing.assert_allclose(out[16:], v, rtol=1e-4, atol=1e-5)
    # a constant added to every score changes nothing
    shifted = np.asarray(group_advantages.max_at_k(scores + np.float32(3.0), groups, 8))
    np.testing.assert_allclose(shifted, np.asarray(group_advantages.max_at_k(scores, groups, 8)),
                               rtol=1e-3, atol=1e-4)

  def test_max_at_k_scores_scale_counts_a_win_by_its_margin(self):
    """scale="scores": one divisor for the batch, the std of its valid programs' scores. A
    group won by 0.001 gets a thousandth of the credit of one won by 1.0 (each group's own
    std gives both the same); failures stay out of the divisor; below 2 valid programs the
    best-of-k term is 0, and the validity term is added as before."""
    scores = np.array([0.801, 0.800, 0.800, 0.800, 1.80, 0.80, 0.80, 0.80, -10.0, 0.5],
                      np.float32)
    groups = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2], np.int32)
    valid = (scores > -5).astype(np.float32)
    out = np.asarray(group_advantages.max_at_k(scores, groups, 4, valid=valid, scale="scores"))
    raw = _max_at_k_ref(scores.astype(np.float64), groups, 4, False)
    spread = scores[valid > 0].astype(np.float64).std(ddof=1)
    np.testing.assert_allclose(out[:8], raw[:8] / spread, rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(out[4] / out[0], 1000.0, rtol=1e-2)
    per_group = np.asarray(group_advantages.max_at_k(scores, groups, 4, valid=valid))
    np.testing.assert_allclose(per_group[0], per_group[4], rtol=1e-2)     # the same unit
    # with μ, the validity term is added on its own (group) scale, as with scale="group"
    mu = np.asarray(group_advantages.max_at_k(scores, groups, 4, valid=valid, valid_coef=1.0,
                                              scale="scores"))
    v = _group_normalized(_rloo_ref(valid, groups), groups)
    np.testing.assert_allclose(mu - out, v, rtol=1e-4, atol=1e-5)
    one_valid = np.where(np.arange(10) == 4, 1.0, 0.0).astype(np.float32)
    none = np.asarray(group_advantages.max_at_k(scores, groups, 4, valid=one_valid,
                                                scale="scores"))
    np.testing.assert_array_equal(none[:8], 0.0)
    with self.assertRaises(ValueError):
      group_advantages.max_at_k(scores, groups, 4, scale="scores")          # needs `valid`
    with self.assertRaises(ValueError):
      group_advantages.max_at_k(scores, groups, 4, valid=valid, scale="batch")

  def test_max_at_k_refuses_k_below_one(self):
    with self.assertRaises(ValueError):
      group_advantages.max_at_k(np.ones(2, np.float32), np.zeros(2, np.int32), 0)
