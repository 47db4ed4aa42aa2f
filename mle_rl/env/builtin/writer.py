"""Shared writer for built-in tasks: the public/private split, the files, the Kaggle-style page.

Every built-in task is written the same way: `public/train.csv`, `public/test.csv` (no
targets), `public/sample_submission.csv` (a valid, uninformed submission), any extra public
files (e.g. `public/images/*.png`), `private/answers.csv` (test ids and targets) and
`description.md`.
"""

from __future__ import annotations

import pathlib
import textwrap
from typing import Mapping, Optional, Sequence

import numpy as np
import pandas as pd

# One paragraph per metric, for the Evaluation section.
METRIC_TEXT = {
    "auc": "Submissions are evaluated on the area under the ROC curve (AUC) between the "
           "predicted probability and the observed target. Higher is better (1.0 is perfect, "
           "0.5 is chance).",
    "multiclass_log_loss": "Submissions are evaluated with the multi-class logarithmic loss: "
           "for each row, minus the log of the probability given to the true class, averaged "
           "over rows. Probabilities are clipped to [eps, 1 - eps] (eps = 2.2e-16); each row "
           "must sum to 1 within 1e-6 (rows are not renormalised). Lower is better.",
    "rmse": "Submissions are evaluated on the root mean squared error (RMSE) between the "
            "predicted and the observed target. Lower is better.",
    "rmsle_column_mean": "Submissions are evaluated on the root mean squared logarithmic error "
            "(RMSLE), sqrt(mean((log(1 + p) - log(1 + a))^2)), computed for each target column "
            "and averaged over the columns. Predictions must be greater than -1. Lower is better.",
    "word_jaccard": "Submissions are evaluated on the word-level Jaccard score between the "
            "predicted and the true span, averaged over rows: both strings are lower-cased and "
            "split on whitespace, and the score is |A ∩ B| / |A ∪ B|. Higher is better.",
}

SANDBOX_TEXT = (
    "Your program runs with its working directory as the current directory. The competition "
    "files are available read-only under `./input/` (for example `./input/train.csv`); the "
    "program must write its predictions to `./submission.csv` in the working directory. "
    "There is no internet access.")


def split_ids(n: int, test_frac: float, seed: int,
              stratify: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """Shuffles row indices 0..n-1 and splits them; returns (train_idx [n-m], test_idx [m]).

    With `stratify` ([n] labels) each label keeps its share in the test part.
    """
    rng = np.random.default_rng(seed)
    if stratify is None:
        perm = rng.permutation(n)
        m = int(round(n * test_frac))
        return np.sort(perm[m:]), np.sort(perm[:m])
    test = []
    for label in sorted(set(stratify.tolist()), key=str):
        rows = np.flatnonzero(stratify == label)
        rows = rng.permutation(rows)
        test.extend(rows[: int(round(len(rows) * test_frac))].tolist())
    test = np.sort(np.array(test, dtype=np.int64))
    train = np.setdiff1d(np.arange(n), test)
    return train, test


def describe(*, title: str, overview: str, files: Mapping[str, str], columns: Mapping[str, str],
             metric: str, submission_text: str, sample_submission: pd.DataFrame,
             notes: str = "") -> str:
    """The Kaggle-style page: Overview, Data (files and columns), Evaluation, Submission."""
    file_lines = "\n".join(f"* `{name}`: {text}" for name, text in files.items())
    col_lines = "\n".join(f"* `{name}`: {text}" for name, text in columns.items())
    head = sample_submission.head(3).copy()
    for c in head.columns:  # keep long text cells readable in the example
        if not pd.api.types.is_numeric_dtype(head[c]):
            head[c] = [v if len(str(v)) <= 60 else str(v)[:57] + "..." for v in head[c]]
    example = head.to_csv(index=False, float_format="%.4g").strip()
    parts = [
        f"# {title}",
        "## Overview",
        textwrap.fill(overview, 100),
        textwrap.fill(SANDBOX_TEXT, 100),
        "## Data",
        "Files in `./input/`:",
        file_lines,
        "Columns:",
        col_lines,
    ]
    if notes:
        parts.append(textwrap.fill(notes, 100))
    parts += [
        "## Evaluation",
        textwrap.fill(METRIC_TEXT[metric], 100),
        "### Submission file",
        textwrap.fill(submission_text + " The file must have a header row, exactly one row "
                      "per id in `test.csv`, and look like this:", 100),
        f"```\n{example}\n...\n```",
    ]
    return "\n\n".join(parts) + "\n"


def write_task(root: pathlib.Path, *, description: str, train: pd.DataFrame,
               test: pd.DataFrame, answers: pd.DataFrame, sample_submission: pd.DataFrame,
               extra_files: Sequence[str] = ()) -> None:
    """Writes the task under `root` (which must exist). `extra_files`: public files already
    written by the builder, only checked here."""
    public, private = root / "public", root / "private"
    public.mkdir(exist_ok=True)
    private.mkdir(exist_ok=True)
    if len(test) != len(answers) or len(test) != len(sample_submission):
        raise AssertionError("test, answers and sample submission must have the same rows")
    train.to_csv(public / "train.csv", index=False)
    test.to_csv(public / "test.csv", index=False)
    sample_submission.to_csv(public / "sample_submission.csv", index=False)
    answers.to_csv(private / "answers.csv", index=False)
    for name in extra_files:
        if not (public / name).exists():
            raise AssertionError(f"builder did not write public/{name}")
    (root / "description.md").write_text(description, encoding="utf-8")
