"""Metric functions against scikit-learn / hand-computed values; graders reject bad input."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn import metrics as skm

from mle_rl.env import graders as G
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


def test_log_loss_matches_sklearn_clipping_without_renormalising():
    y = RNG.integers(0, 4, 100)
    p = RNG.random((100, 4)) + 0.05
    p /= p.sum(1, keepdims=True)
    assert M.multiclass_log_loss(y, p) == pytest.approx(skm.log_loss(y, p, labels=range(4)))
    onehot = np.eye(4)[y]
    assert M.multiclass_log_loss(onehot, p) == pytest.approx(M.multiclass_log_loss(y, p))
    # rows are not renormalised (scikit-learn only warns), and zeros clip at machine epsilon
    q = p * (1 + 1e-5)
    with pytest.warns(UserWarning):
        want = skm.log_loss(onehot, q)
    assert M.multiclass_log_loss(y, q) == pytest.approx(want, abs=1e-12)
    zero = np.array([[0.0, 1.0], [1.0, 0.0], [0.3, 0.7]])
    assert M.multiclass_log_loss([0, 0, 1], zero) == pytest.approx(
        skm.log_loss([0, 0, 1], zero), abs=1e-12)
    assert M.multiclass_log_loss([0], [[0.0, 1.0]]) == pytest.approx(-np.log(np.finfo(float).eps))
    b = RNG.random(50)
    yb = RNG.integers(0, 2, 50)
    assert M.binary_log_loss(yb, b) == pytest.approx(skm.log_loss(yb, b), abs=1e-12)


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
    assert M.word_jaccard(["Hello World", "a b c"], ["hello there", "c b a"]) == \
        pytest.approx((1 / 3 + 1.0) / 2)
    assert M.word_jaccard(["x"], [""]) == 0.0
    with pytest.raises(ZeroDivisionError):   # Kaggle's formula: two empty strings are 0/0
        M.word_jaccard([" "], [""])


def test_qwk_matches_sklearn():
    y = RNG.integers(1, 7, 300)
    p = np.clip(y + RNG.integers(-2, 3, 300), 1, 6)
    assert M.quadratic_weighted_kappa(y, p) == pytest.approx(
        skm.cohen_kappa_score(y, p, weights="quadratic"))
    assert M.quadratic_weighted_kappa(y, y) == pytest.approx(1.0)


def test_accuracy_pearson_map():
    assert M.accuracy([1, 2, 3, 4], [1, 2, 0, 4]) == 0.75
    a, b = RNG.random(50), RNG.random(50)
    assert M.pearson(a, b) == pytest.approx(stats.pearsonr(a, b)[0])
    assert np.isnan(M.pearson(a, np.ones(50)))
    assert M.map_at_k([{"a"}, {"b"}, {"c"}], [["a", "x"], ["x", "b"], ["x", "y"]]) == \
        pytest.approx((1 + 0.5 + 0) / 3)
    # repeats count once; several true labels: precision at each hit over min(|actual|, k)
    assert M.average_precision_at_k({"b"}, ["a", "a", "b"]) == pytest.approx(1 / 3)
    assert M.average_precision_at_k({"a", "c"}, ["a", "b", "c"]) == pytest.approx((1 + 2 / 3) / 2)
    assert M.average_precision_at_k({"f"}, list("abcdef")) == 0.0
    assert np.isnan(M.quadratic_weighted_kappa([3, 3], [3, 3]))   # as cohen_kappa_score


# ----------------------------------------------------------------------------- graders

ANS = pd.DataFrame({"id": [3, 1, 2, 4], "y": [1, 0, 1, 0]})
AUC = G.TableGrader("auc", "id", ("y",))


def test_grader_aligns_by_id_as_pandas_compares_them():
    sub = pd.DataFrame({"id": [4.0, 3.0, 2.0, 1.0], "y": [0.2, 0.9, 0.8, 0.1]})
    assert AUC(sub, ANS) == 1.0                       # 4.0 == 4
    text = pd.DataFrame({"id": ["1", "2", "3", "4"], "y": [0.1, 0.8, 0.9, 0.2]})
    with pytest.raises(InvalidSubmission, match="do not match"):
        AUC(text, ANS)                                # '1' != 1, as MLE-bench compares
    ans = pd.DataFrame({"k": ["a", "b ", "c", "d"], "y": [0, 1, 1, 0]})
    g = G.TableGrader("auc", "k", ("y",))
    assert g(pd.DataFrame({"k": ["d", "c", "b ", "a"], "y": [0.1, 0.9, 0.8, 0.2]}), ans) == 1.0
    with pytest.raises(InvalidSubmission, match="do not match"):
        g(pd.DataFrame({"k": ["d", "c", "b", "a"], "y": [0.1, 0.9, 0.8, 0.2]}), ans)
    dup = pd.DataFrame({"k": ["a", "a", "b"], "y": [1, 0, 1]})   # repeated test ids pair up
    assert g(pd.DataFrame({"k": ["b", "a", "a"], "y": [0.9, 0.1, 0.7]}), dup) == 0.5


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
    g1 = G.TableGrader("multiclass_log_loss", "id", classes, answer_label="cls")
    g2 = G.TableGrader("multiclass_log_loss", "id", None)
    assert g1(sub, ans_label) == pytest.approx(want)
    assert g2(sub, ans_onehot) == pytest.approx(want)
    bad = sub.assign(c=[0.9, 0.9])
    with pytest.raises(InvalidSubmission, match="sum to 1"):
        g1(bad, ans_label)
    neg = sub.assign(a=[-0.1, 0.1], c=[0.9, 0.3])
    with pytest.raises(InvalidSubmission, match=r"\[0, 1\]"):
        g1(neg, ans_label)


def test_header_and_probability_sum_rules():
    ans = pd.DataFrame({"id": ["i1", "i2"], "a": [1, 0], "b": [0, 1]})
    sub = pd.DataFrame({"id": ["i2", "i1"], "a": [0.2, 0.7], "b": [0.8, 0.3]})
    indexed = sub.reset_index().rename(columns={"index": "Unnamed: 0"})
    loose = G.TableGrader("multiclass_log_loss", "id")
    exact = G.TableGrader("multiclass_log_loss", "id", header="exact")
    first = G.TableGrader("multiclass_log_loss", "id", header="exact_id_first")
    want = -(np.log(0.7) + np.log(0.8)) / 2
    assert loose(indexed, ans) == pytest.approx(want) == first(sub[["id", "b", "a"]], ans)
    with pytest.raises(InvalidSubmission, match=r"index=False"):
        exact(indexed, ans)
    with pytest.raises(InvalidSubmission, match="first column"):
        first(sub[["a", "id", "b"]], ans)
    off = sub.assign(a=sub.a * (1 + 5e-6))   # 5e-6 off: within np.isclose, not round(6)
    assert loose(off, ans) == pytest.approx(want, rel=1e-5)
    with pytest.raises(InvalidSubmission, match="6 decimals"):
        G.TableGrader("multiclass_log_loss", "id", prob_sum="round6")(off, ans)
    with pytest.raises(InvalidSubmission, match="within 1e-6"):
        loose(sub.assign(a=sub.a * 0.99), ans)
    with pytest.raises(ValueError, match="header rule"):
        G.TableGrader("auc", "id", header="strict")


def test_other_graders():
    ans = pd.DataFrame({"id": [1, 2], "t": ["The cat sat", "on a mat"]})
    jac = G.TableGrader("word_jaccard", "id", ("t",))
    sub = pd.DataFrame({"id": [1, 2], "t": ["the cat", np.nan]})  # empty span allowed
    assert jac(sub, ans) == pytest.approx((2 / 3 + 0) / 2)
    acc = G.TableGrader("accuracy", "id", ("t",))
    ids = {"id": [1, 2, 3]}
    assert acc(pd.DataFrame({**ids, "t": [1, 0, 1.0]}),
               pd.DataFrame({**ids, "t": [True, True, True]})) == pytest.approx(2 / 3)
    assert acc(pd.DataFrame({**ids, "t": ["a", "b", "B"]}),
               pd.DataFrame({**ids, "t": ["a", "b", "b"]})) == pytest.approx(2 / 3)
    for pred, true, why in [(["x", 0, 1], [0, 1, 1], "text"), ([0.5, 0, 1], [0, 1, 1], "whole"),
                            ([1, 0, 1], ["a", "b", "b"], "class names")]:
        with pytest.raises(InvalidSubmission, match=why):   # as scikit-learn refuses them
            acc(pd.DataFrame({**ids, "t": pred}), pd.DataFrame({**ids, "t": true}))
    qwk = G.TableGrader("quadratic_weighted_kappa", "id", ("t",))
    with pytest.raises(InvalidSubmission, match="whole-number"):
        qwk(pd.DataFrame({"id": [1, 2], "t": [1.5, 2]}), pd.DataFrame({"id": [1, 2], "t": [1, 2]}))
    rmsle = G.TableGrader("rmsle_column_mean", "id", ("t",))
    with pytest.raises(InvalidSubmission, match="greater than -1"):
        rmsle(pd.DataFrame({"id": [1, 2], "t": [-2.0, 2]}), pd.DataFrame({"id": [1, 2], "t": [1, 2]}))
    with pytest.raises(ValueError, match="Unknown metric"):
        G.TableGrader("f1", "id", ("t",))


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
    report = G.grade_submission(tiny_task, path)
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
    report = G.grade_submission(tiny_task, path)
    assert report["valid_submission"] is False and report["score"] is None
    assert reason in report["message"], report["message"]
