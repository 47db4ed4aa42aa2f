"""tabular-synth: a larger synthetic binary task shaped like tabular-playground-series-may-2022.

50,000 rows (40,000 train / 10,000 test) of 31 features: floats, integer counts, a 10-letter
code string `f_27` and two small categoricals. The target comes from pairwise interactions,
thresholds and the letters of `f_27`, so a linear model on the raw numeric columns is fast but
mediocre and boosted trees are clearly better. Measured on the test split, 2 shared CPU cores:
scaled logistic regression on the numeric columns, AUC 0.727 in 0.25 s; HistGradientBoosting
with defaults, 0.863 in 3-16 s (depending on load); with 400 trees and the letters of f_27 as
features, 0.928 in ~1-2 min.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pandas as pd

from mle_rl.env.builtin import writer
from mle_rl.env.builtin.spec import BuiltinSpec
from mle_rl.env.graders import TableGrader

SEED = 2022
N_ROWS = 50_000
TEST_FRAC = 0.2
LETTERS = np.array(list("ABCDEFGHIJKLMNOPQRST"))


def make_frame(n: int = N_ROWS, seed: int = SEED) -> pd.DataFrame:
    """[n, 33]: id, f_00..f_30 and target in {0, 1}; deterministic for a given seed."""
    rng = np.random.default_rng(seed)
    cont_a = rng.normal(size=(n, 7))                      # f_00..f_06
    counts = rng.poisson(lam=rng.uniform(1.0, 5.0, size=12), size=(n, 12))  # f_07..f_18
    cont_b = rng.normal(scale=1.5, size=(n, 8))           # f_19..f_26
    # f_27: 10 letters, each position with its own skewed letter distribution
    probs = rng.dirichlet(np.full(len(LETTERS), 0.6), size=10)
    codes = np.stack([rng.choice(len(LETTERS), size=n, p=probs[j]) for j in range(10)], axis=1)
    f27 = np.array(["".join(row) for row in LETTERS[codes]])
    f28 = rng.normal(scale=200.0, size=n)
    f29 = rng.integers(0, 2, size=n)
    f30 = rng.integers(0, 3, size=n)

    a, c, b = cont_a, counts - counts.mean(axis=0), cont_b
    n_unique = np.array([len(set(s)) for s in f27])
    z = (
        0.6 * a[:, 0] - 0.5 * a[:, 3] + 0.25 * b[:, 1] + 0.002 * f28         # weak linear part
        + 1.1 * a[:, 1] * a[:, 2] - 0.9 * a[:, 4] * b[:, 0] / 1.5             # interactions
        + 0.8 * np.sign(b[:, 2]) * np.sign(b[:, 3])
        + 1.2 * (np.abs(a[:, 5]) > 1.2) - 0.6                                 # thresholds
        + 0.9 * (f29 == 1) * (b[:, 4] > 0.5) - 0.7 * (f30 == 2) * (a[:, 6] < 0)
        + 0.35 * np.tanh(c[:, 0] * c[:, 3] / 3.0) + 0.15 * c[:, 7]
        + 0.45 * (n_unique - n_unique.mean())                                 # letters of f_27
        + 0.9 * (codes[:, 2] == codes[:, 7]) - 0.3 * (codes[:, 0] < 5)
        + rng.logistic(scale=0.35, size=n)
    )
    target = (z > np.median(z)).astype(int)
    df = pd.DataFrame({"id": np.arange(n)})
    for j in range(7):
        df[f"f_{j:02d}"] = np.round(cont_a[:, j], 6)
    for j in range(12):
        df[f"f_{7 + j:02d}"] = counts[:, j]
    for j in range(8):
        df[f"f_{19 + j:02d}"] = np.round(cont_b[:, j], 6)
    df["f_27"] = f27
    df["f_28"] = np.round(f28, 4)
    df["f_29"] = f29
    df["f_30"] = f30
    df["target"] = target
    return df


def description(train: pd.DataFrame, test: pd.DataFrame, sample: pd.DataFrame,
                seed: int = SEED) -> str:
    """The task page of a split of `make_frame(n, seed)` (tabular-synth's and its smaller
    variants')."""
    return writer.describe(
        title="Tabular Synth: Simulated Manufacturing Control Data",
        overview="The data simulates measurements from a manufacturing control process. Each "
                 "row is one run, described by continuous sensor readings, integer event "
                 "counts, a 10-letter process code and two small categorical settings; the "
                 "target says whether the run reached state 1. The features interact: how one "
                 "reading matters can depend on another, and the letters of the process code "
                 "carry signal. The data is synthetic and fixed (generated with seed "
                 f"{seed}).",
        files={"train.csv": f"{len(train)} runs with the target.",
               "test.csv": f"{len(test)} runs without it.",
               "sample_submission.csv": "a valid submission predicting 0.5 everywhere."},
        columns={"id": "row identifier",
                 "f_00..f_06, f_19..f_26, f_28": "continuous readings",
                 "f_07..f_18": "integer counts",
                 "f_27": "a 10-letter process code (letters A-T)",
                 "f_29": "a binary setting (0 or 1)", "f_30": "a ternary setting (0, 1 or 2)",
                 "target": "0 or 1 (train only)"},
        metric="auc",
        submission_text="Predict a probability in [0, 1] that `target` is 1.",
        sample_submission=sample)


def split(df: pd.DataFrame, seed: int = SEED):
    """(train, test without the target, answers, sample submission) of a frame."""
    tr, te = writer.split_ids(len(df), TEST_FRAC, seed)
    train, test_full = df.iloc[tr], df.iloc[te]
    answers = test_full[["id", "target"]]
    return train, test_full.drop(columns="target"), answers, answers.assign(target=0.5)


def build(root: pathlib.Path) -> None:
    train, test, answers, sample = split(make_frame())
    writer.write_task(root, description=description(train, test, sample), train=train,
                      test=test, answers=answers, sample_submission=sample)


SPECS = (
    BuiltinSpec(id="tabular-synth", metric="auc", modality="tabular",
                grader=TableGrader("auc", "id", ("target",)), build=build, timeout_s=180,
                memory_mb=4096, reward_scale=10.0, packages=("numpy",)),
)
