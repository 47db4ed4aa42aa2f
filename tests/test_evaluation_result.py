"""evaluate.py's per-task result: validity is told apart by mode (solve samples are the
i.i.d. draws; improve samples are shown a valid program first), in the table and the JSON."""

from mle_rl.agent.evaluation import TaskResult, markdown_table, results_to_json


def _result(samples):
    r = TaskResult("t", "auc", False, baseline=0.5)
    for mode, score in samples:
        r.samples.append({"mode": mode, "family": "linear", "score": score, "status":
                          "ok" if score is not None else "error", "duration_s": 0.1})
        r.n += 1
        r.valid += score is not None
        r.families["linear"] += 1
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
