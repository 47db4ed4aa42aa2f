"""evaluate.py's per-task result: validity is told apart by mode (solve samples are the
i.i.d. draws; improve samples are shown a valid program first), in the table and the JSON."""

from mle_rl.agent.evaluation import TaskResult, markdown_table, progress_due, results_to_json
from mle_rl.env.types import ActionResult


def _result(samples):
    r = TaskResult("t", "auc", False, baseline=0.5)
    for mode, score in samples:
        r.record(mode, ActionResult(status="ok" if score is not None else "error", score=score,
                                    reward=-1.0, duration_s=0.1), "")
    return r


def test_validity_by_mode_in_the_table_and_the_json():
    r = _result([("solve", None), ("solve", 0.7), ("solve", None),
                 ("improve", 0.8), ("improve", 0.75)])
    assert r.valid_by_mode() == {"solve": [1, 3], "improve": [2, 2]}
    row = markdown_table({"t": r}).splitlines()[2]
    assert "| solve 1/3, improve 2/2 |" in row
    js = results_to_json({"t": r})["t"]
    assert js["valid_by_mode"] == {"solve": [1, 3], "improve": [2, 2]} and js["valid"] == 3


def test_solve_only_results_keep_the_plain_count():
    r = _result([("solve", None), ("solve", 0.7)])
    assert "| 1/2 |" in markdown_table({"t": r}).splitlines()[2]
    assert results_to_json({"t": r})["t"]["valid_by_mode"] == {"solve": [1, 2]}


def test_record_counts_valid_as_the_reward_does():
    """A program is valid when the reward would grade it (status ok and a finite score): a NaN
    or inf score is a failure, kept out of best@k and of the best, as in training."""
    r = TaskResult("t", "auc", False, baseline=0.5)
    code = "from sklearn.linear_model import LogisticRegression\n"

    def done(status, score):
        return ActionResult(status=status, score=score, reward=-1.0, duration_s=0.25, code=code)

    assert r.record("solve", done("ok", 0.7), "resp")
    assert not r.record("solve", done("ok", float("nan")), "resp")
    assert not r.record("solve", done("ok", float("inf")), "resp")
    assert not r.record("solve", done("error", None), "resp")
    assert not r.record("improve", done("ok", 0.65), "resp")      # valid, not the best
    assert r.record("improve", done("ok", 0.8), "resp")
    assert (r.n, r.valid, r.best, r.best_mode) == (6, 3, 0.8, "improve")
    assert r.solve_scores() == [0.7, None, None, None]
    assert r.valid_by_mode() == {"solve": [1, 4], "improve": [2, 2]}
    assert r.statuses == {"ok": 5, "error": 1} and len(r.failures) == 1
    assert r.best_at_k([1, 4])[4] == 0.7         # the NaN and inf draws count as invalid


def test_record_keeps_the_first_of_equal_bests_lower_is_better():
    r = TaskResult("t", "rmse", True)
    for mode, s in [("solve", 2.0), ("solve", 1.5), ("improve", 1.5), ("solve", 3.0)]:
        r.record(mode, ActionResult(status="ok", score=s, reward=-s, duration_s=0.1), "")
    assert (r.best, r.best_mode, r.valid) == (1.5, "solve", 4)


def test_progress_lines_come_about_ten_times_per_task():
    n, k = 2314, 16
    due = [done for done in range(k, n + k, k) if progress_due(done - k, min(done, n), n)]
    assert len(due) == 9 and due[0] == 240           # 10 steps; the 10th is the final line
    assert all(a < b for a, b in zip(due, due[1:])) and due[-1] < n
    assert not progress_due(2304, 2314, 2314)         # the last round: the final line says it
    assert [d for d in (2, 4) if progress_due(d - 2, d, 4)] == [2]   # a short run: one line
