"""Descriptions of generated tasks, worded differently every time.

A page has four parts (overview, data, evaluation, submission), each written from one of
several phrasings, under one of several heading styles, in a shuffled order (the overview
first more often than not), and sometimes cut short: a policy trained on these pages must
find the metric, the target and the file format wherever they are, not memorize a layout.
"""

from __future__ import annotations

import random
from typing import Sequence

import pandas as pd

# metric -> phrasings of what is measured (direction and format follow separately).
METRIC_PHRASES = {
    "auc": ("the area under the ROC curve (AUC) between the predicted probability and the "
            "observed target", "ROC AUC of your predicted probabilities",
            "AUC: how well the predicted probabilities rank positives above negatives",
            "the area under the receiver operating characteristic curve"),
    "accuracy": ("classification accuracy: the share of rows whose predicted label is right",
                 "accuracy (the fraction of correctly predicted labels)",
                 "the percentage of test rows classified correctly"),
    "binary_log_loss": ("the binary log loss (cross-entropy) of the predicted probability",
                        "logarithmic loss on the probability of the positive class",
                        "binary cross-entropy between predicted probabilities and outcomes"),
    "multiclass_log_loss": ("the multi-class logarithmic loss: minus the log of the probability "
                            "given to the true class, averaged over rows",
                            "multi-class log loss (cross-entropy) of the class probabilities",
                            "log loss over the predicted class probabilities"),
    "rmse": ("the root mean squared error (RMSE) between predicted and observed values",
             "RMSE", "root-mean-square error of the predictions"),
    "mae": ("the mean absolute error (MAE) between predicted and observed values",
            "MAE (mean absolute error)", "the average absolute difference between prediction "
            "and truth"),
    "rmsle_column_mean": ("the root mean squared logarithmic error (RMSLE), "
                          "sqrt(mean((log(1 + p) - log(1 + a))^2)), per target column, averaged "
                          "over the columns", "mean column-wise RMSLE",
                          "RMSLE of each target, averaged"),
    "mcrmse": ("the mean column-wise root mean squared error (MCRMSE): the RMSE of each target "
               "column, averaged", "MCRMSE over the target columns",
               "column-averaged RMSE"),
}
LOWER = {"auc": False, "accuracy": False, "binary_log_loss": True, "multiclass_log_loss": True,
         "rmse": True, "mae": True, "rmsle_column_mean": True, "mcrmse": True}
HEADINGS = (("## {}", "# {}"), ("### {}", "## {}"), ("{}:", "{}"), ("**{}**", "# {}"))
NAMES = {"overview": ("Overview", "Description", "About", "The task"),
         "data": ("Data", "Dataset", "Files", "Data description"),
         "evaluation": ("Evaluation", "Metric", "Scoring", "How you are scored"),
         "submission": ("Submission", "Submission file", "What to submit", "Output format")}


def _pick(rng: random.Random, options: Sequence[str]) -> str:
    return options[rng.randrange(len(options))]


def _target_sentence(rng, kind: str, targets: Sequence[str], positive=None, classes=()) -> str:
    t = ", ".join(f"`{c}`" for c in targets)
    if kind == "binary":
        return _pick(rng, (f"Predict {t}: 1 when {positive}, else 0.",
                           f"The target {t} is 1 if {positive} and 0 otherwise.",
                           f"Your model should tell whether {positive} ({t} = 1)."))
    if kind == "multiclass":
        shown = ", ".join(str(c) for c in classes[:8]) + (", ..." if len(classes) > 8 else "")
        return _pick(rng, (f"Predict the class in {t} ({len(classes)} classes: {shown}).",
                           f"Each row belongs to one of {len(classes)} classes ({shown}), given "
                           f"in {t}.", f"Classify each row by {t}."))
    if kind == "multireg":
        return _pick(rng, (f"Predict the {len(targets)} numeric targets {t}.",
                           f"There are {len(targets)} targets to predict: {t}."))
    return _pick(rng, (f"Predict the numeric value of {t}.", f"The target is {t}, a number.",
                       f"Estimate {t} for each test row."))


def _submission_sentence(rng, metric: str, kind: str, targets, id_col: str) -> str:
    t = ", ".join(f"`{c}`" for c in targets)
    if metric in ("auc", "binary_log_loss"):
        what = _pick(rng, (f"a probability in [0, 1] that {t} is 1",
                           f"the predicted probability of {t} = 1"))
    elif metric == "multiclass_log_loss":
        what = _pick(rng, ("one probability per class, in the class columns of the sample "
                           "submission; each row must sum to 1",
                           "a column of probabilities for every class (rows sum to one)"))
    elif metric == "accuracy":
        what = _pick(rng, (f"the predicted label in {t}", f"one of the class labels for {t}"))
    else:
        what = _pick(rng, (f"a number for {t}", f"the predicted value(s) of {t}"))
    return _pick(rng, (f"For every `{id_col}` in test.csv, give {what}.",
                       f"Write one row per test `{id_col}` with {what}.",
                       f"The submission holds `{id_col}` and {what}."))


def describe(rng: random.Random, *, title: str, about: str, origin: str, kind: str,
             metric: str, id_col: str, targets: Sequence[str], features: Sequence[str],
             n_train: int, n_test: int, sample: pd.DataFrame, positive=None,
             classes: Sequence = ()) -> str:
    """One page for a generated task; every call words it differently (see module doc)."""
    heading, title_fmt = _pick(rng, HEADINGS)
    direction = "Lower is better." if LOWER[metric] else "Higher is better."
    overview = " ".join(s for s in [
        _pick(rng, (f"This task uses the {title} data ({origin}).",
                    f"The data come from {title}, as found in {origin}.",
                    f"A table from {origin}: {title}.")),
        about,
        _target_sentence(rng, kind, targets, positive, classes)] if s)
    shown = list(features[:12])
    more = f" and {len(features) - len(shown)} more" if len(features) > len(shown) else ""
    data = "\n".join([
        _pick(rng, ("Files in `./input/`:", "The input directory holds:", "You get three files:")),
        f"* `train.csv`: {n_train} rows with `{id_col}`, the features and the target(s).",
        f"* `test.csv`: {n_test} rows with `{id_col}` and the features only.",
        "* `sample_submission.csv`: a valid submission in the expected format.",
        _pick(rng, ("Feature columns: ", "Columns: ", "The features are ")) +
        ", ".join(f"`{c}`" for c in shown) + more + "."])
    evaluation = " ".join([
        _pick(rng, ("Submissions are evaluated on", "The score is", "We measure")),
        _pick(rng, METRIC_PHRASES[metric]) + ".", direction])
    example = sample.head(3).to_csv(index=False, float_format="%.4g").strip()
    submission = "\n".join([
        _submission_sentence(rng, metric, kind, targets, id_col),
        _pick(rng, ("It looks like this:", "For example:", "Format:")),
        f"```\n{example}\n...\n```"])
    sections = {"overview": overview, "data": data, "evaluation": evaluation,
                "submission": submission}
    order = list(sections)
    rest = order[1:] if rng.random() < 0.7 else order
    rng.shuffle(rest)
    order = (["overview"] + rest) if len(rest) == 3 else rest
    parts = [title_fmt.format(title)]
    for name in order:
        parts += [heading.format(_pick(rng, NAMES[name])), sections[name]]
    if rng.random() < 0.15:            # a page cut short (the data section is the one lost)
        cut = [i for i, n in enumerate(order) if n == "data"]
        if cut:
            del parts[1 + 2 * cut[0]: 3 + 2 * cut[0]]
    return "\n\n".join(parts) + "\n"
