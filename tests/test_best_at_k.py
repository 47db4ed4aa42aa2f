"""best@k (`agent/best_at_k.py`) against brute force over every k-subset, and its floor."""

import itertools

import numpy as np
import pytest

from mle_rl.agent import best_at_k as bak


def _brute(values, k):
    return float(np.mean([max(c) for c in itertools.combinations(values, k)]))


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
def test_expected_best_matches_every_subset(k):
    rng = np.random.default_rng(k)
    v = list(rng.normal(size=8))
    v[3] = v[5]                                   # a tie
    assert bak.expected_best(v, k) == pytest.approx(_brute(v, k), rel=1e-9, abs=1e-12)


def test_expected_best_bounds_and_errors():
    v = [0.1, 0.7, 0.3, 0.5]
    assert bak.expected_best(v, 1) == pytest.approx(np.mean(v))
    assert bak.expected_best(v, 4) == pytest.approx(0.7)
    curve = [bak.expected_best(v, k) for k in range(1, 5)]
    assert all(a <= b + 1e-12 for a, b in zip(curve, curve[1:]))     # never falls with k
    for k in (0, 5):
        with pytest.raises(ValueError, match="1 <= k <= n"):
            bak.expected_best(v, k)


def test_large_n_is_finite_and_exact():
    v = np.linspace(0.0, 1.0, 1000)
    assert bak.expected_best(v, 1000) == pytest.approx(1.0)
    # best of 2 from a uniform grid on [0, 1]: E[max] = 2/3 (continuous), ~ on the grid
    assert bak.expected_best(v, 2) == pytest.approx(2 / 3, abs=2e-3)


def test_invalid_counts_as_the_sample_submission_and_ranks_last():
    scores = [0.8, None, 0.9, 0.4]                # AUC; 0.4 is worse than the sample's 0.5
    got = bak.best_at_k(scores, [1, 2, 4], is_lower_better=False, baseline=0.5)
    assert got[1] == pytest.approx(np.mean([0.8, 0.5, 0.9, 0.5]))
    assert got[4] == pytest.approx(0.9)
    assert got[2] == pytest.approx(_brute([0.8, 0.5, 0.9, 0.5], 2))


def test_lower_is_better_comes_back_in_the_metric_direction():
    scores = [0.30, 0.25, None, 0.60]             # log loss; the sample submission: 1.0
    got = bak.best_at_k(scores, bak.powers_of_two(4), is_lower_better=True, baseline=1.0)
    assert sorted(got) == [1, 2, 4]
    assert got[4] == pytest.approx(0.25)
    assert got[1] == pytest.approx(np.mean([0.30, 0.25, 1.0, 0.60]))
    assert got[1] > got[2] > got[4]               # lower is better: falls with k


def test_without_baseline_the_floor_is_the_worst_valid_score():
    assert bak.floor_of([0.3, None, 0.2], None, is_lower_better=True) == -0.3
    got = bak.best_at_k([0.3, None, 0.2], [1], is_lower_better=True)
    assert got[1] == pytest.approx(np.mean([0.3, 0.3, 0.2]))
    assert bak.best_at_k([None, None], [1], is_lower_better=False) == {}


def test_powers_of_two():
    assert bak.powers_of_two(1) == [1]
    assert bak.powers_of_two(128) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert bak.powers_of_two(100) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert bak.powers_of_two(0) == []
