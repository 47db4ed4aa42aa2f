"""Small real tabular tasks from data that ships with scikit-learn and palmerpenguins.

* breast-cancer-diagnosis: binary, AUC (higher is better).
* penguin-island: 3-class with missing values and categoricals, log loss (lower is better).
* diabetes-progression: regression, RMSE (lower is better).
* tumor-worst-case: two-target regression, mean column RMSLE (lower is better), like nomad2018.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pandas as pd
from sklearn import datasets

from mle_rl.env.builtin import writer
from mle_rl.env.builtin.spec import BuiltinSpec
from mle_rl.env.graders import TableGrader

SEED = 0


def _snake(name: str) -> str:
    return name.strip().lower().replace(" ", "_")


def _cancer_frame() -> pd.DataFrame:
    """569 rows: 30 nucleus measurements (snake_case) and `diagnosis` in {M, B}."""
    data = datasets.load_breast_cancer(as_frame=True)
    df = data.frame.rename(columns=_snake)
    df["diagnosis"] = np.where(df.pop("target") == 0, "M", "B")  # sklearn: 0 = malignant
    return df


def build_breast_cancer(root: pathlib.Path) -> None:
    df = _cancer_frame()
    df.insert(0, "id", np.arange(1, len(df) + 1))
    df["malignant"] = (df.pop("diagnosis") == "M").astype(int)
    tr, te = writer.split_ids(len(df), 0.3, SEED, stratify=df["malignant"].to_numpy())
    train, test_full = df.iloc[tr], df.iloc[te]
    answers = test_full[["id", "malignant"]]
    sample = answers.assign(malignant=round(float(train["malignant"].mean()), 4))
    features = [c for c in df.columns if c not in ("id", "malignant")]
    desc = writer.describe(
        title="Breast Cancer Diagnosis",
        overview="Fine-needle aspirates of breast masses were digitised, and ten properties of "
                 "the cell nuclei (radius, texture, perimeter, area, smoothness, compactness, "
                 "concavity, concave points, symmetry, fractal dimension) were measured in each "
                 "image: their mean, standard error and worst (largest) value. Predict the "
                 "probability that each mass is malignant. (Wisconsin Diagnostic Breast Cancer "
                 "data, as shipped with scikit-learn.)",
        files={"train.csv": f"{len(train)} rows with the features and the target.",
               "test.csv": f"{len(test_full)} rows with the features only.",
               "sample_submission.csv": "a valid submission predicting the training prior."},
        columns={"id": "row identifier",
                 "mean_* / *_error / worst_*": f"{len(features)} numeric nucleus measurements",
                 "malignant": "the target, 1 for malignant and 0 for benign (train only)"},
        metric="auc",
        submission_text="Predict a probability in [0, 1] that `malignant` is 1.",
        sample_submission=sample)
    writer.write_task(root, description=desc, train=train, test=test_full.drop(columns="malignant"),
                      answers=answers, sample_submission=sample)


PENGUIN_CLASSES = ("Biscoe", "Dream", "Torgersen")


def build_penguin_island(root: pathlib.Path) -> None:
    from palmerpenguins import load_penguins

    df = load_penguins().reset_index(drop=True)
    df.insert(0, "id", np.arange(1, len(df) + 1))
    tr, te = writer.split_ids(len(df), 0.3, SEED, stratify=df["island"].to_numpy())
    train, test_full = df.iloc[tr], df.iloc[te]
    answers = test_full[["id", "island"]]
    prior = train["island"].value_counts(normalize=True).reindex(PENGUIN_CLASSES).fillna(0.0)
    sample = pd.DataFrame({"id": answers["id"].to_numpy()})
    for c in PENGUIN_CLASSES:
        sample[c] = prior[c]
    desc = writer.describe(
        title="Palmer Penguins: Which Island?",
        overview="Adult penguins of three species were measured at three islands of the "
                 "Palmer Archipelago, Antarctica, in 2007-2009. Given a penguin's species, "
                 "bill, flipper and body measurements, sex and year, predict the island it was "
                 "seen on. Some measurements and some sexes are missing. (Palmer penguins data, "
                 "as shipped with the palmerpenguins package.)",
        files={"train.csv": f"{len(train)} penguins with the island.",
               "test.csv": f"{len(test_full)} penguins without it.",
               "sample_submission.csv": "a valid submission predicting the training prior."},
        columns={"id": "row identifier",
                 "species": "Adelie, Chinstrap or Gentoo",
                 "bill_length_mm, bill_depth_mm, flipper_length_mm, body_mass_g":
                     "measurements (may be empty)",
                 "sex": "male or female (may be empty)",
                 "year": "2007, 2008 or 2009",
                 "island": f"the target, one of {', '.join(PENGUIN_CLASSES)} (train only)"},
        metric="multiclass_log_loss",
        submission_text=f"Predict a probability for each island, in columns "
                        f"{', '.join(PENGUIN_CLASSES)}.",
        sample_submission=sample)
    writer.write_task(root, description=desc, train=train, test=test_full.drop(columns="island"),
                      answers=answers, sample_submission=sample)


DIABETES_NAMES = {"s1": "tc", "s2": "ldl", "s3": "hdl", "s4": "tch", "s5": "ltg", "s6": "glu"}


def build_diabetes(root: pathlib.Path) -> None:
    data = datasets.load_diabetes(as_frame=True, scaled=False)
    df = data.frame.rename(columns=DIABETES_NAMES).rename(columns={"target": "progression"})
    df.insert(0, "id", np.arange(1, len(df) + 1))
    tr, te = writer.split_ids(len(df), 0.3, SEED)
    train, test_full = df.iloc[tr], df.iloc[te]
    answers = test_full[["id", "progression"]]
    sample = answers.assign(progression=round(float(train["progression"].mean()), 2))
    desc = writer.describe(
        title="Diabetes Disease Progression",
        overview="Ten baseline variables were recorded for diabetes patients: age, sex, body "
                 "mass index, average blood pressure and six blood serum measurements. Predict "
                 "a quantitative measure of disease progression one year after baseline. "
                 "(Efron et al., 'Least Angle Regression', 2004; as shipped with scikit-learn, "
                 "unscaled.)",
        files={"train.csv": f"{len(train)} patients with the target.",
               "test.csv": f"{len(test_full)} patients without it.",
               "sample_submission.csv": "a valid submission predicting the training mean."},
        columns={"id": "row identifier", "age": "age in years", "sex": "1 or 2",
                 "bmi": "body mass index", "bp": "average blood pressure",
                 "tc, ldl, hdl, tch, ltg, glu": "total cholesterol, LDL, HDL, total/HDL ratio, "
                 "log serum triglycerides, blood sugar",
                 "progression": "the target (train only)"},
        metric="rmse",
        submission_text="Predict `progression` for every test patient.",
        sample_submission=sample)
    writer.write_task(root, description=desc, train=train,
                      test=test_full.drop(columns="progression"), answers=answers,
                      sample_submission=sample)


WORST_TARGETS = ("worst_area", "worst_concavity")


def build_tumor_worst_case(root: pathlib.Path) -> None:
    df = _cancer_frame()
    keep = [c for c in df.columns if c.startswith("mean_")] + ["diagnosis"]
    df = df[keep + list(WORST_TARGETS)]
    df.insert(0, "id", np.arange(1, len(df) + 1))
    tr, te = writer.split_ids(len(df), 0.3, SEED + 1)
    train, test_full = df.iloc[tr], df.iloc[te]
    answers = test_full[["id", *WORST_TARGETS]]
    sample = answers.assign(**{t: round(float(train[t].median()), 4) for t in WORST_TARGETS})
    desc = writer.describe(
        title="Tumour Nuclei: Predict the Worst Case",
        overview="Each row describes the cell nuclei in one digitised image of a breast mass "
                 "by the mean of ten nucleus properties, plus the diagnosis (M = malignant, "
                 "B = benign). Predict two properties of the worst (largest) nuclei in the same "
                 "image: their area and their concavity. Both targets are non-negative and on "
                 "very different scales, so the metric works on log(1 + value). (Wisconsin "
                 "Diagnostic Breast Cancer data, as shipped with scikit-learn.)",
        files={"train.csv": f"{len(train)} images with both targets.",
               "test.csv": f"{len(test_full)} images without them.",
               "sample_submission.csv": "a valid submission predicting the training medians."},
        columns={"id": "row identifier",
                 "mean_*": "ten numeric mean nucleus measurements",
                 "diagnosis": "M or B",
                 "worst_area": "target 1, in square pixels (train only)",
                 "worst_concavity": "target 2, severity of concave contour portions (train only)"},
        metric="rmsle_column_mean",
        submission_text="Predict both `worst_area` and `worst_concavity` for every test image.",
        sample_submission=sample)
    writer.write_task(root, description=desc, train=train,
                      test=test_full.drop(columns=list(WORST_TARGETS)), answers=answers,
                      sample_submission=sample)


SPECS = (
    BuiltinSpec(id="breast-cancer-diagnosis", metric="auc", modality="tabular",
                grader=TableGrader("auc", "id", ("malignant",)), build=build_breast_cancer,
                timeout_s=60, memory_mb=2048, reward_scale=10.0, packages=("scikit-learn",)),
    BuiltinSpec(id="penguin-island", metric="multiclass_log_loss", modality="tabular",
                grader=TableGrader("multiclass_log_loss", "id", PENGUIN_CLASSES,
                                   answer_label="island"),
                build=build_penguin_island, timeout_s=60, memory_mb=2048, reward_scale=2.0,
                packages=("palmerpenguins",)),
    BuiltinSpec(id="diabetes-progression", metric="rmse", modality="tabular",
                grader=TableGrader("rmse", "id", ("progression",)), build=build_diabetes,
                timeout_s=60, memory_mb=2048, reward_scale=0.1, packages=("scikit-learn",)),
    BuiltinSpec(id="tumor-worst-case", metric="rmsle_column_mean", modality="tabular",
                grader=TableGrader("rmsle_column_mean", "id", WORST_TARGETS),
                build=build_tumor_worst_case, timeout_s=60, memory_mb=2048, reward_scale=10.0,
                packages=("scikit-learn",)),
)
