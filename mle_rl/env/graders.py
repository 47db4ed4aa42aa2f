"""Graders: check a submission as MLE-bench's grade.py does, then score it with `metrics`.

`TableGrader` takes the submission and answers as DataFrames, raises `InvalidSubmission`
(one sentence for a person) on every submission MLE-bench rejects, and on a few that it
would score but should not (GRADING.md lists them), and otherwise returns the metric.
`read_submission` reads a file as hostile input (`submission_file`: a regular file with
one name, bounded in size and line length); `grade_submission` grades a file for a `Task`
and never raises for a bad file.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np
import pandas as pd
from pandas.api.types import is_numeric_dtype

from mle_rl.env import metrics as M
from mle_rl.env import submission_file as F
from mle_rl.env.types import InvalidSubmission, Task

HEADERS = ("superset", "exact", "exact_id_first")
# MLE-bench's rules for a row of class probabilities: (wording, sums [N] -> ok [N]).
PROB_SUM_RULES = {
    "isclose": ("within 1e-6", lambda s: np.isclose(s, 1.0, atol=1e-6)),  # leaf, spooky
    "round6": ("to 6 decimals", lambda s: np.round(s, 6) == 1.0),         # lmsys
}


def _examples(values, n: int = 3) -> str:
    """The first n values as short reprs (NumPy scalars as plain Python values)."""
    shown = [repr(v.item() if isinstance(v, np.generic) else v) for v in list(values)[:n]]
    return ", ".join(r if len(r) <= 40 else r[:37] + "..." for r in shown)


# ----------------------------------------------------------------------------- checks


def check_header(sub: pd.DataFrame, id_col: str, cols: Sequence[str], header: str) -> None:
    """Raises unless `sub` has rows and the columns id_col + cols, as `header` demands."""
    if not isinstance(sub, pd.DataFrame) or sub.shape[0] == 0:
        raise InvalidSubmission("The submission has no rows; write one row per test id.")
    needed = [id_col] + list(cols)
    want = ",".join(needed[:8]) + (",..." if len(needed) > 8 else "")
    missing = [c for c in needed if c not in sub.columns]
    if missing:
        raise InvalidSubmission(
            f"The submission is missing column(s) {_examples(missing, 5)}"
            f"{' and more' if len(missing) > 5 else ''}; expected the header {want}.")
    extra = [c for c in sub.columns if c not in needed]
    if header != "superset" and extra:
        hint = (" (an index column: write the file with to_csv(index=False))"
                if any(str(c).startswith("Unnamed:") for c in extra) else "")
        raise InvalidSubmission(f"The submission has extra column(s) {_examples(extra)}{hint}; "
                                f"this competition accepts only the columns {want}.")
    if header == "exact_id_first" and sub.columns[0] != id_col:
        raise InvalidSubmission(f"The first column must be '{id_col}', not {sub.columns[0]!r}; "
                                f"write the header {want}.")


def _id_mismatch(sid: pd.Series, aid: pd.Series, id_col: str) -> InvalidSubmission:
    s, a = pd.Index(sid), pd.Index(aid)
    unknown, absent = s[~s.isin(a)].unique(), a[~a.isin(s)].unique()
    if len(unknown) == 0 and len(absent) == 0:
        return InvalidSubmission(
            f"Column '{id_col}' repeats some ids; write each test id exactly once.")
    return InvalidSubmission(
        f"The submission's '{id_col}' values do not match the test ids: {len(unknown)} unknown "
        f"(e.g. {_examples(unknown)}) and {len(absent)} missing (e.g. {_examples(absent)}); "
        "use the ids from the test set exactly.")


def align(sub: pd.DataFrame, answers: pd.DataFrame, id_col: str):
    """Both frames with row k of each holding the same id; raises on any other set of ids.

    Ids match as pandas compares them (7 == 7.0, but '7' != 7 and 'a ' != 'a'). Duplicate
    test ids (detecting-insults keys rows by comment text) pair up in sorted order.
    """
    if len(sub) != len(answers):
        raise InvalidSubmission(
            f"The submission has {len(sub)} rows but the test set has {len(answers)}; "
            "write exactly one row per test id.")
    sid, aid = sub[id_col], answers[id_col]
    if sid.isna().any():
        raise InvalidSubmission(f"Column '{id_col}' has missing ids.")
    index = pd.Index(aid)
    if index.is_unique:
        pos = index.get_indexer(pd.Index(sid))
        if (pos < 0).any() or np.unique(pos).size != pos.size:
            raise _id_mismatch(sid, aid, id_col)
        return sub.iloc[np.argsort(pos)].reset_index(drop=True), answers.reset_index(drop=True)
    s, a = sid.to_numpy(dtype=object), aid.to_numpy(dtype=object)
    try:
        s_order, a_order = np.argsort(s, kind="stable"), np.argsort(a, kind="stable")
        same = bool(np.array_equal(s[s_order], a[a_order]))
    except TypeError:  # ids of mixed types
        same = False
    if not same:
        raise _id_mismatch(sid, aid, id_col)
    return (sub.iloc[s_order].reset_index(drop=True),
            answers.iloc[a_order].reset_index(drop=True))


def numeric(sub: pd.DataFrame, cols: Sequence[str]) -> np.ndarray:
    """The columns as float64 [N, K]; raises on text, NaN or inf (a column read as text
    is refused even if its cells look numeric, as MLE-bench's metrics refuse it)."""
    out = []
    for c in cols:
        raw = sub[c]
        if not is_numeric_dtype(raw.dtype):  # bool counts as numeric
            text = raw[raw.notna()]
            bad = text[pd.to_numeric(text, errors="coerce").isna()]
            if len(bad):
                raise InvalidSubmission(
                    f"Column '{c}' must be numeric, but has values like {_examples(bad)}.")
            if not raw.isna().any():
                raise InvalidSubmission(f"Column '{c}' must hold plain numbers.")
        arr = raw.to_numpy(dtype=np.float64, na_value=np.nan)
        if np.isnan(arr).any():
            raise InvalidSubmission(
                f"Column '{c}' has {int(np.isnan(arr).sum())} missing (NaN or empty) value(s); "
                "predict a number for every row.")
        if not np.isfinite(arr).all():
            raise InvalidSubmission(f"Column '{c}' has infinite values; predict finite numbers.")
        out.append(arr)
    return np.stack(out, axis=1)


def in_unit_interval(values: np.ndarray, cols: Sequence[str]) -> None:
    """Raises unless every value of [N, K] lies in [0, 1]."""
    bad = [c for k, c in enumerate(cols) if (values[:, k] < 0).any() or (values[:, k] > 1).any()]
    if bad:
        raise InvalidSubmission(
            f"Column(s) {_examples(bad)} must hold probabilities in [0, 1], but some are outside.")


def class_labels(pred: pd.Series, true: pd.Series, col: str):
    """(pred, true) as arrays scikit-learn's classification metrics accept; raises otherwise.

    As scikit-learn: no missing labels, no text among numeric (or boolean) answers and no
    numbers among text answers, and numeric labels must be whole numbers.
    """
    if pred.isna().any():
        raise InvalidSubmission(f"Column '{col}' has missing values; predict every row.")
    if not is_numeric_dtype(true.dtype):
        p = pred.to_numpy(dtype=object)
        if not all(isinstance(v, str) for v in p):
            raise InvalidSubmission(f"Column '{col}' must hold class names like "
                                    f"{_examples(true.unique())}, not numbers.")
        return p, true.to_numpy(dtype=object)
    if not is_numeric_dtype(pred.dtype):
        raise InvalidSubmission(f"Column '{col}' must hold labels like "
                                f"{_examples(true.unique())}, but has text like "
                                f"{_examples(pred[pd.to_numeric(pred, errors='coerce').isna()])}.")
    p = pred.to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore"):
        whole = np.isfinite(p).all() and bool(np.all(p == p.astype(np.int64)))
    if not whole:
        raise InvalidSubmission(f"Column '{col}' must hold whole-number labels like "
                                f"{_examples(true.unique())}; round the predictions.")
    return p, true.to_numpy(dtype=np.float64)


# ----------------------------------------------------------------------------- grader


@dataclasses.dataclass(frozen=True)
class TableGrader:
    """grade(submission_df, answers_df) -> float for a CSV keyed by an id column.

    metric: a key of metrics.METRICS. id_col: the key column (rows match by id, never by
    position). targets: the graded columns (for log loss: the class columns; None = every
    answers column but id_col). answer_label: for multiclass log loss, the answers column
    holding the class name (else the answers are one-hot in `targets`). header:
    "superset" (other columns are ignored), "exact" (no other column, e.g. no index from
    `to_csv()`) or "exact_id_first" (and id_col first). prob_sum: the rule each row of
    class probabilities must meet, a key of PROB_SUM_RULES. mlebench_csv: read the CSVs as
    MLE-bench does (pandas' defaults: 'NA', 'None', 'null', 'nan', ... are missing), else
    only empty cells are missing. A frozen dataclass, so a Task pickles across processes.
    """

    metric: str
    id_col: str
    targets: Optional[tuple] = None
    answer_label: Optional[str] = None
    header: str = "superset"
    prob_sum: str = "isclose"
    mlebench_csv: bool = False

    def __post_init__(self):
        if self.metric not in M.METRICS:
            raise ValueError(f"Unknown metric '{self.metric}'; known: {sorted(M.METRICS)}.")
        if self.header not in HEADERS:
            raise ValueError(f"Unknown header rule '{self.header}'; use one of {HEADERS}.")
        if self.prob_sum not in PROB_SUM_RULES:
            raise ValueError(f"Unknown prob_sum rule '{self.prob_sum}'; use one of "
                             f"{sorted(PROB_SUM_RULES)}.")

    def graded_columns(self, answers: pd.DataFrame) -> list:
        if self.targets is not None:
            return list(self.targets)
        return [c for c in answers.columns if c != self.id_col]

    def __call__(self, submission: pd.DataFrame, answers: pd.DataFrame) -> float:
        cols = self.graded_columns(answers)
        check_header(submission, self.id_col, cols, self.header)
        sub, ans = align(submission, answers, self.id_col)
        m, col = self.metric, cols[0]
        if m == "word_jaccard":
            pred = sub[col].fillna("").astype(str).tolist()
            true = ans[col].fillna("").astype(str).tolist()
            if any(not t.split() and not p.split() for t, p in zip(true, pred)):
                raise InvalidSubmission(
                    "Word Jaccard is undefined (0/0) where a prediction and its answer both "
                    "have no words, and MLE-bench rejects the submission; predict at least "
                    "one word in every row.")
            return M.word_jaccard(true, pred)
        if m == "map_at_5":
            if sub[col].isna().any():
                raise InvalidSubmission(f"Column '{col}' has missing values; predict up to 5 "
                                        "labels per row, separated by single spaces.")
            return M.map_at_k([set(str(v).split(" ")) for v in ans[col]],
                              [str(v).split(" ") for v in sub[col]], k=5)
        if m in ("accuracy", "quadratic_weighted_kappa"):
            pred, true = class_labels(sub[col], ans[col], col)
            return M.accuracy(true, pred) if m == "accuracy" else \
                M.quadratic_weighted_kappa(true, pred)
        pred = numeric(sub, cols)
        if m in ("multiclass_log_loss", "binary_log_loss"):
            return self._log_loss(pred, ans, cols)
        true = ans[cols].to_numpy(dtype=np.float64)
        if m in ("auc", "mean_column_auc"):
            in_unit_interval(pred, cols)
            return M.auc(true[:, 0], pred[:, 0]) if m == "auc" else M.mean_column_auc(true, pred)
        if m == "rmsle_column_mean" and (pred <= -1).any():
            raise InvalidSubmission("Predictions must be greater than -1 for RMSLE (log1p is "
                                    "taken); clip them at 0.")
        if m == "pearson":
            if np.ptp(pred[:, 0]) == 0:
                raise InvalidSubmission(
                    f"Column '{col}' is constant, so the Pearson correlation is undefined.")
            return M.pearson(true[:, 0], pred[:, 0])
        return {"rmse": M.rmse, "mae": M.mae, "mcrmse": M.mcrmse,
                "rmsle_column_mean": M.rmsle_column_mean}[m](true, pred)

    def _log_loss(self, pred: np.ndarray, ans: pd.DataFrame, cols: list) -> float:
        in_unit_interval(pred, cols)
        if self.metric == "binary_log_loss":
            return M.binary_log_loss(ans[cols[0]].to_numpy(dtype=np.int64), pred[:, 0])
        sums = pred.sum(axis=1)
        wording, rule = PROB_SUM_RULES[self.prob_sum]
        far = ~rule(sums)
        if far.any():
            raise InvalidSubmission(
                f"Each row's class probabilities must sum to 1 ({wording}), but "
                f"{int(far.sum())} row(s) do not (e.g. a row sums to {sums[far][0]:.10g}); "
                "normalise them.")
        if self.answer_label is None:
            return M.multiclass_log_loss(ans[cols].to_numpy(dtype=np.float64), pred)
        lookup = {str(c): k for k, c in enumerate(cols)}
        names = ans[self.answer_label].astype(str)
        if not names.isin(list(lookup)).all():
            raise ValueError(f"The answers hold classes that are not among {cols}.")
        return M.multiclass_log_loss(names.map(lookup).to_numpy(dtype=np.int64), pred)


# ----------------------------------------------------------------------------- files


def read_csv_table(source, pandas_na: bool = False) -> pd.DataFrame:
    """pd.read_csv of a path or binary file, for submissions and answers alike.

    pandas_na: pandas' own missing markers ('NA', 'None', 'null', 'nan', ...) read as NaN,
    exactly as MLE-bench reads; else only empty cells do (a text span 'None' stays text).
    """
    if pandas_na:
        return pd.read_csv(source, encoding="utf-8")
    return pd.read_csv(source, encoding="utf-8", keep_default_na=False, na_values=[""],
                       low_memory=False)


def read_submission(path, max_bytes: int = F.MAX_SUBMISSION_BYTES,
                    pandas_na: bool = False) -> pd.DataFrame:
    """Reads a submission CSV as hostile input; raises InvalidSubmission, in one sentence,
    for a missing, special, linked, oversized, empty, non-UTF-8 or malformed file."""
    with F.open_submission(path, max_bytes) as f:
        F.check_lines(f)
        f.seek(0)
        try:
            return read_csv_table(f, pandas_na)
        except UnicodeDecodeError:
            raise InvalidSubmission("The submission file is not UTF-8 text; write a plain "
                                    "CSV.") from None
        except pd.errors.EmptyDataError:
            raise InvalidSubmission("The submission file has no header or rows.") from None
        except (pd.errors.ParserError, ValueError, OSError) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise InvalidSubmission(
                f"The submission file could not be read as CSV: {first}.") from None


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
    pandas_na = isinstance(task.grader, TableGrader) and task.grader.mlebench_csv
    try:
        submission = read_submission(submission_path, F.submission_limit(answers_path),
                                     pandas_na)
        score = float(task.grader(submission, read_csv_table(answers_path, pandas_na)))
        if not np.isfinite(score):
            raise InvalidSubmission(f"The metric came out as {score}; check the predictions.")
    except InvalidSubmission as e:
        report["message"] = str(e)
        return report
    except Exception as e:  # a grader tripping over odd input is still the submission's fault
        first = (str(e).strip().splitlines() or [""])[0][:200]
        report["message"] = f"The submission could not be graded: {type(e).__name__}: {first}"
        return report
    report.update(score=score, valid_submission=True)
    return report
