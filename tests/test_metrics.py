"""Metric functions against scikit-learn / hand-computed values; graders reject bad input."""

import numpy as np
import pandas as pd
import pytest
from sklearn import metrics as skm

from mle_rl.env import metrics as M
from mle_rl.env.types import InvalidSubmission, Task

RNG = np.random.default_rng(0)


def test_auc_matches_sklearn_with_ties():
    y = RNG.integers(0, 2, 200)
    s = np.round(RNG.random(200), 1)  # many ties
    assert M.auc(y, s) == pytest.approx(skm.roc_auc_score(y, s), abs=1e-12)
    assert M.auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75)
    with pytest.raises(ValueError):
        M.auc([1, 1], [0.2, 0.3])


def test_mean_column_auc_skips_minus_one_rows():
    y = np.array([[0, 1], [1, 0], [1, 1], [-1, -1], [0, 0]])
    s = RNG.random((5, 2))
    keep = [0, 1, 2, 4]
    want = np.mean([skm.roc_auc_score(y[keep, k], s[keep, k]) for k in range(2)])
    assert M.mean_column_auc(y, s) == pytest.approx(want)


def test_log_loss_matches_sklearn_and_renormalises():
    y = RNG.integers(0, 4, 100)
    p = RNG.random((100, 4)) + 0.05
    p /= p.sum(1, keepdims=True)
    assert M.multiclass_log_loss(y, p) == pytest.approx(skm.log_loss(y, p, labels=range(4)))
    assert M.multiclass_log_loss(y, 2 * p) == pytest.approx(M.multiclass_log_loss(y, p))
    onehot = np.eye(4)[y]
    assert M.multiclass_log_loss(onehot, p) == pytest.approx(M.multiclass_log_loss(y, p))
    # a zero probability on the true class is clipped, not infinite
    assert M.multiclass_log_loss([0], [[0.0, 1.0]]) == pytest.approx(-np.log(1e-15))


def test_regression_metrics():
    t = np.array([[1.0, 2.0], [3.0, 5.0], [0.0, 1.0]])
    p = np.array([[1.5, 2.0], [2.0, 4.0], [0.5, 3.0]])
    assert M.rmse(t, p) == pytest.approx(np.sqrt(np.mean((t - p) ** 2)))
    assert M.mae(t[:, 0], p[:, 0]) == pytest.approx(skm.mean_absolute_error(t[:, 0], p[:, 0]))
    want = np.mean([skm.root_mean_squared_log_error(t[:, k], p[:, k]) for k in range(2)])
    assert M.rmsle_column_mean(t, p) == pytest.approx(want)
    col = [np.sqrt(np.mean((t[:, k] - p[:, k]) ** 2)) for k in range(2)]
    assert M.mcrmse(t, p) == pytest.approx(np.mean(col))


def test_word_jaccard_hand_computed():
    assert M.word_jaccard(["Hello World", "a b c", ""], ["hello there", "c b a", ""]) == \
        pytest.approx((1 / 3 + 1.0 + 1.0) / 3)
    assert M.word_jaccard(["x"], [""]) == 0.0


def test_qwk_matches_sklearn():
    y = RNG.integers(1, 7, 300)
    p = np.clip(y + RNG.integers(-2, 3, 300), 1, 6)
    assert M.quadratic_weighted_kappa(y, p) == pytest.approx(
        skm.cohen_kappa_score(y, p, weights="quadratic"))
    assert M.quadratic_weighted_kappa(y, y) == pytest.approx(1.0)


def test_accuracy_pearson_map():
    assert M.accuracy([1, 2, 3, 4], [1, 2, 0, 4]) == 0.75
    a, b = RNG.random(50), RNG.random(50)
    assert M.pearson(a, b) == pytest.approx(np.corrcoef(a, b)[0, 1])
    assert M.map_at_k([{"a"}, {"b"}, {"c"}], [["a", "x"], ["x", "b"], ["x", "y"]]) == \
        pytest.approx((1 + 0.5 + 0) / 3)


# ----------------------------------------------------------------------------- graders

ANS = pd.DataFrame({"id": [3, 1, 2, 4], "y": [1, 0, 1, 0]})
AUC = M.TableGrader("auc", "id", ("y",))


def test_grader_aligns_by_id_and_accepts_string_ids():
    sub = pd.DataFrame({"id": ["1", "2", "3", "4"], "y": [0.1, 0.8, 0.9, 0.2]})
    assert AUC(sub, ANS) == 1.0
    sub2 = pd.DataFrame({"id": [4.0, 3.0, 2.0, 1.0], "y": [0.2, 0.9, 0.8, 0.1]})
    assert AUC(sub2, ANS) == 1.0


@pytest.mark.parametrize("sub, reason", [
    (pd.DataFrame({"id": [1, 2, 3, 4]}), "missing column"),
    (pd.DataFrame({"id": [1, 2, 3], "y": [0.1, 0.2, 0.3]}), "has 3 rows"),
    (pd.DataFrame({"id": [1, 2, 3, 9], "y": [0.1, 0.2, 0.3, 0.4]}), "do not match"),
    (pd.DataFrame({"id": [1, 2, 3, 3], "y": [0.1, 0.2, 0.3, 0.4]}), "do not match"),
    (pd.DataFrame({"id": [1, 2, 3, 4], "y": [0.1, np.nan, 0.3, 0.4]}), "missing (NaN"),
    (pd.DataFrame({"id": [1, 2, 3, 4], "y": ["a", "b", 0.3, 0.4]}), "must be numeric"),
    (pd.DataFrame({"id": [1, 2, 3, 4], "y": [0.1, 1.5, 0.3, 0.4]}), "in [0, 1]"),
    (pd.DataFrame({"id": [], "y": []}), "no rows"),
])
def test_grader_rejects_with_reason(sub, reason):
    with pytest.raises(InvalidSubmission, match=None) as e:
        AUC(sub, ANS)
    assert reason in str(e.value)


def test_log_loss_grader_label_and_one_hot_answers():
    classes = ("a", "b", "c")
    ans_label = pd.DataFrame({"id": [1, 2], "cls": ["b", "c"]})
    ans_onehot = pd.DataFrame({"id": [1, 2], "a": [0, 0], "b": [1, 0], "c": [0, 1]})
    sub = pd.DataFrame({"id": [2, 1], "a": [0.2, 0.1], "b": [0.2, 0.6], "c": [0.6, 0.3]})
    want = -(np.log(0.6) + np.log(0.6)) / 2
    g1 = M.TableGrader("multiclass_log_loss", "id", classes, answer_label="cls")
    g2 = M.TableGrader("multiclass_log_loss", "id", None)
    assert g1(sub, ans_label) == pytest.approx(want)
    assert g2(sub, ans_onehot) == pytest.approx(want)
    bad = sub.assign(c=[0.9, 0.9])
    with pytest.raises(InvalidSubmission, match="sum to 1"):
        g1(bad, ans_label)
    neg = sub.assign(a=[-0.1, 0.1], c=[0.9, 0.3])
    with pytest.raises(InvalidSubmission, match=r"\[0, 1\]"):
        g1(neg, ans_label)


def test_other_graders():
    ans = pd.DataFrame({"id": [1, 2], "t": ["The cat sat", "on a mat"]})
    jac = M.TableGrader("word_jaccard", "id", ("t",))
    sub = pd.DataFrame({"id": [1, 2], "t": ["the cat", np.nan]})  # empty span allowed
    assert jac(sub, ans) == pytest.approx((2 / 3 + 0) / 2)
    acc = M.TableGrader("accuracy", "id", ("t",))
    assert acc(pd.DataFrame({"id": [1, 2], "t": [True, False]}),
               pd.DataFrame({"id": [1, 2], "t": ["True", "True"]})) == 0.5
    qwk = M.TableGrader("quadratic_weighted_kappa", "id", ("t",))
    with pytest.raises(InvalidSubmission, match="integer"):
        qwk(pd.DataFrame({"id": [1, 2], "t": [1.5, 2]}), pd.DataFrame({"id": [1, 2], "t": [1, 2]}))
    rmsle = M.TableGrader("rmsle_column_mean", "id", ("t",))
    with pytest.raises(InvalidSubmission, match="greater than -1"):
        rmsle(pd.DataFrame({"id": [1, 2], "t": [-2.0, 2]}), pd.DataFrame({"id": [1, 2], "t": [1, 2]}))
    with pytest.raises(ValueError, match="Unknown metric"):
        M.TableGrader("f1", "id", ("t",))


# ----------------------------------------------------------------------------- files


@pytest.fixture()
def tiny_task(tmp_path):
    (tmp_path / "public").mkdir()
    (tmp_path / "private").mkdir()
    ANS.to_csv(tmp_path / "private" / "answers.csv", index=False)
    return Task(id="tiny", root=tmp_path, metric="auc", is_lower_better=False, grader=AUC)


def test_grade_submission_valid(tiny_task, tmp_path):
    path = tmp_path / "submission.csv"
    pd.DataFrame({"id": [1, 2, 3, 4], "y": [0.1, 0.8, 0.9, 0.2]}).to_csv(path, index=False)
    report = M.grade_submission(tiny_task, path)
    assert report == {"task_id": "tiny", "metric": "auc", "is_lower_better": False,
                      "score": 1.0, "valid_submission": True, "message": ""}


@pytest.mark.parametrize("content, reason", [
    (None, "No submission file"),
    (b"", "empty"),
    (b"\xff\xfe\x00\x81\x92garbage\n\xff", "not UTF-8"),
    (b"id,y\n1,0.1\n2,0.2,7,8\n", "could not be read"),
    (b"id,y\n1,0.1\n2,0.2\n", "has 2 rows"),
    (b"\n", "no header"),
    (b"id,y\n", "no rows"),
])
def test_grade_submission_never_raises(tiny_task, tmp_path, content, reason):
    path = tmp_path / "submission.csv"
    if content is not None:
        path.write_bytes(content)
    report = M.grade_submission(tiny_task, path)
    assert report["valid_submission"] is False and report["score"] is None
    assert reason in report["message"], report["message"]
