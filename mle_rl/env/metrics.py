"""Competition metrics as pure NumPy functions, and graders that validate a submission first.

Metric functions take arrays and return a float; they assume valid input. Graders
(`TableGrader`) take the submission and answers as DataFrames, check the submission the
way a Kaggle leaderboard does (columns, row count, ids, NaNs, value ranges) and raise
`InvalidSubmission` with one sentence for a person, then call the metric.
`grade_submission` reads a submission file for a `Task` and never raises for a bad file.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Optional, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from mle_rl.env.types import InvalidSubmission, Task

LOG_LOSS_EPS = 1e-15
MAX_SUBMISSION_BYTES = 512 * 2**20


# ----------------------------------------------------------------------------- metrics


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
    """Mean over columns of `auc`; y_true, y_score: [N, K]. Rows whose answers are -1 skip."""
    y_true = np.asarray(y_true)
    y_score = np.asarray(y_score, dtype=np.float64)
    keep = (y_true >= 0).all(axis=1)
    return float(np.mean([auc(y_true[keep, k], y_score[keep, k])
                          for k in range(y_true.shape[1])]))


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Fraction of exact matches; y_true, y_pred: [N] of any comparable dtype."""
    return float(np.mean(np.asarray(y_true) == np.asarray(y_pred)))


def multiclass_log_loss(y_true: np.ndarray, probs: np.ndarray, eps: float = LOG_LOSS_EPS) -> float:
    """Mean negative log-probability of the true class, as on Kaggle.

    y_true: [N] int class indices, or [N, K] one-hot; probs: [N, K] non-negative.
    Rows are renormalised to sum to 1 and clipped to [eps, 1 - eps].
    """
    probs = np.asarray(probs, dtype=np.float64)
    y_true = np.asarray(y_true)
    if y_true.ndim == 2:
        y_true = y_true.argmax(axis=1)
    probs = probs / probs.sum(axis=1, keepdims=True)
    probs = np.clip(probs, eps, 1.0 - eps)
    picked = probs[np.arange(probs.shape[0]), y_true.astype(np.int64)]
    return float(-np.mean(np.log(picked)))


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


def _jaccard(a: str, b: str) -> float:
    sa, sb = set(str(a).lower().split()), set(str(b).lower().split())
    if not sa and not sb:
        return 1.0
    inter = len(sa & sb)
    return inter / (len(sa) + len(sb) - inter)


def word_jaccard(true_texts: Sequence[str], pred_texts: Sequence[str]) -> float:
    """Mean word-level Jaccard (lower-cased, whitespace split) as in tweet-sentiment-extraction.

    true_texts, pred_texts: [N] strings. Two empty strings count as a perfect match.
    """
    return float(np.mean([_jaccard(t, p) for t, p in zip(true_texts, pred_texts)]))


def quadratic_weighted_kappa(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Cohen's kappa with quadratic weights; y_true, y_pred: [N] integer ratings."""
    y_true = np.asarray(y_true).astype(np.int64)
    y_pred = np.asarray(y_pred).astype(np.int64)
    labels = np.union1d(y_true, y_pred)
    k = labels.size
    ti, pi = np.searchsorted(labels, y_true), np.searchsorted(labels, y_pred)
    observed = np.zeros((k, k))
    np.add.at(observed, (ti, pi), 1.0)
    expected = np.outer(observed.sum(1), observed.sum(0)) / observed.sum()
    idx = np.arange(k)
    weights = (idx[:, None] - idx[None, :]) ** 2 / max((k - 1) ** 2, 1)
    denom = (weights * expected).sum()
    if denom == 0:
        return 1.0 if (weights * observed).sum() == 0 else 0.0
    return float(1.0 - (weights * observed).sum() / denom)


def pearson(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Pearson correlation coefficient; [N] each, neither constant."""
    return float(np.corrcoef(np.asarray(y_true, float), np.asarray(y_pred, float))[0, 1])


def map_at_k(actual: Sequence[set], predicted: Sequence[Sequence[str]], k: int = 5) -> float:
    """Mean average precision at k with one relevant label per row (whale-categorization)."""
    scores = []
    for truth, preds in zip(actual, predicted):
        score, seen = 0.0, set()
        for i, p in enumerate(list(preds)[:k]):
            if p in truth and p not in seen:
                score = 1.0 / (i + 1)
                break
            seen.add(p)
        scores.append(score)
    return float(np.mean(scores))


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


# ----------------------------------------------------------------------------- graders


def _examples(values, n: int = 3) -> str:
    return ", ".join(repr(v) for v in list(values)[:n])


def _norm_ids(col: pd.Series) -> np.ndarray:
    """Ids as strings, so 7, 7.0 and '7' match; [N] object."""
    num = pd.to_numeric(col, errors="coerce")
    if num.notna().all() and np.all(np.mod(num.to_numpy(dtype=float), 1) == 0):
        return num.astype(np.int64).astype(str).to_numpy(dtype=object)
    return col.astype(str).str.strip().to_numpy(dtype=object)


def _numeric(sub: pd.DataFrame, cols: Sequence[str]) -> np.ndarray:
    """The columns as float64 [N, K]; raises InvalidSubmission on text, NaN or inf."""
    out = []
    for c in cols:
        raw = sub[c]
        num = pd.to_numeric(raw, errors="coerce")
        bad = num.isna() & raw.notna()
        if bad.any():
            raise InvalidSubmission(
                f"Column '{c}' must be numeric, but has values like {_examples(raw[bad])}.")
        if num.isna().any():
            raise InvalidSubmission(
                f"Column '{c}' has {int(num.isna().sum())} missing (NaN or empty) value(s); "
                "predict a number for every row.")
        arr = num.to_numpy(dtype=np.float64)
        if not np.isfinite(arr).all():
            raise InvalidSubmission(f"Column '{c}' has infinite values; predict finite numbers.")
        out.append(arr)
    return np.stack(out, axis=1)


def _in_unit_interval(values: np.ndarray, cols: Sequence[str]) -> None:
    if (values < 0).any() or (values > 1).any():
        bad = [c for k, c in enumerate(cols) if (values[:, k] < 0).any() or (values[:, k] > 1).any()]
        raise InvalidSubmission(
            f"Column(s) {_examples(bad)} must hold probabilities in [0, 1], but some are outside.")


@dataclasses.dataclass(frozen=True)
class TableGrader:
    """grade(submission_df, answers_df) -> float for a CSV keyed by an id column.

    metric: a key of METRICS. id_col: the key column. targets: the submission columns that
    are graded (for log loss: the class columns; None = every answers column but id_col).
    answer_label: for log loss, the answers column holding the class name (the answers are
    one-hot in `targets` when None). prob_tolerance: how far a row of probabilities may sum
    from 1 before it is rejected (accepted rows are renormalised, as on Kaggle).
    A frozen dataclass, so a Task pickles across processes.
    """

    metric: str
    id_col: str
    targets: Optional[tuple] = None
    answer_label: Optional[str] = None
    prob_tolerance: float = 1e-2

    def __post_init__(self):
        if self.metric not in METRICS:
            raise ValueError(f"Unknown metric '{self.metric}'; known: {sorted(METRICS)}.")

    def columns(self, answers: pd.DataFrame) -> list:
        if self.targets is not None:
            return list(self.targets)
        return [c for c in answers.columns if c != self.id_col]

    def __call__(self, submission: pd.DataFrame, answers: pd.DataFrame) -> float:
        cols = self.columns(answers)
        sub, ans = self._align(submission, answers, cols)
        m = self.metric
        if m in ("word_jaccard", "map_at_5"):
            pred = sub[cols[0]].fillna("").astype(str).tolist()
            true = ans[cols[0]].fillna("").astype(str).tolist()
            if m == "word_jaccard":
                return word_jaccard(true, pred)
            return map_at_k([set(t.split()) for t in true], [p.split() for p in pred], k=5)
        if m == "accuracy":
            return self._accuracy(sub[cols[0]], ans[cols[0]], cols[0])
        pred = _numeric(sub, cols)
        if m in ("multiclass_log_loss", "binary_log_loss"):
            return self._log_loss(pred, ans, cols)
        true = ans[cols].to_numpy(dtype=np.float64)
        if m in ("auc", "mean_column_auc"):
            _in_unit_interval(pred, cols)
            return auc(true[:, 0], pred[:, 0]) if m == "auc" else mean_column_auc(true, pred)
        if m == "rmsle_column_mean":
            if (pred <= -1).any():
                raise InvalidSubmission(
                    "Predictions must be greater than -1 for RMSLE (log1p is taken); "
                    "clip them at 0.")
            return rmsle_column_mean(true, pred)
        if m == "quadratic_weighted_kappa":
            if not np.all(np.mod(pred, 1) == 0):
                raise InvalidSubmission(
                    f"Column '{cols[0]}' must hold integer ratings; round the predictions.")
            return quadratic_weighted_kappa(true[:, 0], pred[:, 0])
        if m == "pearson":
            if np.ptp(pred[:, 0]) == 0:
                raise InvalidSubmission(
                    f"Column '{cols[0]}' is constant, so the Pearson correlation is undefined.")
            return pearson(true[:, 0], pred[:, 0])
        return {"rmse": rmse, "mae": mae, "mcrmse": mcrmse}[m](true, pred)

    def _align(self, submission, answers, cols):
        """Checks columns, row count and ids; returns both frames sorted by id."""
        if not isinstance(submission, pd.DataFrame) or submission.shape[0] == 0:
            raise InvalidSubmission("The submission has no rows; write one row per test id.")
        needed = [self.id_col] + list(cols)
        missing = [c for c in needed if c not in submission.columns]
        if missing:
            raise InvalidSubmission(
                f"The submission is missing column(s) {_examples(missing, 5)}"
                f"{' and more' if len(missing) > 5 else ''}; expected the header "
                f"{','.join(needed[:8])}{',...' if len(needed) > 8 else ''}.")
        if len(submission) != len(answers):
            raise InvalidSubmission(
                f"The submission has {len(submission)} rows but the test set has "
                f"{len(answers)}; write exactly one row per test id.")
        if submission[self.id_col].isna().any():
            raise InvalidSubmission(f"Column '{self.id_col}' has missing ids.")
        sid, aid = _norm_ids(submission[self.id_col]), _norm_ids(answers[self.id_col])
        s_order, a_order = np.argsort(sid, kind="stable"), np.argsort(aid, kind="stable")
        if not np.array_equal(sid[s_order], aid[a_order]):
            extra = sorted(set(sid) - set(aid))
            absent = sorted(set(aid) - set(sid))
            if not extra and not absent:
                raise InvalidSubmission(
                    f"Column '{self.id_col}' repeats some ids; write each test id exactly once.")
            raise InvalidSubmission(
                f"The submission's '{self.id_col}' values do not match the test ids: "
                f"{len(extra)} unknown (e.g. {_examples(extra)}) and {len(absent)} missing "
                f"(e.g. {_examples(absent)}); use the ids from test.csv.")
        sub = submission.iloc[s_order].reset_index(drop=True)
        ans = answers.iloc[a_order].reset_index(drop=True)
        return sub, ans

    def _accuracy(self, pred: pd.Series, true: pd.Series, col: str) -> float:
        if pred.isna().any():
            raise InvalidSubmission(f"Column '{col}' has missing values; predict every row.")
        pn, tn = pd.to_numeric(pred, errors="coerce"), pd.to_numeric(true, errors="coerce")
        if pn.notna().all() and tn.notna().all():
            return accuracy(tn.to_numpy(float), pn.to_numpy(float))
        norm = lambda s: s.astype(str).str.strip().str.lower().to_numpy()
        return accuracy(norm(true), norm(pred))

    def _log_loss(self, pred: np.ndarray, ans: pd.DataFrame, cols: list) -> float:
        _in_unit_interval(pred, cols)
        if self.metric == "binary_log_loss":
            pred = np.concatenate([1.0 - pred, pred], axis=1)
            true = ans[cols[0]].to_numpy(dtype=np.int64)
        elif self.answer_label is not None:
            names = ans[self.answer_label].astype(str).to_numpy()
            lookup = {str(c): k for k, c in enumerate(cols)}
            true = np.array([lookup[n] for n in names], dtype=np.int64)
        else:
            true = ans[cols].to_numpy(dtype=np.float64).argmax(axis=1)
        sums = pred.sum(axis=1)
        far = np.abs(sums - 1.0) > self.prob_tolerance
        if far.any():
            raise InvalidSubmission(
                f"Each row's class probabilities must sum to 1, but {int(far.sum())} row(s) "
                f"do not (e.g. a row sums to {sums[far][0]:.4g}); normalise them.")
        return multiclass_log_loss(true, pred)


# ----------------------------------------------------------------------------- files


def read_submission(path) -> pd.DataFrame:
    """Reads a submission CSV; raises InvalidSubmission for a missing, empty or unreadable file.

    Only empty cells read as NaN (so a text span such as "None" stays text).
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise InvalidSubmission(
            f"No submission file at {path}; the program must write submission.csv "
            "in its working directory.")
    size = path.stat().st_size
    if size == 0:
        raise InvalidSubmission("The submission file is empty; write a header and one row per test id.")
    if size > MAX_SUBMISSION_BYTES:
        raise InvalidSubmission(f"The submission file is {size >> 20} MiB, too large to grade.")
    try:
        return read_csv_table(path)
    except UnicodeDecodeError:
        raise InvalidSubmission("The submission file is not UTF-8 text; write a plain CSV.") from None
    except pd.errors.EmptyDataError:
        raise InvalidSubmission("The submission file has no header or rows.") from None
    except (pd.errors.ParserError, ValueError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InvalidSubmission(f"The submission file could not be read as CSV: {first}.") from None


def read_csv_table(path) -> pd.DataFrame:
    """pd.read_csv where only empty cells are NaN; used for submissions and answers alike."""
    return pd.read_csv(path, encoding="utf-8", keep_default_na=False, na_values=[""],
                       low_memory=False)


def grade_submission(task: Task, submission_path) -> dict:
    """Grades a submission file for `task`, like mlebench's grade-sample.

    Returns {"task_id", "metric", "is_lower_better", "score": float | None,
    "valid_submission": bool, "message": str (why invalid, else "")}. Never raises for a
    bad submission; raises FileNotFoundError only if the task's own answers are missing.
    """
    report = {"task_id": task.id, "metric": task.metric,
              "is_lower_better": task.is_lower_better, "score": None,
              "valid_submission": False, "message": ""}
    answers_path = task.private_dir / task.answers_file
    if not answers_path.is_file():
        raise FileNotFoundError(f"Task '{task.id}' has no answers file at {answers_path}; "
                                "prepare the task again.")
    try:
        submission = read_submission(submission_path)
        score = float(task.grader(submission, read_csv_table(answers_path)))
        if not np.isfinite(score):
            raise InvalidSubmission(f"The metric came out as {score}; check the predictions.")
    except InvalidSubmission as e:
        report["message"] = str(e)
        return report
    except Exception as e:  # a grader tripping over odd input is still the submission's fault
        report["message"] = f"The submission could not be graded: {type(e).__name__}: {e}"
        return report
    report.update(score=score, valid_submission=True)
    return report
