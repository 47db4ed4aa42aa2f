"""run_action: response text -> parse -> instrument -> sandbox -> grade -> reward, with the
right status and reward on every path and no exception for bad model output."""

import pytest

from tests._tiny_task import GOOD_CODE, make_tiny_task
from mle_rl.env import action, warm_pool


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return make_tiny_task(tmp_path_factory.mktemp("action"))


def respond(code, plan="Threshold x at 0."):
    return f"{plan}\n\n```python\n{code}```\n"


def test_valid_action(task, tmp_path):
    saved = tmp_path / "sub.csv"
    res = action.run_code(task, GOOD_CODE, plan="p", save_submission=saved)
    assert (res.status, res.score, res.reward) == ("ok", 1.0, 1.0)
    assert res.hits == ("imports", "data_loaded", "submission_written")
    assert res.plan == "p" and res.code == GOOD_CODE and res.duration_s > 0
    assert saved.read_text().startswith("id,y")


@pytest.mark.parametrize("text,status", [
    ("I would fit a model.", "no_code"),
    ("plan\n```python\nx = 1\n```\n```python\ny = 2\n```", "bad_format"),
    ("plan\n```python\ndef f(:\n```", "bad_format"),
])
@pytest.mark.parametrize("scheme,want", [("rl4mle", -10.0), ("mlagent", 0.0)])
def test_bad_responses(task, text, status, scheme, want):
    res = action.run_action(task, text, reward_scheme=scheme)
    assert (res.status, res.reward, res.duration_s, res.score) == (status, want, 0.0, None)
    assert res.message


def test_invalid_submission(task):
    code = "import pandas as pd\npd.DataFrame({'id': [1], 'y': [0]}).to_csv('submission.csv')\n"
    res = action.run_action(task, respond(code))
    assert res.status == "invalid_submission" and res.score is None
    assert res.reward == pytest.approx(-10 + 0.1 * 2)        # imports, submission_written
    assert "columns" in res.message


def test_mlagent_improvement_and_no_change(task):
    res = action.run_action(task, respond(GOOD_CODE), reward_scheme="mlagent", prev_score=0.5)
    assert res.status == "ok" and 0.99 < res.reward < 1.0      # sigmoid(10 * 0.5)
    same = action.run_action(task, respond(GOOD_CODE), reward_scheme="mlagent",
                             prev_score=1.0, prev_code=GOOD_CODE + "\n# a comment\n")
    assert same.reward == 0.5                                   # same program: no change
    slow = action.run_action(task, respond("import time\ntime.sleep(60)\n"),
                             reward_scheme="mlagent", timeout_s=1)
    assert (slow.status, slow.reward) == ("timeout", 0.5)


def test_unknown_scheme_is_a_clear_error(task):
    with pytest.raises(ValueError, match="Unknown reward scheme"):
        action.run_code(task, GOOD_CODE, reward_scheme="best")


def test_with_warm_pool(task):
    with warm_pool.WarmPool(size=1, public_dir=task.public_dir) as pool:
        for _ in range(2):
            res = action.run_action(task, respond(GOOD_CODE), pool=pool)
            assert (res.status, res.score) == ("ok", 1.0)
        assert pool.stats["served_warm"] == 2
