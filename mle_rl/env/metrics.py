"""Competition metrics as pure NumPy functions: arrays in, a float out.

They assume valid input; checking a submission is the graders' job (`mle_rl.env.graders`).
Each computes what MLE-bench's grade.py computes through scikit-learn or SciPy (log loss
clipped at machine epsilon and never renormalised, ROC AUC with ties counted half, the
quadratic kappa over the labels present, MAP@k with duplicates skipped), so that scores
agree to ~1e-15; `tests/test_metrics.py` checks them against scikit-learn.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy import stats

# scikit-learn's log_loss clips probabilities to [eps, 1 - eps], eps of the float dtype.
LOG_LOSS_EPS = float(np.finfo(np.float64).eps)


def auc(y_true: np.ndarray, y_score: np.ndarray) -> float:
    """Area under the ROC curve, ties counted half (Mann-Whitney U / (n_pos * n_neg)).

    y_true: [N] in {0, 1}; y_score: [N] float. Raises ValueError if y_true has one class.
    """
    y_true = np.asarray(y_true).astype(bool)
    y_score = np.asarray(y_score, dtype=np.float64)
    n_pos = int(y_true.sum())
    n_neg = y_true.size - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("AUC is undefined when the answers hold only one class.")
    ranks = stats.rankdata(y_score)  # average ranks for ties
    u = ranks[y_true].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def mean_column_auc(y_true: np.ndarray, y_score: np.ndarray) -> float:
    """Mean over columns of `auc`; y_true, y_score: [N, K].

    Rows whose answers sum below 0 are skipped (jigsaw marks unscored rows with -1).
    """
    y_true = np.asarray(y_true)
    y_score = np.asarray(y_score, dtype=np.float64)
    keep = y_true.sum(axis=1) >= 0
    return float(np.mean([auc(y_true[keep, k], y_score[keep, k])
                          for k in range(y_true.shape[1])]))


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Fraction of exact matches; y_true, y_pred: [N] of any comparable dtype."""
    return float(np.mean(np.asarray(y_true) == np.asarray(y_pred)))


def multiclass_log_loss(y_true: np.ndarray, probs: np.ndarray, eps: float = LOG_LOSS_EPS) -> float:
    """Mean negative log-probability of the true class, as scikit-learn's `log_loss`.

    y_true: [N] int class indices, or [N, K] one-hot; probs: [N, K] in [0, 1]. Probabilities
    are clipped to [eps, 1 - eps] and not renormalised (rows are checked to sum to 1 first).
    """
    probs = np.asarray(probs, dtype=np.float64)
    y_true = np.asarray(y_true)
    if y_true.ndim == 2:
        y_true = y_true.argmax(axis=1)
    probs = np.clip(probs, eps, 1.0 - eps)
    picked = probs[np.arange(probs.shape[0]), y_true.astype(np.int64)]
    return float(-np.mean(np.log(picked)))


def binary_log_loss(y_true: np.ndarray, p: np.ndarray, eps: float = LOG_LOSS_EPS) -> float:
    """Log loss of [N] probabilities of class 1 against [N] labels in {0, 1}."""
    p = np.asarray(p, dtype=np.float64)
    return multiclass_log_loss(np.asarray(y_true).astype(np.int64), np.stack([1.0 - p, p], 1), eps)


def rmse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Root mean squared error over all entries; any matching shapes."""
    d = np.asarray(y_true, dtype=np.float64) - np.asarray(y_pred, dtype=np.float64)
    return float(np.sqrt(np.mean(d**2)))


def mae(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean absolute error over all entries; any matching shapes."""
    d = np.asarray(y_true, dtype=np.float64) - np.asarray(y_pred, dtype=np.float64)
    return float(np.mean(np.abs(d)))


def rmsle_column_mean(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean over columns of sqrt(mean((log1p(pred) - log1p(true))^2)); [N, K] each, > -1."""
    t = np.log1p(np.asarray(y_true, dtype=np.float64))
    p = np.log1p(np.asarray(y_pred, dtype=np.float64))
    t, p = t.reshape(t.shape[0], -1), p.reshape(p.shape[0], -1)
    return float(np.mean(np.sqrt(np.mean((t - p) ** 2, axis=0))))


def mcrmse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean column-wise RMSE (feedback-prize); y_true, y_pred: [N, K]."""
    d = np.asarray(y_true, dtype=np.float64) - np.asarray(y_pred, dtype=np.float64)
    d = d.reshape(d.shape[0], -1)
    return float(np.mean(np.sqrt(np.mean(d**2, axis=0))))


def jaccard(a: str, b: str) -> float:
    """Word-level Jaccard of two strings (lower-cased, whitespace split), as on Kaggle.

    Raises ZeroDivisionError when neither has a word (Kaggle's and MLE-bench's formula).
    """
    sa, sb = set(a.lower().split()), set(b.lower().split())
    inter = len(sa & sb)
    return inter / (len(sa) + len(sb) - inter)


def word_jaccard(true_texts: Sequence[str], pred_texts: Sequence[str]) -> float:
    """Mean `jaccard` over pairs (tweet-sentiment-extraction); [N] strings each."""
    return float(np.mean([jaccard(t, p) for t, p in zip(true_texts, pred_texts)]))


def quadratic_weighted_kappa(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Cohen's kappa with quadratic weights over the labels present; [N] integer ratings.

    NaN where undefined (a single label overall), as scikit-learn's cohen_kappa_score.
    """
    y_true = np.asarray(y_true).astype(np.int64)
    y_pred = np.asarray(y_pred).astype(np.int64)
    labels = np.union1d(y_true, y_pred)
    k = labels.size
    ti, pi = np.searchsorted(labels, y_true), np.searchsorted(labels, y_pred)
    observed = np.zeros((k, k))
    np.add.at(observed, (ti, pi), 1.0)
    expected = np.outer(observed.sum(1), observed.sum(0)) / observed.sum()
    idx = np.arange(k)
    weights = (idx[:, None] - idx[None, :]) ** 2.0
    denom = (weights * expected).sum()
    if denom == 0:
        return float("nan")
    return float(1.0 - (weights * observed).sum() / denom)


def pearson(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Pearson correlation coefficient; [N] each (NaN if either is constant)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(np.corrcoef(np.asarray(y_true, float), np.asarray(y_pred, float))[0, 1])


def average_precision_at_k(actual: set, predicted: Sequence[str], k: int = 5) -> float:
    """AP@k: sum of precision at each new hit in the first k, over min(|actual|, k)."""
    predicted = list(predicted)[:k]
    score, hits = 0.0, 0
    for i, p in enumerate(predicted):
        if p in actual and p not in predicted[:i]:
            hits += 1
            score += hits / (i + 1.0)
    return score / min(len(actual), k) if actual else 0.0


def map_at_k(actual: Sequence[set], predicted: Sequence[Sequence[str]], k: int = 5) -> float:
    """Mean of `average_precision_at_k` over rows (whale-categorization)."""
    return float(np.mean([average_precision_at_k(a, p, k) for a, p in zip(actual, predicted)]))


# name -> is_lower_better
METRICS = {
    "auc": False,
    "mean_column_auc": False,
    "accuracy": False,
    "multiclass_log_loss": True,
    "binary_log_loss": True,
    "rmse": True,
    "mae": True,
    "rmsle_column_mean": True,
    "mcrmse": True,
    "word_jaccard": False,
    "quadratic_weighted_kappa": False,
    "pearson": False,
    "map_at_5": False,
}
