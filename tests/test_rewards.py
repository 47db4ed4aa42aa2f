"""Reward schemes, against hand-computed values."""

import math

import pytest

from mle_rl.env import rewards


@pytest.mark.parametrize("status,score,lower,hits,want", [
    ("ok", 0.83, False, 7, 0.83),              # valid: the score, no print bonus
    ("ok", 0.40, True, 7, -0.40),              # lower is better: sign flipped
    ("error", None, False, 0, -10.0),
    ("error", None, False, 3, -9.7),           # partial credit for prints reached
    ("timeout", None, True, 7, -9.3),
    ("oom", None, False, 2, -9.8),
    ("invalid_submission", None, False, 6, -9.4),
    ("no_code", None, False, 0, -10.0),
    ("bad_format", None, False, 0, -10.0),
    ("ok", None, False, 7, -9.3),              # "ok" without a score cannot be rewarded
    ("ok", float("nan"), False, 1, -9.9),
])
def test_rl4mle(status, score, lower, hits, want):
    assert rewards.rl4mle(status, score, lower, hits) == pytest.approx(want)


def test_rl4mle_any_valid_beats_any_failure():
    worst_valid = rewards.rl4mle("ok", 5.0, True, 0)     # a log loss of 5
    best_failure = rewards.rl4mle("error", None, False, 7)
    assert worst_valid > best_failure


def test_rl4mle_scale_divides_valid_scores_only():
    assert rewards.rl4mle("ok", 55.0, True, 0, scale=77.0) == pytest.approx(-55.0 / 77.0)
    assert rewards.rl4mle("error", None, True, 3, scale=77.0) == pytest.approx(-9.7)
    assert rewards.compute_reward("rl4mle", status="ok", score=30.0, is_lower_better=True,
                                  score_scale=60.0) == pytest.approx(-0.5)


def test_score_scale_puts_an_rmse_task_on_the_paper_scale():
    """Diabetes progression is scored in the target's units (RMSE ~ 55-80): divided by the
    sample submission's RMSE, its own sample earns -1 and beats any failure; a metric with
    its own scale (AUC) is left alone."""
    from mle_rl.env import action, tasks
    from mle_rl.env.graders import grade_submission

    task = tasks.get_task("diabetes-progression")
    scale = action.score_scale(task)
    sample = grade_submission(task, task.public_dir / "sample_submission.csv")["score"]
    assert scale == pytest.approx(sample) and scale > 10
    assert rewards.rl4mle("ok", sample, True, 0, scale=scale) == pytest.approx(-1.0)
    assert rewards.rl4mle("ok", 2 * sample, True, 0, scale=scale) > rewards.rl4mle(
        "error", None, True, 7)
    assert action.score_scale(tasks.get_task("breast-cancer-diagnosis")) == 1.0


def sig(x):
    return 1 / (1 + math.exp(-x))


@pytest.mark.parametrize("status,score,prev,lower,alpha,changed,want", [
    ("error", None, 0.5, False, 10, True, 0.0),
    ("bad_format", None, 0.5, False, 10, True, 0.0),
    ("no_code", None, 0.5, False, 10, True, 0.0),
    ("invalid_submission", None, 0.5, False, 10, True, 0.0),
    ("timeout", None, 0.5, False, 10, True, 0.5),
    ("oom", None, 0.5, False, 10, True, 0.5),
    ("ok", 0.7, 0.7, False, 10, False, 0.5),            # valid but nothing changed
    ("ok", 0.8, 0.7, False, 10, True, sig(10 * 0.1)),
    ("ok", 0.6, 0.7, False, 10, True, sig(-10 * 0.1)),
    ("ok", 0.3, 0.5, True, 4, True, sig(4 * 0.2)),      # lower is better: 0.5 -> 0.3 is +0.2
    ("ok", 0.9, None, False, 2, True, sig(2 * 0.9)),    # first step: from 0
    ("ok", 0.9, None, True, 2, True, sig(-2 * 0.9)),
])
def test_mlagent(status, score, prev, lower, alpha, changed, want):
    got = rewards.mlagent(status, score, prev, lower, alpha, changed=changed)
    assert got == pytest.approx(want)


def test_mlagent_is_stable_for_large_gaps():
    assert rewards.mlagent("ok", 1e6, 0.0, False, 100.0) == 1.0
    assert rewards.mlagent("ok", -1e6, 0.0, False, 100.0) == 0.0


def test_compute_reward_dispatch():
    assert rewards.compute_reward("rl4mle", status="error", score=None, is_lower_better=False,
                                  n_hits=2) == pytest.approx(-9.8)
    assert rewards.compute_reward("mlagent", status="ok", score=0.8, is_lower_better=False,
                                  prev_score=0.8, alpha=5.0) == 0.5
    assert set(rewards.REWARDS) == {"rl4mle", "mlagent"}
    with pytest.raises(ValueError, match="Unknown reward scheme"):
        rewards.compute_reward("bogus", status="ok", score=1.0, is_lower_better=False)
