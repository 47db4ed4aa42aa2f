"""`agent.batch_metrics`: one update's metrics row, here the credit per model family."""

import numpy as np
import pytest

from mle_rl.agent.batch_metrics import batch_metrics
from mle_rl.agent.buffer import Rollout


def _rollout(i, family, reward, status="ok", score=0.8, duration=1.0):
    return Rollout(request_id=i, task_id="t", prompt_tokens=[1], response_tokens=[2],
                   logprobs=[0.0], policy_version=0, reward=reward, duration_s=duration,
                   status=status, score=score if status == "ok" else None,
                   prompt_kind="solve", meta={"family": family, "hits": 0})


class _Task:
    is_lower_better = False


def _row(rollouts, per_seq=None):
    return batch_metrics(rollouts, step=1, tasks={"t": _Task()}, task_ids=["t"], best={},
                         dropped_stale=0, actions_done=len(rollouts),
                         busy={"learner": 0.0, "sampler": 0.0}, wall=1.0, per_seq=per_seq)


def test_credit_per_family_is_the_mean_over_its_programs():
    rs = [_rollout(0, "mlp", 0.8), _rollout(1, "mlp", 0.7), _rollout(2, "linear", 0.6),
          _rollout(3, "none", -10.0, status="error")]
    per = {"advantage": np.array([1.0, -0.5, 0.25, -2.0]),
           "weight": np.array([2.0, 2.0, 0.5, 0.5])}
    m = _row(rs, per)
    assert m["family/mlp"] == 0.5 and m["family/linear"] == 0.25
    assert m["advantage/mlp"] == pytest.approx(0.25)            # (1 - 0.5) / 2
    assert m["weight/mlp"] == pytest.approx(2.0)
    assert m["credit/mlp"] == pytest.approx(0.5)                # (2 - 1) / 2
    assert m["credit/linear"] == pytest.approx(0.125)
    assert m["credit/none"] == pytest.approx(-1.0)
    assert "credit/knn" not in m                                # no programs: no entry


def test_no_credit_without_the_learners_rows():
    rs = [_rollout(0, "mlp", 0.8), _rollout(1, "linear", 0.6)]
    for per in (None, {}, {"advantage": np.zeros(3), "weight": np.ones(3)}):   # wrong length
        m = _row(rs, per)
        assert m["family/mlp"] == 0.5
        assert not any(k.startswith(("credit/", "advantage/", "weight/")) for k in m)
